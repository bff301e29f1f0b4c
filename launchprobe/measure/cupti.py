"""GPU activity of a few steps from CUPTI, through torch.profiler, as a Timeline like the trace readers make.

The CUPTI pass of ``classify`` and ``launchprobe analyze`` then share one reading of GPU work: the same Timeline
columns, and busy time from the same whole-trace window analysis (launchprobe.analysis.windows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from launchprobe.timeline import GPU_OP_COLUMNS, Timeline, conform


@dataclass(frozen=True)
class ActivitySummary:
    steps: int
    timeline: Timeline  # the GPU ops CUPTI saw over all profiled steps (CUPTI clock)
    kernels: int  # GPU ops (kernels, copies, sets) over all profiled steps
    busy_ns: int  # union of their intervals
    span_ns: int  # first start to last end

    @property
    def kernels_per_step(self) -> float:
        return self.kernels / self.steps

    @property
    def busy_ms_per_step(self) -> float:
        return self.busy_ns / self.steps / 1e6


def cuda_intervals(work: Callable[[], Any]) -> list[tuple[str, int, int]]:
    """Run ``work`` under torch.profiler (CUDA activity only); the GPU ops CUPTI saw as (name, start, end) in ns,
    in start order. Empty when another profiler (nsys, ncu) holds CUPTI."""
    return [(name, start, end) for name, start, end, _ in _cupti_rows(work)]


def _cupti_rows(work: Callable[[], Any]) -> list[tuple[str, int, int, int]]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    rows = []
    for event in prof.profiler.kineto_results.events():
        if event.device_type() == torch.autograd.DeviceType.CUDA:
            start = int(event.start_ns())
            device = int(event.device_index()) if hasattr(event, "device_index") else 0
            rows.append((event.name(), start, start + int(event.duration_ns()), device))
    rows.sort(key=lambda row: row[1])
    return rows


def gpu_timeline(rows: Sequence[tuple[str, int, int, int]]) -> Timeline:
    """(name, start_ns, end_ns, device) rows of GPU work -> a Timeline (no API calls: CUDA activity only)."""

    def kind(name: str) -> str:
        lowered = name.lower()
        return "memcpy" if lowered.startswith("memcpy") else "memset" if lowered.startswith("memset") else "kernel"

    frame = pd.DataFrame(
        {
            "kind": [kind(r[0]) for r in rows],
            "name": [r[0] for r in rows],
            "start_ns": [r[1] for r in rows],
            "end_ns": [r[2] for r in rows],
            "device": [r[3] for r in rows],
            "stream": -1,
            "pid": 0,
            "correlation_id": -1,
            "graph_node_id": -1,
            "bytes": 0,
        }
    )
    return Timeline(gpu_ops=conform(frame, GPU_OP_COLUMNS), meta={"format": "cupti", "notices": []})


def summarize_activity(timeline: Timeline, steps: int) -> ActivitySummary:
    """Busy time and op count of the profiled steps, from the whole-trace windows of the timeline (every device)."""
    from launchprobe.analysis.windows import AnalysisOptions, prepare, whole_trace_windows, window_record

    options = AnalysisOptions(top_kernels=0, largest_idle=0)
    prep = prepare(timeline, options)
    records = [window_record(w, prep, timeline, options) for w in whole_trace_windows(prep)]
    return ActivitySummary(
        steps=steps,
        timeline=timeline,
        kernels=sum(r.gpu_ops for r in records),
        busy_ns=sum(r.busy_ns for r in records),
        span_ns=max((r.end_ns for r in records), default=0) - min((r.start_ns for r in records), default=0),
    )


def profile_gpu_activity(step: Callable[[], Any], steps: int) -> ActivitySummary | None:
    """Run ``steps`` steps under torch.profiler with CUDA activity only and summarise the GPU work.

    None when CUPTI reported no GPU work at all: another profiler (nsys, ncu) holds CUPTI, and the caller must say
    that kernels and busy time were not measured rather than report zeros.
    """

    def steps_back_to_back() -> None:
        for _ in range(steps):
            step()

    rows = _cupti_rows(steps_back_to_back)
    if not rows:
        return None
    return summarize_activity(gpu_timeline(rows), steps)
