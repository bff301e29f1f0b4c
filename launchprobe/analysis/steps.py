"""Steps of a trace: the iterations of a decode (or training) loop, found from engines' step markers or from the
trace's own structure, and sorted into kinds (docs/analysis.md, "Steps").

Pure functions of a Timeline (numpy, no per-op Python loops). Two sources:

- ``annotations``: step ranges of known engines recognised by name (vLLM ``execute_context_<n>(<t>)_generation_<m>
  (<t>)`` and ``execute_new_<n>_cached_<m>``, SGLang ``step[DECODE bs=<n>]`` / ``step[EXTEND bs=<n> toks=<m>]`` /
  ``step[MIXED ...]``, TensorRT-LLM ``[Executor] _forward_step <i>: <n> ctx reqs, <m> gen reqs``, PyTorch
  ``ProfilerStep#<n>``); a step's work is the GPU ops launched inside the range from any thread of its process.
- ``structure``: per process and device, the work is split into active periods at quiet stretches (no GPU op
  running and no API call of the process for ``quiet_ns``), and each period into iterations by the first signal
  that repeats: the host synchronisation that ends a step (a blocking sync or synchronous device-to-host copy),
  one (or a fixed number of) graph launch(es) per step, or the period of the launch sequence itself (kernel names
  and API calls). A signal is used only when at least ``MIN_STEPS`` iterations of identical launch sequences cover
  at least half of the period's work; otherwise the period has no steps ("no repeating steps found").

A step owns the GPU time from the end of the previous step's work (same process and device, same active period)
to the end of its own work; the first step of a period owns from its own first op. Steps with the same launch
sequence (and, for annotations, the same parsed phase and batch) are one kind; a kind's steps slower than
``OUTLIER_FACTOR`` times its median are warm-up / compilation steps, kept out of its statistics and listed.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from launchprobe.analysis.windows import AnalysisOptions, Prepared, prepare
from launchprobe.collect.api_names import canonical_api_name
from launchprobe.timeline import Timeline

Ints = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

MIN_STEPS = 3  # fewer iterations than this are not a loop
MIN_OPS = 2  # a step runs at least this many GPU ops, one a kernel
QUIET_NS = 100_000_000  # 100 ms without GPU work or API calls splits active periods
MIN_COVERAGE = 0.5  # the steps must hold at least this share of the period's launched ops
MAX_GROUP = 16  # at most this many sync / graph segments per step
MATCH_MIN = 0.5  # a grouping of segments must repeat at least this often (lag self-match)
SEQ_MATCH_MIN = 0.75  # the launch sequence must match itself at the step period at least this often
BOUNDARY_RATIO = 2.0  # a step boundary: the host's median gap there is at least this times its median gap
OUTLIER_FACTOR = 3.0  # a step slower than this times its kind's median span is warm-up / compilation
MODES = ("auto", "annotations", "off")

SIGNAL_ANNOTATION = "annotation"
SIGNAL_SYNC = "host sync"
SIGNAL_GRAPH = "graph launch"
SIGNAL_SEQUENCE = "repeating launch sequence"
NO_STEPS = "no repeating steps found"

# --- engine step markers ------------------------------------------------------------------------------------------

_VLLM = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
_VLLM_OLD = re.compile(r"execute_new_(\d+)_cached_(\d+)")
_SGLANG = re.compile(r"step\[(DECODE|EXTEND|MIXED|PREFILL|IDLE)([^\]]*)\]")
_TRTLLM = re.compile(r"\[Executor\] _forward_step (\d+): (\d+) ctx reqs, (\d+) gen reqs")
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)")
_KV = re.compile(r"(\w+)=(\d+)")


@dataclass(frozen=True)
class Marker:
    """What an engine's step name says."""

    engine: str  # vllm | sglang | trtllm | torch
    phase: str  # decode | prefill | mixed | step
    batch: int | None = None
    tokens: int | None = None

    @property
    def label(self) -> str:
        parts = [self.phase]
        if self.batch is not None:
            parts.append(f"bs={self.batch}")
        if self.tokens is not None and self.phase != "decode":
            parts.append(f"toks={self.tokens}")
        return " ".join(parts)


def _phase(ctx: int, gen: int) -> str:
    if ctx and gen:
        return "mixed"
    return "prefill" if ctx else "decode"


def parse_marker(name: str) -> Marker | None:
    """The engine step a range name marks, with batch size and tokens where the name carries them; else None."""
    if m := _VLLM.fullmatch(name):
        ctx, ctx_tok, gen, gen_tok = (int(x) for x in m.groups())
        return Marker("vllm", _phase(ctx, gen), ctx + gen, ctx_tok + gen_tok)
    if m := _VLLM_OLD.fullmatch(name):
        new, cached = int(m.group(1)), int(m.group(2))
        return Marker("vllm", _phase(new, cached), new + cached)
    if m := _SGLANG.fullmatch(name):
        values = {k: int(v) for k, v in _KV.findall(m.group(2))}
        phase = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "MIXED": "mixed"}.get(
            m.group(1), "idle"
        )
        return Marker("sglang", phase, values.get("bs"), values.get("toks"))
    if m := _TRTLLM.fullmatch(name):
        ctx, gen = int(m.group(2)), int(m.group(3))
        return Marker("trtllm", _phase(ctx, gen), ctx + gen)
    if _PROFILER_STEP.fullmatch(name):
        return Marker("torch", "step")
    return None


# --- results ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One detected step on one device."""

    index: int  # in start order over the device's steps
    device: int
    pid: int
    tid: int | None
    start_ns: int  # the period the step owns: from the end of the previous step's work...
    end_ns: int  # ...to the end of its own work
    gpu_start_ns: int  # its own first op's start
    first_op: int  # gpu_ops rows of its first and last op (by end)
    last_op: int
    host_start_ns: int  # its first host call (or the range's start)
    host_end_ns: int  # its last host call's end (or the range's end)
    signal: str  # what cut it: annotation | host sync | graph launch | repeating launch sequence
    kind: str  # key of its kind (StepKind.key)
    ops: int
    kernels: int
    launches: int  # launch calls (kernel, graph, copy, set) that launched its ops
    graph_kernels: int  # kernels replayed from a graph
    rows: Ints = field(repr=False, compare=False)  # its gpu_ops rows, sorted
    name: str | None = None  # the range's name (annotations)
    batch: int | None = None
    tokens: int | None = None
    outlier: bool = False  # warm-up / compilation: kept out of its kind's statistics

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class StepKind:
    key: str
    label: str  # e.g. "decode, graph replay, 84 ops"
    device: int
    detected_by: str  # the signal, with its detail ("host sync (cudaStreamSynchronize)")
    instances: int  # steps in its statistics (outliers excluded)
    outliers: tuple[int, ...]  # indices (Step.index) of its warm-up / compilation steps
    ops: int  # modal ops per step
    kernels: int
    span_p50_ns: int
    busy_p50_ns: int  # p50 of the union of each step's own ops


@dataclass(frozen=True)
class StepResult:
    mode: str  # annotations | structure | none
    steps: list[Step]
    kinds: list[StepKind]
    reason: str  # how they were found, or why there are none
    periods: int = 0  # active periods examined (structure)


# --- shared helpers -----------------------------------------------------------------------------------------------


def _hash_names(names: list[str], salt: str) -> U64:
    """A stable 64-bit hash of each name."""
    out = np.empty(len(names), dtype=np.uint64)
    for i, name in enumerate(names):
        out[i] = int.from_bytes(hashlib.blake2b((salt + name).encode(), digest_size=8).digest(), "little")
    return out


def percentile(values: Ints, q: int) -> int:
    """Inverted-CDF percentile (the smallest value with at least q% at or below it), as windows.percentile."""
    part = np.sort(values)
    k = max(-(-len(part) * q // 100), 1) - 1
    return int(part[k])


def _union(starts: Ints, ends: Ints) -> int:
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    gaps = np.maximum(s[1:] - e[:-1], 0)
    return int(e[-1] - s[0] - gaps.sum())


@dataclass
class _Events:
    """The host calls of one process that matter to its steps on one device, in start order."""

    api: Ints  # api row
    start: Ints
    end: Ints
    token: U64  # API name, first op's name, op count
    sync: npt.NDArray[np.bool_]  # blocking sync or synchronous device-to-host copy
    graph: npt.NDArray[np.bool_]
    nops: Ints  # ops on this device


@dataclass
class _Ctx:
    timeline: Timeline
    prep: Prepared
    api_cat: npt.NDArray[np.object_]
    api_canon: list[str]  # canonical name of each prep.api_names entry
    name_hash: U64  # per prep.op_names
    api_hash: U64  # per prep.api_names
    op_order: Ints  # op rows sorted by (launch row, start)
    op_first: Ints  # per api row: position in op_order of its first op, -1 none
    op_count: Ints  # per api row: ops launched


SYNC_COPY_NAMES = frozenset({"cudaMemcpy", "cuMemcpyDtoH", "cuMemcpy", "hipMemcpy", "hipMemcpyDtoH"})


def _context(timeline: Timeline, prep: Prepared) -> _Ctx:
    api_cat = timeline.api_calls["category"].astype(str).to_numpy(dtype=object)
    canon = [canonical_api_name(n) for n in prep.api_names]
    launched = np.flatnonzero(prep.op_launch >= 0)
    order = launched[np.lexsort((prep.op_start[launched], prep.op_launch[launched]))]
    n_api = len(prep.api_start)
    count = (
        np.bincount(prep.op_launch[order], minlength=n_api).astype(np.int64)
        if len(order)
        else np.zeros(n_api, dtype=np.int64)
    )
    first = np.full(n_api, -1, dtype=np.int64)
    if len(order):
        calls = prep.op_launch[order]
        heads = np.flatnonzero(np.concatenate([[True], calls[1:] != calls[:-1]]))
        first[calls[heads]] = heads
    return _Ctx(
        timeline=timeline,
        prep=prep,
        api_cat=api_cat,
        api_canon=canon,
        name_hash=_hash_names(prep.op_names, "op:"),
        api_hash=_hash_names(canon, "api:"),
        op_order=order,
        op_first=first,
        op_count=count,
    )


# --- annotations --------------------------------------------------------------------------------------------------


def _marker_ranges(timeline: Timeline) -> list[tuple[int, Marker]]:
    names = timeline.ranges["name"].astype(str)
    parsed = {n: parse_marker(n) for n in names.unique()}
    return [(i, m) for i, n in enumerate(names) if (m := parsed[n]) is not None]


def has_markers(timeline: Timeline) -> bool:
    names = timeline.ranges["name"].astype(str).unique()
    return any(parse_marker(n) is not None for n in names)


def _annotation_steps(ctx: _Ctx) -> list[_Raw]:
    prep, ranges = ctx.prep, ctx.timeline.ranges
    found = _marker_ranges(ctx.timeline)
    if not found:
        return []
    launched = np.flatnonzero(prep.op_launch >= 0)
    calls = prep.op_launch[launched]
    key_pid = prep.api_pid[calls]
    key_start = prep.api_start[calls]
    order = np.lexsort((key_start, key_pid))
    rows_sorted, pid_sorted, start_sorted = launched[order], key_pid[order], key_start[order]
    rstart = ranges["start_ns"].to_numpy(dtype=np.int64)
    rend = ranges["end_ns"].to_numpy(dtype=np.int64)
    rpid = ranges["pid"].to_numpy(dtype=np.int64)
    rtid = ranges["tid"].to_numpy(dtype=np.int64)
    names = ranges["name"].astype(str).to_numpy(dtype=object)
    out: list[_Raw] = []
    for i, marker in found:
        pid = int(rpid[i])
        lo_p = int(np.searchsorted(pid_sorted, pid, side="left"))
        hi_p = int(np.searchsorted(pid_sorted, pid, side="right"))
        seg = start_sorted[lo_p:hi_p]
        a = lo_p + int(np.searchsorted(seg, rstart[i], side="left"))
        b = lo_p + int(np.searchsorted(seg, rend[i], side="right"))
        rows = np.sort(rows_sorted[a:b])
        if not len(rows):
            continue
        for dev in np.unique(prep.op_device[rows]):
            mine = rows[prep.op_device[rows] == dev]
            out.append(
                _Raw(
                    device=int(dev),
                    pid=pid,
                    tid=int(rtid[i]),
                    rows=mine,
                    host_start=int(rstart[i]),
                    host_end=int(rend[i]),
                    signal=SIGNAL_ANNOTATION,
                    key=f"{marker.label}|{str(names[i]) if marker.engine == 'torch' else marker.engine}",
                    period=0,
                    name=str(names[i]),
                    marker=marker,
                )
            )
    return out


# --- structure ----------------------------------------------------------------------------------------------------


@dataclass
class _Raw:
    """A step before its owned period and kind are settled."""

    device: int
    pid: int
    tid: int | None
    rows: Ints
    host_start: int
    host_end: int
    signal: str
    key: str  # kind key (launch-sequence signature, or marker label)
    period: int  # active period number (steps own time only within one)
    name: str | None = None
    marker: Marker | None = None
    detail: str = ""
    sequence: int = 0  # order-sensitive signature of its calls (structure)
    ev_lo: int = 0  # its calls: [ev_lo, ev_hi) in the device's event list (structure)
    ev_hi: int = 0


def _events(ctx: _Ctx, pid: int, device: int) -> _Events:
    prep = ctx.prep
    ops_here = np.flatnonzero((prep.op_device == device) & (prep.op_pid == pid) & (prep.op_launch >= 0))
    per_call = np.bincount(prep.op_launch[ops_here], minlength=len(prep.api_start))
    calls = np.flatnonzero(per_call).astype(np.int64)  # sorted, as np.unique, in O(n)
    nops = per_call[calls].astype(np.int64)
    canon = ctx.api_canon
    is_sync_name = np.array([n.endswith("Synchronize") for n in canon], dtype=bool)
    is_sync_copy = np.array([n in SYNC_COPY_NAMES for n in canon], dtype=bool)
    is_graph_name = np.array([n in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch") for n in canon], dtype=bool)
    api_pid = prep.api_pid
    syncs = np.flatnonzero((api_pid == pid) & is_sync_name[prep.api_name]) if len(canon) else np.zeros(0, np.int64)
    api = np.concatenate([calls, syncs]).astype(np.int64)
    order = np.argsort(prep.api_start[api], kind="stable")
    api = api[order]
    n_ops = np.concatenate([nops, np.zeros(len(syncs), dtype=np.int64)])[order]
    name = prep.api_name[api]
    # token: the API, the first op's name (on any device) and how many ops it launched
    first_pos = ctx.op_first[api]
    first_row = ctx.op_order[np.maximum(first_pos, 0)] if len(ctx.op_order) else np.zeros(len(api), np.int64)
    op_hash = np.where(first_pos >= 0, ctx.name_hash[prep.op_name[first_row]] if len(first_row) else 0, 0)
    with np.errstate(over="ignore"):
        token = ctx.api_hash[name] * np.uint64(0x9E3779B97F4A7C15) + op_hash.astype(np.uint64)
        token = token + n_ops.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    sync = is_sync_name[name] | (is_sync_copy[name] & (n_ops > 0))
    return _Events(api, prep.api_start[api], prep.api_end[api], token, sync, is_graph_name[name], n_ops)


def _active_periods(ctx: _Ctx, pid: int, device: int, quiet_ns: int) -> Ints:
    """Start times of the active periods (sorted); a period runs until the next start."""
    prep = ctx.prep
    ops = np.flatnonzero((prep.op_device == device) & (prep.op_pid == pid))
    api = np.flatnonzero(prep.api_pid == pid)
    starts = np.concatenate([prep.op_start[ops], prep.api_start[api]])
    ends = np.concatenate([prep.op_end[ops], prep.api_end[api]])
    if not len(starts):
        return np.zeros(1, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    cut = np.flatnonzero(s[1:] - e[:-1] >= quiet_ns) + 1
    return np.concatenate([[np.iinfo(np.int64).min], s[cut]]).astype(np.int64)


_R = np.uint64(0x100000001B3)  # odd: invertible modulo 2**64


def _prefix(token: U64) -> tuple[U64, U64]:
    """Prefix sums of token * R**j and the powers R**-j, so that a span's order-sensitive signature is
    (P[b] - P[a]) * R**-a (all modulo 2**64)."""
    n = len(token)
    inv = np.uint64(pow(int(_R), -1, 1 << 64))
    with np.errstate(over="ignore"):
        pw = np.cumprod(np.full(n, _R, dtype=np.uint64)) if n else np.zeros(0, np.uint64)
        one = np.ones(1, dtype=np.uint64)
        pw = np.concatenate([one, pw[:-1]]) if n else pw
        ipw = np.cumprod(np.full(n + 1, inv, dtype=np.uint64))
        ipw = np.concatenate([one, ipw[:-1]])
        pre = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(token * pw, dtype=np.uint64)])
    return pre.astype(np.uint64), ipw.astype(np.uint64)


def _sig(pre: U64, ipw: U64, a: Ints, b: Ints) -> U64:
    with np.errstate(over="ignore"):
        return (pre[b] - pre[a]) * ipw[a] + (b - a).astype(np.uint64) * np.uint64(0x94D049BB133111EB)


def _self_match(values: npt.NDArray[np.uint64], lag: int) -> float:
    if lag <= 0 or lag >= len(values):
        return 0.0
    return float(np.mean(values[:-lag] == values[lag:]))


def _boundary(gap: Ints, p: int) -> tuple[int, float]:
    """The phase (0..p-1) with the longest median host gap before it, and that median over the median of all gaps
    (how much more the host pauses there: a step boundary is where the host does its per-step work)."""
    usable = (len(gap) // p) * p
    if usable < p * 2:
        return 0, 0.0
    medians = np.median(gap[:usable].reshape(-1, p), axis=0)
    phase = int(np.argmax(medians))
    overall = max(float(np.median(gap[:usable])), 1.0)
    ratio = float(medians[phase]) / overall
    return phase, ratio if ratio >= BOUNDARY_RATIO else 1.0


def _pick(candidates: list[int], scores: list[float], gap: Ints, tolerance: float) -> tuple[int, int] | None:
    """Among lags that repeat nearly as well as the best, the one whose boundary gap stands out most (within 20%
    of the most, the smallest lag: multiples of the step repeat as well and pause at the same place)."""
    best = max(scores)
    near = [(q, _boundary(gap, q)) for q, sc in zip(candidates, scores, strict=True) if sc >= best - tolerance]
    if not near:
        return None
    top = max(r for _, (_, r) in near)
    q, (phase, _) = min((x for x in near if x[1][1] >= 0.8 * top), key=lambda x: x[0])
    return q, phase


def _group(seg_a: Ints, seg_b: Ints, seg_sig: U64, gap: Ints) -> tuple[Ints, Ints, int] | None:
    """Consecutive segments grouped q at a time (q: ``_pick`` over q = 1..MAX_GROUP), from the phase with the
    longest median host gap before a group; None when nothing repeats."""
    k = len(seg_a)
    if k < MIN_STEPS:
        return None
    lags = list(range(1, min(MAX_GROUP, k // MIN_STEPS) + 1))
    scores = [_self_match(seg_sig, q) for q in lags]
    if not scores or max(scores) < MATCH_MIN:
        return None
    if scores[0] >= max(scores) - 0.1:  # every segment is like the next: one per step
        q, phase = 1, 0
    else:
        picked = _pick(lags, scores, gap, 0.1)
        if picked is None:
            return None
        q, phase = picked
    if q == 1:
        phase = 0
    heads = np.arange(phase, k - q + 1, q)
    return seg_a[heads], seg_b[heads + q - 1], q


def _sequence_period(ev: _Events) -> tuple[Ints, Ints, int] | None:
    """Steps from the period of the launch sequence itself: candidate lags are the typical spacing of each token
    that recurs regularly; the period is the smallest lag at which the sequence matches itself about as well as at
    the best one; steps are cut before the token at the phase with the longest median host gap."""
    tok = ev.token
    n = len(tok)
    if n < 2 * MIN_STEPS:
        return None
    uniq, inv, counts = np.unique(tok, return_inverse=True, return_counts=True)
    order = np.argsort(inv, kind="stable")
    grouped = inv[order]
    diffs = np.diff(order)
    same = grouped[1:] == grouped[:-1]
    d, who = diffs[same], grouped[1:][same]
    if not len(d):
        return None
    # modal spacing per token: count (token, spacing) pairs
    pair = who.astype(np.int64) * (n + 1) + d
    pu, pc = np.unique(pair, return_counts=True)
    ptok, pd = pu // (n + 1), pu % (n + 1)
    best_of = np.lexsort((-pc, ptok))
    first = np.flatnonzero(np.concatenate([[True], ptok[best_of][1:] != ptok[best_of][:-1]]))
    pick = best_of[first]
    mode_tok, mode_d, mode_c = ptok[pick], pd[pick], pc[pick]
    regular = (counts[mode_tok] >= MIN_STEPS) & (mode_c >= 0.5 * (counts[mode_tok] - 1)) & (mode_d * MIN_STEPS <= n)
    lags = np.unique(mode_d[regular])
    if not len(lags):
        return None
    lags = lags[np.argsort(-np.bincount(np.searchsorted(lags, mode_d[regular])), kind="stable")][:32]
    cand = [int(p) for p in lags]
    scores = [_self_match(tok, p) for p in cand]
    if max(scores) < SEQ_MATCH_MIN:
        return None
    gap = np.concatenate([[0], ev.start[1:] - ev.end[:-1]])
    picked = _pick(cand, scores, gap, 0.05)
    if picked is None:
        return None
    p, phase = picked
    usable = (n // p) * p
    anchor = np.bincount(inv[phase:usable:p]).argmax()
    cuts = np.flatnonzero(inv == anchor)
    if abs(len(cuts) - n / p) > 0.1 * n / p:  # the token is not once per step: fixed-length windows
        cuts = np.arange(phase, n - p + 1, p)
    a = cuts[:-1] if len(cuts) > 1 else cuts
    b = cuts[1:] - 1 if len(cuts) > 1 else cuts + p - 1
    # the last step: as long as the typical one
    tail = cuts[-1] if len(cuts) > 1 else None
    if tail is not None and tail + p <= n:
        a, b = np.append(a, tail), np.append(b, tail + p - 1)
    return a.astype(np.int64), b.astype(np.int64), p


def _cut(ctx: _Ctx, ev: _Events, signal: str) -> tuple[Ints, Ints, str] | None:
    """Steps as [first event, last event] index pairs for one signal, or None."""
    n = len(ev.start)
    gap = np.concatenate([[0], ev.start[1:] - ev.end[:-1]])
    has_ops = ev.nops > 0
    if signal == SIGNAL_SYNC:
        marks = np.flatnonzero(ev.sync)
        if len(marks) < MIN_STEPS:
            return None
        work_before = np.concatenate([[0], np.cumsum(has_ops)])  # launches in [0, i)
        prev = np.concatenate([[-1], marks[:-1]])
        keep = work_before[marks + 1] - work_before[prev + 1] > 0  # a launch since the previous sync
        ends = marks[keep]
        starts = np.concatenate([[0], ends[:-1] + 1])
        # drop the syncs with nothing in front of them from each segment's start
        if not len(ends):
            return None
        pre, ipw = _prefix(ev.token)
        grouped = _group(starts, ends, _sig(pre, ipw, starts, ends + 1), gap[starts])
        if grouped is None:
            return None
        a, b, q = grouped
        names = {canonical_api_name(n) for n in _names_at(ctx, ev, ends)}
        return a, b, f"{signal} ({', '.join(sorted(names))}{f', {q} per step' if q > 1 else ''})"
    if signal == SIGNAL_GRAPH:
        marks = np.flatnonzero(ev.graph & has_ops)
        if len(marks) < MIN_STEPS:
            return None
        starts = marks
        ends = np.concatenate([marks[1:] - 1, [n - 1]])
        pre, ipw = _prefix(ev.token)
        sig = _sig(pre, ipw, starts, ends + 1)
        if len(marks) > 1:  # the last segment runs to the period's end: compare as long as the one before
            length = ends[-2] - starts[-2]
            if starts[-1] + length < n:
                ends[-1] = starts[-1] + length
                sig[-1] = _sig(pre, ipw, starts[-1:], ends[-1:] + 1)[0]
        grouped = _group(starts, ends, sig, gap[starts])
        if grouped is None:
            return None
        a, b, q = grouped
        names = {canonical_api_name(n) for n in _names_at(ctx, ev, a)}
        return a, b, f"{signal} ({', '.join(sorted(names))}, {q} per step)"
    found = _sequence_period(ev)
    if found is None:
        return None
    a, b, p = found
    return a, b, f"{signal} (period {p} calls)"


def _names_at(ctx: _Ctx, ev: _Events, idx: Ints) -> list[str]:
    codes = np.unique(ctx.prep.api_name[ev.api[idx]])
    return [ctx.prep.api_names[int(c)] for c in codes]


def _structure_steps(ctx: _Ctx, quiet_ns: int) -> tuple[list[_Raw], int]:
    """Per process, device and active period: the signals in turn (sync, graph launch, launch sequence), each on the
    stretches of calls the ones before left uncovered; the period's steps stand when they hold at least
    ``MIN_COVERAGE`` of its launched ops."""
    prep = ctx.prep
    out: list[_Raw] = []
    periods = 0
    for pid, device in _pid_devices(prep):
        ev_all = _events(ctx, pid, device)
        if not len(ev_all.start):
            continue
        bounds = _active_periods(ctx, pid, device, quiet_ns)
        which = np.searchsorted(bounds, ev_all.start, side="right") - 1
        cuts = np.flatnonzero(np.concatenate([[True], which[1:] != which[:-1], [True]]))
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            periods += 1
            launched_ops = int(ev_all.nops[lo:hi].sum())
            if not launched_ops:
                continue
            found: list[_Raw] = []
            runs = [(lo, hi)]
            for signal in (SIGNAL_SYNC, SIGNAL_GRAPH, SIGNAL_SEQUENCE):
                left = []
                for r_lo, r_hi in runs:
                    kept = _signal_steps(ctx, ev_all, r_lo, r_hi, pid, device, signal, periods)
                    if not kept:
                        left.append((r_lo, r_hi))
                        continue
                    found += kept
                    edges = [r_lo, *(x for k in kept for x in (k.ev_lo, k.ev_hi)), r_hi]
                    left += [(x, y) for x, y in zip(edges[::2], edges[1::2], strict=True) if y - x >= 2 * MIN_STEPS]
                runs = left
            covered = sum(len(r.rows) for r in found)
            if len(found) >= MIN_STEPS and covered >= MIN_COVERAGE * launched_ops:
                out += found
    return out, periods


def _signal_steps(
    ctx: _Ctx, ev_all: _Events, lo: int, hi: int, pid: int, device: int, signal: str, period: int
) -> list[_Raw]:
    ev = _slice(ev_all, lo, hi)
    found = _cut(ctx, ev, signal)
    if found is None:
        return []
    a, b, detail = found
    kept = _repeating(_raws(ctx, ev, a, b, pid, device, signal, detail, period, offset=lo))
    return kept if len(kept) >= MIN_STEPS else []


def _pid_devices(prep: Prepared) -> list[tuple[int, int]]:
    key = prep.op_pid * 4096 + prep.op_device
    return [(int(k // 4096), int(k % 4096)) for k in np.unique(key)]


def _slice(ev: _Events, lo: int, hi: int) -> _Events:
    return _Events(
        ev.api[lo:hi], ev.start[lo:hi], ev.end[lo:hi], ev.token[lo:hi], ev.sync[lo:hi], ev.graph[lo:hi],
        ev.nops[lo:hi],
    )  # fmt: skip


def _raws(
    ctx: _Ctx,
    ev: _Events,
    a: Ints,
    b: Ints,
    pid: int,
    device: int,
    signal: str,
    detail: str,
    period: int,
    offset: int = 0,
) -> list[_Raw]:
    prep = ctx.prep
    pre, ipw = _prefix(ev.token)
    sigs = _sig(pre, ipw, a, b + 1)
    out = []
    for lo, hi, sig in zip(a.tolist(), b.tolist(), sigs.tolist(), strict=True):
        calls = ev.api[lo : hi + 1]
        calls = calls[ev.nops[lo : hi + 1] > 0]
        if not len(calls):
            continue
        rows = _rows_of(ctx, calls, device)
        if len(rows) < MIN_OPS or not np.any(prep.op_kind[rows] == 0):  # a lone copy or set is no step
            continue
        out.append(
            _Raw(
                device=device,
                pid=pid,
                tid=int(prep.api_tid[calls[0]]),
                rows=rows,
                host_start=int(ev.start[lo]),
                host_end=int(ev.end[hi]),
                signal=signal,
                key=_multiset(ctx, rows),
                period=period,
                detail=detail,
                sequence=int(sig),
                ev_lo=offset + lo,
                ev_hi=offset + hi + 1,
            )
        )
    return out


def _rows_of(ctx: _Ctx, calls: Ints, device: int) -> Ints:
    first = ctx.op_first[calls]
    count = ctx.op_count[calls]
    ok = first >= 0
    first, count = first[ok], count[ok]
    if not len(first):
        return np.zeros(0, dtype=np.int64)
    total = int(count.sum())
    offsets = np.repeat(first - np.concatenate([[0], np.cumsum(count)[:-1]]), count)
    rows = ctx.op_order[np.arange(total) + offsets]
    rows = rows[ctx.prep.op_device[rows] == device]
    return np.sort(rows)


def _repeating(raws: list[_Raw]) -> list[_Raw]:
    """Steps whose exact launch sequence occurs at least twice."""
    counts: dict[int, int] = {}
    for r in raws:
        counts[r.sequence] = counts.get(r.sequence, 0) + 1
    return [r for r in raws if counts[r.sequence] >= 2]


def _multiset(ctx: _Ctx, rows: Ints) -> str:
    """A kind key: which ops (by name and kind) a step ran, in any order, and whether graphs replayed them."""
    prep = ctx.prep
    with np.errstate(over="ignore"):
        h = ctx.name_hash[prep.op_name[rows]] + prep.op_kind[rows].astype(np.uint64) * np.uint64(0x2545F4914F6CDD1D)
        total = int(np.sum(h, dtype=np.uint64))
    graph = _graph_kernels(prep, rows) > 0
    return f"{total:016x}{len(rows):06d}{'g' if graph else 'e'}"


# --- owned periods, kinds -----------------------------------------------------------------------------------------


def _finish(ctx: _Ctx, raws: list[_Raw], mode: str) -> tuple[list[Step], list[StepKind]]:
    prep = ctx.prep
    steps: list[Step] = []
    raws = sorted(raws, key=lambda r: (r.device, int(prep.op_end[r.rows].max())))
    by_device: dict[int, list[_Raw]] = {}
    for r in raws:
        by_device.setdefault(r.device, []).append(r)
    kinds: list[StepKind] = []
    for device, group in by_device.items():
        ends = [int(prep.op_end[r.rows].max()) for r in group]
        starts = [int(prep.op_start[r.rows].min()) for r in group]
        prev_end: dict[tuple[int, str], int] = {}
        built: list[Step] = []
        for r, end, start in zip(group, ends, starts, strict=True):
            # annotated steps of different engines' streams own time only from their own previous step
            chain = (r.pid, r.signal) if mode != "annotations" else (r.pid, r.signal)
            key = (r.period, chain[1]) if mode != "annotations" else (r.pid, "")
            before = prev_end.get(key)
            own_start = before if before is not None and before <= start else start
            if before is not None and before > start:  # overlapping steps (host-ordered annotations)
                own_start = min(start, before)
            prev_end[key] = end
            rows = r.rows
            kind_codes = prep.op_kind[rows]
            graph = _graph_kernels(prep, rows)
            last = rows[int(np.argmax(prep.op_end[rows]))]
            first = rows[int(np.argmin(prep.op_start[rows]))]
            launches = np.unique(prep.op_launch[rows])
            built.append(
                Step(
                    index=len(built),
                    device=device,
                    pid=r.pid,
                    tid=r.tid,
                    start_ns=own_start,
                    end_ns=end,
                    gpu_start_ns=start,
                    first_op=int(first),
                    last_op=int(last),
                    host_start_ns=r.host_start,
                    host_end_ns=r.host_end,
                    signal=r.signal,
                    kind=r.key,
                    ops=len(rows),
                    kernels=int(np.count_nonzero(kind_codes == 0)),
                    launches=int(np.count_nonzero(launches >= 0)),
                    graph_kernels=graph,
                    rows=rows,
                    name=r.name,
                    batch=r.marker.batch if r.marker else None,
                    tokens=r.marker.tokens if r.marker else None,
                )
            )
        group = _merge_kinds(prep, group)
        built = [_with_kind(st, r.key) for st, r in zip(built, group, strict=True)]
        details = {r.key: r.detail for r in group}
        markers = {r.key: r.marker for r in group}
        dev_steps, dev_kinds = _kinds(prep, built, details, markers, device)
        steps += dev_steps
        kinds += dev_kinds
    return steps, kinds


MERGE_SHARE = 0.1  # kinds with as many ops whose op names differ in at most this share of them are one kind


def _merge_kinds(prep: Prepared, group: list[_Raw]) -> list[_Raw]:
    """One kind for steps that run as many ops, replayed the same way, with at most ``MERGE_SHARE`` of their op
    names different (attention kernels that change with the context length, for one)."""
    reps: dict[str, _Raw] = {}
    counts: dict[str, int] = {}
    for r in group:
        counts[r.key] = counts.get(r.key, 0) + 1
        reps.setdefault(r.key, r)
    names: dict[str, Counter[int]] = {k: Counter(prep.op_name[r.rows].tolist()) for k, r in reps.items()}
    target: dict[str, str] = {}
    clusters: list[str] = []
    for key in sorted(reps, key=lambda k: -counts[k]):
        r = reps[key]
        for head in clusters:
            h = reps[head]
            same_shape = len(h.rows) == len(r.rows) and h.key[-1] == r.key[-1] and h.marker == r.marker
            if same_shape and sum((names[head] - names[key]).values()) <= MERGE_SHARE * len(r.rows):
                target[key] = head
                break
        else:
            clusters.append(key)
            target[key] = key
    return [r if target[r.key] == r.key else replace(r, key=target[r.key]) for r in group]


def _with_kind(step: Step, key: str) -> Step:
    return step if step.kind == key else replace(step, kind=key)


def _graph_kernels(prep: Prepared, rows: Ints) -> int:
    calls = prep.op_launch[rows]
    ok = (calls >= 0) & (prep.op_kind[rows] == 0)
    if not ok.any():
        return 0
    return int(np.count_nonzero(_GRAPH_CODES(prep)[prep.api_name[calls[ok]]]))


def _GRAPH_CODES(prep: Prepared) -> npt.NDArray[np.bool_]:  # noqa: N802
    return np.array(
        [canonical_api_name(n) in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch") for n in prep.api_names],
        dtype=bool,
    )


@dataclass
class _KindStats:
    key: str
    typical: list[int]  # positions in the device's steps
    outlier: list[int]
    span: int
    busy: int
    ops: int
    kernels: int
    graph_share: float


def _kinds(
    prep: Prepared,
    steps: list[Step],
    details: dict[str, str],
    markers: dict[str, Marker | None],
    device: int,
) -> tuple[list[Step], list[StepKind]]:
    members: dict[str, list[int]] = {}
    for i, st in enumerate(steps):
        members.setdefault(st.kind, []).append(i)
    stats: list[_KindStats] = []
    for key, idx in members.items():
        spans = np.array([steps[i].span_ns for i in idx], dtype=np.int64)
        med = percentile(spans, 50)
        outlier = [i for i in idx if len(idx) >= MIN_STEPS and steps[i].span_ns > OUTLIER_FACTOR * med]
        typical = [i for i in idx if i not in set(outlier)]
        busy = np.array([_union(prep.op_start[steps[i].rows], prep.op_end[steps[i].rows]) for i in typical])
        ops = np.array([steps[i].ops for i in typical], dtype=np.int64)
        kernels = np.array([steps[i].kernels for i in typical], dtype=np.int64)
        graph = sum(steps[i].graph_kernels for i in typical)
        stats.append(
            _KindStats(
                key=key,
                typical=typical,
                outlier=outlier,
                span=percentile(np.array([steps[i].span_ns for i in typical], dtype=np.int64), 50),
                busy=percentile(busy.astype(np.int64), 50),
                ops=int(np.bincount(ops).argmax()),
                kernels=int(np.bincount(kernels).argmax()),
                graph_share=graph / max(int(kernels.sum()), 1),
            )
        )
    stats.sort(key=lambda k: -len(k.typical))
    dominant = stats[0] if stats else None
    out_kinds = []
    labels_seen: dict[str, int] = {}
    for k in stats:
        marker = markers.get(k.key)
        g = k.graph_share
        mode = "graph replay" if g >= 0.9 else "eager" if g == 0 else "mixed graph/eager"
        phase = marker.label if marker is not None else _phase_guess(k, dominant, stats)
        label = f"{phase}, {mode}, {k.ops} ops"
        labels_seen[label] = labels_seen.get(label, 0) + 1
        if labels_seen[label] > 1:
            label = f"{label} ({labels_seen[label]})"
        out_kinds.append(
            StepKind(
                key=k.key,
                label=label,
                device=device,
                detected_by=details.get(k.key) or SIGNAL_ANNOTATION,
                instances=len(k.typical),
                outliers=tuple(steps[i].index for i in k.outlier),
                ops=k.ops,
                kernels=k.kernels,
                span_p50_ns=k.span,
                busy_p50_ns=k.busy,
            )
        )
    outliers = {i for k in stats for i in k.outlier}
    final = [replace(st, outlier=True) if i in outliers else st for i, st in enumerate(steps)]
    return final, out_kinds


def _phase_guess(k: _KindStats, dominant: _KindStats | None, stats: list[_KindStats]) -> str:
    """prefill: a rarer kind doing much more GPU work than the commonest one with about as many kernels (more
    tokens through the same model); the commonest kind is then decode. Otherwise just "step"."""

    def is_prefill(x: _KindStats) -> bool:
        if dominant is None or x is dominant:
            return False
        return (
            len(x.typical) * 2 <= len(dominant.typical)
            and x.busy >= 1.5 * dominant.busy
            and abs(x.kernels - dominant.kernels) <= 0.25 * max(dominant.kernels, 1)
        )

    if is_prefill(k):
        return "prefill"
    if k is dominant and any(is_prefill(x) for x in stats):
        return "decode"
    return "step"


# --- entry point --------------------------------------------------------------------------------------------------


def detect_steps(
    timeline: Timeline,
    mode: str = "default",
    *,
    prep: Prepared | None = None,
    options: AnalysisOptions | None = None,
    quiet_ns: int = QUIET_NS,
) -> StepResult:
    """Steps of the trace. ``mode``: ``annotations`` (engine step markers only), ``auto`` (structure only: markers
    ignored), ``default`` (markers when the trace has them, else structure), ``off``."""
    if mode == "off":
        return StepResult("none", [], [], "step detection off")
    if prep is None:
        prep = prepare(timeline, options or AnalysisOptions())
    ctx = _context(timeline, prep)
    wanted = set(prep.devices)
    if mode in ("annotations", "default"):
        raws = [r for r in _annotation_steps(ctx) if r.device in wanted]
        if raws:
            steps, kinds = _finish(ctx, raws, "annotations")
            engines = sorted({r.marker.engine for r in raws if r.marker})
            return StepResult("annotations", steps, kinds, f"engine step markers ({', '.join(engines)})")
        if mode == "annotations":
            return StepResult("none", [], [], "no engine step markers in the trace")
    raws_s, periods = _structure_steps(ctx, quiet_ns)
    raws_s = [r for r in raws_s if r.device in wanted]
    if not raws_s:
        return StepResult("none", [], [], NO_STEPS, periods)
    steps, kinds = _finish(ctx, raws_s, "structure")
    signals = sorted({k.detected_by for k in kinds})
    return StepResult("structure", steps, kinds, f"found from the trace's structure: {'; '.join(signals)}", periods)
