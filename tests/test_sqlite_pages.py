"""The page-level SQLite reader gives exactly what SQL gives, and declines what it cannot decode."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
from launchprobe.collect.sqlite_pages import read_int_columns
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = Path(__file__).parents[1].parent / "shared" / "traces" / "nsys"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY")


def _by_sql(conn: sqlite3.Connection, table: str, cols: list[str], fill: int) -> np.ndarray:
    rows = conn.execute(f'SELECT {", ".join(cols)} FROM "{table}" ORDER BY rowid').fetchall()
    return np.array([[fill if v is None else v for v in r] for r in rows], dtype=np.int64).T.reshape(len(cols), -1)


def _by_pages(conn: sqlite3.Connection, path: Path, table: str, cols: list[str], fill: int) -> np.ndarray | None:
    n = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    out = np.empty((len(cols), n), dtype=np.int64)
    return out if read_int_columns(conn, path, table, cols, [fill] * len(cols), out) else None


def _exports(tmp_path: Path) -> list[Path]:
    paths = []
    for gz in sorted(FIXTURES.glob("*.sqlite.gz")):
        target = tmp_path / gz.name[:-3]
        with gzip.open(gz, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        paths.append(target)
    return paths + sorted(TRACES.glob("*.sqlite"))


def test_pages_equal_sql_on_real_exports(tmp_path: Path) -> None:
    checked = 0
    for path in _exports(tmp_path):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        for table in TABLES:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[2] == "INTEGER"]
            if not cols:
                continue
            got = _by_pages(conn, path, table, cols, -7)
            assert got is not None, (path.name, table)
            np.testing.assert_array_equal(got, _by_sql(conn, table, cols, -7))
            checked += 1
        conn.close()
    assert checked >= 5


def _table(path: Path, values: Sequence[tuple[object, ...]], *, wal: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (a INTEGER NOT NULL, b INTEGER, c TEXT, d INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", values)
    conn.commit()
    return conn


def test_every_integer_width_nulls_and_constants(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    widths = [0, 1, 127, -128, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1, -(2**31), 2**47 - 1, -(2**47)]
    widths += [2**63 - 1, -(2**63)]
    values = [
        (w, None if i % 3 == 0 else int(rng.integers(-(2**40), 2**40)), "x" * (i % 40), i % 2)
        for i, w in enumerate(widths * 300)
    ]
    path = tmp_path / "w.sqlite"
    conn = _table(path, values)
    got = _by_pages(conn, path, "t", ["a", "b", "d"], -1)
    assert got is not None
    np.testing.assert_array_equal(got, _by_sql(conn, "t", ["a", "b", "d"], -1))


def test_declines_what_it_cannot_decode(tmp_path: Path) -> None:
    wal = tmp_path / "wal.sqlite"
    conn = _table(wal, [(1, 2, "x", 3)], wal=True)
    assert _by_pages(conn, wal, "t", ["a"], 0) is None
    big = tmp_path / "overflow.sqlite"
    conn = _table(big, [(1, 2, "y" * 10_000, 3)])
    assert _by_pages(conn, big, "t", ["a"], 0) is None  # the record spills to overflow pages
    text = tmp_path / "text.sqlite"
    conn = _table(text, [(1, 2, "z", 3)])
    assert _by_pages(conn, text, "t", ["c"], 0) is None  # not an integer column


def test_reader_falls_back_to_sql_with_same_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _exports(tmp_path)[0]
    fast = read_nsys_sqlite(path)
    monkeypatch.setattr("launchprobe.collect.nsys_sqlite.read_int_columns", lambda *args: False)
    slow = read_nsys_sqlite(path)
    assert list(fast.gpu_ops.columns) == list(GPU_OP_COLUMNS)
    assert list(fast.api_calls.columns) == list(API_CALL_COLUMNS)
    for name in ("gpu_ops", "api_calls", "ranges"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert list(a.columns) == list(b.columns)
        for col in a.columns:
            assert a[col].astype(str).tolist() == b[col].astype(str).tolist(), (name, col)
