"""Analysis windows of a trace and the numbers for each: the whole trace, or each instance of matching NVTX ranges,
per device.

GPU work belongs to a range when its launch call lies inside the range on the same thread (nsys's NVTX projection),
or on any thread of its process for whole-process steps (``ProfilerStep#N``) and with ``--any-thread``; ops with no
launch call in the trace fall back to overlapping the range in time (same process). A range window is the range's
GPU projection: from its first attributed op's start to its last attributed op's end, busy the union of its own
ops; the host side (the range's own start, end and how far the host ran ahead) is kept beside it. Whole-trace
windows run from the device's first op to its last and count every op. See docs/analysis.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from launchprobe.analysis.idle import (
    CLASS_NAMES,
    DEFAULT_SHORT_GAP_NS,
    HOST_WAIT,
    OTHER,
    SHORT_GAP,
    DeviceOps,
    device_ops,
    queued_idle,
)
from launchprobe.analysis.intervals import clipped_union_ns
from launchprobe.analysis.no_work import DEFAULT_QUIET_NS, Coverage, intersect, no_work_intervals
from launchprobe.analysis.trace_verdict import decide, metric_means
from launchprobe.errors import NoDataError, UsageError
from launchprobe.run.schema import Distribution, IdleStretch, Metrics, TopKernel
from launchprobe.run.schema import Window as WindowRecord
from launchprobe.timeline import Timeline

Ints = npt.NDArray[np.int64]
WHOLE_TRACE = "whole trace"
LAUNCH_CATEGORIES = ("launch", "graph_launch")
_PID_SHIFT = np.int64(38)  # join key: pid << 38 | correlation id
WHOLE_PROCESS_STEP = re.compile(r"ProfilerStep#\d+")  # torch.profiler's step: the whole process's work
NO_WORK = "no_work"  # the kind of an idle stretch that is mostly no work


@dataclass(frozen=True)
class AnalysisOptions:
    ranges: tuple[str, ...] = ()  # regexes matched against the whole range name
    devices: tuple[int, ...] = ()  # empty: every device
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS
    # attribute by launch calls on the range's own thread (True, nsys projection), of its whole process (False),
    # or None: the whole process for whole-process steps (ProfilerStep#N), the range's thread otherwise
    same_thread: bool | None = None
    quiet_ns: int = DEFAULT_QUIET_NS  # no-work heuristic: no API call of the process for this long
    top_kernels: int = 10
    largest_idle: int = 5

    def same_thread_for(self, name: str) -> bool:
        if self.same_thread is not None:
            return self.same_thread
        return WHOLE_PROCESS_STEP.fullmatch(name) is None


COMM_NAME = "nccl"  # kernels whose name has it (any case) are communication: comm_kernels, comm_busy_ns


@dataclass
class Prepared:
    """The timeline as flat arrays, GPU ops joined to their launch calls."""

    op_start: Ints
    op_end: Ints
    op_device: Ints
    op_pid: Ints
    op_kind: Ints  # 0 kernel, 1 memcpy, 2 memset
    op_name: Ints  # codes into op_names
    op_names: list[str]
    op_launch: Ints  # row in the api arrays, -1 when the launch call is not in the trace
    api_start: Ints
    api_end: Ints
    api_pid: Ints
    api_tid: Ints
    api_name: Ints
    api_names: list[str]  # base names (nsys version suffix dropped)
    api_is_launch: npt.NDArray[np.bool_]
    op_launch_end: Ints = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # -1 without a launch call
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS
    devices: dict[int, DeviceOps] = field(default_factory=dict)
    all_rows: Ints | None = None  # a device's ``index`` when it is every op in row order (gathers become views)
    idle_cov: dict[int, Coverage] = field(default_factory=dict)  # each device's idle between its first and last op
    no_work_cov: dict[int, Coverage] = field(default_factory=dict)  # the no-work part of that idle
    no_work_source: dict[int, str] = field(default_factory=dict)
    _api_by_pid: dict[int, tuple[Ints, Ints, Ints]] = field(default_factory=dict)
    _own: dict[int, tuple[Window, DeviceOps]] = field(default_factory=dict)
    _comm_names: npt.NDArray[np.bool_] | None = None

    def comm_names(self) -> npt.NDArray[np.bool_]:
        """Per op name code: a communication (NCCL) kernel's name (``nccl`` in it, any case)."""
        if self._comm_names is None or len(self._comm_names) != len(self.op_names):
            self._comm_names = np.array([COMM_NAME in n.lower() for n in self.op_names], dtype=bool)
        return self._comm_names

    def own_ops(self, window: Window) -> DeviceOps:
        """The window's own ops as a device of their own: the device itself for whole-trace windows, and for range
        windows whose own ops are every op on the device inside them (a synchronous step: no copy needed)."""
        dev = self.devices[window.device]
        if window.instance is None:
            return dev
        key = id(window)
        if key not in self._own:  # kept with its window: the id of a window gone could be another's
            rows = window.rows
            inside = dev.overlapping(window.start_ns, window.end_ns)
            if inside.stop - inside.start == len(rows):  # candidates include every own op: they are the same
                self._own[key] = (window, dev)
            else:
                self._own[key] = (
                    window,
                    device_ops(
                        window.device,
                        self.op_start[rows],
                        self.op_end[rows],
                        rows,
                        self.op_launch_end[rows],
                        short_gap_ns=self.short_gap_ns,
                    ),
                )
        return self._own[key][1]

    def api_index(self, pid: int) -> tuple[Ints, Ints, Ints]:
        """The process's API calls in start order: rows, starts, running max of ends."""
        if pid not in self._api_by_pid:
            rows = np.nonzero(self.api_pid == pid)[0]
            starts = self.api_start[rows]
            if len(rows) > 1 and np.any(starts[1:] < starts[:-1]):  # calls are usually in start order already
                order = rows[np.argsort(starts, kind="stable")]
                starts = self.api_start[order]
            else:
                order = rows
            ends = self.api_end[order]
            self._api_by_pid[pid] = (order, starts, np.maximum.accumulate(ends) if len(ends) else ends)
        return self._api_by_pid[pid]

    def api_in_flight(self, pid: int, lo: int, hi: int) -> int:
        """Row of the API call of ``pid`` overlapping [lo, hi) the most; -1 when none."""
        order, starts, max_end = self.api_index(pid)
        first = int(np.searchsorted(max_end, lo, side="right"))
        last = int(np.searchsorted(starts, hi, side="left"))
        if last <= first:
            return -1
        cand = order[first:last]
        overlap = np.minimum(self.api_end[cand], hi) - np.maximum(self.api_start[cand], lo)
        best = int(np.argmax(overlap))
        return int(cand[best]) if overlap[best] > 0 else -1

    def api_in_flight_many(self, pid: int, lo: Ints, hi: Ints) -> Ints:
        """``api_in_flight`` for each [lo, hi) at once (ties: the first call in start order, as argmax)."""
        order, starts, max_end = self.api_index(pid)
        first = np.searchsorted(max_end, lo, side="right")
        count = np.maximum(np.searchsorted(starts, hi, side="left") - first, 0)
        out = np.full(len(lo), -1, dtype=np.int64)
        total = int(count.sum())
        if not total:
            return out
        query = np.repeat(np.arange(len(lo)), count)
        cand = order[np.arange(total) + np.repeat(first - np.cumsum(count) + count, count)]
        overlap = np.minimum(self.api_end[cand], hi[query]) - np.maximum(self.api_start[cand], lo[query])
        pick = np.lexsort((np.arange(total), -overlap, query))  # per query: the largest overlap, then the first
        heads = pick[np.concatenate([[True], query[pick][1:] != query[pick][:-1]])]
        good = overlap[heads] > 0
        out[query[heads][good]] = cand[heads][good]
        return out


def _codes(series: pd.Series, *, wide: bool = True) -> tuple[Ints, list[str]]:
    """Integer codes and the names they stand for (categoricals, as the nsys reader makes, need no hashing);
    ``wide=False`` leaves a categorical's small integer codes as they are (for lookups, no int64 copy)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy()
        if not len(codes) or codes.min() >= 0:
            narrow = cast(Ints, codes)  # int8/int16/int32 codes: used only as indices into small tables
            return codes.astype(np.int64) if wide else narrow, [str(c) for c in series.cat.categories]
    codes, uniques = pd.factorize(series, sort=False)
    return codes.astype(np.int64), [str(u) for u in uniques]


def base_api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (nsys appends the API version)."""
    return re.sub(r"_v\d+$", "", name)


def prepare(timeline: Timeline, options: AnalysisOptions) -> Prepared:
    ops, api = timeline.gpu_ops, timeline.api_calls
    kind_codes = {"kernel": 0, "memcpy": 1, "memset": 2}
    kind_idx, kind_names = _codes(ops["kind"], wide=False)
    kind_map = np.array([kind_codes.get(k, 0) for k in kind_names], dtype=np.int64)
    kinds: Ints = kind_map[kind_idx] if len(kind_idx) else np.zeros(0, dtype=np.int64)
    op_name, op_names = _codes(ops["name"])
    api_name_raw, api_names_raw = _codes(api["name"], wide=False)
    base = [base_api_name(n) for n in api_names_raw]
    base_unique = list(dict.fromkeys(base))
    remap = np.array([base_unique.index(b) for b in base], dtype=np.int64)
    api_name = remap[api_name_raw]
    prep = Prepared(
        op_start=ops["start_ns"].to_numpy(dtype=np.int64),
        op_end=ops["end_ns"].to_numpy(dtype=np.int64),
        op_device=ops["device"].to_numpy(dtype=np.int64),
        op_pid=ops["pid"].to_numpy(dtype=np.int64),
        op_kind=kinds,
        op_name=op_name,
        op_names=op_names,
        op_launch=_join(ops, api),
        api_start=api["start_ns"].to_numpy(dtype=np.int64),
        api_end=api["end_ns"].to_numpy(dtype=np.int64),
        api_pid=api["pid"].to_numpy(dtype=np.int64),
        api_tid=api["tid"].to_numpy(dtype=np.int64),
        api_name=api_name,
        api_names=base_unique,
        api_is_launch=_is_launch(api["category"]),
    )
    op_device = prep.op_device
    one = len(op_device) and op_device.min() == op_device.max()
    all_devices = [int(op_device[0])] if one else sorted(int(d) for d in np.unique(op_device))
    wanted = [d for d in all_devices if not options.devices or d in options.devices]
    if not wanted:
        raise NoDataError(
            f"no GPU work on device {', '.join(map(str, options.devices))}; "
            f"the trace has devices {', '.join(map(str, all_devices))}"
        )
    if len(prep.api_end):  # the end of each op's launch call, -1 without one (one gather, no masked copies)
        launch_end = np.take(prep.api_end, prep.op_launch, mode="wrap")
        np.copyto(launch_end, -1, where=prep.op_launch < 0)
    else:
        launch_end = np.full(len(prep.op_launch), -1, dtype=np.int64)
    for dev in wanted:
        if len(all_devices) == 1:  # no copies
            rows = np.arange(len(prep.op_device), dtype=np.int64)
            starts, ends, lend = prep.op_start, prep.op_end, launch_end
        else:
            rows = np.nonzero(prep.op_device == dev)[0].astype(np.int64)
            starts, ends, lend = prep.op_start[rows], prep.op_end[rows], launch_end[rows]
        ops_here = device_ops(dev, starts, ends, rows, lend, short_gap_ns=options.short_gap_ns)
        if ops_here.index is rows and len(all_devices) == 1:  # in start order already: index is 0..n-1
            prep.all_rows = rows
        prep.devices[dev] = ops_here
    prep.op_launch_end = launch_end
    prep.short_gap_ns = options.short_gap_ns
    _no_work(prep, timeline, options)
    return prep


def _no_work(prep: Prepared, timeline: Timeline, options: AnalysisOptions) -> None:
    """Each device's idle (between its first and last op) and its no-work part: the stretches of the process
    whose op ends the idle stretch during which it issued no GPU work (analysis.no_work)."""
    if not len(prep.op_start):
        return
    lo = int(min(prep.op_start.min(), prep.api_start.min() if len(prep.api_start) else prep.op_start.min()))
    hi = int(max(prep.op_end.max(), prep.api_end.max() if len(prep.api_end) else prep.op_end.max()))
    per_pid: dict[int, tuple[Ints, Ints, str]] = {}
    for dev, d in prep.devices.items():
        s, e, nxt = d.idle_start[1:-1], d.idle_end[1:-1], d.idle_next[1:-1]
        prep.idle_cov[dev] = Coverage(s, e)
        pids = prep.op_pid[d.index[nxt]] if len(nxt) else np.zeros(0, dtype=np.int64)
        one = not len(pids) or pids.min() == pids.max()
        parts_s, parts_e, sources = [], [], []
        for p in [int(pids[0])] if len(pids) and one else [int(x) for x in np.unique(pids)]:
            if p not in per_pid:
                per_pid[p] = _process_no_work(prep, timeline, p, (lo, hi), options.quiet_ns)
            nws, nwe, source = per_pid[p]
            sources.append(source)
            sel = (s, e) if one else (s[pids == p], e[pids == p])
            a, b = intersect(sel, (nws, nwe))
            parts_s.append(a)
            parts_e.append(b)
        if parts_s:
            a, b = np.concatenate(parts_s), np.concatenate(parts_e)
            order = np.argsort(a, kind="stable")
            prep.no_work_cov[dev] = Coverage(a[order], b[order])
        else:
            prep.no_work_cov[dev] = Coverage(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        prep.no_work_source[dev] = sources[0] if len(set(sources)) == 1 else "mixed"


def _process_no_work(
    prep: Prepared, timeline: Timeline, pid: int, bounds: tuple[int, int], quiet_ns: int
) -> tuple[Ints, Ints, str]:
    mine = prep.api_pid == pid
    one = bool(mine.all())
    starts = prep.api_start if one else prep.api_start[mine]
    ends = prep.api_end if one else prep.api_end[mine]
    calls = prep.op_launch[(prep.op_launch >= 0) & (prep.op_pid == pid)]
    tids = np.unique(prep.api_tid[calls]) if len(calls) else np.zeros(0, dtype=np.int64)
    return no_work_intervals(starts, ends, tids, timeline.thread_states, pid, bounds, quiet_ns)


def _is_launch(category: pd.Series) -> npt.NDArray[np.bool_]:
    codes, names = _codes(category, wide=False)
    wanted = np.array([n in LAUNCH_CATEGORIES for n in names], dtype=bool)
    return wanted[codes] if len(codes) else np.zeros(0, dtype=bool)


def _join(ops: pd.DataFrame, api: pd.DataFrame) -> Ints:
    """Row of each op's launch call (same pid and correlation id, the first such call), -1 when absent."""
    result = np.full(len(ops), -1, dtype=np.int64)
    if not len(api) or not len(ops):
        return result
    api_corr = api["correlation_id"].to_numpy(dtype=np.int64)
    api_pid = api["pid"].to_numpy(dtype=np.int64)
    op_corr = ops["correlation_id"].to_numpy(dtype=np.int64)
    op_pid = ops["pid"].to_numpy(dtype=np.int64)
    valid = np.flatnonzero(api_corr >= 0)
    if not len(valid):
        return result
    top = int(api_corr[valid].max())
    pid = int(api_pid[0])
    if top <= 4 * len(api) + (1 << 20) and not np.any(api_pid != pid):
        # one process, ids not too sparse: a lookup table by correlation id (reversed, so the first call wins)
        lut = np.full(top + 1, -1, dtype=np.int64)
        lut[api_corr[valid[::-1]]] = valid[::-1]
        mask = (op_corr >= 0) & (op_corr <= top) & (op_pid == pid)
        if mask.all():
            np.take(lut, op_corr, out=result, mode="clip")  # all in range; clip skips a buffered copy
        else:
            ok = np.flatnonzero(mask)
            result[ok] = lut[op_corr[ok]]
        return result
    api_key = (api_pid << _PID_SHIFT) | np.maximum(api_corr, 0)
    keys, first = np.unique(api_key[valid], return_index=True)
    op_key = (op_pid << _PID_SHIFT) | np.maximum(op_corr, 0)
    pos = np.minimum(np.searchsorted(keys, op_key), len(keys) - 1)
    hit = (op_corr >= 0) & (keys[pos] == op_key)
    result[hit] = valid[first[pos[hit]]]
    return result


# --- windows ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    name: str
    device: int
    start_ns: int
    end_ns: int
    rows: Ints  # gpu_ops rows attributed to the window
    instance: int | None = None  # n-th occurrence of this range name
    pid: int | None = None
    tid: int | None = None
    range_start: int | None = None  # the range on the host
    range_end: int | None = None
    attribution: str | None = None  # thread | process


def whole_trace_windows(prep: Prepared) -> list[Window]:
    return [
        Window(WHOLE_TRACE, dev, int(d.starts[0]), int(d.max_end[-1]), d.index)
        for dev, d in prep.devices.items()
        if len(d)
    ]


def range_windows(timeline: Timeline, prep: Prepared, options: AnalysisOptions) -> list[Window]:
    ranges = timeline.ranges
    patterns = []
    for text in options.ranges:
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise UsageError(f"--range {text!r} is not a valid regular expression: {exc}") from None
    names = ranges["name"].astype(str)
    unique = pd.unique(names)
    matched = {n for n in unique if any(p.fullmatch(n) for p in patterns)}
    if not matched:
        raise NoDataError(_never_occurs(options.ranges, names))
    sel = ranges[names.isin(matched).to_numpy()].sort_values(["start_ns", "end_ns"], kind="stable")
    attributors: dict[bool, _Attributor] = {}
    windows: list[Window] = []
    counts: dict[str, int] = {}
    for name, start, end, pid, tid in zip(
        sel["name"].astype(str), sel["start_ns"], sel["end_ns"], sel["pid"], sel["tid"], strict=True
    ):
        instance = counts.get(name, 0)
        counts[name] = instance + 1
        same_thread = options.same_thread_for(name)
        if same_thread not in attributors:
            attributors[same_thread] = _Attributor(prep, same_thread)
        rows = attributors[same_thread](int(pid), int(tid), int(start), int(end))
        devices = prep.op_device[rows]
        for dev in prep.devices:
            mine = rows[devices == dev]
            if not len(mine):
                continue
            first, last = int(prep.op_start[mine].min()), int(prep.op_end[mine].max())
            windows.append(
                Window(
                    name,
                    dev,
                    first,
                    last,
                    mine,
                    instance,
                    int(pid),
                    int(tid),
                    int(start),
                    int(end),
                    "thread" if same_thread else "process",
                )  # fmt: skip
            )
    if not windows:
        raise NoDataError(
            f"range(s) {', '.join(sorted(matched))} occur {len(sel)} time(s), but no GPU work on the analysed "
            "device(s) was launched inside them"
        )
    return windows


def _never_occurs(patterns: Sequence[str], names: pd.Series) -> str:
    common = names.value_counts().head(8)
    listing = ", ".join(f"{n!r} x{c}" for n, c in common.items()) or "none"
    return (
        f"no NVTX range or annotation matches {', '.join(repr(p) for p in patterns)} (the whole name must match); "
        f"most common ranges in the trace: {listing}"
    )


class _Attributor:
    """Finds the ops launched inside a host range, and unlaunched ops overlapping it."""

    def __init__(self, prep: Prepared, same_thread: bool) -> None:
        self.prep = prep
        self.same_thread = same_thread
        launched = np.nonzero(prep.op_launch >= 0)[0]
        calls = prep.op_launch[launched]
        pid, tid, start = prep.api_pid[calls], prep.api_tid[calls], prep.api_start[calls]
        if not same_thread:
            tid = np.zeros_like(tid)
        order = np.lexsort((start, tid, pid))
        self.rows, self.lstart = launched[order], start[order]
        pid, tid = pid[order], tid[order]
        self.groups: dict[tuple[int, int], tuple[int, int]] = {}
        if len(order):
            cut = np.nonzero((np.diff(pid) != 0) | (np.diff(tid) != 0))[0] + 1
            bounds = np.concatenate([[0], cut, [len(order)]])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                self.groups[(int(pid[a]), int(tid[a]))] = (int(a), int(b))
        orphans = np.nonzero(prep.op_launch < 0)[0]
        self.orphans: dict[int, tuple[Ints, Ints, Ints]] = {}
        for p in np.unique(prep.op_pid[orphans]):
            rows = orphans[prep.op_pid[orphans] == p]
            rows = rows[np.argsort(prep.op_start[rows], kind="stable")]
            self.orphans[int(p)] = (rows, prep.op_start[rows], np.maximum.accumulate(prep.op_end[rows]))

    def __call__(self, pid: int, tid: int, start: int, end: int) -> Ints:
        parts = []
        group = self.groups.get((pid, tid if self.same_thread else 0))
        if group:
            a, b = group
            lo = a + int(np.searchsorted(self.lstart[a:b], start, side="left"))
            hi = a + int(np.searchsorted(self.lstart[a:b], end, side="right"))
            parts.append(self.rows[lo:hi])
        if pid in self.orphans:
            rows, starts, max_end = self.orphans[pid]
            first = int(np.searchsorted(max_end, start, side="right"))
            last = int(np.searchsorted(starts, end, side="left"))
            cand = rows[first:last]
            parts.append(cand[self.prep.op_end[cand] > start])
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


# --- per-window numbers -----------------------------------------------------------------------------------------


def percentile(values: npt.ArrayLike, q: float) -> int | None:
    """Smallest value with at least ``q`` percent of the values at or below it (inverted CDF); None if empty."""
    return percentiles(values, (q,))[0]


def percentiles(values: npt.ArrayLike, qs: Sequence[float]) -> list[int | None]:
    """``percentile`` for several ``qs`` with one partial sort: ``np.percentile(values, qs, method="inverted_cdf")``
    computed exactly. numpy finds the rank as ``n * q / 100`` in floats, which lands past a whole rank where that
    product rounds up (q=99.9, n=1000 gives the 1000th value, not the 999th); here the rank of a whole percentile
    is integer arithmetic, so the value is the same on every machine (tests/test_api.py checks the two agree)."""
    arr = np.asarray(values)
    n = len(arr)
    if not n:
        return [None] * len(qs)
    # the k-th smallest value with k = ceil(n q / 100), in integers where q is whole (numpy's inverted_cdf)
    ks = [max(-(-n * int(q) // 100) if float(q).is_integer() else int(np.ceil(n * q / 100)), 1) - 1 for q in qs]
    part = np.partition(arr, sorted(set(ks)))
    return [int(part[k]) for k in ks]


def distribution(values: npt.ArrayLike) -> Distribution:
    arr = np.asarray(values, dtype=np.int64)
    if not len(arr):
        return Distribution(count=0)
    p50, p90, p99 = percentiles(arr, (50, 90, 99))
    return Distribution(count=len(arr), p50=p50, p90=p90, p99=p99, max=int(arr.max()), mean=round(float(arr.mean()), 1))


def window_gaps(window: Window, prep: Prepared) -> Ints:
    """Lengths of the window's idle stretches (between its own ops, clipped to it)."""
    i_start, i_end, _, _ = prep.own_ops(window).idle_in(window.start_ns, window.end_ns)
    return i_end - i_start


@dataclass(frozen=True)
class IdleSplit:
    host_wait: int
    short_gap: int
    other: int
    no_work: int
    per_stretch_no_work: Ints


def idle_split(window: Window, prep: Prepared, s: Ints, e: Ints, cls: Ints) -> IdleSplit:
    """The window's idle stretches (gaps between its own ops) split into host wait, short gaps, other and no work.

    Where the device ran other windows' work during a gap the GPU was not idle: that part is ``other``. No work
    comes only out of host-wait stretches (nothing was queued): the part during which the process issued none."""
    lengths = e - s
    whole = prep.own_ops(window) is prep.devices[window.device]  # no other work on the device in its gaps
    free = lengths if whole else prep.idle_cov[window.device].within(s, e)  # the device itself idle
    covered = int(lengths.sum() - free.sum())
    hw = cls == HOST_WAIT
    cov = prep.no_work_cov.get(window.device)
    nw = np.zeros(len(s), dtype=np.int64)
    if cov is not None and len(cov) and hw.any():
        nw[hw] = cov.within(s[hw], e[hw])
    no_work = int(nw.sum())
    return IdleSplit(
        host_wait=int(np.sum(free, where=hw)) - no_work,
        short_gap=int(np.sum(free, where=cls == SHORT_GAP)),
        other=int(np.sum(free, where=cls == OTHER)) + covered,
        no_work=no_work,
        per_stretch_no_work=nw,
    )


def host_ahead(prep: Prepared, rows: Ints) -> int | None:
    """Queue time of the window's first op that has a launch call: its start minus that call's end."""
    lend = prep.op_launch_end[rows]
    have = rows[lend >= 0]
    if not len(have):
        return None
    first = have[np.argmin(prep.op_start[have])]
    return int(prep.op_start[first] - prep.op_launch_end[first])


def window_record(window: Window, prep: Prepared, timeline: Timeline, options: AnalysisOptions) -> WindowRecord:
    own = prep.own_ops(window)
    ws, we = window.start_ns, window.end_ns
    span = we - ws
    i_start, i_end, i_next, i_cls = own.idle_in(ws, we)
    lengths = i_end - i_start
    # the idle stretches are the complement of the ops' union, so clipped to the window they add up with it
    busy = span - int(lengths.sum())
    split = idle_split(window, prep, i_start, i_end, i_cls)
    cov = prep.no_work_cov.get(window.device)
    queued = int(queued_idle(i_start, i_end, i_next, own.launch_end, cov, i_cls == HOST_WAIT).sum())
    rows = window.rows
    kinds = _take(prep.op_kind, rows, prep)
    launch = _launch_numbers(prep, rows)
    metrics = metric_means(timeline.metrics, window.device, ws, we)
    ahead = None if window.instance is None else host_ahead(prep, window.rows)
    verdict = decide(
        span_ns=span,
        busy_ns=busy,
        host_wait_ns=split.host_wait,
        short_gap_ns=split.short_gap,
        other_ns=split.other,
        no_work_ns=split.no_work,
        no_work_source=prep.no_work_source.get(window.device),
        host_ahead_ns=ahead,
        quiet_ns=options.quiet_ns,
        metrics=metrics,
        source_has_metrics=timeline.metrics is not None and len(timeline.metrics) > 0,
    )
    gap_p50, gap_p90, gap_p99 = percentiles(lengths, (50, 90, 99))
    comm_kernels, comm_busy = _comm_numbers(prep, rows, kinds, ws, we)
    ranged = window.range_start is not None and window.range_end is not None
    return WindowRecord(
        name=window.name,
        device=window.device,
        instance=window.instance,
        pid=window.pid,
        tid=window.tid,
        start_ns=ws,
        end_ns=we,
        span_ns=span,
        kernels=int((kinds == 0).sum()),
        gpu_ops=len(rows),
        memcpys=int((kinds == 1).sum()),
        memsets=int((kinds == 2).sum()),
        comm_kernels=comm_kernels,
        comm_busy_ns=comm_busy,
        **launch,
        busy_ns=busy,
        idle_ns=span - busy,
        idle_fraction=round((span - busy) / span, 6) if span > 0 else None,
        idle_host_wait_ns=split.host_wait,
        idle_short_gap_ns=split.short_gap,
        idle_other_ns=split.other,
        idle_no_work_ns=split.no_work,
        idle_queued_ns=queued,
        no_work_fraction=round(split.no_work / span, 6) if span > 0 else None,
        no_work_source=prep.no_work_source.get(window.device),
        active_ns=span - split.no_work,
        range_start_ns=window.range_start,
        range_end_ns=window.range_end,
        range_ns=window.range_end - window.range_start if ranged else None,  # type: ignore[operator]
        host_ahead_ns=ahead,
        attribution=window.attribution,
        idle_stretches=len(lengths),
        gap_p50_ns=gap_p50,
        gap_p90_ns=gap_p90,
        gap_p99_ns=gap_p99,
        gap_max_ns=int(lengths.max()) if len(lengths) else None,
        top_kernels=top_kernels(prep, rows, options.top_kernels),
        largest_idle=_largest_idle(
            prep, own, i_start, i_end, i_next, i_cls, options.largest_idle, lengths, split.per_stretch_no_work
        ),
        metrics=None
        if metrics is None
        else Metrics(
            dram_pct=metrics.dram_pct,
            compute_pct=metrics.compute_pct,
            compute_metric=metrics.compute_metric,
            samples=metrics.samples,
        ),
        verdict=verdict.verdict,
        verdict_reason=verdict.reason,
    )


def _comm_numbers(prep: Prepared, rows: Ints, kinds: Ints, start: int, end: int) -> tuple[int, int]:
    """The window's communication kernels (NCCL) and the union of their intervals clipped to the window."""
    comm = prep.comm_names()
    if not comm.any() or not len(rows):
        return 0, 0
    mask = (kinds == 0) & comm[_take(prep.op_name, rows, prep)]
    count = int(np.count_nonzero(mask))
    if not count:
        return 0, 0
    picked = rows[mask]
    return count, clipped_union_ns(prep.op_start[picked], prep.op_end[picked], start, end)


def _take(values: npt.NDArray[Any], rows: Ints, prep: Prepared) -> npt.NDArray[Any]:
    """``values[rows]``: the array itself (no copy; read-only use) when ``rows`` are all ops in order."""
    return values if rows is prep.all_rows else values[rows]


def _launch_numbers(prep: Prepared, rows: Ints) -> dict[str, Any]:
    calls_all = _take(prep.op_launch, rows, prep)
    has = calls_all >= 0
    without = len(has) - int(np.count_nonzero(has))
    calls, op_rows = (calls_all, rows) if not without else (calls_all[has], rows[has])
    del has
    is_launch = prep.api_is_launch[calls]
    if not is_launch.all():
        calls, op_rows = calls[is_launch], op_rows[is_launch]
    del is_launch
    if len(calls) > 1 and np.any(calls[1:] < calls[:-1]):
        order = np.argsort(calls, kind="stable")
        calls, op_rows = calls[order], op_rows[order]
    # calls now ascending: one group per launch call
    n = len(calls)
    bounds = np.flatnonzero(calls[1:] != calls[:-1]) if n else np.zeros(0, dtype=np.int64)
    op_start = _take(prep.op_start, op_rows, prep)
    if len(bounds) == max(n - 1, 0):  # one op per call (the usual case): every op heads its group
        unique, first_start = calls, op_start
    else:
        heads = np.empty(len(bounds) + 1, dtype=np.int64)
        heads[0] = 0
        np.add(bounds, 1, out=heads[1:])
        unique = calls[heads]
        first_start = np.minimum.reduceat(op_start, heads)
        del heads
    del bounds
    counts = np.bincount(prep.api_name[unique], minlength=len(prep.api_names))
    launches = {prep.api_names[i]: int(counts[i]) for i in np.flatnonzero(counts)}
    launched_kernels = int(np.count_nonzero(_take(prep.op_kind, op_rows, prep) == 0))
    # queue time: first op of each call starts minus the call's end (negative: started before the call returned)
    call_end = prep.api_end[unique]
    api_ns = prep.api_start[unique]
    np.subtract(call_end, api_ns, out=api_ns)
    queue_ns = np.subtract(first_start, call_end, out=call_end)
    del first_start
    return {
        "launches": dict(sorted(launches.items(), key=lambda kv: -kv[1])),
        "launch_calls": len(unique),
        "kernels_per_launch": round(launched_kernels / len(unique), 3) if len(unique) else None,
        "ops_without_launch": without,
        "launch_api_ns": distribution(api_ns),
        "queue_ns": distribution(queue_ns),
    }


def top_kernels(prep: Prepared, rows: Ints, top: int) -> list[TopKernel]:
    if top <= 0:
        return []
    is_kernel = _take(prep.op_kind, rows, prep) == 0
    k = rows if is_kernel.all() else rows[is_kernel]
    del is_kernel
    if not len(k):
        return []
    codes = _take(prep.op_name, k, prep)
    durations = np.subtract(_take(prep.op_end, k, prep), _take(prep.op_start, k, prep))
    size = len(prep.op_names)
    grand = int(durations.sum())
    if grand < 1 << 53 and durations.min() >= 0:
        # every partial sum is a whole number below 2**53, so the float bincount is exact
        all_totals = np.bincount(codes, weights=durations, minlength=size).astype(np.int64)
    else:  # exact integer sums through float bincounts: low 20 bits and the rest summed apart stay below 2**53
        low = np.bincount(codes, weights=durations & 0xFFFFF, minlength=size).astype(np.int64)
        high = np.bincount(codes, weights=durations >> 20, minlength=size).astype(np.int64)
        all_totals = (high << 20) + low
    del durations
    all_counts = np.bincount(codes, minlength=size)
    uniq = np.flatnonzero(all_counts)
    totals, counts = all_totals[uniq], all_counts[uniq]
    order = np.argsort(-totals, kind="stable")[:top]
    return [
        TopKernel(
            name=prep.op_names[int(uniq[i])],
            count=int(counts[i]),
            total_ns=int(totals[i]),
            mean_ns=int(round(totals[i] / counts[i])),
            share=round(int(totals[i]) / grand, 4) if grand else None,
        )
        for i in order
    ]


def _top_value(values: Ints, top: int) -> int:
    """The ``top``-th largest value (``np.partition``'s at ``len - top``), by peeling off the largest distinct
    values: a few linear passes, where introselect slows down on a million equal gaps and a few longer ones."""
    cut = int(values.max())
    while np.count_nonzero(values >= cut) < top:
        cut = int(values[values < cut].max())
    return cut


def _largest_idle(
    prep: Prepared,
    dev: DeviceOps,
    starts: Ints,
    ends: Ints,
    nxt: Ints,
    cls: Ints,
    top: int,
    lengths: Ints | None = None,
    no_work: Ints | None = None,
) -> list[IdleStretch]:
    if not len(starts) or top <= 0:
        return []
    if lengths is None:
        lengths = ends - starts
    if len(lengths) > top:  # only the candidates for the top, in position order (a stable sort of them all)
        cut = _top_value(lengths, top)
        longer = np.flatnonzero(lengths > cut)
        cand = np.concatenate([longer, np.flatnonzero(lengths == cut)[: top - len(longer)]])  # ties: the first
        order = cand[np.lexsort((cand, -lengths[cand]))][:top]
    else:
        order = np.argsort(-lengths, kind="stable")
    out = []
    for i in order:
        a, b, pos = int(starts[i]), int(ends[i]), int(nxt[i])
        row = int(dev.index[pos]) if pos >= 0 else -1
        launch = int(prep.op_launch[row]) if row >= 0 else -1
        pid = int(prep.op_pid[row]) if row >= 0 else int(prep.op_pid[dev.index[-1]])
        host = prep.api_in_flight(pid, a, b)
        nw = int(no_work[i]) if no_work is not None else 0
        out.append(
            IdleStretch(
                start_ns=a,
                end_ns=b,
                duration_ns=b - a,
                kind=NO_WORK if 2 * nw >= b - a and nw else CLASS_NAMES[int(cls[i])],
                no_work_ns=nw,
                next_op=prep.op_names[int(prep.op_name[row])] if row >= 0 else None,
                next_launch=prep.api_names[int(prep.api_name[launch])] if launch >= 0 else None,
                host_api_in_flight=prep.api_names[int(prep.api_name[host])] if host >= 0 else None,
            )
        )
    return out
