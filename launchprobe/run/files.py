"""Run files: the one place that reads JSON into a typed run (upgrading older schemas) and writes it back.

Loading parses JSON, lifts an older ``schema_version`` through ``UPGRADES`` on the raw data, then converts to the
struct; a file that does not fit the schema is refused with the field that did not fit. Saving is atomic: a crash
mid-write never leaves a truncated run file in place.
"""

from __future__ import annotations

import errno
import gzip
import json
import math
import os
import re
import secrets
import stat
import statistics
import zlib
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
    """Refuse, before any long measurement, an output that cannot be written or would replace a user's file:
    a folder, a special file other than a character device or pipe (``/dev/null``, ``/dev/stdout``), an existing
    file without ``force``, a missing or unwritable folder (tried with a temporary file, removed at once)."""
    info = _stat(path)
    if info is not None and is_descriptor_path(path):  # /dev/stdout into a file: the shell's redirect, not ours
        return
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"cannot write {path}: it is a folder; give a file name")
        if _is_stream(info):
            if not os.access(path, os.W_OK):
                raise UsageError(f"cannot write {path}: permission denied")
            return
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"cannot write {path}: not a regular file")
        if not force:
            raise UsageError(f"{path} already exists; choose another name or pass --force to overwrite it")
    folder = _target(path).parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {path}: folder {folder} does not exist")
    probe_folder(path, folder)


def _stat(path: Path) -> os.stat_result | None:
    """What the path names (links followed), None when nothing is there yet."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    except ValueError:  # an embedded NUL byte
        raise UsageError(f"cannot write {path!r}: not a valid path") from None


def is_descriptor_path(path: Path) -> bool:
    """A path that names an open descriptor of this process (/dev/stdout, /dev/fd/3, /proc/self/fd/1): written
    straight, appended to, whatever it leads to (a terminal, a pipe, or a file the shell opened for it)."""
    text = os.path.normpath(str(path))
    return text in ("/dev/stdout", "/dev/stderr") or os.path.dirname(text) in ("/dev/fd", "/proc/self/fd")


def _is_stream(info: os.stat_result) -> bool:
    """A character device or a pipe: written straight, never replaced (``/dev/null``, ``/dev/stdout``)."""
    return stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)


def _target(path: Path) -> Path:
    """The file a path names: a symbolic link's target (followed all the way), else the path itself."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def probe_folder(path: Path, folder: Path) -> None:
    """Create and remove a temporary file where ``path`` will be written (access checks lie to root)."""
    try:
        fd, name = _create_temp(folder, ".launchprobe-probe")
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # the folder is there but takes no new files (/proc, /sys)
            raise UsageError(f"cannot write {path}: {folder} does not take new files") from None
        raise UsageError(f"cannot write {path}: {exc.strerror} (in {folder})") from None
    os.close(fd)
    os.unlink(name)


def _create_temp(folder: Path, stem: str) -> tuple[int, str]:
    """A new file in ``folder`` with the mode a plain ``open(..., "w")`` gives (0666 less the umask)."""
    for _ in range(100):
        name = os.path.join(folder, f".{stem[:100]}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))


def write_file(path: Path, text: str, *, force: bool = False) -> None:
    """Write ``text`` to what ``path`` names, never leaving a half-written file: a regular file (or a link's
    target) is written to a temporary file beside it and renamed over it, keeping an existing file's mode; a
    character device, a pipe or a descriptor path (/dev/stdout) is written straight (appended to). Refusals as
    ``check_writable``; a failing write (a full disk) is one error and leaves nothing behind."""
    check_writable(path, force)
    info = _stat(path)
    if info is not None and (_is_stream(info) or is_descriptor_path(path)):
        try:  # appending: what the shell's redirect already holds stays
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror}") from None
        return
    target = _target(path)
    try:
        fd, tmp = _create_temp(target.parent, target.name)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if info is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(info.st_mode))
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    """Save the run file (``write_file``: atomic, through links, never replacing a device)."""
    check_writable(path, force)
    write_file(path, dumps_run(run) + "\n", force=force)


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
        except (OSError, EOFError, zlib.error) as exc:  # zlib.error: corrupt deflate data
            raise UsageError(f"{path}: not a launchprobe run file (corrupt gzip data: {exc})") from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # strictly UTF-8 (json.loads of bytes lets surrogates in)
        raw = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_int64)
        if SURROGATE_ESCAPE.search(text):
            json.dumps(raw, ensure_ascii=False).encode("utf-8")  # "\ud800" alone: a string no output can hold
    except UnicodeEncodeError:
        raise UsageError(f"{path}: not a launchprobe run file (a string holds an unpaired surrogate)") from None
    except _NonFinite as exc:
        raise UsageError(f"{path}: not a valid launchprobe run file ({exc} is not a number JSON allows)") from None
    except _Overflow as exc:
        raise UsageError(f"{path}: not a valid launchprobe run file ({exc} is not a finite number)") from None
    except _OutOfRange as exc:
        raise UsageError(f"{path}: not a valid launchprobe run file ({exc} does not fit in 64 bits)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a launchprobe run file (invalid JSON at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a launchprobe run file (not UTF-8 text)") from None
    except RecursionError:
        raise UsageError(f"{path}: not a launchprobe run file (JSON nested too deeply)") from None
    return from_builtins(raw, str(path))


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # may pair up, or stand alone


class _NonFinite(ValueError):
    pass


class _Overflow(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class _OutOfRange(ValueError):
    pass


INT64 = 1 << 63


def _int64(text: str) -> int:
    """Integers of a run file (ns, counts, bytes) fit in 64 bits; a larger one is damage, and would overflow the
    arithmetic of renderers and compare."""
    value = int(text) if len(text) <= 21 else 2 * INT64  # longer: out of range, and slow to convert
    if not -INT64 <= value < 2 * INT64:
        raise _OutOfRange(text if len(text) <= 40 else text[:40] + "...")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise _Overflow(text if len(text) <= 40 else text[:40] + "...")
    return value


def from_builtins(raw: Any, label: str = "run") -> Run:
    """Plain JSON values (as loaded) -> the typed run, after the upgrade chain."""
    raw = upgrade_run(raw, label)
    kind: type[ClassifyRun] | type[AnalyzeRun] = ClassifyRun if raw["kind"] == "classify" else AnalyzeRun
    try:
        run: Run = msgspec.convert(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{label}: not a valid launchprobe run file: {exc}") from None
    except UnicodeEncodeError:  # a lone surrogate in a string (load_run refuses those first)
        raise UsageError(f"{label}: not a valid launchprobe run file: a string holds an unpaired surrogate") from None
    if isinstance(run, ClassifyRun):
        for result in run.results:
            _check_result(result, label)
        if not run.speedups:  # files from before speed-ups were stored
            run.speedups = schema.speedups_of([r for r in run.results if r.step_ms_median is not None])
    return run


REL_TOLERANCE = 1e-6  # a stored statistic and the same one computed again agree to float rounding, not more


def _check_result(result: ClassifyResult, label: str) -> None:
    """Refuse a result whose numbers disagree (an edited or damaged file): compare computes the median and tokens/s
    from the samples, so a stored median they contradict would be silently ignored."""
    where = f"{label}: inconsistent run file: result {result.key}"
    median, samples = result.step_ms_median, result.step_ms_samples
    if samples and median is None:
        raise UsageError(f"{where}: step_ms_samples without a step_ms_median")
    times = ([] if median is None else [median]) + list(samples or [])
    if any(not math.isfinite(x) or x <= 0 for x in times):
        raise UsageError(f"{where}: step times must be positive")
    if median is None:
        return
    if samples:
        computed = statistics.median(samples)
        if not math.isclose(computed, median, rel_tol=REL_TOLERANCE):
            raise UsageError(
                f"{where}: step_ms_median {median:.6g} disagrees with the median of its {len(samples)} "
                f"step_ms_samples, {computed:.6g}"
            )
    tokens = result.tokens_per_s
    if tokens is not None:
        expected = result.batch / (median / 1e3)
        if not math.isclose(tokens, expected, rel_tol=REL_TOLERANCE):
            raise UsageError(
                f"{where}: tokens_per_s {tokens:.6g} disagrees with batch {result.batch} / step_ms_median "
                f"{median:.6g} ms = {expected:.6g}"
            )


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
