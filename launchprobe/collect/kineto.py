"""Read a PyTorch-profiler (Kineto) chrome trace, ``.json`` or ``.json.gz``, into a Timeline.

``ts`` and ``dur`` are microseconds; floats carry nanoseconds. They are parsed as decimal text and converted
exactly (round half to even), so no nanosecond is lost to binary floating point even on epoch-scale clocks.
``end_ns`` is ``start_ns + dur_ns``. GPU rows carry the device as their pid; they are given the host process
of the launch call they correlate with, so analyses can join on (pid, correlation_id) as for nsys.
"""

from __future__ import annotations

import gc
import gzip
import json
import zlib
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from launchprobe.errors import BadTraceError, NoDataError
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category

# Kineto's ``cat`` spellings, matched case-insensitively. PyTorch >= 1.9 writes libkineto's ActivityType names
# (kernel, gpu_memcpy, gpu_memset, cuda_runtime, cuda_driver, user_annotation, gpu_user_annotation, cpu_op,
# python_function, cuda_sync, ...); PyTorch 1.8's first Kineto traces wrote Kernel, Memcpy, Memset, Runtime,
# Driver and Operator. ROCm builds write the same names (roctracer activities map onto the CUDA ones).
GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
API_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver")
RANGE_CATS = ("user_annotation",)
# Known and deliberately not read: host operators and Python frames (not GPU work, not launches),
# gpu_user_annotation (the GPU-timeline copy of a user annotation, on the device's pid: windows come from the host
# range), cuda_sync (sync records on the GPU timeline: waiting, not work).
IGNORED_CATS = ("cpu_op", "operator", "python_function", "python", "gpu_user_annotation", "cuda_sync", "trace")
THOUSAND = Decimal(1000)
TIME_LIMIT_NS = 1 << 62  # |time| above this (~146 years in ns) is not a clock reading; keeps differences in int64
MAX_US_DIGITS = 18  # a time of 1e18 us or more is out of range whatever its form


def us_to_ns(value: Any) -> int:
    """Kineto microseconds (int, or float kept as its decimal text) -> integer nanoseconds."""
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"not a time: {value[:40]!r}") from None
        if not number.is_finite():
            raise ValueError(f"not a finite time: {value[:40]!r}")
        if number and number.adjusted() >= MAX_US_DIGITS:  # never materialise 10**huge
            raise ValueError(f"time out of range: {value[:40]!r}")
        return int((number * THOUSAND).to_integral_value(ROUND_HALF_EVEN))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite time: {value!r}")
        return round(value * 1000)
    raise TypeError(f"not a time: {str(value)[:40]}")


def _as_int(value: Any, default: int) -> int:
    """An id as an int: ints as they are, decimal text (and PyTorch 1.8's ``"stream 7"`` thread names) parsed."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value[7:] if value.startswith("stream ") else value)
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
    except OSError as exc:
        raise BadTraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:  # at any point of the stream, not only the header
            raise BadTraceError(f"{path}: truncated or corrupt gzip file ({exc})") from None
    if raw[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark, which json.loads also accepts
        raw = raw[3:]
    try:
        return _decode(raw)
    except msgspec.DecodeError as exc:
        if "UTF-8" in str(exc):  # bytes that are not UTF-8 (in a name, say): read them as U+FFFD
            try:
                return _decode(raw.decode("utf-8", "replace").encode("utf-8"))
            except msgspec.DecodeError as again:
                exc = again
            except RecursionError:
                raise BadTraceError(f"{path}: JSON nested too deeply to be a trace") from None
        loose = _loose_json(raw)  # NaN / Infinity, which Python's json writes and strict JSON forbids
        if loose is not None:
            return loose
        raise BadTraceError(f"{path}: truncated or invalid JSON ({exc})") from None
    except RecursionError:
        raise BadTraceError(f"{path}: JSON nested too deeply to be a trace") from None


def _decode(raw: bytes) -> _Trace | Any:
    try:
        return _TYPED.decode(raw)
    except msgspec.ValidationError:  # valid JSON of another shape (a bare event list, odd events): decode as is
        return _ANY.decode(raw)


def _loose_json(raw: bytes) -> Any:
    """JSON with the non-standard constants NaN, Infinity and -Infinity (kept as their text, like floats), decoded
    by Python's json; None when that fails too or the text has no such constant."""
    if b"NaN" not in raw and b"Infinity" not in raw:
        return None
    try:
        return json.loads(raw.decode("utf-8", "replace"), parse_float=str, parse_constant=str)
    except (ValueError, RecursionError):
        return None


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
        except (TypeError, ValueError, ArithmeticError) as exc:  # InvalidOperation, OverflowError
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
    props = header.get("deviceProperties")
    for prop in props if isinstance(props, list) else []:
        if isinstance(prop, dict) and isinstance(prop.get("id"), int) and prop.get("name"):
            meta["gpus"][prop["id"]] = str(prop["name"])
    dist = header.get("distributedInfo")
    if isinstance(dist, dict) and "rank" in dist:
        meta["rank"] = dist.get("rank")
        meta["world_size"] = dist.get("world_size")
    return Timeline(
        gpu_ops=_frame(path, ops, GPU_OP_COLUMNS, "a GPU op"),
        api_calls=_frame(path, apis, API_CALL_COLUMNS, "an API call"),
        ranges=_frame(path, ranges, RANGE_COLUMNS, "a range"),
        metrics=None,
        meta=meta,
    )


def _frame(path: Path, columns: dict[str, list[Any]], dtypes: dict[str, str], what: str) -> pd.DataFrame:
    """Column lists -> a frame with exactly ``dtypes``' columns, in order and dtype. An integer that does not fit
    int64, or a time beyond TIME_LIMIT_NS, is a BadTraceError naming the column."""
    data: dict[str, Any] = {}
    for name, dtype in dtypes.items():
        values = columns[name]
        if dtype == "int64":
            try:
                array = np.array(values, dtype=np.int64)
            except (OverflowError, TypeError, ValueError):
                raise BadTraceError(f"{path}: {what} {name} value out of range (not a 64-bit integer)") from None
            is_time = name in ("start_ns", "end_ns")
            if is_time and len(array) and max(-int(array.min()), int(array.max())) > TIME_LIMIT_NS:
                raise BadTraceError(f"{path}: {what} time out of range ({name} beyond {TIME_LIMIT_NS} ns)")
            data[name] = pd.Series(array, dtype=dtype)
        else:
            data[name] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(data)


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
