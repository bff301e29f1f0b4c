"""Integer columns of an SQLite rowid table, decoded straight from the file's b-tree pages with numpy.

Python's sqlite3 hands values over one at a time, and even ``group_concat`` costs ~0.1 s per column per million
rows. nsys exports are plain rollback-journal databases whose activity tables hold only small integer records,
so their leaf pages decode in bulk: cell pointers, varints and big-endian integers, a chunk of pages at a time
(bounded memory), rows in rowid order. File format: https://www.sqlite.org/fileformat2.html.

Anything this reader does not handle (WAL mode, records spilling to overflow pages, WITHOUT ROWID tables, a
rowid-alias column, multi-byte serial types, text or float values in a wanted column, rows with fewer columns than
asked for, a row count that disagrees with SQLite's) makes it return None, and the caller reads through SQL.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]

LEAF_TABLE, INTERIOR_TABLE = 13, 5
CHUNK_PAGES = 1024  # pages decoded at a time (4 MiB of 4 KiB pages)
PAD = 16  # zero bytes after a chunk, so fixed 8-byte gathers near its end stay in bounds
# Serial types (single-byte ones, 0..127): 0 NULL, 1-6 integers of 1, 2, 3, 4, 6, 8 bytes, 7 float, 8/9 the
# constants 0/1, 10/11 reserved, then blobs (even) and text (odd) of (type - 12) // 2 bytes.
SERIAL_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0] + [(t - 12) // 2 for t in range(12, 128)], dtype=np.int64)
INT_SIZE = np.where(np.arange(128) < 7, SERIAL_SIZE, 0).astype(np.int64)
IS_INT = np.isin(np.arange(128), [0, 1, 2, 3, 4, 5, 6, 8, 9])


class Unsupported(Exception):
    """The file or table needs the SQL path."""


def read_int_columns(
    conn: sqlite3.Connection, path: Path, table: str, columns: Sequence[str | None], fills: Sequence[int], out: Ints
) -> bool:
    """Fill ``out[i]`` with column ``columns[i]`` over the table's rows in rowid order (NULL -> ``fills[i]``);
    rows whose column is None are left alone.

    ``out`` has one row per column and one column per table row (``SELECT count(*)``); it may be a column slice
    of a larger array. Returns False, with ``out`` in an unspecified state, when the SQL path must be used instead.
    """
    try:
        _read(conn, path, table, columns, fills, out)
    except (Unsupported, OSError, IndexError, ValueError, OverflowError, MemoryError):
        return False
    return True


def _read(
    conn: sqlite3.Connection, path: Path, table: str, columns: Sequence[str | None], fills: Sequence[int], out: Ints
) -> None:
    root, positions = _schema(conn, table, columns)
    if not positions:
        return
    with open(path, "rb") as handle:
        fd = handle.fileno()
        header = os.pread(fd, 100, 0)
        if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
            raise Unsupported("not an SQLite file")
        if header[18] != 1 or header[19] != 1:
            raise Unsupported("WAL mode")  # the newest pages may be in the -wal file
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        if page_size < 512 or page_size & (page_size - 1):
            raise Unsupported("not a valid page size")
        usable = page_size - header[20]
        if usable < 480:
            raise Unsupported("too little usable space per page")
        leaves = _leaves(fd, root, page_size, os.fstat(fd).st_size // page_size)
        done = 0
        for first in range(0, len(leaves), CHUNK_PAGES):
            pages = _read_pages(fd, leaves[first : first + CHUNK_PAGES], page_size)
            done += _decode(pages, page_size, usable, positions, fills, out, done)
    if done != out.shape[1]:
        raise Unsupported("row count differs from SQLite's")


def _schema(conn: sqlite3.Connection, table: str, columns: Sequence[str | None]) -> tuple[int, dict[int, int]]:
    """The table's root page, and {position of each wanted column in a record: its row in ``out``}."""
    row = conn.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    if row is None or not row[0] or "WITHOUT ROWID" in str(row[1]).upper():
        raise Unsupported("not a rowid table")
    info = {r[1]: r for r in conn.execute(f'PRAGMA table_info("{table}")')}
    pk = [r for r in info.values() if r[5]]
    alias = pk[0][1] if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else None
    if any(c is not None and (c not in info or c == alias) for c in columns):
        raise Unsupported("a column is missing or aliases the rowid")
    return int(row[0]), {int(info[c][0]): i for i, c in enumerate(columns) if c is not None}


def _leaves(fd: int, root: int, page_size: int, pages: int) -> list[int]:
    """Leaf page numbers of the table b-tree under ``root``, in key (rowid) order. A child pointer outside the
    file's ``pages``, or a page reached twice (a cycle in a corrupt tree), declines."""
    leaves: list[int] = []
    stack = [root]
    seen: set[int] = set()
    while stack:
        pgno = stack.pop()
        if not 1 <= pgno <= pages or pgno in seen:
            raise Unsupported(f"page {pgno} is outside the file or reached twice")
        seen.add(pgno)
        page = os.pread(fd, page_size, (pgno - 1) * page_size)
        at = 100 if pgno == 1 else 0
        kind = page[at] if len(page) > at else -1
        if kind == LEAF_TABLE:
            leaves.append(pgno)
        elif kind == INTERIOR_TABLE:
            cells = int.from_bytes(page[at + 3 : at + 5], "big")
            buf = np.frombuffer(page, dtype=np.uint8)
            ptr = at + 12 + 2 * np.arange(cells)
            offsets = (buf[ptr].astype(np.int64) << 8) | buf[ptr + 1]
            children = [int.from_bytes(page[o : o + 4], "big") for o in offsets.tolist()]
            children.append(int.from_bytes(page[at + 8 : at + 12], "big"))
            stack.extend(reversed(children))
        else:
            raise Unsupported(f"page {pgno} is not a table b-tree page")
    return leaves


def _read_pages(fd: int, pgnos: list[int], page_size: int) -> Bytes:
    """The pages, concatenated, plus PAD zero bytes; runs of consecutive pages are read with one call."""
    parts: list[bytes] = []
    run_start = prev = pgnos[0]
    for pgno in [*pgnos[1:], -1]:
        if pgno == prev + 1:
            prev = pgno
            continue
        want = (prev - run_start + 1) * page_size
        data = os.pread(fd, want, (run_start - 1) * page_size)
        if len(data) != want:
            raise Unsupported("truncated file")
        parts.append(data)
        run_start = prev = pgno
    parts.append(bytes(PAD))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def _bytes_at(buf: Bytes, pos: Ints, width: int) -> Bytes:
    """``width`` bytes starting at each position, as a (positions, width) array."""
    view = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - width, width), strides=(1, 1), writeable=False)
    return view[pos]


def _varint(buf: Bytes, pos: Ints, *, value: bool = True) -> tuple[Ints, Ints]:
    """Decode the SQLite varints at ``pos``: values (zeros unless ``value``) and lengths in bytes (1-9)."""
    first = buf[pos]
    if not np.any(first >= 0x80):  # the usual case: one-byte varints
        return first.astype(np.int64), np.ones(len(pos), dtype=np.int64)
    # byte by byte while any varint goes on (a high bit set in all bytes so far): the ninth byte has 8 value bits
    length = np.ones(len(pos), dtype=np.int64)
    result = (first & 0x7F).astype(np.int64) if value else np.zeros(len(pos), dtype=np.int64)
    going = first >= 0x80
    k = 1
    while k < 9 and going.any():
        byte = buf[pos + k]
        length += going
        if value:
            step = (result << 8) | byte if k == 8 else (result << 7) | (byte & 0x7F)
            np.copyto(result, step, where=going)
        going &= byte >= 0x80
        k += 1
    return result, length


def _decode(
    buf: Bytes, page_size: int, usable: int, positions: dict[int, int], fills: Sequence[int], out: Ints, at: int
) -> int:
    """Decode the wanted columns of every cell of the leaf pages in ``buf`` into ``out[:, at:]``; return the cells."""
    npages = (len(buf) - PAD) // page_size
    base = np.arange(npages, dtype=np.int64) * page_size
    if np.any(buf[base] != LEAF_TABLE):
        raise Unsupported("not a leaf page")
    ncells = (buf[base + 3].astype(np.int64) << 8) | buf[base + 4]
    if np.any(8 + 2 * ncells > page_size):
        raise Unsupported("more cells than fit a page")
    n = int(ncells.sum())
    if not n:
        return 0
    if at + n > out.shape[1]:
        raise Unsupported("more rows than SQLite counts")
    first = np.cumsum(ncells) - ncells
    page_of = np.repeat(np.arange(npages, dtype=np.int64), ncells)
    ptr = page_of * page_size + 8 + 2 * (np.arange(n, dtype=np.int64) - first[page_of])
    cell = page_of * page_size + ((buf[ptr].astype(np.int64) << 8) | buf[ptr + 1])
    payload, len1 = _varint(buf, cell)
    if np.any(payload > usable - 35):
        raise Unsupported("a record spills to overflow pages")
    _, len2 = _varint(buf, cell + len1, value=False)  # the rowid
    record = cell + len1 + len2
    header_len, len3 = _varint(buf, record)
    ncols = max(positions) + 1
    if np.any(header_len - len3 < ncols):
        raise Unsupported("a row with fewer columns than wanted")
    serial = np.ascontiguousarray(_bytes_at(buf, record + len3, ncols).T)  # (columns, rows) serial types
    if np.any(serial >= 0x80):
        raise Unsupported("multi-byte serial type")
    words = _words(buf)
    offset = record + header_len  # where the current column's value starts
    for col in range(ncols):
        types = serial[col]
        first_type = int(types[0])
        uniform = first_type if not np.any(types != first_type) else None  # usually one type for the column
        if col in positions:
            i = positions[col]
            if not (IS_INT[first_type] if uniform is not None else np.all(IS_INT[types])):
                raise Unsupported("a value that is not an integer")
            _ints(words, offset, types, fills[i], out[i, at : at + n], uniform)
        if col + 1 < ncols:  # the last column's values are read already
            offset += int(SERIAL_SIZE[uniform]) if uniform is not None else np.take(SERIAL_SIZE, types)
    return n


def _words(buf: Bytes) -> npt.NDArray[np.int64]:
    """``words[o]`` = the big-endian 8-byte integer starting at byte ``o`` of ``buf`` (a strided view, no copy)."""
    return np.ndarray(shape=(len(buf) - 8,), dtype=">i8", buffer=buf, strides=(1,))


def _ints(words: npt.NDArray[np.int64], offset: Ints, serial: Bytes, fill: int, out: Ints, uniform: int | None) -> None:
    """``out`` = the big-endian two's-complement integers of serial types 1-6, 8 and 9 (NULL -> fill);
    ``uniform``: the one serial type of them all, when there is one."""
    if uniform is not None:  # the usual case: one serial type for the whole column
        if uniform in (0, 8, 9):
            out[...] = fill if uniform == 0 else uniform - 8
        else:  # eight bytes read from the value's start, shifted arithmetically, leave the value sign-extended
            np.right_shift(words[offset], (64 - 8 * int(INT_SIZE[uniform])) % 64, out=out)
        return
    value = words[offset].astype(np.int64) >> (64 - 8 * INT_SIZE[serial]) % 64
    value[serial == 8] = 0
    value[serial == 9] = 1
    value[serial == 0] = fill
    out[...] = value
