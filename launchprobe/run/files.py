"""Run files: the one place that reads JSON into a typed run (upgrading older schemas) and writes it back.

Loading parses JSON, lifts an older ``schema_version`` through ``UPGRADES`` on the raw data, then converts to the
struct; a file that does not fit the schema is refused with the field that did not fit. Saving is atomic: a crash
mid-write never leaves a truncated run file in place.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from launchprobe.errors import UsageError
from launchprobe.run import schema
from launchprobe.run.schema import RUN_KINDS, AnalyzeRun, ClassifyResult, ClassifyRun, Run

SCHEMA_VERSION = schema.SCHEMA_VERSION  # the version this launchprobe writes and reads
# Upgrades from version N to N+1 on the raw JSON, applied in order by load_run. Empty while there is one version.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def finite_number(value: Any) -> float | None:
    """A value as a finite float, or None when missing or not a number (bool excluded)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def check_writable(path: Path, force: bool) -> None:
    """Refuse to overwrite a user's file unless asked; fail early, before any long measurement."""
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; choose another name or pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")


def to_builtins(run: Run) -> dict[str, Any]:
    """The run as plain JSON values, in the order the documents show (schema_version and kind first). A result
    that was not measured (a plan) carries only the cost-model fields, as docs/run-file.md says."""
    raw = msgspec.to_builtins(run, enc_hook=_plain_value)
    if isinstance(run, ClassifyRun):
        for result, out in zip(run.results, raw["results"], strict=True):
            if not result.measured:
                for name in ClassifyResult.MEASURED:
                    out.pop(name, None)
    head = {"schema_version": raw.pop("schema_version"), "kind": raw.pop("kind")}
    return {**head, **raw}


def _plain_value(value: Any) -> Any:
    """numpy scalars and str subclasses (torch's version string) as plain JSON values."""
    if isinstance(value, str):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a run file")


def dumps_run(run: Run) -> str:
    """The run as indented JSON; NaN and infinities are refused (ValueError)."""
    return json.dumps(to_builtins(run), indent=1, allow_nan=False)


def save_run(run: Run, path: Path, *, force: bool = False) -> None:
    check_writable(path, force)
    text = dumps_run(run)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_run(path: Path | str) -> Run:
    """Read a run file (plain or gzipped JSON), upgrading an older schema; refuse what is not a run file or is from
    the future."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise UsageError(f"{path}: not a launchprobe run file (corrupt gzip data: {exc})") from None
    try:
        raw = json.loads(data, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        raise UsageError(f"{path}: not a valid launchprobe run file ({exc} is not a number JSON allows)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a launchprobe run file (invalid JSON at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a launchprobe run file (not UTF-8 text)") from None
    except RecursionError:
        raise UsageError(f"{path}: not a launchprobe run file (JSON nested too deeply)") from None
    return from_builtins(raw, str(path))


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def from_builtins(raw: Any, label: str = "run") -> Run:
    """Plain JSON values (as loaded) -> the typed run, after the upgrade chain."""
    raw = upgrade_run(raw, label)
    kind: type[ClassifyRun] | type[AnalyzeRun] = ClassifyRun if raw["kind"] == "classify" else AnalyzeRun
    try:
        run: Run = msgspec.convert(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{label}: not a valid launchprobe run file: {exc}") from None
    if isinstance(run, ClassifyRun) and not run.speedups:  # files from before speed-ups were stored
        run.speedups = schema.speedups_of([r for r in run.results if r.step_ms_median is not None])
    return run


def upgrade_run(run: Any, label: str = "run") -> dict[str, Any]:
    if not isinstance(run, dict) or "schema_version" not in run or run.get("kind") not in RUN_KINDS:
        raise UsageError(f"{label}: not a launchprobe run file (no schema_version or kind)")
    version = run["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"{label}: invalid schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"{label}: schema_version {version} is newer than this launchprobe understands "
            f"({SCHEMA_VERSION}); upgrade launchprobe"
        )
    while version < SCHEMA_VERSION:
        if version not in UPGRADES:
            raise UsageError(f"{label}: schema_version {version} is too old to read; re-run to make a new file")
        run = UPGRADES[version](run)
        version = run["schema_version"]
    return run


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a run file, generated from the structs (shipped as docs/run-file.schema.json)."""
    return msgspec.json.schema(Run)
