"""The records of many windows at once: ``windows.window_record``'s numbers (docs/analysis.md, "Numbers per
window") computed in one pass over all the windows' ops and idle stretches.

It takes the windows whose own ops are every op of their device inside them (a step of a one-stream loop, a
synchronous range): their idle stretches are the device's, clipped. The others, windows with communication kernels
and traces with GPU metrics go through ``window_record`` one at a time. The records are the same either way
(tests/test_window_batch.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from launchprobe.analysis.idle import CLASS_NAMES, HOST_WAIT, OTHER, SHORT_GAP, queued_idle
from launchprobe.analysis.trace_verdict import decide
from launchprobe.analysis.windows import NO_WORK, AnalysisOptions, Prepared, Window, window_record
from launchprobe.run.schema import Distribution, IdleStretch, TopKernel
from launchprobe.run.schema import Window as WindowRecord
from launchprobe.timeline import Timeline

Ints = npt.NDArray[np.int64]
QS = (50, 90, 99)


def window_records(
    windows: Sequence[Window], prep: Prepared, timeline: Timeline, options: AnalysisOptions
) -> list[WindowRecord]:
    """``[window_record(w, prep, timeline, options) for w in windows]``, the windows that allow it in one pass."""
    out: list[WindowRecord | None] = [None] * len(windows)
    if timeline.metrics is None or not len(timeline.metrics):
        by_device: dict[int, list[int]] = {}
        for i, w in enumerate(windows):
            if w.instance is not None and len(w.rows):
                by_device.setdefault(w.device, []).append(i)
        for device, idx in by_device.items():
            chosen = [idx[j] for j in np.flatnonzero(_alone(prep, device, [windows[i] for i in idx]))]
            for i, rec in zip(chosen, _batch(prep, device, [windows[i] for i in chosen], options), strict=True):
                out[i] = rec
    return [rec if rec is not None else window_record(w, prep, timeline, options) for rec, w in zip(out, windows)]


def _alone(prep: Prepared, device: int, windows: list[Window]) -> npt.NDArray[np.bool_]:
    """Which windows hold every op of the device that runs inside them (``Prepared.own_ops`` gives the device) and
    no communication kernel."""
    dev = prep.devices[device]
    lo = np.array([w.start_ns for w in windows], dtype=np.int64)
    hi = np.array([w.end_ns for w in windows], dtype=np.int64)
    lens = np.array([len(w.rows) for w in windows], dtype=np.int64)
    inside = np.maximum(np.searchsorted(dev.starts, hi, side="left") - np.searchsorted(dev.max_end, lo, "right"), 0)
    ok = inside == lens
    comm = prep.comm_names()
    if comm.any():
        rows = np.concatenate([w.rows for w in windows])
        hit = comm[prep.op_name[rows]] & (prep.op_kind[rows] == 0)
        ok &= _per(hit.astype(np.int64), lens) == 0
    return ok


def _ranges(first: Ints, count: Ints) -> Ints:
    """first[i], first[i] + 1, ..., first[i] + count[i] - 1, for every i in turn."""
    total = int(count.sum())
    return np.arange(total, dtype=np.int64) + np.repeat(first - np.cumsum(count) + count, count)


def _per(values: npt.NDArray[Any], counts: Ints) -> npt.NDArray[Any]:
    """Exact sums of ``values`` laid out group after group (``counts`` each, empty groups included)."""
    out = np.zeros(len(counts), dtype=values.dtype)
    full = counts > 0
    if full.any():
        out[full] = np.add.reduceat(values, (np.cumsum(counts) - counts)[full])
    return out


def _sorted_within(values: Ints, counts: Ints) -> Ints:
    """``values`` sorted within each group (laid out group after group, ``counts`` each)."""
    if not len(values):
        return values
    if counts.min() == counts.max():  # groups of one size: rows of a matrix
        return np.sort(values.reshape(len(counts), -1), axis=1).ravel()
    group = np.repeat(np.arange(len(counts)), counts)
    low, high = int(values.min()), int(values.max())
    width = high - low + 1
    if low >= 0 and len(counts) * width < 1 << 62:  # one sort of a combined key
        return np.sort(group * width + (values - low), kind="stable") - group * width + low
    return values[np.lexsort((values, group))]


def _quantiles(ordered: Ints, counts: Ints) -> list[list[int | None]]:
    """Per group (values sorted within each), ``windows.percentiles`` at QS: the k-th smallest, k = ceil(n q / 100)."""
    heads = np.cumsum(counts) - counts
    out = []
    for q in QS:
        k = np.maximum(-(-counts * q // 100), 1) - 1
        picked = ordered[np.minimum(heads + k, max(len(ordered) - 1, 0))] if len(ordered) else np.zeros_like(counts)
        out.append([int(v) if c else None for v, c in zip(picked.tolist(), counts.tolist(), strict=True)])
    return out


def _distributions(values: Ints, group: Ints, n: int) -> list[Distribution]:
    """``windows.distribution`` of each group's values."""
    counts = np.bincount(group, minlength=n).astype(np.int64)
    ordered = _sorted_within(values, counts)
    p50, p90, p99 = _quantiles(ordered, counts)
    heads = np.cumsum(counts) - counts
    sums = _per(ordered, counts).tolist()
    top = ordered[np.maximum(heads + counts - 1, 0)].tolist() if len(ordered) else [0] * n
    return [
        Distribution(count=c, p50=p50[i], p90=p90[i], p99=p99[i], max=int(top[i]), mean=round(float(sums[i]) / c, 1))
        if c
        else Distribution(count=0)
        for i, c in enumerate(counts.tolist())
    ]


def _batch(prep: Prepared, device: int, windows: list[Window], options: AnalysisOptions) -> list[WindowRecord]:
    n = len(windows)
    if not n:
        return []
    dev = prep.devices[device]
    ws = np.array([w.start_ns for w in windows], dtype=np.int64)
    we = np.array([w.end_ns for w in windows], dtype=np.int64)
    span = we - ws
    # idle stretches: the device's, clipped to each window (Devices.idle_in), empty ones dropped
    first = np.searchsorted(dev.idle_end, ws, side="right")
    count = np.maximum(np.searchsorted(dev.idle_start, we, side="left") - first, 0)
    pos = _ranges(first, count)
    wid = np.repeat(np.arange(n), count)
    s, e = np.maximum(dev.idle_start[pos], ws[wid]), np.minimum(dev.idle_end[pos], we[wid])
    keep = e > s
    pos, wid, s, e = pos[keep], wid[keep], s[keep], e[keep]
    cls, nxt = dev.idle_class[pos], dev.idle_next[pos]
    lengths = e - s
    stretches = np.bincount(wid, minlength=n).astype(np.int64)
    hw = cls == HOST_WAIT
    nw = np.zeros(len(s), dtype=np.int64)
    cov = prep.no_work_cov.get(device)
    if cov is not None and len(cov) and hw.any():
        nw[hw] = cov.within(s[hw], e[hw])
    no_work = _per(nw, stretches)
    host_wait = _per(lengths * hw, stretches) - no_work
    short_gap = _per(lengths * (cls == SHORT_GAP), stretches)
    other = _per(lengths * (cls == OTHER), stretches)
    queued = _per(queued_idle(s, e, nxt, dev.launch_end, cov, hw), stretches)
    busy = span - _per(lengths, stretches)
    ordered = _sorted_within(lengths, stretches)
    gap_p50, gap_p90, gap_p99 = _quantiles(ordered, stretches)
    gap_max = ordered[np.maximum(np.cumsum(stretches) - 1, 0)].tolist() if len(ordered) else [0] * n
    largest = _largest_idle(prep, dev, s, e, nxt, cls, nw, wid, stretches, options.largest_idle)
    # the windows' own ops
    lens = np.array([len(w.rows) for w in windows], dtype=np.int64)
    rows = np.concatenate([w.rows for w in windows])
    rid = np.repeat(np.arange(n), lens)
    kinds = prep.op_kind[rows]
    by_kind = np.bincount(rid * 3 + kinds, minlength=3 * n).reshape(n, 3).tolist()
    launch = _launch_numbers(prep, rows, rid, kinds, n)
    ahead = _host_ahead(prep, rows, rid, lens)
    tops = _top_kernels(prep, rows[kinds == 0], rid[kinds == 0], n, options.top_kernels)
    source = prep.no_work_source.get(device)
    out = []
    columns = (span, busy, no_work, host_wait, short_gap, other, queued, lens, stretches)
    for i, (w, (sp, bz, nwk, hwt, sg, ot, qd, ops, idle)) in enumerate(
        zip(windows, zip(*(c.tolist() for c in columns), strict=True), strict=True)
    ):
        verdict = decide(
            span_ns=sp,
            busy_ns=bz,
            host_wait_ns=hwt,
            short_gap_ns=sg,
            other_ns=ot,
            no_work_ns=nwk,
            no_work_source=source,
            host_ahead_ns=ahead[i],
            quiet_ns=options.quiet_ns,
            metrics=None,
            source_has_metrics=False,
        )
        ranged = w.range_start is not None and w.range_end is not None
        out.append(
            WindowRecord(
                name=w.name,
                device=w.device,
                instance=w.instance,
                pid=w.pid,
                tid=w.tid,
                start_ns=w.start_ns,
                end_ns=w.end_ns,
                span_ns=sp,
                kernels=by_kind[i][0],
                gpu_ops=ops,
                memcpys=by_kind[i][1],
                memsets=by_kind[i][2],
                comm_kernels=0,
                comm_busy_ns=0,
                **launch[i],
                busy_ns=bz,
                idle_ns=sp - bz,
                idle_fraction=round((sp - bz) / sp, 6) if sp > 0 else None,
                idle_host_wait_ns=hwt,
                idle_short_gap_ns=sg,
                idle_other_ns=ot,
                idle_no_work_ns=nwk,
                idle_queued_ns=qd,
                no_work_fraction=round(nwk / sp, 6) if sp > 0 else None,
                no_work_source=source,
                active_ns=sp - nwk,
                range_start_ns=w.range_start,
                range_end_ns=w.range_end,
                range_ns=w.range_end - w.range_start if ranged else None,  # type: ignore[operator]
                host_ahead_ns=ahead[i],
                attribution=w.attribution,
                idle_stretches=idle,
                gap_p50_ns=gap_p50[i],
                gap_p90_ns=gap_p90[i],
                gap_p99_ns=gap_p99[i],
                gap_max_ns=gap_max[i] if idle else None,
                top_kernels=tops[i],
                largest_idle=largest[i],
                metrics=None,
                verdict=verdict.verdict,
                verdict_reason=verdict.reason,
            )
        )
    return out


def _largest_idle(
    prep: Prepared,
    dev: Any,
    s: Ints,
    e: Ints,
    nxt: Ints,
    cls: Ints,
    nw: Ints,
    wid: Ints,
    stretches: Ints,
    top: int,
) -> list[list[IdleStretch]]:
    """Per window its ``top`` longest idle stretches (ties: the earlier), as ``windows._largest_idle``."""
    n = len(stretches)
    if top <= 0 or not len(s):
        return [[] for _ in range(n)]
    length = e - s
    width = int(length.max()) + 1
    if (int(wid[-1]) + 1) * width < 1 << 62:  # longest first within each window, ties in order: one stable sort
        order = np.argsort(wid * width + (width - 1 - length), kind="stable")
    else:
        order = np.lexsort((np.arange(len(s)), -length, wid))
    rank = np.arange(len(s)) - np.repeat(np.cumsum(stretches) - stretches, stretches)
    pick = order[rank < top]
    a, b, nx = s[pick], e[pick], nxt[pick]
    row = np.where(nx >= 0, dev.index[np.maximum(nx, 0)], -1)
    launch = np.where(row >= 0, prep.op_launch[np.maximum(row, 0)], -1)
    pid = np.where(row >= 0, prep.op_pid[np.maximum(row, 0)], prep.op_pid[dev.index[-1]])
    host = np.full(len(pick), -1, dtype=np.int64)
    for p in np.unique(pid).tolist():
        mine = pid == p
        host[mine] = prep.api_in_flight_many(p, a[mine], b[mine])
    out: list[list[IdleStretch]] = [[] for _ in range(n)]
    columns = (wid[pick], a, b, nw[pick], cls[pick], row, launch, host)
    for w, lo, hi, k, c, r, lc, h in zip(*(x.tolist() for x in columns), strict=True):
        out[w].append(
            IdleStretch(
                start_ns=lo,
                end_ns=hi,
                duration_ns=hi - lo,
                kind=NO_WORK if 2 * k >= hi - lo and k else CLASS_NAMES[c],
                no_work_ns=k,
                next_op=prep.op_names[int(prep.op_name[r])] if r >= 0 else None,
                next_launch=prep.api_names[int(prep.api_name[lc])] if lc >= 0 else None,
                host_api_in_flight=prep.api_names[int(prep.api_name[h])] if h >= 0 else None,
            )
        )
    return out


def _launch_numbers(prep: Prepared, rows: Ints, rid: Ints, kinds: Ints, n: int) -> list[dict[str, Any]]:
    """Per window ``windows._launch_numbers``: its launch calls by API name, kernels per call, call and queue
    times."""
    calls = prep.op_launch[rows]
    has = calls >= 0
    without = np.bincount(rid[~has], minlength=n).tolist()
    sel = has & np.take(prep.api_is_launch, calls, mode="wrap") if len(prep.api_is_launch) else has & False
    c, w, r = (calls, rid, rows) if sel.all() else (calls[sel], rid[sel], rows[sel])
    dc = np.diff(c)
    if len(c) > 1 and not np.all(dc >= 0) and not np.all((dc >= 0) | (np.diff(w) > 0)):  # one group per call
        order = np.lexsort((c, w))
        c, w, r = c[order], w[order], r[order]
        dc = np.diff(c)
    head = np.ones(len(c), dtype=bool)
    head[1:] = (dc != 0) | (w[1:] != w[:-1])
    if head.all():  # one op per call (the usual case)
        first_start, unique, uw = prep.op_start[r], c, w
    else:
        heads = np.flatnonzero(head)
        first_start = np.minimum.reduceat(prep.op_start[r], heads) if len(heads) else np.zeros(0, np.int64)
        unique, uw = c[heads], w[heads]
    n_calls = np.bincount(uw, minlength=n).tolist()
    names = len(prep.api_names)
    by_name = np.bincount(uw * names + prep.api_name[unique], minlength=n * names).reshape(n, names)
    launched = np.bincount(w[prep.op_kind[r] == 0], minlength=n).tolist()
    call_end = prep.api_end[unique]
    api_ns = _distributions(call_end - prep.api_start[unique], uw, n)
    queue_ns = _distributions(first_start - call_end, uw, n)
    used = np.flatnonzero(by_name.any(axis=0))
    named = [prep.api_names[int(k)] for k in used]
    out = []
    for i, counts in enumerate(by_name[:, used].tolist()):
        launches = {k: v for k, v in zip(named, counts, strict=True) if v}
        out.append(
            {
                "launches": dict(sorted(launches.items(), key=lambda kv: -kv[1])),
                "launch_calls": n_calls[i],
                "kernels_per_launch": round(launched[i] / n_calls[i], 3) if n_calls[i] else None,
                "ops_without_launch": without[i],
                "launch_api_ns": api_ns[i],
                "queue_ns": queue_ns[i],
            }
        )
    return out


def _host_ahead(prep: Prepared, rows: Ints, rid: Ints, lens: Ints) -> list[int | None]:
    """Per window ``windows.host_ahead``: its first op (by start; ties: the first in its rows) with a launch call,
    that op's start minus the call's end."""
    lend = prep.op_launch_end[rows]
    have = lend >= 0
    counts = np.bincount(rid[have], minlength=len(lens)).astype(np.int64)
    start, lend = prep.op_start[rows][have], lend[have]
    out: list[int | None] = [None] * len(lens)
    if not len(start):
        return out
    full = counts > 0
    heads = (np.cumsum(counts) - counts)[full]
    earliest = np.minimum.reduceat(start, heads)
    pos = np.where(start == np.repeat(earliest, counts[full]), np.arange(len(start)), len(start))
    first = np.minimum.reduceat(pos, heads)
    for i, v in zip(np.flatnonzero(full).tolist(), (start[first] - lend[first]).tolist(), strict=True):
        out[i] = int(v)
    return out


def _top_kernels(prep: Prepared, rows: Ints, rid: Ints, n: int, top: int) -> list[list[TopKernel]]:
    """Per window ``windows.top_kernels``: its kernels by name, the ``top`` with the most time (ties: name order)."""
    if top <= 0 or not len(rows):
        return [[] for _ in range(n)]
    codes = prep.op_name[rows]
    durations = prep.op_end[rows] - prep.op_start[rows]
    grand = _per(durations, np.bincount(rid, minlength=n).astype(np.int64)).tolist()
    names = len(prep.op_names)
    if n * names <= 1 << 22 and durations.min() >= 0:  # (window, name) bins; float sums exact (in two halves)
        key = rid * names + codes
        if sum(grand) < 1 << 53:
            summed = np.bincount(key, weights=durations, minlength=n * names).astype(np.int64)
        else:
            low = np.bincount(key, weights=durations & 0xFFFFF, minlength=n * names).astype(np.int64)
            summed = (np.bincount(key, weights=durations >> 20, minlength=n * names).astype(np.int64) << 20) + low
        every = np.bincount(key, minlength=n * names)
        bins = np.flatnonzero(every)
        totals, counts = summed[bins], every[bins]
        gcode, gw = bins % names, bins // names
    else:
        order = np.lexsort((codes, rid))
        codes, durations, rid = codes[order], durations[order], rid[order]
        head = np.ones(len(codes), dtype=bool)
        head[1:] = (codes[1:] != codes[:-1]) | (rid[1:] != rid[:-1])
        heads = np.flatnonzero(head)
        totals = np.add.reduceat(durations, heads)
        counts = np.diff(np.append(heads, len(codes)))
        gcode, gw = codes[heads], rid[heads]
    pick = np.lexsort((gcode, -totals, gw))
    per = np.bincount(gw, minlength=n).astype(np.int64)
    rank = np.arange(len(pick)) - np.repeat(np.cumsum(per) - per, per)
    pick = pick[rank < top]
    out: list[list[TopKernel]] = [[] for _ in range(n)]
    for w, code, total, cnt in zip(*(x.tolist() for x in (gw[pick], gcode[pick], totals[pick], counts[pick]))):
        out[w].append(
            TopKernel(
                name=prep.op_names[code],
                count=cnt,
                total_ns=total,
                mean_ns=int(round(total / cnt)),
                share=round(total / grand[w], 4) if grand[w] else None,
            )
        )
    return out
