"""Interval arithmetic on GPU work, in integer nanoseconds.

Busy time is the length of the union of intervals, never their sum; the gap before an op is its start minus the
latest end among all ops that started before it (so an op that starts while another still runs has no gap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class IntervalStats:
    span_ns: int  # first start to last end
    busy_ns: int  # union of intervals
    gaps_ns: IntArray  # gap before each op after the first, in start order (>= 0)

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns


def sort_by_start(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[IntArray, IntArray, IntArray]:
    """Sort by start (stable, ties by end); return starts, ends and the order used."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    order = start_order(s, e)
    if order is None:  # traces are usually written in start order: no sort, no copies
        return s, e, np.arange(len(s), dtype=np.int64)
    return s[order], e[order], order


def start_order(starts: IntArray, ends: IntArray) -> IntArray | None:
    """The (start, end) sort order of the intervals, or None when they are in that order already."""
    if starts.shape != ends.shape:
        raise ValueError("starts and ends differ in length")
    if np.any(ends < starts):
        raise ValueError("an interval ends before it starts")
    if len(starts) < 2:
        return None
    step = np.diff(starts)
    if not np.any(step < 0):
        ties = np.nonzero(step == 0)[0]
        if not np.any(ends[ties + 1] < ends[ties]):
            return None
    return np.lexsort((ends, starts)).astype(np.int64)


def gaps_before(starts: npt.ArrayLike, ends: npt.ArrayLike) -> IntArray:
    """Gap before each op, in start order, for ops 1..n-1 (``n-1`` values, zeros where ops overlap)."""
    s, e, _ = sort_by_start(starts, ends)
    if len(s) < 2:
        return np.zeros(0, dtype=np.int64)
    latest_end = np.maximum.accumulate(e)[:-1]
    return np.maximum(s[1:] - latest_end, 0)


def interval_stats(starts: npt.ArrayLike, ends: npt.ArrayLike) -> IntervalStats:
    s, e, _ = sort_by_start(starts, ends)
    if len(s) == 0:
        return IntervalStats(0, 0, np.zeros(0, dtype=np.int64))
    gaps = gaps_before(s, e)
    span = int(e.max() - s[0])
    return IntervalStats(span_ns=span, busy_ns=span - int(gaps.sum()), gaps_ns=gaps)


def union_ns(starts: npt.ArrayLike, ends: npt.ArrayLike) -> int:
    return interval_stats(starts, ends).busy_ns


def clipped_union_ns(starts: npt.ArrayLike, ends: npt.ArrayLike, lo: int, hi: int) -> int:
    """Union of the intervals clipped to the window [lo, hi)."""
    s = np.clip(np.asarray(starts, dtype=np.int64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.int64), lo, hi)
    keep = e > s
    return union_ns(s[keep], e[keep])


def union_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of (start, end) intervals as disjoint intervals in time order (touching ones merge)."""
    starts, ends = union_arrays([a for a, _ in intervals], [b for _, b in intervals])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def union_arrays(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    """The union of intervals as disjoint (starts, ends) arrays in time order (touching ones merge)."""
    s, e, _ = sort_by_start(starts, ends)
    if len(s) == 0:
        return s, e
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]
