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
    report: Path, *, nsys: str | None = None, force: bool = False, output: Path | None = None
) -> tuple[Path, bool]:
    """Export ``report`` next to it; return the SQLite path and whether an existing up-to-date export was reused.

    An export newer than the report is reused; an older one is replaced only with ``force``.
    """
    out = output or sqlite_path_for(report)
    if out.exists():
        if not force and out.stat().st_mtime >= report.stat().st_mtime:
            return out, True
        if not force:
            raise UsageError(f"{out} exists and is older than {report}; pass --force to export over it")
    binary = find_nsys(nsys)
    if out.exists():
        out.unlink()
    command = [binary, "export", "--type", "sqlite", "--output", str(out), str(report)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise MissingToolError(f"cannot run {binary}: {exc.strerror}") from None
    if done.returncode != 0 or not out.exists():
        lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        detail = lines[-1].strip() if lines else "no message"
        raise BadTraceError(f"{report}: nsys export failed (exit {done.returncode}): {detail}")
    return out, False
