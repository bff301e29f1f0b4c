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

Ints = npt.NDArray[np.int64]

HOST_WAIT, SHORT_GAP, OTHER = 0, 1, 2
CLASS_NAMES = ("host_wait", "short_gap", "other")
DEFAULT_SHORT_GAP_NS = 2_000
NO_END = np.iinfo(np.int64).max


@dataclass(frozen=True)
class DeviceOps:
    """One device's GPU ops in start order, with their launch calls and idle stretches."""

    device: int
    starts: Ints
    ends: Ints
    index: Ints  # row in the timeline's gpu_ops for each op here
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
        """Idle stretches clipped to [lo, hi): starts, ends, next-op positions, classes (empty ones dropped)."""
        first = int(np.searchsorted(self.idle_end, lo, side="right"))
        last = int(np.searchsorted(self.idle_start, hi, side="left"))
        s = np.maximum(self.idle_start[first:last], lo)
        e = np.minimum(self.idle_end[first:last], hi)
        keep = e > s
        return s[keep], e[keep], self.idle_next[first:last][keep], self.idle_class[first:last][keep]


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
    # gap before each op after the first: its start minus the latest end so far (intervals.gaps_before)
    gaps = np.maximum(s[1:] - max_end[:-1], 0) if n > 1 else np.zeros(0, dtype=np.int64)
    k = np.nonzero(gaps > 0)[0] + 1  # positions of ops that follow a stretch
    gap_start = max_end[k - 1]
    cls = np.full(len(k), OTHER, dtype=np.int64)
    cls[gaps[k - 1] < short_gap_ns] = SHORT_GAP
    launched = lend[k] >= 0
    cls[launched & (lend[k] > gap_start)] = HOST_WAIT
    if n:
        lead_cls = HOST_WAIT if lend[0] >= 0 else OTHER
        idle_start = np.concatenate([[np.iinfo(np.int64).min], gap_start, [max_end[-1]]])
        idle_end = np.concatenate([[s[0]], s[k], [NO_END]])
        idle_next = np.concatenate([[0], k, [-1]])
        idle_class = np.concatenate([[lead_cls], cls, [OTHER]])
    else:
        idle_start = idle_end = idle_next = idle_class = np.zeros(0, dtype=np.int64)
    return DeviceOps(
        device=device,
        starts=s,
        ends=e,
        index=idx,
        max_end=max_end,
        idle_start=idle_start.astype(np.int64, copy=False),
        idle_end=idle_end.astype(np.int64, copy=False),
        idle_next=idle_next.astype(np.int64, copy=False),
        idle_class=idle_class.astype(np.int64, copy=False),
    )
