"""Collectors: read a trace (nsys SQLite or report, Kineto JSON) into a Timeline.

``load_trace`` picks the reader from the file's content (and, for ``.nsys-rep``, its name); every reader turns
an unreadable file into BadTraceError and a trace without GPU work into NoDataError.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from launchprobe.errors import BadTraceError, UsageError
from launchprobe.timeline import Timeline

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def sniff_format(path: Path) -> str:
    """``nsys-rep``, ``nsys-sqlite`` or ``kineto``; raises BadTraceError for anything else."""
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not a trace file")
    if path.name.lower().endswith(NSYS_REPORT_SUFFIXES):
        return "nsys-rep"
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as handle:
                head = handle.read(64)
        except (OSError, EOFError) as exc:
            raise BadTraceError(f"{path}: corrupt gzip file ({exc})") from None
    if head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    raise BadTraceError(
        f"{path}: not a trace (expected an .nsys-rep report, an nsys SQLite export or a Kineto JSON trace)"
    )


def load_trace(path: Path, *, nsys: str | None = None, keep_sqlite: bool = True, force: bool = False) -> Timeline:
    """Read any supported trace; ``.nsys-rep`` goes through ``nsys export`` first."""
    fmt = sniff_format(path)
    if fmt == "nsys-rep":
        from launchprobe.collect.nsys_rep import export_sqlite

        sqlite_path, reused = export_sqlite(path, nsys=nsys, force=force)
        from launchprobe.collect.nsys_sqlite import read_nsys_sqlite

        try:
            timeline = read_nsys_sqlite(sqlite_path)
        finally:
            if not keep_sqlite and not reused:
                sqlite_path.unlink(missing_ok=True)
        timeline.meta["format"] = "nsys-rep"
        timeline.meta["path"] = str(path)
        timeline.meta["sqlite"] = str(sqlite_path) if keep_sqlite or reused else None
        return timeline
    if fmt == "nsys-sqlite":
        from launchprobe.collect.nsys_sqlite import read_nsys_sqlite

        return read_nsys_sqlite(path)
    from launchprobe.collect.kineto import read_kineto

    return read_kineto(path)
