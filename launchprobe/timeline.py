"""The one timeline every collector produces and every analysis reads.

Collectors (synthetic run through torch.profiler, nsys SQLite, Kineto JSON) map their own fields onto these fixed
columns; analyses never look at a source format. All times are integer nanoseconds on one clock per trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from launchprobe.collect.api_names import GRAPH_LAUNCH_NAMES, LAUNCH_NAMES
from launchprobe.collect.api_names import api_category as _api_category

# GPU work: kernels, copies, sets. One row per operation that ran on a device.
GPU_OP_COLUMNS: dict[str, str] = {
    "kind": "string",  # "kernel" | "memcpy" | "memset"
    "name": "string",  # kernel name (short), or copy kind ("HtoD", "DtoD", ...) for copies
    "start_ns": "int64",
    "end_ns": "int64",
    "device": "int64",
    "stream": "int64",
    "pid": "int64",
    "correlation_id": "int64",  # joins to api_calls.correlation_id within a pid; -1 when unknown
    "graph_node_id": "int64",  # CUDA graph node id, -1 when not replayed from a graph / unknown
    "bytes": "int64",  # bytes copied or set; 0 for kernels
}

# Host-side CUDA API calls (runtime and driver). One row per call.
API_CALL_COLUMNS: dict[str, str] = {
    "name": "string",  # e.g. "cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaStreamSynchronize"
    "category": "string",  # "launch" | "graph_launch" | "sync" | "memcpy" | "other"
    "start_ns": "int64",
    "end_ns": "int64",
    "pid": "int64",
    "tid": "int64",
    "correlation_id": "int64",
}

# Annotated host ranges (NVTX push/pop and start/end, Kineto user annotations / profiler steps).
RANGE_COLUMNS: dict[str, str] = {
    "name": "string",
    "domain": "string",  # NVTX domain ("" for the default domain)
    "start_ns": "int64",
    "end_ns": "int64",
    "pid": "int64",
    "tid": "int64",
    "depth": "int64",  # nesting depth on its thread, 0 for outermost; -1 when unknown
}

# Sampled GPU metrics (nsys --gpu-metrics-devices). Optional.
METRIC_COLUMNS: dict[str, str] = {
    "device": "int64",
    "metric": "string",  # e.g. "DRAM Read Bandwidth [Throughput %]"
    "timestamp_ns": "int64",
    "value": "float64",
}

# OS thread scheduling (nsys --cpuctxsw=process-tree: SCHED_EVENTS). Optional. One row per stretch a thread was
# switched out (off the CPU: blocked, asleep or preempted), from its sched-out to its next sched-in.
THREAD_STATE_COLUMNS: dict[str, str] = {
    "pid": "int64",
    "tid": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
}

# The name tables live in collect.api_names (CUDA and HIP); these names stay for existing imports.
LAUNCH_API_NAMES = tuple(sorted(LAUNCH_NAMES))
GRAPH_LAUNCH_API_NAMES = tuple(sorted(GRAPH_LAUNCH_NAMES))


def api_category(name: str) -> str:
    """Map an API name (with or without an nsys version suffix like ``_v7000``) to its category."""
    return _api_category(name)


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in columns.items()})


def conform(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Return ``frame`` with exactly ``columns`` in order and dtype; raises KeyError on a missing column."""
    return pd.DataFrame({name: frame[name].astype(dtype) for name, dtype in columns.items()}).reset_index(  # type: ignore[call-overload]
        drop=True
    )


@dataclass
class Timeline:
    """Everything an analysis needs from one trace."""

    gpu_ops: pd.DataFrame = field(default_factory=lambda: empty_frame(GPU_OP_COLUMNS))
    api_calls: pd.DataFrame = field(default_factory=lambda: empty_frame(API_CALL_COLUMNS))
    ranges: pd.DataFrame = field(default_factory=lambda: empty_frame(RANGE_COLUMNS))
    metrics: pd.DataFrame | None = None
    thread_states: pd.DataFrame | None = None  # None: the trace has no thread-state data
    # source format, file, tool versions, GPU names by device, ...
    meta: dict[str, Any] = field(default_factory=dict)
