"""Idle with no work: stretches during which a process issued no GPU work because it had none (docs/analysis.md).

Two sources, the better one where the trace has it:

- thread state (nsys ``--cpuctxsw=process-tree``, ``SCHED_EVENTS``): every thread of the process that launched GPU
  work was switched out (blocked or asleep), and none was inside a CUDA API call (a thread blocked in a sync waits
  for the GPU, it does not lack work);
- otherwise a heuristic: the process made no CUDA API call at all for at least ``quiet_ns`` (default 50 ms).

Everything here works on sorted, disjoint interval sets held as two int64 arrays, in numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

Ints = npt.NDArray[np.int64]
DEFAULT_QUIET_NS = 50_000_000
THREAD_STATE = "thread-state"
QUIET_HEURISTIC = "quiet-heuristic"
_EMPTY = np.zeros(0, dtype=np.int64)


def union(starts: Ints, ends: Ints) -> tuple[Ints, Ints]:
    """The union of intervals [start, end) as sorted disjoint intervals (empty ones dropped)."""
    keep = ends > starts
    s, e = (starts, ends) if keep.all() else (starts[keep], ends[keep])
    if not len(s):
        return _EMPTY, _EMPTY
    if np.any(s[1:] < s[:-1]):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    max_end = np.maximum.accumulate(e)
    head = np.ones(len(s), dtype=bool)
    head[1:] = s[1:] > max_end[:-1]
    first = np.flatnonzero(head)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], max_end[last]


def intersect_all(sets: list[tuple[Ints, Ints]]) -> tuple[Ints, Ints]:
    """The intersection of interval sets, each sorted and disjoint: where all of them cover (one sweep)."""
    k = len(sets)
    if not k or any(not len(s) for s, _ in sets):
        return _EMPTY, _EMPTY
    if k == 1:
        return sets[0]
    if k == 2:
        return intersect(sets[0], sets[1])
    times = np.concatenate([a for s, e in sets for a in (s, e)])
    delta = np.concatenate([np.full(len(a), d, dtype=np.int64) for s, e in sets for a, d in ((s, 1), (e, -1))])
    order = np.lexsort((delta, times))  # at one time, ends (-1) before starts: intervals are half-open
    times, count = times[order], np.cumsum(delta[order])
    at = np.flatnonzero(count[:-1] == k)
    lo, hi = times[at], times[at + 1]
    keep = hi > lo
    return lo[keep], hi[keep]


def intersect(a: tuple[Ints, Ints], b: tuple[Ints, Ints]) -> tuple[Ints, Ints]:
    """The intersection of two sorted disjoint interval sets, in time linear in the overlaps (no sort)."""
    (a_s, a_e), (b_s, b_e) = a, b
    if not len(a_s) or not len(b_s):
        return _EMPTY, _EMPTY
    first = np.searchsorted(a_e, b_s, side="right")  # per b interval: the a intervals ending after it starts
    last = np.searchsorted(a_s, b_e, side="left")  # ...and starting before it ends
    counts = np.maximum(last - first, 0)
    total = int(counts.sum())
    if not total:
        return _EMPTY, _EMPTY
    which_b = np.repeat(np.arange(len(b_s)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    which_a = first[which_b] + offsets
    lo = np.maximum(a_s[which_a], b_s[which_b])
    hi = np.minimum(a_e[which_a], b_e[which_b])
    keep = hi > lo
    return lo[keep].astype(np.int64), hi[keep].astype(np.int64)


class Coverage:
    """A sorted disjoint interval set and how much of it lies inside given ranges (prefix sums, vectorised)."""

    def __init__(self, starts: Ints, ends: Ints) -> None:
        self.starts, self.ends = starts, ends
        self.cum = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def upto(self, t: Ints) -> Ints:
        """Length of the set before each time ``t``."""
        i = np.searchsorted(self.starts, t, side="left")  # intervals starting before t
        over = np.where(i > 0, np.maximum(self.ends[np.maximum(i - 1, 0)] - t, 0), 0) if len(self.starts) else 0
        return np.asarray(self.cum[i] - over, dtype=np.int64)

    def within(self, lo: Ints, hi: Ints) -> Ints:
        """Length of the set inside each [lo, hi)."""
        if not len(self.starts):
            return np.zeros(len(lo), dtype=np.int64)
        return self.upto(hi) - self.upto(lo)


def api_gaps(starts: Ints, ends: Ints, lo: int, hi: int) -> tuple[Ints, Ints]:
    """Where a process has no API call in flight, inside [lo, hi): the complement of its calls' union."""
    s, e = union(starts, ends)
    gs = np.concatenate([[lo], e]).astype(np.int64)
    ge = np.concatenate([s, [hi]]).astype(np.int64)
    gs, ge = np.maximum(gs, lo), np.minimum(ge, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


def no_work_intervals(
    api_start: Ints,
    api_end: Ints,
    launching_tids: Ints,
    thread_states: pd.DataFrame | None,
    pid: int,
    bounds: tuple[int, int],
    quiet_ns: int,
) -> tuple[Ints, Ints, str]:
    """One process's no-work stretches within ``bounds``, and the source they come from.

    ``api_start``/``api_end``: the process's API calls; ``launching_tids``: its threads that launched GPU work;
    ``thread_states``: the timeline's switched-out stretches (None without thread-state data)."""
    lo, hi = bounds
    free_s, free_e = api_gaps(api_start, api_end, lo, hi)
    states = None
    if thread_states is not None and len(thread_states):
        states = thread_states[thread_states["pid"].to_numpy() == pid]
    if states is None or not len(states) or not len(launching_tids):
        if quiet_ns <= 0:
            return _EMPTY, _EMPTY, QUIET_HEURISTIC
        long = (free_e - free_s) >= quiet_ns
        return free_s[long], free_e[long], QUIET_HEURISTIC
    tids = states["tid"].to_numpy()
    s_all, e_all = states["start_ns"].to_numpy(dtype=np.int64), states["end_ns"].to_numpy(dtype=np.int64)
    sets = [union(s_all[tids == t], e_all[tids == t]) for t in launching_tids]
    asleep = intersect_all(sets)  # a launching thread never switched out leaves this empty
    s, e = intersect_all([asleep, (free_s, free_e)])
    return s, e, THREAD_STATE
