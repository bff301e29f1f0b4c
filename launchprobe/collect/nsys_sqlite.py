"""Read an ``nsys export --type sqlite`` file into a Timeline.

Tables exist only when they have rows and columns come and go between nsys versions, so every query is built
from the columns the file actually has. The big tables (kernels, copies, sets, runtime and driver calls) are
decoded straight from the file's pages (``sqlite_pages``) into one preallocated int64 block per frame, in rowid
order, with no Python object per row; when that reader declines, the columns come through SQL as one
``group_concat`` string per column and chunk, parsed by numpy. The frames are built on those blocks without
copying; names are categoricals (one Python string per distinct name).
"""

from __future__ import annotations

import mmap
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt
import pandas as pd

from launchprobe.collect.sqlite_pages import read_int_columns
from launchprobe.errors import BadTraceError, NoDataError, UsageError
from launchprobe.timeline import (
    API_CALL_COLUMNS,
    GPU_OP_COLUMNS,
    METRIC_COLUMNS,
    RANGE_COLUMNS,
    THREAD_STATE_COLUMNS,
    Timeline,
    api_category,
    conform,
    empty_frame,
)

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
SCHED_TABLE = "SCHED_EVENTS"
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
CHUNK_ROWS = 1_000_000
TIME_LIMIT_NS = 1 << 62

# CUPTI memcpy kinds, used when the export has no ENUM_CUDA_MEMCPY_OPER table.
MEMCPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
    6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP",
}  # fmt: skip
METRIC_KEYWORDS = ("DRAM", "SMs Active", "SM Issue", "Tensor Active", "Compute Warps")

Ints = npt.NDArray[np.int64]


def read_nsys_sqlite(path: Path, *, with_metrics: bool = True) -> Timeline:
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not an nsys SQLite export")
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BadTraceError(f"{path}: cannot open as SQLite ({_one_line(exc)})") from None
    try:
        try:
            return _read(conn, path, with_metrics)
        except (sqlite3.OperationalError, UnicodeDecodeError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and "decode" not in str(exc):
                raise
            # Text that is not UTF-8 (in the schema, a name, a metadata value): read it with U+FFFD instead.
            conn.text_factory = _replace_invalid_utf8
            return _read(conn, path, with_metrics)
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{path}: corrupt or truncated SQLite file ({_one_line(exc)})") from None
    except UnicodeDecodeError:  # SQLite's own message quotes a damaged schema that is not UTF-8
        raise BadTraceError(f"{path}: corrupt SQLite file (a damaged schema that is not UTF-8)") from None
    except MemoryError:
        raise BadTraceError(f"{path}: corrupt SQLite file (a table claims more rows than fit in memory)") from None
    finally:
        conn.close()


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """SQLite's message on one line (a malformed schema is quoted with its newlines), at most ``limit`` chars."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _replace_invalid_utf8(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _text(value: Any) -> str:
    """A value SQLite returned where text belongs, as text (a blob is decoded, invalid UTF-8 replaced)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _read(conn: sqlite3.Connection, path: Path, with_metrics: bool) -> Timeline:
    tables = _tables(conn)
    if "StringIds" not in tables and not any(t.startswith("CUPTI_ACTIVITY_KIND") for t in tables):
        raise BadTraceError(f"{path}: an SQLite file, but not an nsys export (no StringIds or CUPTI tables)")
    meta = _meta(conn, tables)
    meta.update(format="nsys-sqlite", path=str(path))
    strings = _strings(conn, path) if "StringIds" in tables else {}
    ops = _gpu_ops(conn, path, tables, strings)
    if ops is None:
        hint = ""
        if _has_rows(conn, tables, GRAPH_TRACE_TABLE):
            hint = (
                "; CUDA graphs were traced as whole graphs (--cuda-graph-trace=graph): re-run with "
                "--cuda-graph-trace=node"
            )
        elif meta.get("cuda_trace") is False:
            hint = "; CUDA tracing was off in this capture (nsys profile -t cuda,nvtx)"
        raise NoDataError(f"{path}: the trace has no kernels, copies or sets{hint}")
    notices: list[str] = []
    if _has_rows(conn, tables, GRAPH_TRACE_TABLE):
        notices.append(
            "some CUDA graphs were traced as whole graphs (--cuda-graph-trace=graph): their nodes are missing, "
            "so gaps inside them are not seen; profile with --cuda-graph-trace=node"
        )
    meta["notices"] = notices
    metrics = _metrics(conn, path, tables) if with_metrics else None
    return Timeline(
        gpu_ops=ops,
        api_calls=_runtime(conn, path, tables, strings),
        ranges=_nvtx(conn, path, tables, strings),
        metrics=metrics,
        thread_states=_thread_states(conn, path, tables),
        meta=meta,
    )


# --- schema helpers ---------------------------------------------------------------------------------------------


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


# Columns without which a table cannot be read (a missing one used to read as zeros).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    KERNEL_TABLE: ("start", "end", "deviceId", "streamId"),
    MEMCPY_TABLE: ("start", "end", "deviceId", "streamId"),
    MEMSET_TABLE: ("start", "end", "deviceId", "streamId"),
    RUNTIME_TABLE: ("start", "end", "nameId"),
    DRIVER_TABLE: ("start", "end", "nameId"),
    NVTX_TABLE: ("start", "end", "eventType"),
    SCHED_TABLE: ("start", "isSchedIn", "globalTid"),
    "StringIds": ("id", "value"),
    "GPU_METRICS": ("timestamp", "metricId", "value"),
    "TARGET_INFO_GPU_METRICS": ("metricId", "metricName"),
}
KERNEL_NAME_COLUMNS = ("shortName", "demangledName", "mangledName", "name")


def _require(conn: sqlite3.Connection, path: Path, table: str) -> set[str]:
    """The table's columns; BadTraceError naming the first required one it lacks."""
    cols = _columns(conn, table)
    for col in REQUIRED_COLUMNS.get(table, ()):
        if col not in cols:
            raise BadTraceError(
                f"{path}: table {table} has no column {col!r} (not an nsys export this version reads, or modified)"
            )
    if table == KERNEL_TABLE and not any(c in cols for c in KERNEL_NAME_COLUMNS):
        raise BadTraceError(f"{path}: table {table} has no kernel name column ({', '.join(KERNEL_NAME_COLUMNS)})")
    return cols


def _check_integers(
    conn: sqlite3.Connection, path: Path, table: str, columns: Sequence[str], *, real_ok: Sequence[str] = ()
) -> None:
    """BadTraceError when a value of one of ``columns`` is text or a blob (or a float, unless ``real_ok``):
    SQL would turn it into a wrong number or misalign the columns."""
    if not columns:
        return
    allowed = {col: ("integer", "null", "real") if col in real_ok else ("integer", "null") for col in columns}
    tests = " OR ".join(
        f'typeof("{col}") NOT IN ({", ".join(repr(t) for t in kinds)})' for col, kinds in allowed.items()
    )
    types = ", ".join(f'typeof("{col}")' for col in columns)
    bad = conn.execute(f'SELECT rowid, {types} FROM "{table}" WHERE {tests} LIMIT 1').fetchone()  # one scan
    if bad is None:
        return
    for col, kind in zip(columns, bad[1:]):
        if kind not in allowed[col]:
            raise BadTraceError(
                f"{path}: table {table}, column {col}: a {kind} value where a number belongs (row {bad[0]})"
            )


def _check_times(path: Path, table: str, *times: npt.NDArray[np.int64]) -> None:
    """Times beyond TIME_LIMIT_NS are no clock reading (and would overflow differences in analyses)."""
    for t in times:
        if len(t) and (int(t.max()) > TIME_LIMIT_NS or int(t.min()) < -TIME_LIMIT_NS):
            raise BadTraceError(f"{path}: table {table}: a time out of range (beyond {TIME_LIMIT_NS} ns)")


def _has_rows(conn: sqlite3.Connection, tables: set[str], table: str) -> bool:
    return table in tables and conn.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None


def _read_ints(
    conn: sqlite3.Connection, table: str, exprs: Sequence[str], where: str = "", dtype: Any = np.int64
) -> list[npt.NDArray[Any]]:
    """Each SQL expression as a numpy array over the table's rows (rowid order), in chunks of CHUNK_ROWS.

    Expressions must never be NULL (wrap them in coalesce): group_concat skips NULLs.
    """
    lo, hi = conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    parts: list[list[npt.NDArray[Any]]] = [[] for _ in exprs]
    if lo is None:
        return [np.zeros(0, dtype=dtype) for _ in exprs]
    select = ", ".join(f"group_concat({e})" for e in exprs)
    extra = f" AND ({where})" if where else ""
    for start in range(lo, hi + 1, CHUNK_ROWS):
        row = conn.execute(
            f'SELECT {select} FROM "{table}" WHERE rowid >= ? AND rowid < ?{extra}', (start, start + CHUNK_ROWS)
        ).fetchone()
        for i, text in enumerate(row):
            if text:
                parts[i].append(np.fromstring(text, dtype=dtype, sep=","))
    return [np.concatenate(p) if p else np.zeros(0, dtype=dtype) for p in parts]


def _strings(conn: sqlite3.Connection, path: Path) -> dict[int, str]:
    _require(conn, path, "StringIds")
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    if not all(type(v) is str for v in strings.values()):  # a blob or number where text belongs
        strings = {k: _text(v) for k, v in strings.items()}
    return strings


def _meta(conn: sqlite3.Connection, tables: set[str]) -> dict[str, Any]:
    """Versions, graph-trace mode, GPU names; metadata a file lacks (or holds in odd types) is left out."""
    meta: dict[str, Any] = {"tool": "nsys"}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables and {"name", "value"} <= _columns(conn, table):
            rows = {_text(k): v for k, v in conn.execute(f'SELECT name, value FROM "{table}"')}
            for key, field in (("EXPORT_PRODUCT_VERSION", "tool_version"), ("EXPORT_SCHEMA_VERSION", "schema_version")):
                value = rows.get(key)
                meta[field] = None if value is None else _text(value)
            meta["metadata_table"] = table
            break
    if "META_DATA_CAPTURE" in tables and {"name", "value"} <= _columns(conn, "META_DATA_CAPTURE"):
        capture = conn.execute(
            "SELECT value FROM META_DATA_CAPTURE WHERE name = 'CUDA_GRAPH_TRACE_OPTIONS:MODE'"
        ).fetchone()
        if capture and capture[0] is not None:
            meta["cuda_graph_trace"] = _text(capture[0])
    gpus: dict[int, str] = {}
    if "TARGET_INFO_GPU" in tables:
        cols = _columns(conn, "TARGET_INFO_GPU")
        dev_col = next((c for c in ("cuDevice", "id") if c in cols), None)
        if dev_col is not None and "name" in cols:
            for dev, name in conn.execute(f'SELECT "{dev_col}", name FROM TARGET_INFO_GPU'):
                if isinstance(dev, int) and name:
                    gpus.setdefault(dev, _text(name))
    meta["gpus"] = gpus
    return meta


# --- integer blocks ---------------------------------------------------------------------------------------------


def _count(conn: sqlite3.Connection, tables: set[str], table: str) -> int:
    return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]) if table in tables else 0


def _fill_block(
    conn: sqlite3.Connection, path: Path, table: str, spec: Sequence[tuple[str | None, int]], out: Ints
) -> None:
    """``out[i]`` = column ``spec[i][0]`` of ``table`` in rowid order, NULL (or a column the table lacks) as
    ``spec[i][1]``. ``out`` may be a column slice of a larger block."""
    cols = _require(conn, path, table)
    names = [name if name in cols else None for name, _ in spec]
    fills = [fill for _, fill in spec]
    for i, name in enumerate(names):
        if name is None:
            out[i] = fills[i]
    wanted = [i for i, name in enumerate(names) if name is not None]
    if not wanted or not out.shape[1]:
        return
    if read_int_columns(conn, path, table, names, fills, out):
        return
    _check_integers(conn, path, table, [n for n in names if n is not None])
    exprs = [f'coalesce("{names[i]}", {fills[i]})' for i in wanted]
    done = 0
    for chunk in _sql_chunks(conn, table, exprs):
        m = len(chunk[0])
        if done + m > out.shape[1] or any(len(c) != m for c in chunk):
            raise BadTraceError(f"{path}: {table} changed while it was read")
        for i, values in zip(wanted, chunk, strict=True):
            out[i, done : done + m] = values
        done += m
    if done != out.shape[1]:
        raise BadTraceError(f"{path}: {table} changed while it was read")


def _sql_chunks(conn: sqlite3.Connection, table: str, exprs: Sequence[str]) -> Iterator[list[Ints]]:
    """Each expression over CHUNK_ROWS rowids at a time, as one ``group_concat`` string per column parsed by numpy
    (expressions must never be NULL: group_concat skips NULLs)."""
    lo, hi = conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    if lo is None:
        return
    select = ", ".join(f"group_concat({e})" for e in exprs)
    for start in range(lo, hi + 1, CHUNK_ROWS):
        row = conn.execute(
            f'SELECT {select} FROM "{table}" WHERE rowid >= ? AND rowid < ?', (start, start + CHUNK_ROWS)
        ).fetchone()
        yield [np.fromstring(t, dtype=np.int64, sep=",") if t else np.zeros(0, np.int64) for t in row]


def _block(rows: int, cols: int) -> Ints:
    """An int64 block for a whole table. Large ones come from their own anonymous mapping, without the
    transparent-huge-page hint numpy gives big arrays: with THP defrag on ``madvise`` (a common default) that
    hint can make the kernel compact memory for seconds while the block is first written."""
    if rows * cols * 8 < 1 << 26:
        return np.empty((rows, cols), dtype=np.int64)
    return np.frombuffer(mmap.mmap(-1, rows * cols * 8), dtype=np.int64).reshape(rows, cols)


def _split_global_id(block: Ints, pid_row: int, tid_row: int | None = None) -> None:
    """In place: an nsys global id (pid in bits 24-47, tid in bits 0-23) -> pid, and tid when asked for."""
    if tid_row is not None:
        np.bitwise_and(block[pid_row], 0xFFFFFF, out=block[tid_row])
    np.right_shift(block[pid_row], 24, out=block[pid_row])
    np.bitwise_and(block[pid_row], 0xFFFFFF, out=block[pid_row])


def _codes_of(ids: Ints, names_of: Callable[[Ints], list[str]]) -> tuple[Ints, list[str]]:
    """Integer ids -> (codes, categories): one name per distinct id, equal names merged. Linear time for the
    small non-negative ids nsys uses (a lookup table), a sort otherwise."""
    if len(ids) and ids.min() >= 0 and ids.max() < 1 << 24:
        seen = np.zeros(int(ids.max()) + 1, dtype=bool)
        seen[ids] = True
        uniq = np.nonzero(seen)[0]
        lut = np.zeros(len(seen), dtype=np.int64)
        lut[uniq] = np.arange(len(uniq))
        codes = lut[ids]
    else:
        uniq, codes = np.unique(ids, return_inverse=True)
    names = names_of(uniq)
    merged = list(dict.fromkeys(names))
    if len(merged) < len(names):
        remap = np.array([merged.index(n) for n in names], dtype=np.int64)
        codes = remap[codes]
    return codes.astype(np.int64, copy=False), merged


def _categorical(codes: npt.NDArray[np.integer[Any]], categories: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object), validate=False)


def _frame(block: Ints, columns: Sequence[str], leading: dict[str, Any]) -> pd.DataFrame:
    """A frame over ``block`` (one row per integer column, no copy) with ``leading`` columns in front."""
    frame = pd.DataFrame(block.T, columns=list(columns), copy=False)
    for i, (name, values) in enumerate(leading.items()):
        frame.insert(i, name, values)
    return frame


# --- GPU work ---------------------------------------------------------------------------------------------------

OP_INT_COLUMNS = [c for c, dtype in GPU_OP_COLUMNS.items() if dtype == "int64"]
OP_KINDS = ("kernel", "memcpy", "memset")


def _op_spec(conn: sqlite3.Connection, table: str) -> list[tuple[str | None, int]]:
    """Source columns in OP_INT_COLUMNS order, then the name source (kernel name id, copy kind)."""
    size: str | None = None
    extra: str | None = None
    if table == KERNEL_TABLE:
        cols = _columns(conn, table)
        extra = next((c for c in KERNEL_NAME_COLUMNS if c in cols), None)
    else:
        size, extra = "bytes", "copyKind" if table == MEMCPY_TABLE else None
    return [
        ("start", 0), ("end", 0), ("deviceId", 0), ("streamId", 0), ("globalPid", 0), ("correlationId", -1),
        ("graphNodeId", -1), (size, 0), (extra, -1 if table == KERNEL_TABLE else 0),
    ]  # fmt: skip


def _gpu_ops(conn: sqlite3.Connection, path: Path, tables: set[str], strings: dict[int, str]) -> pd.DataFrame | None:
    """Kernels, copies and sets in one frame (None when there are none)."""
    sources = [(KERNEL_TABLE, 0), (MEMCPY_TABLE, 1), (MEMSET_TABLE, 2)]
    counts = [_count(conn, tables, table) for table, _ in sources]
    total = sum(counts)
    if not total:
        return None
    ncols = len(OP_INT_COLUMNS)
    block = _block(ncols + 1, total)  # the last row: name ids / copy kinds
    kinds = np.empty(total, dtype=np.int8)
    name_codes = np.empty(total, dtype=np.int64)
    categories: list[str] = []
    at = 0
    copy_kinds = _memcpy_kind_names(conn, tables)
    for (table, kind), n in zip(sources, counts, strict=True):
        if not n:
            continue
        part = block[:, at : at + n]
        _fill_block(conn, path, table, _op_spec(conn, table), part)
        kinds[at : at + n] = kind
        if kind == 0:
            codes, names = _codes_of(part[ncols], lambda u: [strings.get(int(i), f"kernel#{int(i)}") for i in u])
        elif kind == 1:
            codes, names = _codes_of(part[ncols], lambda u: [f"Memcpy {copy_kinds.get(int(k), k)}" for k in u.tolist()])
        else:
            codes, names = np.zeros(n, dtype=np.int64), ["Memset"]
        offset = len(categories)
        categories += names
        np.add(codes, offset, out=name_codes[at : at + n])
        del codes
        at += n
    merged = list(dict.fromkeys(categories))
    if len(merged) < len(categories):  # a kernel named like a copy
        name_codes = np.array([merged.index(c) for c in categories], dtype=np.int64)[name_codes]
    ints = block[:ncols]
    _split_global_id(ints, OP_INT_COLUMNS.index("pid"))
    start, end = ints[OP_INT_COLUMNS.index("start_ns")], ints[OP_INT_COLUMNS.index("end_ns")]
    np.maximum(end, start, out=end)
    _check_times(path, "CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET", start, end)
    return _frame(
        ints,
        OP_INT_COLUMNS,
        {
            "kind": _categorical(kinds, list(OP_KINDS)),
            "name": _categorical(name_codes, merged),
        },
    )


def _memcpy_kind_names(conn: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    kinds = dict(MEMCPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables and "name" in _columns(conn, "ENUM_CUDA_MEMCPY_OPER"):
        if "id" not in _columns(conn, "ENUM_CUDA_MEMCPY_OPER"):
            return kinds
        for key, name in conn.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
            if not isinstance(key, int):
                continue
            # e.g. CUDA_MEMCPY_KIND_HTOD -> HtoD
            short = _text(name).rsplit("_", 1)[-1]
            if len(short) == 4 and short[1:3].lower() == "to":
                short = short[0] + "to" + short[3]
            kinds[key] = short
    return kinds


# --- host side --------------------------------------------------------------------------------------------------

API_INT_COLUMNS = [c for c, dtype in API_CALL_COLUMNS.items() if dtype == "int64"]  # start, end, pid, tid, corr
API_SPEC: list[tuple[str | None, int]] = [
    ("start", 0), ("end", 0), ("globalTid", 0), (None, 0), ("correlationId", -1), ("nameId", -1),
]  # fmt: skip


def _runtime(conn: sqlite3.Connection, path: Path, tables: set[str], strings: dict[int, str]) -> pd.DataFrame:
    sources = [t for t in (RUNTIME_TABLE, DRIVER_TABLE) if t in tables]
    counts = [_count(conn, tables, t) for t in sources]
    total = sum(counts)
    if not total:
        return empty_frame(API_CALL_COLUMNS)
    block = _block(len(API_SPEC), total)
    at = 0
    for table, n in zip(sources, counts, strict=True):
        _fill_block(conn, path, table, API_SPEC, block[:, at : at + n])
        at += n
    ints = block[: len(API_INT_COLUMNS)]
    _split_global_id(ints, 2, 3)
    np.maximum(ints[1], ints[0], out=ints[1])
    _check_times(path, " / ".join(sources), ints[0], ints[1])
    codes, names = _codes_of(block[-1], lambda u: [strings.get(int(i), f"api#{int(i)}") for i in u])
    cat_names = [api_category(n) for n in names]
    cat_unique = sorted(set(cat_names))
    cat_map = np.array([cat_unique.index(c) for c in cat_names], dtype=np.int64)
    cat_map = cat_map.astype(np.int8 if len(cat_unique) < 128 else np.int64)  # small codes, small gather
    return _frame(
        ints,
        API_INT_COLUMNS,
        {"name": _categorical(codes, names), "category": _categorical(cat_map[codes], cat_unique)},
    )


def _nvtx(conn: sqlite3.Connection, path: Path, tables: set[str], strings: dict[int, str]) -> pd.DataFrame:
    if not _has_rows(conn, tables, NVTX_TABLE):
        return empty_frame(RANGE_COLUMNS)
    cols = _require(conn, path, NVTX_TABLE)
    _check_integers(conn, path, NVTX_TABLE, [c for c in ("start", "end", "eventType", "globalTid") if c in cols])
    text = "text" if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    domain = "coalesce(domainId, 0)" if "domainId" in cols else "0"
    tid = "coalesce(globalTid, 0)" if "globalTid" in cols else "0"
    domains: dict[int, str] = {}
    if "domainId" in cols:
        for dom, name in conn.execute(
            f"SELECT domainId, {text} FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE}"
        ):
            if isinstance(dom, int) and name:
                domains[dom] = _text(name)
    rows = conn.execute(
        f"SELECT start, end, {tid}, {domain}, {text}, {text_id} FROM NVTX_EVENTS "
        f"WHERE eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND end IS NOT NULL AND end >= start"
    ).fetchall()
    if not rows:
        return empty_frame(RANGE_COLUMNS)
    start, end, gtid, dom, txt, tids = zip(*rows, strict=True)
    gtid_arr = np.array(gtid, dtype=np.int64)
    names = [
        t if type(t) is str else _text(t) if t is not None else strings.get(i, "") if type(i) is int else ""
        for t, i in zip(txt, tids, strict=True)
    ]
    frame = pd.DataFrame(
        {
            "name": pd.Categorical(names),
            "domain": pd.Categorical([domains.get(d, "") for d in dom]),
            "start_ns": np.array(start, dtype=np.int64),
            "end_ns": np.array(end, dtype=np.int64),
            "pid": (gtid_arr >> 24) & 0xFFFFFF,
            "tid": gtid_arr & 0xFFFFFF,
            "depth": -1,
        }
    )
    _check_times(path, NVTX_TABLE, frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy())
    return conform(frame, RANGE_COLUMNS)


# --- thread scheduling ------------------------------------------------------------------------------------------


def _thread_states(conn: sqlite3.Connection, path: Path, tables: set[str]) -> pd.DataFrame | None:
    """Each thread's switched-out stretches from ``SCHED_EVENTS`` (``--cpuctxsw=process-tree``): from a sched-out
    event to the thread's next sched-in. A sched-out with no later sched-in (asleep at the end) runs to the last
    event of the table; a leading sched-in (switched out since before the capture) is dropped. None when the trace
    has no scheduling data."""
    if not _has_rows(conn, tables, SCHED_TABLE):
        return None
    _require(conn, path, SCHED_TABLE)
    _check_integers(conn, path, SCHED_TABLE, ["start", "isSchedIn", "globalTid"])
    start, sched_in, gtid = _read_ints(
        conn, SCHED_TABLE, ["start", "(coalesce(isSchedIn, 1) != 0)", "coalesce(globalTid, 0)"]
    )
    _check_times(path, SCHED_TABLE, start)
    order = np.lexsort((start, gtid))
    start, sched_in, gtid = start[order], sched_in[order], gtid[order]
    n = len(start)
    nxt = np.arange(1, n + 1)
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[:-1] = gtid[1:] == gtid[:-1]
    last = int(start.max()) if n else 0
    out = np.flatnonzero(sched_in == 0)
    # the next event of the same thread ends the stretch when it is a sched-in; a repeated sched-out is skipped
    has_next = same[out]
    ends = np.full(len(out), last, dtype=np.int64)
    follow = nxt[out[has_next]]
    ends[has_next] = start[follow]
    keep = ~has_next.copy()
    keep[has_next] = sched_in[follow] != 0
    out, ends = out[keep], ends[keep]
    frame = pd.DataFrame(
        {
            "pid": (gtid[out] >> 24) & 0xFFFFFF,
            "tid": gtid[out] & 0xFFFFFF,
            "start_ns": start[out],
            "end_ns": np.maximum(ends, start[out]),
        }
    )
    return conform(frame, THREAD_STATE_COLUMNS)


# --- GPU metrics ------------------------------------------------------------------------------------------------


def _metrics(conn: sqlite3.Connection, path: Path, tables: set[str]) -> pd.DataFrame | None:
    """Samples of the metrics the verdict uses; the device is ``typeId & 0xFF`` (nsys's GPU index)."""
    if not _has_rows(conn, tables, "GPU_METRICS") or not _has_rows(conn, tables, "TARGET_INFO_GPU_METRICS"):
        return None
    _require(conn, path, "TARGET_INFO_GPU_METRICS")
    names: dict[int, str] = {}
    for metric_id, name in conn.execute("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS"):
        if isinstance(metric_id, int) and isinstance(name, str) and any(k in name for k in METRIC_KEYWORDS):
            names[metric_id] = name
    if not names:
        return None
    cols = _require(conn, path, "GPU_METRICS")
    _check_integers(
        conn,
        path,
        "GPU_METRICS",
        [c for c in ("timestamp", "metricId", "typeId", "value") if c in cols],
        real_ok=["value"],
    )
    device = "(coalesce(typeId, 0) & 255)" if "typeId" in cols else "0"
    where = f"timestamp IS NOT NULL AND metricId IN ({', '.join(str(i) for i in names)})"
    ts, dev, mid = _read_ints(conn, "GPU_METRICS", ["timestamp", device, "metricId"], where)
    (value,) = _read_ints(conn, "GPU_METRICS", ["coalesce(value, 0)"], where, dtype=np.float64)
    if not len(ts):
        return None
    _check_times(path, "GPU_METRICS", ts)
    uniq, codes = np.unique(mid, return_inverse=True)
    frame = pd.DataFrame(
        {
            "device": dev,
            "metric": pd.Categorical.from_codes(codes, categories=pd.Index([names[int(u)] for u in uniq])),
            "timestamp_ns": ts,
            "value": value,
        }
    )
    return conform(frame, METRIC_COLUMNS)
