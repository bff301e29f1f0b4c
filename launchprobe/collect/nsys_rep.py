"""Find nsys and turn an ``.nsys-rep`` report into its SQLite export (``nsys export --type sqlite``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from launchprobe.errors import BadTraceError, MissingToolError, UsageError

NSYS_ENV = "LAUNCHPROBE_NSYS"


def find_nsys(explicit: str | None = None) -> str:
    """The nsys binary: ``explicit`` (--nsys), else $LAUNCHPROBE_NSYS, else ``nsys`` on PATH."""
    candidate = explicit or os.environ.get(NSYS_ENV) or shutil.which("nsys")
    if not candidate:
        raise MissingToolError(
            f"nsys (Nsight Systems) not found: put it on PATH, set {NSYS_ENV}=/path/to/nsys, or pass --nsys PATH"
        )
    found = shutil.which(candidate)
    if found is None:
        origin = "--nsys" if explicit else NSYS_ENV
        raise MissingToolError(f"nsys {candidate!r} (from {origin}) is not an executable file")
    return found


def sqlite_path_for(report: Path) -> Path:
    name = report.name
    for suffix in (".nsys-rep", ".qdrep"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return report.with_name(name + ".sqlite")


def export_sqlite(
    report: Path, *, nsys: str | None = None, force: bool = False, output: Path | None = None, atomic: bool = False
) -> tuple[Path, bool]:
    """Export ``report`` next to it; return the SQLite path and whether an existing up-to-date export was reused.

    An export newer than the report is reused; an older one is replaced only with ``force``. With ``atomic``,
    nsys writes to a temporary name in the same folder (``NAME.sqlite.partial-PID.sqlite``) that is renamed
    over ``NAME.sqlite`` only once the export succeeded, so an interrupted or failed export never leaves a
    half-written file under the name the next run would reuse.
    """
    out = output or sqlite_path_for(report)
    if out.is_dir():
        raise UsageError(f"{out} is a folder; the SQLite export of {report} goes there: move or rename the folder")
    if out.exists():
        try:
            fresh = out.stat().st_mtime >= report.stat().st_mtime
        except OSError as exc:
            raise UsageError(f"{report}: cannot read: {exc.strerror}") from None
        if not force and fresh:
            return out, True
        if not force:
            raise UsageError(f"{out} exists and is older than {report}; pass --force to export over it")
    binary = find_nsys(nsys)
    target = out.with_name(f"{out.name}.partial-{os.getpid()}.sqlite") if atomic else out
    try:
        if target.exists() or target.is_symlink():
            target.unlink()
        if not atomic and out.exists():
            out.unlink()
    except OSError as exc:
        raise UsageError(f"cannot replace {target}: {exc.strerror}") from None
    command = [binary, "export", "--type", "sqlite", "--output", str(target), str(report)]
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
        except OSError as exc:
            raise MissingToolError(f"cannot run {binary}: {exc.strerror}") from None
        if done.returncode != 0 or not target.is_file():
            lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
            detail = lines[-1].strip() if lines else "no message"
            raise BadTraceError(f"{report}: nsys export failed (exit {done.returncode}): {detail}")
        if atomic:
            try:
                os.replace(target, out)
            except OSError as exc:
                raise UsageError(f"cannot move the export {target} to {out}: {exc.strerror}") from None
    finally:
        if atomic:
            target.unlink(missing_ok=True)  # interrupted (Ctrl-C) or failed: the partial export goes
    return out, False
