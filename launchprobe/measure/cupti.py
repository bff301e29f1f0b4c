"""GPU activity of a few steps from CUPTI, through torch.profiler: kernels per step and busy time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from launchprobe.analysis.intervals import interval_stats


@dataclass(frozen=True)
class ActivitySummary:
    steps: int
    kernels: pd.DataFrame  # name, start_ns, end_ns (CUPTI clock), one row per kernel/copy/set
    busy_ns: int  # union of intervals over all profiled steps
    span_ns: int  # first start to last end

    @property
    def kernels_per_step(self) -> float:
        return len(self.kernels) / self.steps

    @property
    def busy_ms_per_step(self) -> float:
        return self.busy_ns / self.steps / 1e6


def cuda_intervals(work: Callable[[], Any]) -> list[tuple[str, int, int]]:
    """Run ``work`` under torch.profiler (CUDA activity only); the GPU ops CUPTI saw as (name, start, end) in ns,
    in start order. Empty when another profiler (nsys, ncu) holds CUPTI."""
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
            rows.append((event.name(), start, start + int(event.duration_ns())))
    rows.sort(key=lambda row: row[1])
    return rows


def profile_gpu_activity(step: Callable[[], Any], steps: int) -> ActivitySummary | None:
    """Run ``steps`` steps under torch.profiler with CUDA activity only and summarise the GPU work.

    None when CUPTI reported no GPU work at all: another profiler (nsys, ncu) holds CUPTI, and the caller must say
    that kernels and busy time were not measured rather than report zeros.
    """

    def steps_back_to_back() -> None:
        for _ in range(steps):
            step()

    rows = cuda_intervals(steps_back_to_back)
    if not rows:
        return None
    frame = pd.DataFrame(rows, columns=["name", "start_ns", "end_ns"])
    stats = interval_stats(frame["start_ns"].to_numpy(np.int64), frame["end_ns"].to_numpy(np.int64))
    return ActivitySummary(steps=steps, kernels=frame, busy_ns=stats.busy_ns, span_ns=stats.span_ns)
