"""Timing a GPU call the way the kernel benchmarks do: many calls captured in one CUDA graph and replayed, so that
launch overhead stays out and, with ``call(i)`` cycling through copies larger than the L2, every call reads HBM."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def time_graph(call: Callable[[int], None], calls: int, *, warm: int = 1, reps: int = 7) -> float:
    """Seconds per call: ``warm`` calls on a side stream (compiles kernels, makes plans), then ``calls`` calls
    (``call(i)``) captured in one graph; the median over ``reps`` replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(warm):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(i)
    graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    del graph
    return statistics.median(times)
