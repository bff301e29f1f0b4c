"""Where a GPU's idle time goes: every idle stretch of a device, classified once (docs/analysis.md).

A stretch runs from the latest end among the ops started so far to the start of the next op. It is

- ``host_wait``: the next op has a launch call that had not returned when the stretch began (it started after
  the GPU ran dry, or was still in flight): nothing was queued, the GPU waited for the CPU;
- ``short_gap``: otherwise, shorter than the short-gap threshold (back-to-back kernels with work queued);
- ``other``: otherwise (synchronisation, cross-stream dependencies, ops with no launch call in the trace).

Windows clip these stretches; busy time comes from ``intervals`` (union, never a sum) and the two always add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from launchprobe.analysis.intervals import start_order
from launchprobe.analysis.no_work import Coverage

Ints = npt.NDArray[np.int64]

HOST_WAIT, SHORT_GAP, OTHER = 0, 1, 2
CLASS_NAMES = ("host_wait", "short_gap", "other")
DEFAULT_SHORT_GAP_NS = 2_000
NO_END = np.iinfo(np.int64).max
# An op launched onto an idle GPU starts about 2 us after its launch call returns (on the H200 under nsys, field
# trace E's eager steps: median 2.2 us, p99.9 4.1, max 9.2 over 8,470 idle stretches); one that has not started
# this long after its call returned is waiting on something else: a host callback, an event, a sync, another
# stream or process (field trace G: its host callback, 390-830 us).
QUEUED_AFTER_LAUNCH_NS = 10_000


@dataclass(frozen=True)
class DeviceOps:
    """One device's GPU ops in start order, with their launch calls and idle stretches."""

    device: int
    starts: Ints
    ends: Ints
    index: Ints  # row in the timeline's gpu_ops for each op here
    launch_end: Ints  # end of each op's launch call, -1 without one
    max_end: Ints  # running max of ends (ends are not sorted when ops overlap)
    # idle stretches: [idle_start, idle_end), the op (position here) that ends each one, and its class
    idle_start: Ints
    idle_end: Ints
    idle_next: Ints
    idle_class: Ints

    def __len__(self) -> int:
        return len(self.starts)

    def overlapping(self, lo: int, hi: int) -> slice:
        """Positions of ops that may intersect [lo, hi): start < hi and running max end > lo."""
        first = int(np.searchsorted(self.max_end, lo, side="right"))
        last = int(np.searchsorted(self.starts, hi, side="left"))
        return slice(first, max(first, last))

    def idle_in(self, lo: int, hi: int) -> tuple[Ints, Ints, Ints, Ints]:
        """Idle stretches clipped to [lo, hi): starts, ends, next-op positions, classes (empty ones dropped).

        Stretches are disjoint and ordered, so only the first and last can need clipping; the arrays are views of
        the device's own where nothing is clipped or dropped (read-only use)."""
        first = int(np.searchsorted(self.idle_end, lo, side="right"))
        last = int(np.searchsorted(self.idle_start, hi, side="left"))
        s = self.idle_start[first:last]
        e = self.idle_end[first:last]
        nxt, cls = self.idle_next[first:last], self.idle_class[first:last]
        if not len(s):
            return s, e, nxt, cls
        if s[0] < lo or e[-1] > hi:
            s = np.maximum(s, lo)
            e = np.minimum(e, hi)
        keep = e > s
        if keep.all():
            return s, e, nxt, cls
        return s[keep], e[keep], nxt[keep], cls[keep]


def queued_idle(
    starts: Ints,
    ends: Ints,
    next_op: Ints,
    launch_end: Ints,
    no_work: Coverage | None = None,
    host_wait: npt.NDArray[np.bool_] | None = None,
) -> Ints:
    """Per idle stretch [starts, ends) ended by the op at ``next_op`` (a position into ``launch_end``, -1 for none),
    the part during which that op had been launched more than ``QUEUED_AFTER_LAUNCH_NS`` before, or all of it for an
    op with no launch call in the trace: idle with the work already queued, which faster launching (a CUDA graph)
    does not remove. A stretch that no op ends has none. With ``no_work`` (the device's no-work idle) and
    ``host_wait`` (the stretches it is counted in), that part of a host-wait stretch leaves out its no-work time,
    which the window counts on its own."""
    has_next = next_op >= 0
    lend = np.where(has_next, launch_end[np.maximum(next_op, 0)], -1)  # no ops: no stretches, nothing indexed
    begin = np.where(lend < 0, starts, np.minimum(np.maximum(starts, lend) + QUEUED_AFTER_LAUNCH_NS, ends))
    queued = (ends - begin).astype(np.int64)
    if no_work is not None and len(no_work) and host_wait is not None and host_wait.any():
        queued[host_wait] -= no_work.within(begin[host_wait], ends[host_wait])
    return np.where(has_next, queued, 0).astype(np.int64, copy=False)


def device_ops(
    device: int,
    starts: Ints,
    ends: Ints,
    index: Ints,
    launch_end: Ints,
    *,
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS,
) -> DeviceOps:
    """Sort one device's ops and classify every idle stretch.

    ``launch_end`` is the end of each op's launch call, -1 where the op has none in the trace. A leading stretch
    (before the first op) and a trailing one (after the last) bound the trace, so a window reaching past the
    device's work still adds up.
    """
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    idx, lend = np.asarray(index, dtype=np.int64), np.asarray(launch_end, dtype=np.int64)
    order = start_order(s, e)
    if order is not None:
        s, e, idx, lend = s[order], e[order], idx[order], lend[order]
    n = len(s)
    max_end = np.maximum.accumulate(e) if n else e
    if n:
        # gap before each op after the first: its start minus the latest end so far (intervals.gaps_before)
        gaps = np.subtract(s[1:], max_end[:-1])
        before = np.flatnonzero(gaps > 0)  # positions (in gaps) of the stretches; op before + 1 ends each
        m = len(before)
        lead_cls = HOST_WAIT if lend[0] >= 0 else OTHER
        # the arrays are built in place: a leading stretch, one per gap, a trailing one
        idle_start = np.empty(m + 2, dtype=np.int64)
        idle_start[0], idle_start[-1] = np.iinfo(np.int64).min, max_end[-1]
        np.take(max_end, before, out=idle_start[1:-1], mode="clip")  # in range: no buffered copy
        idle_class = np.full(m + 2, OTHER, dtype=np.int64)
        idle_class[0] = lead_cls
        idle_class[1:-1][np.take(gaps, before) < short_gap_ns] = SHORT_GAP
        del gaps
        idle_next = np.empty(m + 2, dtype=np.int64)
        idle_next[0], idle_next[-1] = 0, -1
        k = idle_next[1:-1]
        np.add(before, 1, out=k)  # positions of ops that follow a stretch
        del before
        idle_end = np.empty(m + 2, dtype=np.int64)
        idle_end[0], idle_end[-1] = s[0], NO_END
        np.take(s, k, out=idle_end[1:-1], mode="clip")
        lk = np.take(lend, k)
        idle_class[1:-1][(lk >= 0) & (lk > idle_start[1:-1])] = HOST_WAIT
        del lk
    else:
        idle_start = idle_end = idle_next = idle_class = np.zeros(0, dtype=np.int64)
    return DeviceOps(
        device=device,
        starts=s,
        ends=e,
        index=idx,
        launch_end=lend,
        max_end=max_end,
        idle_start=idle_start.astype(np.int64, copy=False),
        idle_end=idle_end.astype(np.int64, copy=False),
        idle_next=idle_next.astype(np.int64, copy=False),
        idle_class=idle_class.astype(np.int64, copy=False),
    )
