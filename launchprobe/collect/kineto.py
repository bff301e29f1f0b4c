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

import numpy as np
import pandas as pd

from launchprobe.errors import BadTraceError, NoDataError
from launchprobe.timeline import (
    API_CALL_COLUMNS,
    GPU_OP_COLUMNS,
    RANGE_COLUMNS,
    Timeline,
    api_category,
    conform,
)

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
    traceEvents: list[_Event] | None = None  # noqa: N815 (Kineto's key)
    schemaVersion: Any = msgspec.UNSET  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815


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
        ev.get("ph"), ev.get("cat", ""), ev.get("name", ""), ev.get("pid"), ev.get("tid"),
        ev.get("ts", msgspec.UNSET), ev.get("dur", 0), args,
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
    # Parsing builds millions of small objects and none of them form cycles: with the cyclic garbage collector on,
    # it rescans them again and again (about 3x the parse time on a 46k-kernel trace). Off while reading.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        data = _load_json(path)
        events = data.get("traceEvents") if isinstance(data, dict) else data
        if not isinstance(events, list):
            raise BadTraceError(f"{path}: JSON, but not a Kineto/chrome trace (no traceEvents list)")
        try:
            ops, apis, ranges = _split(events)
        except (TypeError, ValueError, InvalidOperation) as exc:
            raise BadTraceError(f"{path}: malformed trace event ({exc})") from None
    finally:
        if was_enabled:
            gc.enable()
    if not ops:
        raise NoDataError(f"{path}: the trace has no kernels, copies or sets (was CUDA activity profiled?)")
    host_pids = Counter(a[4] for a in apis)
    default_pid = host_pids.most_common(1)[0][0] if host_pids else 0
    pid_of = {a[6]: a[4] for a in apis if a[6] >= 0}
    gpu_ops = pd.DataFrame(
        ops, columns=["kind", "name", "start_ns", "end_ns", "device", "stream", "correlation_id", "bytes"]
    )
    corr = gpu_ops["correlation_id"].to_numpy()
    gpu_ops["pid"] = np.array([pid_of.get(int(c), default_pid) for c in corr], dtype=np.int64)
    gpu_ops["graph_node_id"] = -1
    api_frame = pd.DataFrame(apis, columns=["name", "category", "start_ns", "end_ns", "pid", "tid", "correlation_id"])
    range_frame = pd.DataFrame(ranges, columns=["name", "domain", "start_ns", "end_ns", "pid", "tid", "depth"])
    meta: dict[str, Any] = {
        "format": "kineto",
        "path": str(path),
        "tool": "kineto",
        "notices": [],
        "gpus": {},
    }
    if isinstance(data, dict):
        if "schemaVersion" in data:
            meta["schema_version"] = data["schemaVersion"]
        for prop in data.get("deviceProperties") or []:
            if isinstance(prop, dict) and isinstance(prop.get("id"), int) and prop.get("name"):
                meta["gpus"][prop["id"]] = str(prop["name"])
        dist = data.get("distributedInfo")
        if isinstance(dist, dict) and "rank" in dist:
            meta["rank"] = dist.get("rank")
            meta["world_size"] = dist.get("world_size")
    return Timeline(
        gpu_ops=conform(gpu_ops, GPU_OP_COLUMNS),
        api_calls=conform(api_frame, API_CALL_COLUMNS),
        ranges=conform(range_frame, RANGE_COLUMNS),
        metrics=None,
        meta=meta,
    )


def _split(events: list[Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    ops: list[tuple[Any, ...]] = []
    apis: list[tuple[Any, ...]] = []
    ranges: list[tuple[Any, ...]] = []
    categories: dict[str, str] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        is_step = name.startswith("ProfilerStep#")
        if cat not in GPU_CATS and cat not in API_CATS and cat not in RANGE_CATS and not is_step:
            continue
        start = us_to_ns(ev["ts"])
        end = start + max(us_to_ns(ev.get("dur", 0)), 0)
        raw_args = ev.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        if cat in GPU_CATS:
            ops.append(
                (
                    GPU_CATS[cat],
                    name,
                    start,
                    end,
                    _as_int(args.get("device"), _as_int(ev.get("pid"), 0)),
                    _as_int(args.get("stream"), _as_int(ev.get("tid"), 0)),
                    _as_int(args.get("correlation"), -1),
                    _as_int(args.get("bytes"), 0),
                )
            )
        elif cat in API_CATS:
            if name not in categories:
                categories[name] = api_category(name)
            apis.append(
                (
                    name,
                    categories[name],
                    start,
                    end,
                    _as_int(ev.get("pid"), 0),
                    _as_int(ev.get("tid"), 0),
                    _as_int(args.get("correlation"), -1),
                )
            )
        else:
            ranges.append((name, "", start, end, _as_int(ev.get("pid"), 0), _as_int(ev.get("tid"), 0), -1))
    return ops, apis, ranges
