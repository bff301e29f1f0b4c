"""Read an ``nsys export --type sqlite`` file into a Timeline.

Tables exist only when they have rows and columns come and go between nsys versions, so every query is built
from the columns the file actually has. Integer columns are read in rowid chunks as one ``group_concat`` string
per column, parsed by numpy: no Python object per row, so a multi-million-kernel export reads at several
million rows per second in bounded memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from launchprobe.errors import BadTraceError, NoDataError
from launchprobe.timeline import (
    API_CALL_COLUMNS,
    GPU_OP_COLUMNS,
    METRIC_COLUMNS,
    RANGE_COLUMNS,
    Timeline,
    api_category,
    conform,
    empty_frame,
)

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
CHUNK_ROWS = 1_000_000

# CUPTI memcpy kinds, used when the export has no ENUM_CUDA_MEMCPY_OPER table.
MEMCPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
    6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP",
}  # fmt: skip
METRIC_KEYWORDS = ("DRAM", "SMs Active", "SM Issue", "Tensor Active", "Compute Warps")

Ints = npt.NDArray[np.int64]


def read_nsys_sqlite(path: Path, *, with_metrics: bool = True) -> Timeline:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BadTraceError(f"{path}: cannot open as SQLite ({exc})") from None
    try:
        return _read(conn, path, with_metrics)
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{path}: corrupt or truncated SQLite file ({exc})") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path, with_metrics: bool) -> Timeline:
    tables = _tables(conn)
    if "StringIds" not in tables and not any(t.startswith("CUPTI_ACTIVITY_KIND") for t in tables):
        raise BadTraceError(f"{path}: an SQLite file, but not an nsys export (no StringIds or CUPTI tables)")
    meta = _meta(conn, tables)
    meta.update(format="nsys-sqlite", path=str(path))
    strings = _strings(conn) if "StringIds" in tables else {}
    ops = [
        frame
        for frame in (
            _kernels(conn, tables, strings),
            _copies(conn, tables, MEMCPY_TABLE, "memcpy"),
            _copies(conn, tables, MEMSET_TABLE, "memset"),
        )
        if frame is not None and len(frame)
    ]
    if not ops:
        hint = ""
        if _has_rows(conn, tables, GRAPH_TRACE_TABLE):
            hint = (
                "; CUDA graphs were traced as whole graphs (--cuda-graph-trace=graph): re-run with "
                "--cuda-graph-trace=node"
            )
        elif meta.get("cuda_trace") is False:
            hint = "; CUDA tracing was off in this capture (nsys profile -t cuda,nvtx)"
        raise NoDataError(f"{path}: the trace has no kernels, copies or sets{hint}")
    gpu_ops = conform(pd.concat(ops, ignore_index=True), GPU_OP_COLUMNS)
    notices: list[str] = []
    if _has_rows(conn, tables, GRAPH_TRACE_TABLE):
        notices.append(
            "some CUDA graphs were traced as whole graphs (--cuda-graph-trace=graph): their nodes are missing, "
            "so gaps inside them are not seen; profile with --cuda-graph-trace=node"
        )
    meta["notices"] = notices
    metrics = _metrics(conn, tables) if with_metrics else None
    return Timeline(
        gpu_ops=gpu_ops,
        api_calls=_runtime(conn, tables, strings),
        ranges=_nvtx(conn, tables, strings),
        metrics=metrics,
        meta=meta,
    )


# --- schema helpers ---------------------------------------------------------------------------------------------


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


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


def _strings(conn: sqlite3.Connection) -> dict[int, str]:
    return dict(conn.execute("SELECT id, value FROM StringIds"))


def _names(ids: Ints, strings: dict[int, str], fallback: str) -> pd.Categorical:
    """String ids -> a categorical of their values (one Python string per distinct name, not per row)."""
    uniq, codes = np.unique(ids, return_inverse=True)
    cats = [strings.get(int(i), f"{fallback}#{int(i)}") for i in uniq]
    # Distinct ids can share a value; categories must be unique.
    values, remap = np.unique(np.array(cats, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index(values, dtype=object))


def _meta(conn: sqlite3.Connection, tables: set[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"tool": "nsys"}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            rows = dict(conn.execute(f'SELECT name, value FROM "{table}"'))
            meta["tool_version"] = rows.get("EXPORT_PRODUCT_VERSION")
            meta["schema_version"] = rows.get("EXPORT_SCHEMA_VERSION")
            meta["metadata_table"] = table
            break
    if "META_DATA_CAPTURE" in tables:
        capture = conn.execute(
            "SELECT value FROM META_DATA_CAPTURE WHERE name = 'CUDA_GRAPH_TRACE_OPTIONS:MODE'"
        ).fetchone()
        if capture:
            meta["cuda_graph_trace"] = capture[0]
    gpus: dict[int, str] = {}
    if "TARGET_INFO_GPU" in tables:
        cols = _columns(conn, "TARGET_INFO_GPU")
        key = "cuDevice" if "cuDevice" in cols else "id"
        if "name" in cols:
            for dev, name in conn.execute(f"SELECT {key}, name FROM TARGET_INFO_GPU"):
                if dev is not None and name:
                    gpus.setdefault(int(dev), str(name))
    meta["gpus"] = gpus
    return meta


# --- GPU work ---------------------------------------------------------------------------------------------------


def _op_columns(conn: sqlite3.Connection, table: str) -> tuple[set[str], list[str]]:
    cols = _columns(conn, table)
    exprs = [
        "start",
        "end",
        "coalesce(deviceId, 0)" if "deviceId" in cols else "0",
        "coalesce(streamId, 0)" if "streamId" in cols else "0",
        "coalesce((globalPid >> 24) & 16777215, 0)" if "globalPid" in cols else "0",
        "coalesce(correlationId, -1)" if "correlationId" in cols else "-1",
        "coalesce(graphNodeId, -1)" if "graphNodeId" in cols else "-1",
    ]
    return cols, exprs


def _op_frame(kind: str, arrays: list[Ints], name: Any, nbytes: Ints | int) -> pd.DataFrame:
    start, end, device, stream, pid, corr, node = arrays
    return pd.DataFrame(
        {
            "kind": pd.Categorical([kind]).repeat(len(start)) if len(start) else pd.Categorical([]),
            "name": name,
            "start_ns": start,
            "end_ns": np.maximum(end, start),
            "device": device,
            "stream": stream,
            "pid": pid,
            "correlation_id": corr,
            "graph_node_id": node,
            "bytes": nbytes,
        }
    )


def _kernels(conn: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> pd.DataFrame | None:
    if KERNEL_TABLE not in tables:
        return None
    cols, exprs = _op_columns(conn, KERNEL_TABLE)
    name_col = next((c for c in ("shortName", "demangledName", "mangledName", "name") if c in cols), None)
    arrays = _read_ints(conn, KERNEL_TABLE, [*exprs, f"coalesce({name_col}, -1)" if name_col else "-1"])
    names = _names(arrays[-1], strings, "kernel")
    return _op_frame("kernel", arrays[:-1], names, 0)


def _copies(conn: sqlite3.Connection, tables: set[str], table: str, kind: str) -> pd.DataFrame | None:
    if table not in tables:
        return None
    cols, exprs = _op_columns(conn, table)
    extra = [
        "coalesce(bytes, 0)" if "bytes" in cols else "0",
        "coalesce(copyKind, 0)" if "copyKind" in cols else "0",
    ]
    arrays = _read_ints(conn, table, [*exprs, *extra])
    if kind == "memset":
        name: Any = pd.Categorical(["Memset"]).repeat(len(arrays[0])) if len(arrays[0]) else pd.Categorical([])
    else:
        kinds = _memcpy_kind_names(conn, tables)
        uniq, codes = np.unique(arrays[-1], return_inverse=True)
        cats = [f"Memcpy {kinds.get(int(k), str(int(k)))}" for k in uniq]
        values, remap = np.unique(np.array(cats, dtype=object), return_inverse=True)
        name = pd.Categorical.from_codes(remap[codes], categories=pd.Index(values, dtype=object))
    return _op_frame(kind, arrays[:-2], name, arrays[-2])


def _memcpy_kind_names(conn: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    kinds = dict(MEMCPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables and "name" in _columns(conn, "ENUM_CUDA_MEMCPY_OPER"):
        for key, name in conn.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
            # e.g. CUDA_MEMCPY_KIND_HTOD -> HtoD
            short = str(name).rsplit("_", 1)[-1]
            if len(short) == 4 and short[1:3].lower() == "to":
                short = short[0] + "to" + short[3]
            kinds[int(key)] = short
    return kinds


# --- host side --------------------------------------------------------------------------------------------------


def _runtime(conn: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> pd.DataFrame:
    frames = []
    for table in (RUNTIME_TABLE, "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table not in tables:
            continue
        cols = _columns(conn, table)
        exprs = [
            "start",
            "end",
            "coalesce((globalTid >> 24) & 16777215, 0)" if "globalTid" in cols else "0",
            "coalesce(globalTid & 16777215, 0)" if "globalTid" in cols else "0",
            "coalesce(correlationId, -1)" if "correlationId" in cols else "-1",
            "coalesce(nameId, -1)" if "nameId" in cols else "-1",
        ]
        start, end, pid, tid, corr, name_ids = _read_ints(conn, table, exprs)
        names = _names(name_ids, strings, "api")
        cat_names = [api_category(str(c)) for c in names.categories]
        uniq_cats = sorted(set(cat_names))
        code_map = np.array([uniq_cats.index(c) for c in cat_names], dtype=np.int64)
        category = pd.Categorical.from_codes(
            code_map[names.codes] if len(code_map) else np.zeros(0, np.int64), categories=pd.Index(uniq_cats)
        )
        frames.append(
            pd.DataFrame(
                {
                    "name": names,
                    "category": category,
                    "start_ns": start,
                    "end_ns": np.maximum(end, start),
                    "pid": pid,
                    "tid": tid,
                    "correlation_id": corr,
                }
            )
        )
    if not frames:
        return empty_frame(API_CALL_COLUMNS)
    return conform(pd.concat(frames, ignore_index=True), API_CALL_COLUMNS)


def _nvtx(conn: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> pd.DataFrame:
    if NVTX_TABLE not in tables:
        return empty_frame(RANGE_COLUMNS)
    cols = _columns(conn, NVTX_TABLE)
    if not {"start", "end", "eventType"} <= cols:
        return empty_frame(RANGE_COLUMNS)
    text = "text" if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    domain = "coalesce(domainId, 0)" if "domainId" in cols else "0"
    tid = "coalesce(globalTid, 0)" if "globalTid" in cols else "0"
    domains: dict[int, str] = {}
    if "domainId" in cols:
        for dom, name in conn.execute(
            f"SELECT domainId, {text} FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE}"
        ):
            if dom is not None and name:
                domains[int(dom)] = str(name)
    rows = conn.execute(
        f"SELECT start, end, {tid}, {domain}, {text}, {text_id} FROM NVTX_EVENTS "
        f"WHERE eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND end IS NOT NULL AND end >= start"
    ).fetchall()
    if not rows:
        return empty_frame(RANGE_COLUMNS)
    start, end, gtid, dom, txt, tids = zip(*rows, strict=True)
    gtid_arr = np.array(gtid, dtype=np.int64)
    names = [
        t if t is not None else strings.get(i, "") if i is not None else "" for t, i in zip(txt, tids, strict=True)
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
    return conform(frame, RANGE_COLUMNS)


# --- GPU metrics ------------------------------------------------------------------------------------------------


def _metrics(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame | None:
    """Samples of the metrics the verdict uses; the device is ``typeId & 0xFF`` (nsys's GPU index)."""
    if "GPU_METRICS" not in tables or "TARGET_INFO_GPU_METRICS" not in tables:
        return None
    info_cols = _columns(conn, "TARGET_INFO_GPU_METRICS")
    if not {"metricId", "metricName"} <= info_cols:
        return None
    names: dict[int, str] = {}
    for metric_id, name in conn.execute("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS"):
        if name and any(k in name for k in METRIC_KEYWORDS):
            names[int(metric_id)] = str(name)
    if not names:
        return None
    cols = _columns(conn, "GPU_METRICS")
    device = "(typeId & 255)" if "typeId" in cols else "0"
    where = f"metricId IN ({', '.join(str(i) for i in names)})"
    ts, dev, mid = _read_ints(conn, "GPU_METRICS", ["timestamp", device, "metricId"], where)
    (value,) = _read_ints(conn, "GPU_METRICS", ["coalesce(value, 0)"], where, dtype=np.float64)
    if not len(ts):
        return None
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
