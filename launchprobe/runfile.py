"""The saved run: one JSON file between collecting and rendering.

Every command that measures or analyses builds a run dict, can save it with ``save_run`` and every renderer reads
it back through ``load_run``, so re-rendering never needs a re-run. The schema is documented in docs/run-file.md.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launchprobe.errors import UsageError

SCHEMA_VERSION = 1
RUN_KINDS = ("classify", "analyze")

# Upgrades from version N to N+1, applied in order by load_run. Empty while there is one version.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def finite_number(value: Any) -> float | None:
    """A run-file value as a finite float, or None when missing or not a number (bool excluded)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def new_run(kind: str, **fields: Any) -> dict[str, Any]:
    import datetime
    import sys

    from launchprobe import __version__

    if kind not in RUN_KINDS:
        raise ValueError(f"unknown run kind {kind!r}")
    run: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "launchprobe", "version": __version__},
        "command": ["launchprobe", *sys.argv[1:]],
        "notices": [],
    }
    run.update(fields)
    return run


def check_writable(path: Path, force: bool) -> None:
    """Refuse to overwrite a user's file unless asked; fail early, before any long measurement."""
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; choose another name or pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")


def save_run(run: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write atomically: a crash mid-write never leaves a truncated run file in place."""
    check_writable(path, force)
    text = json.dumps(run, indent=1, allow_nan=False, default=_json_default)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(tmp, path)


def dumps_run(run: dict[str, Any]) -> str:
    return json.dumps(run, indent=1, allow_nan=False, default=_json_default)


def _json_default(value: Any) -> Any:
    # numpy scalars and similar
    for attr in ("item", "tolist"):
        if hasattr(value, attr):
            return getattr(value, attr)()
    raise TypeError(f"cannot store {type(value).__name__} in a run file")


def load_run(path: Path) -> dict[str, Any]:
    """Read a run file, upgrading an older schema; refuse what is not a run file or is from the future."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        run = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a launchprobe run file (invalid JSON at line {exc.lineno})") from None
    return upgrade_run(run, str(path))


def upgrade_run(run: Any, label: str = "run") -> dict[str, Any]:
    if not isinstance(run, dict) or "schema_version" not in run or run.get("kind") not in RUN_KINDS:
        raise UsageError(f"{label}: not a launchprobe run file (no schema_version or kind)")
    version = run["schema_version"]
    if not isinstance(version, int) or version < 1:
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
