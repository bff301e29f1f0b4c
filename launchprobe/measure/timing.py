"""Step timing: CUDA events at step boundaries only (clean timing), or the wall clock on CPU."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def time_steps_cuda(step: Callable[[], Any], steps: int, host_times: list[float] | None = None) -> list[float]:
    """Milliseconds per step from events recorded between consecutive steps (one event per boundary).

    Steps run back to back with no host sync, as a lean serving loop would; one event record per step is the
    whole instrumentation (benchmarks/bench_overhead.py measures its cost). ``host_times`` receives the host's
    wall-clock ms per step for enqueueing the work (equal to the step time when the host is the bottleneck).
    """
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    events[0].record()
    t0 = time.perf_counter_ns()
    for i in range(steps):
        step()
        events[i + 1].record()
    if host_times is not None:
        host_times.append((time.perf_counter_ns() - t0) / 1e6 / steps)
    events[-1].synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(steps)]


def time_block_cuda(step: Callable[[], Any], steps: int) -> float:
    """Milliseconds for ``steps`` steps with events only around the whole block."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def time_steps_cpu(step: Callable[[], Any], steps: int) -> list[float]:
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        step()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return samples


def warm_up(step: Callable[[], Any], steps: int, cuda: bool) -> None:
    for _ in range(steps):
        step()
    if cuda:
        import torch

        torch.cuda.synchronize()


def time_call(device: str, fn: Any, lead_in: Any = None) -> float:
    """Seconds for one call: CUDA events on a GPU, the wall clock on CPU.

    On a GPU, ``lead_in`` (GPU work of its own, at least as long as the host takes to launch ``fn``) runs first,
    untimed, so that the start event fires when it ends, with ``fn``'s kernels already queued behind it. Without
    it the host's launch of ``fn`` after the start event is timed as well, and a 2 GiB ``x.sum()`` takes only
    0.5 ms: runs on a slow host (a bare launch 8.7-11 us instead of 6.3-7.6) measured the HBM ceiling at 3.90-3.94
    TB/s instead of 4.14-4.21 (docs/performance.md).
    """
    if device.startswith("cuda"):
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if lead_in is not None:
            lead_in()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now (Linux: field 39 of /proc/thread-self/stat), or None."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    try:
        return int(fields[39 - 3])
    except (IndexError, ValueError):
        return None


@contextmanager
def pinned_host() -> Iterator[int | None]:
    """Pin the calling thread to the CPU it runs on, for the block; yields that CPU (None where it cannot be pinned).

    An eager step's host time depends on the core: on the H200 machine one core ran the 1B eager step at 2.0 ms
    and another at 3.1 ms, and an unpinned thread moved between them within a second (docs/performance.md). Steps
    compared side by side must run on one core."""
    cpu = current_cpu()
    get = getattr(os, "sched_getaffinity", None)
    put = getattr(os, "sched_setaffinity", None)
    if cpu is None or get is None or put is None:
        yield None
        return
    before = get(0)
    try:
        put(0, {cpu})
    except OSError:
        yield None
        return
    try:
        yield cpu
    finally:
        put(0, before)
