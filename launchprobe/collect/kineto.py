"""Read a PyTorch-profiler (Kineto) chrome trace, ``.json`` or ``.json.gz``, into a Timeline.

``ts`` and ``dur`` are microseconds; floats carry nanoseconds. They are parsed as decimal text and converted
exactly (round half to even), so no nanosecond is lost to binary floating point even on epoch-scale clocks.
``end_ns`` is ``start_ns + dur_ns``. GPU rows carry the device as their pid; they are given the host process
of the launch call they correlate with, so analyses can join on (pid, correlation_id) as for nsys.
"""

from __future__ import annotations

import gc
import gzip
import zlib
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from launchprobe.errors import BadTraceError, NoDataError
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
API_CATS = ("cuda_runtime", "cuda_driver")
RANGE_CATS = ("user_annotation",)
THOUSAND = Decimal(1000)


def us_to_ns(value: Any) -> int:
    """Kineto microseconds (int, or float kept as its decimal text) -> integer nanoseconds."""
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, str):
        return int((Decimal(value) * THOUSAND).to_integral_value(ROUND_HALF_EVEN))
    if isinstance(value, float):
        return round(value * 1000)
    raise TypeError(f"not a time: {value!r}")


def _as_int(value: Any, default: int) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


class _Args(msgspec.Struct):
    """The event ``args`` the reader uses; other keys are skipped by the decoder, never materialised."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    bytes: Any = None


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = msgspec.UNSET
    dur: Any = 0
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # Kineto key names
    schemaVersion: Any = msgspec.UNSET
    deviceProperties: Any = None
    distributedInfo: Any = None


# float_hook=str keeps a float's decimal text, so us_to_ns converts it exactly.
_TYPED = msgspec.json.Decoder(_Trace, float_hook=str)
_ANY = msgspec.json.Decoder(float_hook=str)


def _as_event(ev: Any) -> _Event | None:
    """A generically decoded event as an _Event, None when it is not an object."""
    if not isinstance(ev, dict):
        return None
    raw = ev.get("args")
    args = (
        _Args(raw.get("device"), raw.get("stream"), raw.get("correlation"), raw.get("bytes"))
        if isinstance(raw, dict)
        else None
    )
    return _Event(
        ev.get("ph"),
        ev.get("cat", ""),
        ev.get("name", ""),
        ev.get("pid"),
        ev.get("tid"),
        ev.get("ts", msgspec.UNSET),
        ev.get("dur", 0),
        args,
    )


def _load_json(path: Path) -> _Trace | list[Any] | Any:
    """The trace as a _Trace when it has the usual shape, else as generic JSON (dicts and lists)."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise BadTraceError(f"{path}: truncated or corrupt gzip file ({exc})") from None
    if raw[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark, which json.loads also accepts
        raw = raw[3:]
    try:
        try:
            return _TYPED.decode(raw)
        except msgspec.ValidationError:  # valid JSON of another shape (a bare event list, odd events): decode as is
            return _ANY.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadTraceError(f"{path}: truncated or invalid JSON ({exc})") from None


def read_kineto(path: Path) -> Timeline:
    # Parsing builds many small objects and none of them form cycles: with the cyclic garbage collector on,
    # it rescans them again and again. Off while reading.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        data = _load_json(path)
        if isinstance(data, _Trace):
            events: Any = data.traceEvents
        else:
            events = data.get("traceEvents") if isinstance(data, dict) else data
            if isinstance(events, list):
                events = [ev for ev in map(_as_event, events) if ev is not None]
        if not isinstance(events, list):
            raise BadTraceError(f"{path}: JSON, but not a Kineto/chrome trace (no traceEvents list)")
        try:
            ops, apis, ranges = _split(events)
        except (TypeError, ValueError, InvalidOperation) as exc:
            raise BadTraceError(f"{path}: malformed trace event ({exc})") from None
    finally:
        if was_enabled:
            gc.enable()
    if not ops["start_ns"]:
        raise NoDataError(f"{path}: the trace has no kernels, copies or sets (was CUDA activity profiled?)")
    host_pids = Counter(apis["pid"])
    default_pid = host_pids.most_common(1)[0][0] if host_pids else 0
    pid_of = {c: p for c, p in zip(apis["correlation_id"], apis["pid"]) if c >= 0}
    ops["pid"] = [pid_of.get(c, default_pid) for c in ops["correlation_id"]]
    ops["graph_node_id"] = [-1] * len(ops["start_ns"])
    meta: dict[str, Any] = {
        "format": "kineto",
        "path": str(path),
        "tool": "kineto",
        "notices": [],
        "gpus": {},
    }
    if isinstance(data, _Trace):
        header = {"deviceProperties": data.deviceProperties, "distributedInfo": data.distributedInfo}
        if data.schemaVersion is not msgspec.UNSET:
            header["schemaVersion"] = data.schemaVersion
    else:
        header = data if isinstance(data, dict) else {}
    if "schemaVersion" in header:
        meta["schema_version"] = header["schemaVersion"]
    for prop in header.get("deviceProperties") or []:
        if isinstance(prop, dict) and isinstance(prop.get("id"), int) and prop.get("name"):
            meta["gpus"][prop["id"]] = str(prop["name"])
    dist = header.get("distributedInfo")
    if isinstance(dist, dict) and "rank" in dist:
        meta["rank"] = dist.get("rank")
        meta["world_size"] = dist.get("world_size")
    return Timeline(
        gpu_ops=_frame(ops, GPU_OP_COLUMNS),
        api_calls=_frame(apis, API_CALL_COLUMNS),
        ranges=_frame(ranges, RANGE_COLUMNS),
        metrics=None,
        meta=meta,
    )


def _frame(columns: dict[str, list[Any]], dtypes: dict[str, str]) -> pd.DataFrame:
    """Column lists -> a frame with exactly ``dtypes``' columns, in order and dtype."""
    return pd.DataFrame({name: pd.Series(columns[name], dtype=dtype) for name, dtype in dtypes.items()})


def _ns_column(values: list[Any]) -> list[int]:
    """us_to_ns over a column; Kineto's plain forms (an int, or text with exactly 3 decimals) skip Decimal."""
    out: list[int] = []
    append = out.append
    for v in values:
        if type(v) is int:
            append(v * 1000)
        elif type(v) is str and len(v) > 4 and v[-4] == "." and v.isascii() and v[:-4].isdigit() and v[-3:].isdigit():
            append(int(v[:-4] + v[-3:]))  # "123.456" us is 123456 ns, exactly
        else:
            append(us_to_ns(v))
    return out


def _spans(starts: list[Any], durs: list[Any]) -> tuple[list[int], list[int]]:
    """Raw ts and dur columns -> (start_ns, end_ns), negative durations clamped to 0."""
    start = _ns_column(starts)
    return start, [s + d if d > 0 else s for s, d in zip(start, _ns_column(durs))]


def _split(events: list[_Event]) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, list[Any]]]:
    """GPU ops, API calls and ranges as column lists (GPU ops still lack pid and graph_node_id)."""
    op_rows: list[tuple[Any, ...]] = []
    api_rows: list[tuple[Any, ...]] = []
    range_rows: list[tuple[Any, ...]] = []
    kinds: dict[Any, str] = {}  # raw cat -> "gpu" | "api" | "range" | ""
    categories: dict[str, str] = {}
    unset = msgspec.UNSET
    for ev in events:
        cat = ev.cat
        kind = kinds.get(cat) if type(cat) is str else None
        if kind is None:
            low = str(cat).lower()
            kind = "gpu" if low in GPU_CATS else "api" if low in API_CATS else "range" if low in RANGE_CATS else ""
            if type(cat) is str:
                kinds[cat] = kind
        if ev.ph != "X" or ev.ts is unset:
            continue
        name = ev.name if type(ev.name) is str else str(ev.name)
        if not kind:
            if not name.startswith("ProfilerStep#"):
                continue
            kind = "range"
        # Ints are the rule: take them as they are, without a call to _as_int.
        pid = v if type(v := ev.pid) is int else _as_int(v, 0)
        tid = v if type(v := ev.tid) is int else _as_int(v, 0)
        args = ev.args
        corr = -1 if args is None else v if type(v := args.correlation) is int else _as_int(v, -1)
        if kind == "gpu":
            if args is None:
                device, stream, size = pid, tid, 0
            else:
                device = v if type(v := args.device) is int else _as_int(v, pid)
                stream = v if type(v := args.stream) is int else _as_int(v, tid)
                size = v if type(v := args.bytes) is int else _as_int(v, 0)
            op_rows.append((GPU_CATS[str(cat).lower()], name, ev.ts, ev.dur, device, stream, corr, size))
        elif kind == "api":
            category = categories.get(name)
            if category is None:
                category = categories[name] = api_category(name)
            api_rows.append((name, category, ev.ts, ev.dur, pid, tid, corr))
        else:
            range_rows.append((name, "", ev.ts, ev.dur, pid, tid, -1))
    ops = _columns(op_rows, ("kind", "name", "start_ns", "end_ns", "device", "stream", "correlation_id", "bytes"))
    apis = _columns(api_rows, ("name", "category", "start_ns", "end_ns", "pid", "tid", "correlation_id"))
    ranges = _columns(range_rows, ("name", "domain", "start_ns", "end_ns", "pid", "tid", "depth"))
    return ops, apis, ranges


def _columns(rows: list[tuple[Any, ...]], names: tuple[str, ...]) -> dict[str, list[Any]]:
    """Rows with raw ts and dur in the start_ns and end_ns slots -> columns with both in integer ns."""
    columns: dict[str, list[Any]] = (
        {name: list(col) for name, col in zip(names, zip(*rows))} if rows else {name: [] for name in names}
    )
    columns["start_ns"], columns["end_ns"] = _spans(columns["start_ns"], columns["end_ns"])
    return columns
