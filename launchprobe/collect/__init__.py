"""Collectors: read a trace (nsys SQLite or report, Kineto JSON) into a Timeline.

``load_trace`` picks the reader from the file's content (and, for ``.nsys-rep``, its name); every reader turns
an unreadable file into BadTraceError and a trace without GPU work into NoDataError. A pipe, FIFO or other
non-seekable input (``/dev/stdin``, ``<(zcat t.json.gz)``) is read once into a temporary file first, so sniffing
never eats bytes the reader needs; a gzip-compressed SQLite export (``t.sqlite.gz``) is decompressed the same way.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from launchprobe.errors import BadTraceError, LaunchprobeError, UsageError

if TYPE_CHECKING:
    from launchprobe.timeline import Timeline

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
JSON_SPACE = b" \t\r\n"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
SNIFF_CHUNK = 1 << 16
SNIFF_LIMIT = 1 << 24  # leading whitespace looked through before giving up (16 MiB)
GZIP_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


def _check_input(path: Path) -> os.stat_result:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{path}: is a folder, not a trace file")
    return info


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _first_json_byte(handle: _Readable) -> bytes:
    """The first byte after an optional UTF-8 byte-order mark and JSON whitespace (b"" when there is none)."""
    chunk = handle.read(SNIFF_CHUNK)
    if chunk.startswith(UTF8_BOM):
        chunk = chunk[len(UTF8_BOM) :]
    seen = 0
    while chunk:
        rest = chunk.lstrip(JSON_SPACE)
        if rest:
            return rest[:1]
        seen += len(chunk)
        if seen > SNIFF_LIMIT:
            return b""
        chunk = handle.read(SNIFF_CHUNK)
    return b""


def _sniff_gzip(path: Path) -> str:
    """``nsys-sqlite-gz`` or ``kineto`` from the decompressed start of a gzip file."""
    try:
        with gzip.open(path, "rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
            if head.startswith(SQLITE_MAGIC):
                return "nsys-sqlite-gz"
            first = _first_json_byte(_Prefixed(head, handle))
    except GZIP_ERRORS as exc:
        raise BadTraceError(f"{path}: truncated or corrupt gzip file ({exc})") from None
    if first in (b"{", b"["):
        return "kineto"
    raise BadTraceError(f"{path}: a gzip file, but neither a Kineto JSON trace nor an nsys SQLite export inside")


class _Prefixed:
    """A read-only stream: ``head`` first, then the rest of ``handle``."""

    def __init__(self, head: bytes, handle: _Readable) -> None:
        self._head = head
        self._handle = handle

    def read(self, size: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._handle.read(size)


def sniff_format(path: Path) -> str:
    """``nsys-rep``, ``nsys-sqlite``, ``nsys-sqlite-gz`` or ``kineto``; raises BadTraceError for anything else.

    Reads the file's first bytes: for a pipe use ``load_trace``, which copies it first."""
    _check_input(path)
    if path.name.lower().endswith(NSYS_REPORT_SUFFIXES):
        return "nsys-rep"
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
            if head.startswith(SQLITE_MAGIC):
                return "nsys-sqlite"
            if head.startswith(GZIP_MAGIC):
                return _sniff_gzip(path)
            first = _first_json_byte(_Prefixed(head, handle))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if first in (b"{", b"["):
        return "kineto"
    raise BadTraceError(
        f"{path}: not a trace (expected an .nsys-rep report, an nsys SQLite export or a Kineto JSON trace)"
    )


@contextlib.contextmanager
def _regular_file(path: Path) -> Iterator[Path]:
    """``path`` when it is a regular file, else a temporary copy of everything it yields (read once, removed
    afterwards): a pipe or FIFO cannot be read twice, and SQLite cannot read one at all."""
    info = _check_input(path)
    if stat.S_ISREG(info.st_mode):
        yield path
        return
    if path.name.lower().endswith(NSYS_REPORT_SUFFIXES):
        raise UsageError(f"{path}: an .nsys-rep report must be a regular file (nsys export reads it by name)")
    with _temporary(path, ".trace") as copy:
        try:
            with path.open("rb") as src, copy.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
        yield copy


@contextlib.contextmanager
def _temporary(source: Path, suffix: str) -> Iterator[Path]:
    fd, name = tempfile.mkstemp(prefix="launchprobe-", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _gunzipped(path: Path) -> Iterator[Path]:
    """A gzip-compressed SQLite export, decompressed into a temporary file."""
    with _temporary(path, ".sqlite") as out:
        try:
            with gzip.open(path, "rb") as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except GZIP_ERRORS as exc:
            if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile) and exc.errno is not None:
                raise UsageError(f"{path}: cannot decompress: {exc.strerror or exc}") from None
            raise BadTraceError(f"{path}: truncated or corrupt gzip file ({exc})") from None
        yield out


def load_trace(path: Path, *, nsys: str | None = None, keep_sqlite: bool = True, force: bool = False) -> Timeline:
    """Read any supported trace; ``.nsys-rep`` goes through ``nsys export`` first."""
    with _regular_file(path) as regular, _named_as(regular, path):
        timeline = _load(regular, nsys=nsys, keep_sqlite=keep_sqlite, force=force)
    if regular != path:
        timeline.meta["path"] = str(path)
    return timeline


@contextlib.contextmanager
def _named_as(copy: Path, original: Path) -> Iterator[None]:
    """Errors about a temporary ``copy`` name the ``original`` input instead."""
    try:
        yield
    except LaunchprobeError as exc:
        if copy == original:
            raise
        raise type(exc)(str(exc).replace(str(copy), str(original)), exc.exit_code) from None


def _load(path: Path, *, nsys: str | None, keep_sqlite: bool, force: bool) -> Timeline:
    fmt = sniff_format(path)
    if fmt == "nsys-rep":
        from launchprobe.collect.nsys_rep import export_sqlite

        sqlite_path, reused = export_sqlite(path, nsys=nsys, force=force, atomic=True)
        from launchprobe.collect.nsys_sqlite import read_nsys_sqlite

        try:
            timeline = read_nsys_sqlite(sqlite_path)
        except BadTraceError as exc:
            if reused:
                raise BadTraceError(f"{exc} (an existing export was reused: pass --force to export again)") from None
            raise
        finally:
            if not keep_sqlite and not reused:
                sqlite_path.unlink(missing_ok=True)
        timeline.meta["format"] = "nsys-rep"
        timeline.meta["path"] = str(path)
        timeline.meta["sqlite"] = str(sqlite_path) if keep_sqlite or reused else None
        return timeline
    if fmt in ("nsys-sqlite", "nsys-sqlite-gz"):
        from launchprobe.collect.nsys_sqlite import read_nsys_sqlite

        if fmt == "nsys-sqlite":
            return read_nsys_sqlite(path)
        with _gunzipped(path) as plain, _named_as(plain, path):
            timeline = read_nsys_sqlite(plain)
        timeline.meta["path"] = str(path)
        return timeline
    from launchprobe.collect.kineto import read_kineto

    return read_kineto(path)
