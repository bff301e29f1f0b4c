"""Steps of a trace: the iterations of a decode (or training) loop, found from engines' step markers or from the
trace's own structure, and sorted into kinds (docs/analysis.md, "Steps").

Pure functions of a Timeline (numpy; per-step work is vectorised across steps). Two sources:

- ``annotations``: step ranges of known engines recognised by name (vLLM ``execute_context_<n>(<t>)_generation_<m>
  (<t>)`` and ``execute_new_<n>_cached_<m>``, SGLang ``step[DECODE bs=<n>]`` / ``step[EXTEND bs=<n> toks=<m>]`` /
  ``step[MIXED ...]``, TensorRT-LLM ``[Executor] _forward_step <i>: <n> ctx reqs, <m> gen reqs``, PyTorch
  ``ProfilerStep#<n>``); a step's work is the GPU ops launched inside the range from any thread of its process.
- ``structure``: per process and device, the work is split into active periods at quiet stretches (no GPU op
  running and no API call of the process for ``quiet_ns``), and each period into iterations by the first signal
  that repeats: the host synchronisation that ends a step (a blocking sync or synchronous device-to-host copy,
  not one waiting for an upload), one (or a fixed number of) graph launch(es) per step, or the period of the
  launch sequence itself (kernel names and API calls). A signal is used only when at least ``MIN_STEPS``
  iterations running the same ops cover at least half of the period's work; otherwise the period has no steps ("no
  repeating steps found"). Uncovered calls next to a step that repeat its launch sequence exactly are a step too (a
  warm-up step stalled across a quiet stretch), and so, at the capture's start or end, are the calls that begin or
  end its sequence (a step cut short).

A step owns the GPU time from the end of the previous step's work (same process and device, same active period)
to the end of its own work; the first step of a period owns from its own first op. Steps running the same ops (up
to ``MERGE_SHARE`` of them) are one kind, split where their GPU busy times fall into groups ``BUSY_SPLIT`` apart
(batch buckets); kinds that never run ``MIN_STEPS`` times in a row and sit next to no such kind of about as many
kernels are a call's setup, not steps. A kind's steps slower than ``OUTLIER_FACTOR`` times its median, and steps
cut short by the capture, are kept out of its statistics and listed.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from launchprobe.analysis.windows import AnalysisOptions, Prepared, prepare
from launchprobe.collect.api_names import canonical_api_name
from launchprobe.timeline import Timeline

Ints = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]
T = TypeVar("T")

MIN_STEPS = 3  # fewer iterations than this are not a loop
MIN_OPS = 4  # a step runs at least this many GPU ops, one a kernel
QUIET_NS = 100_000_000  # 100 ms without GPU work or API calls splits active periods
MIN_COVERAGE = 0.5  # the steps must hold at least this share of the period's launched ops
MAX_GROUP = 16  # at most this many sync / graph segments per step
MATCH_MIN = 0.5  # a grouping of segments must repeat at least this often (lag self-match)
SEQ_MATCH_MIN = 0.75  # the launch sequence must match itself at the step period at least this often
BOUNDARY_RATIO = 2.0  # a step boundary: the host's median gap there is at least this times its median gap
OUTLIER_FACTOR = 3.0  # a step slower than this times its kind's median span is warm-up / compilation
MERGE_SHARE = 0.1  # kinds whose op names differ in at most this share of their ops are one kind
BUSY_SPLIT = 0.05  # a kind whose steps' GPU busy times fall into groups this far apart is one kind per group
LIKE_KERNELS = 0.25  # "about as many kernels": within this share
MODES = ("auto", "annotations", "off")

SIGNAL_ANNOTATION = "annotation"
SIGNAL_SYNC = "host sync"
SIGNAL_GRAPH = "graph launch"
SIGNAL_SEQUENCE = "repeating launch sequence"
SIGNALS = (SIGNAL_SYNC, SIGNAL_GRAPH, SIGNAL_SEQUENCE)
NO_STEPS = "no repeating steps found"

SYNC_COPY_NAMES = frozenset({"cudaMemcpy", "cuMemcpyDtoH", "cuMemcpy", "hipMemcpy", "hipMemcpyDtoH"})
GRAPH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
_UPLOAD = re.compile(r"\bHtoD\b")  # a copy op's name: "Memcpy HtoD", "Memcpy HtoD (Pageable -> Device)"
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_KIND_MIX = np.uint64(0x2545F4914F6CDD1D)

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

    index: int  # in end order over the device's steps
    device: int
    pid: int
    tid: int | None
    start_ns: int  # the period the step owns: from the end of the previous step's work...
    end_ns: int  # ...to the end of its own work
    gpu_start_ns: int  # its own first op's start
    first_op: int  # gpu_ops rows of its first op (by start) and last op (by end)
    last_op: int
    host_start_ns: int  # its first host call (or the range's start)
    host_end_ns: int  # its last host call's end (or the range's end)
    signal: str  # what cut it: annotation | host sync | graph launch | repeating launch sequence
    kind: str  # key of its kind (StepKind.key)
    ops: int
    kernels: int
    launches: int  # launch calls (kernel, graph, copy, set) that launched its ops
    graph_kernels: int  # kernels replayed from a graph
    busy_ns: int  # union of its own ops' intervals
    rows: Ints = field(repr=False, compare=False)  # its gpu_ops rows, in launch order
    name: str | None = None  # the range's name (annotations)
    batch: int | None = None
    tokens: int | None = None
    outlier: bool = False  # warm-up / compilation, or cut short: kept out of its kind's statistics
    truncated: bool = False  # cut short by the capture's start or end

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
    outliers: tuple[int, ...]  # indices (Step.index) of its warm-up / compilation / cut-short steps
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


def _cumsum0(values: npt.NDArray[np.generic]) -> Ints:
    """Prefix sums with a leading 0: the sum over [a, b) is out[b] - out[a]."""
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, dtype=np.int64, out=out[1:])
    return out


def _hashsum0(values: U64) -> U64:
    """``_cumsum0`` of hashes, wrapping modulo 2**64."""
    out = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values, dtype=np.uint64, out=out[1:])
    return out


def _ordered(major: Ints, minor: Ints) -> bool:
    """Whether (major, minor) pairs are already in lexicographic order."""
    if len(major) < 2:
        return True
    dm = np.diff(major)
    return bool(np.all((dm > 0) | ((dm == 0) & (np.diff(minor) >= 0))))


@dataclass
class _Ctx:
    timeline: Timeline
    prep: Prepared
    api_hash: U64  # per api name code (its canonical name)
    api_canon: list[str]
    is_sync: Bools  # per api name code: a blocking sync (...Synchronize)
    is_sync_copy: Bools  # a synchronous copy
    is_upload: Bools  # per op name code: a host-to-device copy
    is_graph: Bools  # a graph launch
    name_hash: U64  # per op name code
    op_hash: U64  # per op: its name and kind (a step's kind key sums them)
    graph_kernel: Bools  # per op: a kernel replayed by a graph launch
    pid_devices: list[tuple[int, int]]  # (process, device) pairs with GPU ops


def _context(timeline: Timeline, prep: Prepared) -> _Ctx:
    canon = [canonical_api_name(n) for n in prep.api_names]
    is_graph = np.array([n in GRAPH_NAMES for n in canon], dtype=bool)
    name_hash = _hash_names(prep.op_names, "op:")
    with np.errstate(over="ignore"):
        op_hash = name_hash[prep.op_name] + prep.op_kind.astype(np.uint64) * _KIND_MIX
    launch = prep.op_launch
    if len(prep.api_name):  # -1 (no launch call) wraps to some call, masked below
        graph_call = np.take(is_graph[prep.api_name], launch, mode="wrap") & (launch >= 0)
    else:
        graph_call = np.zeros(len(launch), dtype=bool)
    return _Ctx(
        timeline=timeline,
        prep=prep,
        api_hash=_hash_names(canon, "api:"),
        api_canon=canon,
        is_sync=np.array([n.endswith("Synchronize") for n in canon], dtype=bool),
        is_sync_copy=np.array([n in SYNC_COPY_NAMES for n in canon], dtype=bool),
        is_upload=np.array([_UPLOAD.search(n) is not None for n in prep.op_names], dtype=bool),
        is_graph=is_graph,
        name_hash=name_hash,
        op_hash=op_hash.astype(np.uint64),
        graph_kernel=graph_call & (prep.op_kind == 0),
        pid_devices=_pid_devices(prep),
    )


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
    key: str  # kind key (op multiset, or marker label)
    period: int  # active period number (steps own time only within one)
    name: str | None = None
    marker: Marker | None = None
    detail: str = ""
    truncated: bool = False
    kernels: int = 0  # structure: counted from its calls; annotations: below
    launches: int = 0
    graph_kernels: int = 0
    # filled in for all steps at once (_with_stats)
    gpu_start: int = 0
    gpu_end: int = 0
    first_op: int = -1
    last_op: int = -1
    busy: int = 0
    ops_hash: int = 0  # sum of its ops' hashes: equal for steps running the same ops, in any order


def _multiset_key(ops_hash: int, ops: int, graph: bool) -> str:
    return f"{ops_hash:016x}{ops:06d}{'g' if graph else 'e'}"


def _with_stats(ctx: _Ctx, raws: list[_Raw], *, hashes: bool, counted: bool) -> list[_Raw]:
    """Each step's first and last op, busy time, and (unless ``counted``) kernels, launch calls and graph kernels,
    and (``hashes``) op hash, computed for all steps in one pass (reductions over their rows laid end to end)."""
    if not raws:
        return raws
    prep = ctx.prep
    lens = np.array([len(r.rows) for r in raws], dtype=np.int64)
    rows = np.concatenate([r.rows for r in raws])
    heads = _cumsum0(lens)[:-1]
    seg = np.repeat(np.arange(len(raws)), lens)
    s, e = prep.op_start[rows], prep.op_end[rows]
    g_start, g_end = np.minimum.reduceat(s, heads), np.maximum.reduceat(e, heads)
    pos = np.arange(len(rows))
    first = rows[np.minimum.reduceat(np.where(s == g_start[seg], pos, len(rows)), heads)]
    last = rows[np.maximum.reduceat(np.where(e == g_end[seg], pos, -1), heads)]
    if counted:
        kernels, launches, graph = (np.array(x) for x in zip(*((r.kernels, r.launches, r.graph_kernels) for r in raws)))
    else:
        kernels = np.add.reduceat((prep.op_kind[rows] == 0).astype(np.int64), heads)
        graph = np.add.reduceat(ctx.graph_kernel[rows].astype(np.int64), heads)
        call = prep.op_launch[rows]
        new_call = np.ones(len(rows), dtype=bool)
        np.not_equal(call[1:], call[:-1], out=new_call[1:])
        new_call[heads] = True
        launches = np.add.reduceat((new_call & (call >= 0)).astype(np.int64), heads)
    ops_hash = np.add.reduceat(ctx.op_hash[rows], heads) if hashes else np.zeros(len(raws), dtype=np.uint64)
    devices = {r.device for r in raws}
    alone = _busy_alone(prep, devices.pop(), g_start, g_end, lens) if len(devices) == 1 else None
    busy = alone if alone is not None else _busy(s, e, seg, heads, g_start, g_end)
    columns = (g_start, g_end, first, last, kernels, launches, graph, busy, ops_hash)
    for r, values in zip(raws, zip(*(c.tolist() for c in columns), strict=True), strict=True):
        (r.gpu_start, r.gpu_end, r.first_op, r.last_op, r.kernels, r.launches, r.graph_kernels, r.busy,
         r.ops_hash) = values  # fmt: skip
    return raws


def _busy_alone(prep: Prepared, device: int, lo: Ints, hi: Ints, lens: Ints) -> Ints | None:
    """Busy time of each step from its device's idle stretches, where every step's ops are all the device's ops
    inside its GPU span (a one-stream loop): the span minus the idle in it. None otherwise."""
    dev = prep.devices.get(device)
    if dev is None or not len(dev.idle_start):
        return None
    inside = np.searchsorted(dev.starts, hi, side="left") - np.searchsorted(dev.max_end, lo, side="right")
    if not np.array_equal(inside, lens):
        return None
    length = dev.idle_end - dev.idle_start
    length[0] = length[-1] = 0  # the unbounded stretches before the first op and after the last
    total = _cumsum0(length)
    first = np.searchsorted(dev.idle_end, lo, side="right")
    last = np.searchsorted(dev.idle_start, hi, side="left") - 1  # the stretches [first, last] meet the span
    n = len(dev.idle_start)

    def clipped(i: Ints) -> Ints:
        j = np.clip(i, 0, n - 1)
        return np.maximum(np.minimum(dev.idle_end[j], hi) - np.maximum(dev.idle_start[j], lo), 0)

    idle = np.where(last > first, total[np.maximum(last, 0)] - total[np.minimum(first + 1, n)] + clipped(last), 0)
    idle = np.where(last >= first, idle + clipped(first), 0)
    return (hi - lo) - idle


def _busy(s: Ints, e: Ints, seg: Ints, heads: Ints, g_start: Ints, g_end: Ints) -> Ints:
    """Per segment, the length of the union of its intervals: one running max over all segments, each shifted
    past the ones before it so that none reaches into the next."""
    if not _ordered(seg, s):
        order = np.lexsort((s, seg))
        s, e = s[order], e[order]
    k = len(heads)
    width = int((g_end - g_start).max()) + 1
    if (k + 1) * width >= 1 << 62:  # too wide to shift: one segment at a time
        bounds = [*heads.tolist(), len(s)]
        return np.array([_union(s[a:b], e[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    shift = seg * width - g_start[seg]
    s2, e2 = s + shift, e + shift
    reach = np.maximum.accumulate(e2)
    before = np.empty_like(reach)
    before[1:] = reach[:-1]
    before[heads] = s2[heads]
    return np.add.reduceat(np.maximum(e2 - np.maximum(s2, before), 0), heads)


def _union(starts: Ints, ends: Ints) -> int:
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    gaps = np.maximum(s[1:] - e[:-1], 0)
    return int(e[-1] - s[0] - gaps.sum())


# --- annotations --------------------------------------------------------------------------------------------------


def _marker_ranges(timeline: Timeline) -> list[tuple[int, Marker]]:
    names = timeline.ranges["name"].astype(str)
    parsed = {n: parse_marker(n) for n in names.unique()}
    return [(i, m) for i, n in enumerate(names) if (m := parsed[n]) is not None]


def has_markers(timeline: Timeline) -> bool:
    names = timeline.ranges["name"].astype(str).unique()
    return any(parse_marker(n) is not None for n in names)


def _annotation_steps(ctx: _Ctx, wanted: set[int]) -> list[_Raw]:
    prep, ranges = ctx.prep, ctx.timeline.ranges
    found = _marker_ranges(ctx.timeline)
    if not found:
        return []
    launched = np.flatnonzero(prep.op_launch >= 0)
    calls = prep.op_launch[launched]
    key_pid = prep.api_pid[calls]
    key_start = prep.api_start[calls]
    order = np.lexsort((calls, key_start, key_pid))  # each call's ops together
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
        rows = rows_sorted[a:b]
        if not len(rows):
            continue
        devices = prep.op_device[rows]
        for dev in np.unique(devices):
            if int(dev) not in wanted:
                continue
            out.append(
                _Raw(
                    device=int(dev),
                    pid=pid,
                    tid=int(rtid[i]),
                    rows=rows[devices == dev],
                    host_start=int(rstart[i]),
                    host_end=int(rend[i]),
                    signal=SIGNAL_ANNOTATION,
                    key=f"{marker.label}|{marker.engine}",
                    period=0,
                    name=str(names[i]),
                    marker=marker,
                )
            )
    return out


def _annotation_keys(raws: list[_Raw]) -> list[_Raw]:
    """Engines' labels are their kinds; ``ProfilerStep#<n>`` says nothing of its work, so its kind is its ops."""
    return [
        replace(r, key=f"{r.key}|{_multiset_key(r.ops_hash, len(r.rows), r.graph_kernels > 0)}")
        if r.marker is not None and r.marker.engine == "torch"
        else r
        for r in raws
    ]


# --- structure ----------------------------------------------------------------------------------------------------


@dataclass
class _Events:
    """The host calls of one process that matter to its steps on one device, in start order, with the device's ops
    each one launched."""

    api: Ints  # api row
    start: Ints
    end: Ints
    token: U64  # API name, first op's name, op count
    sync: Bools  # blocking sync or synchronous device-to-host copy
    graph: Bools
    nops: Ints  # ops on this device
    off: Ints  # call i launched ops[off[i]:off[i + 1]] (one entry more than calls)
    ops: Ints  # op rows in call order (each call's by start); shared by slices, as are the sums below
    kernels: Ints  # prefix sums over ops: kernels...
    graph_kernels: Ints  # ...kernels replayed from graphs...
    hashes: U64  # ...and op hashes


def _events(ctx: _Ctx, pid: int, device: int) -> _Events:
    prep = ctx.prep
    alone = len(ctx.pid_devices) == 1
    mine = prep.op_launch >= 0
    if not alone:
        mine &= (prep.op_device == device) & (prep.op_pid == pid)
    every = alone and bool(mine.all())  # every op, in row order so far: views, no gathers

    def of(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return values if every else values[here]

    here = np.arange(len(mine), dtype=np.int64) if every else np.flatnonzero(mine)
    n_api = len(prep.api_start)
    launch = of(prep.op_launch)
    per_call = np.bincount(launch, minlength=n_api)
    calls = np.flatnonzero(per_call)  # sorted, as np.unique, in O(n)
    sync_call = ctx.is_sync[prep.api_name] if alone else (prep.api_pid == pid) & ctx.is_sync[prep.api_name]
    syncs = np.flatnonzero(sync_call) if n_api else calls[:0]
    api = np.concatenate([calls, syncs]).astype(np.int64)
    api = api[np.argsort(prep.api_start[api], kind="stable")]  # two sorted runs: a merge
    nops = per_call[api].astype(np.int64)
    where = np.empty(n_api, dtype=np.int64)  # each call's place in the list
    where[api] = np.arange(len(api))
    if not _ordered(where[launch], of(prep.op_start)):
        here = here[np.lexsort((of(prep.op_start), where[launch]))]
        every = False
    off = _cumsum0(nops)
    name = prep.api_name[api]
    has = nops > 0
    first = here[np.minimum(off[:-1], max(len(here) - 1, 0))] if len(here) else np.zeros(len(api), np.int64)
    op_hash = np.where(has, ctx.name_hash[prep.op_name[first]] if len(here) else 0, 0).astype(np.uint64)
    with np.errstate(over="ignore"):
        token = ctx.api_hash[name] * _MIX[0] + op_hash + nops.astype(np.uint64) * _MIX[1]
    upload = has & ctx.is_upload[prep.op_name[first]] & (prep.op_kind[first] == 1) if len(here) else has
    after_upload = np.zeros(len(api), dtype=bool)  # a sync that waits for an upload reads nothing back
    after_upload[1:] = upload[:-1]
    return _Events(
        api=api,
        start=prep.api_start[api],
        end=prep.api_end[api],
        token=token,
        sync=(ctx.is_sync[name] & ~after_upload) | (ctx.is_sync_copy[name] & has & ~upload),
        graph=ctx.is_graph[name],
        nops=nops,
        off=off,
        ops=here,
        kernels=_cumsum0(of(prep.op_kind) == 0),
        graph_kernels=_cumsum0(of(ctx.graph_kernel)),
        hashes=_hashsum0(of(ctx.op_hash)),
    )


def _slice(ev: _Events, lo: int, hi: int) -> _Events:
    return replace(
        ev, api=ev.api[lo:hi], start=ev.start[lo:hi], end=ev.end[lo:hi], token=ev.token[lo:hi], sync=ev.sync[lo:hi],
        graph=ev.graph[lo:hi], nops=ev.nops[lo:hi], off=ev.off[lo : hi + 1],
    )  # fmt: skip


_FAR = np.iinfo(np.int64).max


def _quiet(starts: Ints, reach: Ints, quiet_ns: int) -> tuple[Ints, Ints]:
    """The stretches of at least ``quiet_ns`` with none of the intervals running, unbounded ones included
    (``starts`` sorted, ``reach`` the running max of their ends)."""
    if not len(starts):
        return np.array([-_FAR]), np.array([_FAR])
    gap = np.flatnonzero(starts[1:] - reach[:-1] >= quiet_ns)
    return (
        np.concatenate([[-_FAR], reach[gap], reach[-1:]]),
        np.concatenate([starts[:1], starts[gap + 1], [_FAR]]),
    )


def _in_order(starts: Ints, ends: Ints) -> tuple[Ints, Ints]:
    """Starts sorted and the running max of the ends in that order."""
    if np.any(starts[1:] < starts[:-1]):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    return starts, np.maximum.accumulate(ends) if len(ends) else ends


def _active_periods(ctx: _Ctx, pid: int, device: int, quiet_ns: int) -> Ints:
    """Start times of the active periods (sorted; a period runs until the next start): split where, for
    ``quiet_ns``, no op of the process runs on the device and no API call of the process runs (the two sets' quiet
    stretches intersected)."""
    prep = ctx.prep
    dev = prep.devices.get(device)
    if len(ctx.pid_devices) == 1 and dev is not None:  # the device's own, already in order
        op_starts, op_reach = dev.starts, dev.max_end
    else:
        ops = np.flatnonzero((prep.op_device == device) & (prep.op_pid == pid))
        op_starts, op_reach = _in_order(prep.op_start[ops], prep.op_end[ops])
    _, api_starts, api_reach = prep.api_index(pid)
    a_lo, a_hi = _quiet(op_starts, op_reach, quiet_ns)
    b_lo, b_hi = _quiet(api_starts, api_reach, quiet_ns)
    starts = [-_FAR]
    for lo, hi in zip(a_lo.tolist(), a_hi.tolist(), strict=True):
        j, stop = int(np.searchsorted(b_hi, lo, side="right")), int(np.searchsorted(b_lo, hi, side="left"))
        for x, y in zip(b_lo[j:stop].tolist(), b_hi[j:stop].tolist(), strict=True):
            s, e = max(lo, x), min(hi, y)
            if e - s >= quiet_ns and s > -_FAR and e < _FAR:
                starts.append(e)
    return np.array(sorted(starts), dtype=np.int64)


def _launch_sums(ev: _Events) -> tuple[U64, Ints]:
    """Prefix sums of the launch calls' tokens and of their number (calls without ops left out)."""
    has = ev.nops > 0
    return _hashsum0(np.where(has, ev.token, np.uint64(0))), _cumsum0(has)


def _msig(sums: tuple[U64, Ints], a: Ints, b: Ints) -> U64:
    """Order-insensitive signature of the launch calls in [a, b]: the same launches in any order match."""
    tok, count = sums
    with np.errstate(over="ignore"):
        return (tok[b + 1] - tok[a]) + (count[b + 1] - count[a]).astype(np.uint64) * _MIX[2]


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


def _repeat_phase(seg_sig: U64, q: int, default: int) -> int:
    """The phase at which the most groups of q segments repeat (the loop's own boundary: elsewhere its first and
    last iterations are cut into pieces with what surrounds the loop); ties go to ``default``."""
    k = len(seg_sig)
    sums = _hashsum0(seg_sig)
    best, best_n = default, -1
    for phase in range(q):
        heads = np.arange(phase, k - q + 1, q)
        with np.errstate(over="ignore"):
            _, counts = np.unique(sums[heads + q] - sums[heads], return_counts=True)
        n = int(counts[counts >= 2].sum())
        if n > best_n or (n == best_n and phase == default):
            best, best_n = phase, n
    return best


def _group(seg_a: Ints, seg_b: Ints, seg_sig: U64, gap: Ints) -> tuple[Ints, Ints, int] | None:
    """Consecutive segments grouped q at a time (q: ``_pick`` over q = 1..MAX_GROUP), from the phase at which the
    most groups repeat (ties: the longest median host gap before a group); None when nothing repeats."""
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
        phase = _repeat_phase(seg_sig, q, phase) if q > 1 else 0
    heads = _loop_heads(seg_sig, q, phase) if q > 1 else np.arange(k)
    return seg_a[heads], seg_b[heads + q - 1], q


def _loop_heads(seg_sig: U64, q: int, phase: int) -> Ints:
    """The first segment of each group of q, each loop at its own phase (the loops of several ``generate()``
    calls, between setups of different lengths): runs of at least ``MIN_STEPS`` identical consecutive groups
    that overlap are one loop, at the phase whose runs cover the most of it (ties: ``phase``); the segments before
    a loop are grouped back from its start (a prefill before a run of decode steps), those after the last one on
    from its end. Without such runs, every group at ``phase``."""
    k = len(seg_sig)
    sums = _hashsum0(seg_sig)
    with np.errstate(over="ignore"):
        same = (sums[q : k - q + 1] - sums[: k - 2 * q + 1]) == (sums[2 * q :] - sums[q : k - q + 1])
    runs: list[tuple[int, int, int]] = []  # (first segment, end segment, phase)
    for p in range(q):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], same[p::q].astype(np.int8), [0]])))
        for u, v in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            if v - u + 1 >= MIN_STEPS:  # v - u groups each followed by an identical one
                runs.append((p + u * q, p + (v + 1) * q, p))
    loops: list[list[tuple[int, int, int]]] = []
    reach = -1
    for run in sorted(runs):
        if run[0] < reach:
            loops[-1].append(run)
        else:
            loops.append([run])
        reach = max(reach, run[1])
    if not loops:
        return np.arange(phase, k - q + 1, q)
    heads, done = [], 0
    for loop in loops:
        cover = Counter[int]()
        for first, end, p in loop:
            cover[p] += end - first
        best = max(cover, key=lambda p: (cover[p], p == phase))
        first = min(r[0] for r in loop if r[2] == best)
        end = max(r[1] for r in loop if r[2] == best)
        heads += [np.arange(first - q, done - 1, -q)[::-1], np.arange(first, end, q)]
        done = end
    heads.append(np.arange(done, k - q + 1, q))
    return np.concatenate(heads).astype(np.int64)


def _super_period(tok: U64, p: int) -> int | None:
    """The longer period at which the mismatches of the sequence with itself at lag p recur, if they do (p is then
    a layer and the longer period the step: the ops that run once per step break the layer's repeat)."""
    miss = np.flatnonzero(tok[:-p] != tok[p:])
    if len(miss) < MIN_STEPS:
        return None
    heads = miss[np.concatenate([[True], np.diff(miss) > p])]
    d = np.diff(heads)
    if len(d) < MIN_STEPS - 1:
        return None
    values, counts = np.unique(d, return_counts=True)
    period = int(values[np.argmax(counts)])
    return period if period > p and 2 * counts.max() >= len(d) and period * MIN_STEPS <= len(tok) else None


def _step_periods(tok: U64, gap: Ints, cand: list[int], spacings: set[int]) -> list[int]:
    """Candidate lags without the layer periods. A lag p is a layer's where the ops that run once per step break
    its repeat: the sequence matches itself at least as well at the spacing of a token that recurs (``spacings``,
    not a multiple of p), or its mismatches recur at a longer period where the host pauses at least as much."""
    scores: dict[int, float] = {}

    def score(q: int) -> float:
        if q not in scores:
            scores[q] = _self_match(tok, q)
        return scores[q]

    keep = []
    for p in cand:
        if any(q > p and q % p and score(q) >= score(p) for q in spacings):
            continue
        longer = _super_period(tok, p)
        if longer is not None and _boundary(gap, longer)[1] >= _boundary(gap, p)[1]:
            continue
        keep.append(p)
    return keep


def _sequence_period(tok: U64, gap: Ints) -> tuple[Ints, Ints, int] | None:
    """Steps from the period of the launch sequence itself: candidate lags are the typical spacing of each token
    that recurs regularly, layer periods left out (``_step_periods``); the period is the
    smallest lag at which the sequence matches itself about as well as at the best one; steps are cut before the
    token at the phase with the longest median host gap."""
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
    steady = mode_c >= 0.5 * (counts[mode_tok] - 1)
    regular = steady & (counts[mode_tok] >= MIN_STEPS) & (mode_d * MIN_STEPS <= n)
    lags = np.unique(mode_d[regular])
    if not len(lags):
        return None
    lags = lags[np.argsort(-np.bincount(np.searchsorted(lags, mode_d[regular])), kind="stable")][:32]
    spaced, times = np.unique(mode_d[steady & (2 * mode_d <= n)], return_counts=True)
    spacings = set(spaced[np.argsort(-times, kind="stable")][:32].tolist())  # the commonest, at least twice over
    cand = _step_periods(tok, gap, [int(p) for p in lags], spacings)
    scores = [_self_match(tok, p) for p in cand]
    if not scores or max(scores) < SEQ_MATCH_MIN:
        return None
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
    """Steps as [first call, last call] index pairs for one signal, or None."""
    n = len(ev.start)
    gap = np.concatenate([[0], ev.start[1:] - ev.end[:-1]])
    has_ops = ev.nops > 0
    if signal == SIGNAL_SYNC:
        marks = np.flatnonzero(ev.sync)
        if len(marks) < MIN_STEPS:
            return None
        work_before = _cumsum0(has_ops)  # launches in [0, i)
        prev = np.concatenate([[-1], marks[:-1]])
        ends = marks[work_before[marks + 1] - work_before[prev + 1] > 0]  # a launch since the previous sync
        if not len(ends):
            return None
        starts = np.concatenate([[0], ends[:-1] + 1])
        grouped = _group(starts, ends, _msig(_launch_sums(ev), starts, ends), gap[starts])
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
        if len(marks) > 1:  # the last segment runs to the period's end: compare as long as the one before
            ends[-1] = min(starts[-1] + ends[-2] - starts[-2], n - 1)
        grouped = _group(starts, ends, _msig(_launch_sums(ev), starts, ends), gap[starts])
        if grouped is None:
            return None
        a, b, q = grouped
        names = {canonical_api_name(n) for n in _names_at(ctx, ev, a)}
        return a, b, f"{signal} ({', '.join(sorted(names))}, {q} per step)"
    launches = np.flatnonzero(has_ops)  # the launch sequence: syncs left out
    if len(launches) < 2 * MIN_STEPS:
        return None
    starts, ends = ev.start[launches], ev.end[launches]
    found = _sequence_period(ev.token[launches], np.concatenate([[0], starts[1:] - ends[:-1]]))
    if found is None:
        return None
    a, b, p = found
    nxt = np.append(launches, n)  # a step runs to the call before the next step's first launch
    return launches[a], nxt[b + 1] - 1, f"{signal} (period {p} calls)"


def _names_at(ctx: _Ctx, ev: _Events, idx: Ints) -> list[str]:
    codes = np.unique(ctx.prep.api_name[ev.api[idx]])
    return [ctx.prep.api_names[int(c)] for c in codes]


def _ops_keys(ev: _Events, a: Ints, b: Ints) -> U64:
    """Per step [a, b]: a hash of the ops it ran (names and kinds, any order), their number and graph or not."""
    lo, hi = ev.off[a], ev.off[b + 1]
    graph = (ev.graph_kernels[hi] - ev.graph_kernels[lo]) > 0
    with np.errstate(over="ignore"):
        return (ev.hashes[hi] - ev.hashes[lo]) + (hi - lo).astype(np.uint64) * _MIX[1] + graph.astype(np.uint64)


def _signal_steps(ctx: _Ctx, ev: _Events, lo: int, hi: int, signal: str) -> tuple[Ints, Ints, str] | None:
    """One signal's steps in calls [lo, hi): those with at least ``MIN_OPS`` ops, one a kernel, whose ops (any
    order) another step runs too, and those right next to such a step with about as many kernels (a prefill
    before a run of decode steps, a different last step after one); None when fewer than ``MIN_STEPS``."""
    found = _cut(ctx, _slice(ev, lo, hi), signal)
    if found is None:
        return None
    a, b, detail = found
    a, b = a + lo, b + lo
    o_lo, o_hi = ev.off[a], ev.off[b + 1]
    kernels = ev.kernels[o_hi] - ev.kernels[o_lo]
    ok = (o_hi - o_lo >= MIN_OPS) & (kernels > 0)  # a lone copy or set is no step
    a, b, kernels = a[ok], b[ok], kernels[ok]
    _, inv, counts = np.unique(_ops_keys(ev, a, b), return_inverse=True, return_counts=True)
    again = counts[inv] >= 2
    touch = b[:-1] + 1 == a[1:]  # step i ends right before step i + 1
    like = touch & (np.abs(kernels[1:] - kernels[:-1]) <= LIKE_KERNELS * np.maximum(kernels[1:], kernels[:-1]))
    beside = np.zeros(len(a), dtype=bool)
    beside[:-1] |= like & again[1:]
    beside[1:] |= like & again[:-1]
    keep = again | beside
    a, b = a[keep], b[keep]
    return (a, b, detail) if np.count_nonzero(again) >= MIN_STEPS else None


def _pid_devices(prep: Prepared) -> list[tuple[int, int]]:
    pid, dev = prep.op_pid, prep.op_device
    if not len(pid):
        return []
    if pid.min() == pid.max() and dev.min() == dev.max():
        return [(int(pid[0]), int(dev[0]))]
    return [(int(k // 4096), int(k % 4096)) for k in np.unique(pid * 4096 + dev)]


def _structure_steps(ctx: _Ctx, quiet_ns: int, wanted: set[int]) -> tuple[list[_Raw], int]:
    """Per process, device and active period: the signals in turn (sync, graph launch, launch sequence), each on the
    stretches of calls the ones before left uncovered; the period's steps stand when they hold at least
    ``MIN_COVERAGE`` of its launched ops. Then the steps next to uncovered calls are extended (``_extend``)."""
    out: list[_Raw] = []
    periods = 0
    for pid, device in ctx.pid_devices:
        if device not in wanted:
            continue
        ev = _events(ctx, pid, device)
        if not len(ev.start):
            continue
        bounds = _active_periods(ctx, pid, device, quiet_ns)
        which = np.searchsorted(bounds, ev.start, side="right") - 1
        cuts = np.flatnonzero(np.concatenate([[True], which[1:] != which[:-1], [True]]))
        found: list[tuple[Ints, Ints, int, int]] = []  # steps [a, b], period, signal number
        signals: list[tuple[str, str]] = []  # signal number -> (signal, detail)
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            periods += 1
            launched = int(ev.off[hi] - ev.off[lo])
            if not launched:
                continue
            here: list[tuple[Ints, Ints, str, str]] = []
            runs = [(lo, hi)]
            for signal in SIGNALS:
                left = []
                for r_lo, r_hi in runs:
                    got = _signal_steps(ctx, ev, r_lo, r_hi, signal)
                    if got is None:
                        left.append((r_lo, r_hi))
                        continue
                    here.append((got[0], got[1], signal, got[2]))
                    edges = [r_lo, *np.column_stack([got[0], got[1] + 1]).ravel().tolist(), r_hi]
                    left += [(x, y) for x, y in zip(edges[::2], edges[1::2], strict=True) if y - x >= 2 * MIN_STEPS]
                runs = left
            count = sum(len(a) for a, *_ in here)
            covered = sum(int((ev.off[b + 1] - ev.off[a]).sum()) for a, b, *_ in here)
            if count >= MIN_STEPS and covered >= MIN_COVERAGE * launched:
                for a, b, signal, detail in here:
                    found.append((a, b, periods, len(signals)))
                    signals.append((signal, detail))
        if found:
            out += _device_raws(ctx, ev, pid, device, found, signals)
    return out, periods


def _extend(ev: _Events, a: Ints, b: Ints) -> tuple[list[tuple[int, int, int, bool]], Ints]:
    """Steps in the uncovered calls next to the steps [a, b] (sorted): a run of launches repeating a neighbouring
    step's launch sequence exactly is a step of its own (a warm-up step stalled across a quiet stretch); at the
    capture's start (end), the launches before the first step (after the last) that are the end (start) of its
    sequence are a step cut short by the capture. Returns (first launch, last launch, neighbour step, cut short)
    and the launches' call indices."""
    launches = np.flatnonzero(ev.nops > 0)
    before = _cumsum0(ev.nops > 0)  # launches before each call
    tok = ev.token[launches]
    la, lb = before[a].tolist(), (before[b + 1] - 1).tolist()
    total, k = len(launches), len(la)
    new: list[tuple[int, int, int, bool]] = []
    for j in range(k + 1):  # the uncovered launches before step j (j == k: after the last step)
        g_lo = lb[j - 1] + 1 if j else 0
        g_hi = la[j] if j < k else total
        if g_hi <= g_lo:
            continue
        if j < k:  # backwards from step j
            seq = tok[la[j] : lb[j] + 1]
            n = len(seq)
            while g_hi - g_lo >= n and np.array_equal(tok[g_hi - n : g_hi], seq):
                new.append((g_hi - n, g_hi - 1, j, False))
                g_hi -= n
            m = g_hi - g_lo
            if g_lo == 0 and 0 < m < n and np.array_equal(tok[:g_hi], seq[n - m :]):
                new.append((0, g_hi - 1, j, True))
                g_hi = 0
        if j:  # forwards from step j - 1
            seq = tok[la[j - 1] : lb[j - 1] + 1]
            n = len(seq)
            while g_hi - g_lo >= n and np.array_equal(tok[g_lo : g_lo + n], seq):
                new.append((g_lo, g_lo + n - 1, j - 1, False))
                g_lo += n
            m = g_hi - g_lo
            if g_hi == total and 0 < m < n and np.array_equal(tok[g_lo:], seq[:m]):
                new.append((g_lo, total - 1, j - 1, True))
    return new, launches


def _key_strings(ev: _Events, a: Ints, b: Ints) -> list[str]:
    lo, hi = ev.off[a], ev.off[b + 1]
    hashes = (ev.hashes[hi] - ev.hashes[lo]).tolist()
    graph = (ev.graph_kernels[hi] > ev.graph_kernels[lo]).tolist()
    return [_multiset_key(h, n, g) for h, n, g in zip(hashes, (hi - lo).tolist(), graph, strict=True)]


def _device_raws(
    ctx: _Ctx,
    ev: _Events,
    pid: int,
    device: int,
    found: list[tuple[Ints, Ints, int, int]],
    signals: list[tuple[str, str]],
) -> list[_Raw]:
    """The steps of one process and device, those ``_extend`` adds included (a step cut short has the kind of the
    step it is part of)."""
    a = np.concatenate([f[0] for f in found])
    order = np.argsort(a, kind="stable")
    a = a[order]
    b = np.concatenate([f[1] for f in found])[order]
    period = np.concatenate([np.full(len(f[0]), f[2]) for f in found])[order]
    signal = np.concatenate([np.full(len(f[0]), f[3]) for f in found])[order]
    keys = _key_strings(ev, a, b)
    short = np.zeros(len(a), dtype=bool)
    new, launches = _extend(ev, a, b)
    if new:
        lo, hi, near, cut = (np.array(x, dtype=np.int64) for x in zip(*new, strict=True))
        first = launches[lo]
        after = np.append(launches, len(ev.start))[hi + 1] - 1  # up to the call before the next launch...
        last = np.minimum(
            after, np.append(a, len(ev.start))[np.searchsorted(a, first, side="right")] - 1
        )  # ...in the gap
        o_lo, o_hi = ev.off[first], ev.off[last + 1]
        ok = (o_hi - o_lo >= MIN_OPS) & (ev.kernels[o_hi] > ev.kernels[o_lo])
        first, last, near, cut = first[ok], last[ok], near[ok], cut[ok].astype(bool)
        own = _key_strings(ev, first, last)
        keys += [keys[n] if c else k for k, n, c in zip(own, near.tolist(), cut.tolist(), strict=True)]
        a, b = np.concatenate([a, first]), np.concatenate([b, last])
        period, signal = np.concatenate([period, period[near]]), np.concatenate([signal, signal[near]])
        short = np.concatenate([short, cut])
    prep = ctx.prep
    lo_op, hi_op = ev.off[a], ev.off[b + 1]
    kernels = (ev.kernels[hi_op] - ev.kernels[lo_op]).tolist()
    graph = (ev.graph_kernels[hi_op] - ev.graph_kernels[lo_op]).tolist()
    calls = _cumsum0(ev.nops > 0)
    launches = (calls[b + 1] - calls[a]).tolist()
    starts, ends = ev.start[a].tolist(), ev.end[b].tolist()
    out = []
    for i, (x, y) in enumerate(zip(lo_op.tolist(), hi_op.tolist(), strict=True)):
        rows = ev.ops[x:y]
        name, detail = signals[int(signal[i])]
        out.append(
            _Raw(
                device=device,
                pid=pid,
                tid=int(prep.api_tid[prep.op_launch[rows[0]]]),
                rows=rows,
                host_start=starts[i],
                host_end=ends[i],
                signal=name,
                key=keys[i],
                period=int(period[i]),
                detail=detail,
                truncated=bool(short[i]),
                kernels=kernels[i],
                launches=launches[i],
                graph_kernels=graph[i],
            )
        )
    return out


# --- owned periods, kinds -----------------------------------------------------------------------------------------


def _finish(ctx: _Ctx, raws: list[_Raw], mode: str) -> tuple[list[Step], list[StepKind]]:
    prep = ctx.prep
    raws = _with_stats(ctx, raws, hashes=mode == "annotations", counted=mode == "structure")
    if mode == "annotations":
        raws = _annotation_keys(raws)
    steps: list[Step] = []
    kinds: list[StepKind] = []
    for device in sorted({r.device for r in raws}):
        group = sorted((r for r in raws if r.device == device), key=lambda r: r.gpu_end)
        keys = _merge_kinds(prep, group)
        around = _neighbours(group, keys)  # for the labels: before any step is dropped or kind split
        split = keys
        if mode == "structure":  # markers name their own kinds
            split = _split_busy(group, _own_starts(group, mode), keys)
            stand = _standing(group, split)
            group, keys, split, around = (
                _kept(group, stand),
                _kept(keys, stand),
                _kept(split, stand),
                _kept(around, stand),
            )
        built = _owned(group, split, device, mode)
        details = {k: r.detail for r, k in zip(group, split, strict=True)}
        markers = {k: r.marker for r, k in zip(group, split, strict=True)}
        base = dict(zip(split, keys, strict=True))
        dev_steps, dev_kinds = _kinds(built, around, base, details, markers, device)
        steps += dev_steps
        kinds += dev_kinds
    return steps, kinds


def _kept(items: list[T], keep: list[bool]) -> list[T]:
    return [x for x, ok in zip(items, keep, strict=True) if ok]


def _own_starts(group: list[_Raw], mode: str) -> list[int]:
    """Where each step's owned period starts (``group`` in end order): the end of the previous step's work in its
    chain (structure: the same active period and signal; annotations: the same process), else (first, or
    overlapping it) its own first op."""
    prev_end: dict[tuple[int, str], int] = {}
    out = []
    for r in group:
        chain = (r.period, r.signal) if mode == "structure" else (r.pid, "")
        before = prev_end.get(chain)
        prev_end[chain] = r.gpu_end
        out.append(before if before is not None and before <= r.gpu_start else r.gpu_start)
    return out


def _owned(group: list[_Raw], keys: list[str], device: int, mode: str) -> list[Step]:
    """The steps, in end order, each owning its period (``_own_starts``)."""
    out: list[Step] = []
    for r, key, own_start in zip(group, keys, _own_starts(group, mode), strict=True):
        out.append(
            Step(
                index=len(out),
                device=device,
                pid=r.pid,
                tid=r.tid,
                start_ns=own_start,
                end_ns=r.gpu_end,
                gpu_start_ns=r.gpu_start,
                first_op=r.first_op,
                last_op=r.last_op,
                host_start_ns=r.host_start,
                host_end_ns=r.host_end,
                signal=r.signal,
                kind=key,
                ops=len(r.rows),
                kernels=r.kernels,
                launches=r.launches,
                graph_kernels=r.graph_kernels,
                busy_ns=r.busy,
                rows=r.rows,
                name=r.name,
                batch=r.marker.batch if r.marker else None,
                tokens=r.marker.tokens if r.marker else None,
                truncated=r.truncated,
            )
        )
    return out


def _merge_kinds(prep: Prepared, group: list[_Raw]) -> list[str]:
    """Each step's kind: one for steps replayed the same way (and with the same marker) whose op names differ in
    at most ``MERGE_SHARE`` of their ops, either way (an attention kernel that changes with the context length, a
    few ops more in one); the commonest key of a kind names it."""
    counts = Counter(r.key for r in group)
    reps: dict[str, _Raw] = {}
    for r in sorted(group, key=lambda r: r.truncated):  # a whole step stands for its key
        reps.setdefault(r.key, r)
    names: dict[str, Counter[int]] = {}
    target: dict[str, str] = {}
    clusters: list[str] = []
    for key in sorted(reps, key=lambda k: -counts[k]):
        r = reps[key]
        for head in clusters:
            h = reps[head]
            n = max(len(h.rows), len(r.rows))
            if (h.graph_kernels > 0) != (r.graph_kernels > 0) or h.marker != r.marker:
                continue
            if abs(len(h.rows) - len(r.rows)) > MERGE_SHARE * n:  # more ops differ than that
                continue
            a = names.setdefault(head, Counter(prep.op_name[h.rows].tolist()))
            b = names.setdefault(key, Counter(prep.op_name[r.rows].tolist()))
            if max(sum((a - b).values()), sum((b - a).values())) <= MERGE_SHARE * n:
                target[key] = head
                break
        else:
            clusters.append(key)
            target[key] = key
    return [target[r.key] for r in group]


def _split_busy(group: list[_Raw], starts: list[int], keys: list[str]) -> list[str]:
    """Each step's kind once a kind whose typical steps' GPU busy times fall into groups at least ``BUSY_SPLIT``
    apart (each of at least ``MIN_STEPS``) is split into one kind per group: the same kernels at another batch
    size. Its other steps go with the group of their busy time (cut short: that of the nearest whole step)."""
    members: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    out = list(keys)
    for key, idx in members.items():
        spans = {i: group[i].gpu_end - starts[i] for i in idx}
        med = float(np.median(list(spans.values())))
        whole = [i for i in idx if not group[i].truncated]
        typical = [i for i in whole if spans[i] <= OUTLIER_FACTOR * med]
        cuts = np.array(_busy_cuts(np.sort(np.array([group[i].busy for i in typical], dtype=np.int64))))
        if not len(cuts):
            continue
        for i in idx:
            j = i if not group[i].truncated else min(whole, key=lambda w: abs(w - i), default=i)
            part = int(np.searchsorted(cuts, group[j].busy, side="right"))
            out[i] = f"{key}~{part + 1}" if part else key
    return out


def _busy_cuts(busy: Ints) -> list[int]:
    """Busy times between groups (``busy`` sorted): cut in the middle of the largest relative gap while it is at
    least ``BUSY_SPLIT`` and leaves ``MIN_STEPS`` on each side."""
    rel = (busy[1:] - busy[:-1]) / np.maximum(busy[:-1], 1)
    inner = rel[MIN_STEPS - 1 : len(busy) - MIN_STEPS]
    if not len(inner) or inner.max() < BUSY_SPLIT:
        return []
    i = MIN_STEPS - 1 + int(np.argmax(inner))
    return [*_busy_cuts(busy[: i + 1]), int(busy[i] + busy[i + 1]) // 2, *_busy_cuts(busy[i + 1 :])]


def _like(a: int, b: int) -> bool:
    """About as many kernels."""
    return abs(a - b) <= LIKE_KERNELS * max(b, 1)


def _neighbours(group: list[_Raw], keys: list[str]) -> list[tuple[str | None, str | None]]:
    """The kinds of each step's previous and next step of the same process (end order)."""
    by_pid: dict[int, list[int]] = {}
    for i, r in enumerate(group):
        by_pid.setdefault(r.pid, []).append(i)
    out: list[tuple[str | None, str | None]] = [(None, None)] * len(group)
    for idx in by_pid.values():
        for n, i in enumerate(idx):
            out[i] = (keys[idx[n - 1]] if n else None, keys[idx[n + 1]] if n + 1 < len(idx) else None)
    return out


def _standing(group: list[_Raw], keys: list[str]) -> list[bool]:
    """Which steps stand: those of a kind that runs at least ``MIN_STEPS`` times in a row somewhere (a loop), and
    those of a kind each of whose steps is next to one of such a kind with about as many kernels (a prefill before
    a run of decode steps, a different last step after one). The rest (a call's setup, the work between calls,
    pieces of work that alternate) are not steps."""
    kernels = {k: r.kernels for r, k in zip(group, keys, strict=True)}
    around = _neighbours(group, keys)
    run, looping = 0, set()
    for k, (before, _) in zip(keys, around, strict=True):
        run = run + 1 if before == k else 1
        if run >= MIN_STEPS:
            looping.add(k)
    beside: dict[str, bool] = {}
    for k, near in zip(keys, around, strict=True):
        if k not in looping:
            ok = any(x in looping and _like(kernels[k], kernels[x]) for x in near if x is not None)
            beside[k] = beside.get(k, True) and ok
    return [k in looping or beside.get(k, False) for k in keys]


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
    steps: list[Step],
    around: list[tuple[str | None, str | None]],
    base: dict[str, str],
    details: dict[str, str],
    markers: dict[str, Marker | None],
    device: int,
) -> tuple[list[Step], list[StepKind]]:
    """Per kind its statistics (outliers out), label and outliers. ``around``: each step's neighbours' kinds
    before the steps that are not steps were dropped, and before kinds were split by busy time (``base``: the kind
    each one was split from)."""
    members: dict[str, list[int]] = {}
    for i, st in enumerate(steps):
        members.setdefault(st.kind, []).append(i)
    spans = np.array([st.span_ns for st in steps], dtype=np.int64)
    stats: list[_KindStats] = []
    for key, idx in members.items():
        whole = [i for i in idx if not steps[i].truncated] or idx
        med = percentile(spans[whole], 50)
        out = {i for i in idx if steps[i].truncated or (len(idx) >= MIN_STEPS and spans[i] > OUTLIER_FACTOR * med)}
        typical = [i for i in idx if i not in out] or idx
        ops = np.array([steps[i].ops for i in typical], dtype=np.int64)
        kernels = np.array([steps[i].kernels for i in typical], dtype=np.int64)
        graph = sum(steps[i].graph_kernels for i in typical)
        stats.append(
            _KindStats(
                key=key,
                typical=typical,
                outlier=sorted(out),
                span=percentile(spans[typical], 50),
                busy=percentile(np.array([steps[i].busy_ns for i in typical], dtype=np.int64), 50),
                ops=int(np.bincount(ops).argmax()),
                kernels=int(np.bincount(kernels).argmax()),
                graph_share=graph / max(int(kernels.sum()), 1),
            )
        )
    stats.sort(key=lambda k: -len(k.typical))
    dominant = stats[0] if stats else None
    labels = []
    for k in stats:
        marker = markers.get(k.key)
        g = k.graph_share
        mode = "graph replay" if g >= 0.9 else "eager" if g == 0 else "mixed graph/eager"
        phase = marker.label if marker is not None else _phase_guess(k, dominant, stats, around, base)
        labels.append(f"{phase}, {mode}, {k.ops} ops")
    shared = {x for x in labels if labels.count(x) > 1}  # told apart by their GPU busy time
    labels = [f"{x}, {k.busy / 1e6:.3g} ms busy" if x in shared else x for x, k in zip(labels, stats, strict=True)]
    out_kinds = []
    labels_seen: dict[str, int] = {}
    for k, label in zip(stats, labels, strict=True):
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


def _phase_guess(
    k: _KindStats,
    dominant: _KindStats | None,
    stats: list[_KindStats],
    around: list[tuple[str | None, str | None]],
    base: dict[str, str],
) -> str:
    """prefill: a rarer kind with about as many kernels as the commonest one (the same model, more tokens) that
    does at least 1.5x its GPU work, or at least as much where each of its steps starts a run of the commonest
    kind (the first forward of a generate()); the commonest kind is then decode. Otherwise just "step"."""

    def is_prefill(x: _KindStats) -> bool:
        if dominant is None or x is dominant:
            return False
        if len(x.typical) * 2 > len(dominant.typical) or not _like(x.kernels, dominant.kernels):
            return False
        head = base[dominant.key]
        starts_run = all(around[i][1] == head != around[i][0] for i in x.typical + x.outlier)
        return x.busy >= 1.5 * dominant.busy or (starts_run and x.busy >= dominant.busy)

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
    ignored), ``default`` (markers when the trace has them, else structure), ``off``. ``prep``: the trace already
    prepared (``windows.prepare``), as the analysis before it did."""
    if mode == "off":
        return StepResult("none", [], [], "step detection off")
    if prep is None:
        prep = prepare(timeline, options or AnalysisOptions())
    ctx = _context(timeline, prep)
    wanted = set(prep.devices)
    if mode in ("annotations", "default"):
        raws = _annotation_steps(ctx, wanted)
        if raws:
            steps, kinds = _finish(ctx, raws, "annotations")
            engines = sorted({r.marker.engine for r in raws if r.marker})
            return StepResult("annotations", steps, kinds, f"engine step markers ({', '.join(engines)})")
        if mode == "annotations":
            return StepResult("none", [], [], "no engine step markers in the trace")
    raws_s, periods = _structure_steps(ctx, quiet_ns, wanted)
    if not raws_s:
        return StepResult("none", [], [], NO_STEPS, periods)
    steps, kinds = _finish(ctx, raws_s, "structure")
    if not steps:
        return StepResult("none", [], [], NO_STEPS, periods)
    signals = sorted({k.detected_by for k in kinds})
    return StepResult("structure", steps, kinds, f"found from the trace's structure: {'; '.join(signals)}", periods)
