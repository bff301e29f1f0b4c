"""Sampled per-kernel gaps: which ops get an end event in which step, how the steps are stitched into one clean
step, how the stride k is chosen, and the checks against CUPTI. Pure Python on event streams (integer ns);
measure/kernel_pass.py produces the streams on a GPU. docs/gaps.md has the method and its argument.

The scheme, for a step of n ops and a stride k (2 <= k <= n):
- variant r (0 <= r < k) records one end event after every op i with i % k == r; variant k (only when k < n) is
  variant 0 without op 0. Each sampled step runs one variant; every step also has the clean timing's boundary
  event before its first op, and positions are measured from it.
- the gap before op i (i >= 1) is (end_i - duration_i) - end_{i-1}, with end_i and end_{i-1} taken from two
  different variants in which exactly as many events precede op i as precede op i-1, at the same distances
  (``pair_sources``). Whatever those events delay (host time when the host is behind, GPU time of an event when it
  is not), they delay both ends alike, so it cancels in the difference. No event ever sits between op i-1 and op i
  in either of the two steps, so no correction for the events' cost is applied or needed. This is exact when
  the events ahead cost alike (all host records, all event nodes) and when none is ahead (k = n); in piecewise
  mode, where both kinds occur, ``pairing_note`` says so and kernel_pass.py takes k = n when time allows.
- the gap before op 0 (between steps) is the head (boundary to op 0's start, from variant 0, where no event
  precedes op 0) plus the tail (the last op's end to the next boundary), paired the same way with the next
  boundary standing as op n: its time is the step length of a variant with as many events ahead of it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from launchprobe.analysis.kernel_gaps import OpTiming, aggregate_ops, gap_distribution

OVERHEAD_BUDGET = 0.02  # the sampled step stays within 2% of clean (issue 12)
OVERHEAD_TARGET = 0.01  # k is first chosen for half the budget, leaving room for noise
CUPTI_TRUST = 0.05  # CUPTI's own step within 5% of clean: its timestamps describe the clean step
GAP_TOTAL_REL, GAP_TOTAL_ABS_NS = 0.10, 50_000  # stitched gap total vs clean idle: 10% or 50 us, the larger
BUSY_REL = 0.05  # stitched busy vs CUPTI busy
OP_GAP_ABS_NS, OP_GAP_REL = 1_000, 0.15  # per op class median gap (and duration) vs CUPTI: 1 us or 15%


class StitchRefused(Exception):
    """The sampled steps cannot be stitched into one step; the message says why."""


# ----------------------------------------------------------------------------------------------------------------
# Which ops are sampled in which step


def sampling_plan(n_ops: int, stride: int) -> list[list[int]]:
    """The op indices each variant records an end event after (see the module docstring)."""
    if n_ops < 1 or stride < 1:
        raise ValueError("a sampling plan needs at least one op and a stride of at least 1")
    stride = min(stride, n_ops)
    plan = [list(range(r, n_ops, stride)) for r in range(stride)]
    if stride > 1:
        # variant 0 without op 0: the other end of every wrap-around gap (empty when k = n: an event-free step)
        plan.append(plan[0][1:])
    return plan


def pair_sources(n_ops: int, stride: int) -> list[tuple[int, int]]:
    """For the gap before each op i, 1 <= i <= n: (variant giving end_i, variant giving end_{i-1}); i = n stands
    for the next step's start boundary, whose time is the step length.

    Events before op i in the first variant: i-k, i-2k, ... >= 0; before op i-1 in the second: i-1-k, ... >= 0,
    the same count at the same distances, except where i % k == 0: there the first variant has one more (the
    event after op 0), so end_i comes from variant k, which lacks it. With k = 1 (dense) both ends come from the
    one instrumented step and the event after op i-1 sits inside the gap: nothing cancels.
    """
    stride = min(stride, n_ops)
    if stride == 1:
        return [(0, 0)] * n_ops
    return [((stride if i % stride == 0 else i % stride), (i - 1) % stride) for i in range(1, n_ops + 1)]


def pairing_note(stride: int, n_ops: int, mixed: bool) -> str:
    """How exact the pairing is for this stride: the delays cancel when the events ahead of both ends cost the
    same, which holds when all events are of one kind, or when no event is ahead at all (k = n)."""
    if stride >= n_ops:
        return "k = n: one event per step, none ahead of any measured end: exact whatever the events cost"
    if not mixed:
        return "every event of one kind: paired ends have the same events ahead, at the same distances"
    return (
        "mixed: host-recorded events (after eager ops) and event nodes (in graphs) are both ahead of some ends; "
        "where the paired ends have events of different kinds ahead, the gap carries their cost difference"
    )


def variant_order(variants: int, cycle: int) -> list[int]:
    """The variants of one cycle, rotated by the cycle so no variant always follows the same one."""
    return [(cycle + j) % variants for j in range(variants)]


# ----------------------------------------------------------------------------------------------------------------
# Choosing k


def initial_stride(op_costs_ns: Sequence[float], clean_step_ns: float, target: float = OVERHEAD_TARGET) -> int:
    """The smallest k whose predicted cost, sum(op_costs) / k per step, is within ``target`` of the clean step.

    ``op_costs_ns`` is what one end event after each op is predicted to add: the host cost of a record for a
    host-launched op (all of it shows when the host is behind), the GPU cost of an event node inside a graph.
    """
    n = len(op_costs_ns)
    if n < 2:
        return 1
    if clean_step_ns <= 0 or target <= 0:
        return n
    k = math.ceil(sum(max(0.0, c) for c in op_costs_ns) / (target * clean_step_ns))
    return max(2, min(n, k))


@dataclass
class StrideChoice:
    stride: int
    overhead_fraction: float  # measured at the chosen stride (its densest variant)
    within_budget: bool
    probes: list[tuple[int, float]] = field(default_factory=list)  # (k, measured overhead), in probe order


def choose_stride(
    n_ops: int,
    start: int,
    measure: Callable[[int], float],
    *,
    budget: float = OVERHEAD_BUDGET,
    target: float = OVERHEAD_TARGET,
    search_down: bool = True,
    max_probes: int = 6,
) -> StrideChoice:
    """k from measurement: from ``start`` (``initial_stride``), widen k while the measured overhead is over the
    budget; then, if ``search_down``, halve k while the overhead stays within ``target`` (an eager host that runs
    ahead of the GPU absorbs event records, and the worst-case prediction was too cautious).

    ``measure(k)`` returns the measured overhead fraction of a step sampled every k-th op. The chosen k is the
    smallest probed one within the budget; if even k = n is over it, k = n and ``within_budget`` is False.
    """
    if n_ops < 2:
        return StrideChoice(1, 0.0, True)
    probes: list[tuple[int, float]] = []

    def probe(k: int) -> float:
        overhead = measure(k)
        probes.append((k, overhead))
        return overhead

    k = max(2, min(n_ops, start))
    overhead = probe(k)
    while overhead > budget and k < n_ops and len(probes) < max_probes:
        grow = math.ceil(k * overhead / target) if overhead > 0 else 2 * k
        k = min(n_ops, max(2 * k, grow))
        overhead = probe(k)
    if search_down and overhead <= target:
        while k > 2 and len(probes) < max_probes:
            lower = max(2, k // 2)
            lower_overhead = probe(lower)
            if lower_overhead > target:
                break
            k, overhead = lower, lower_overhead
    good = [(kk, o) for kk, o in probes if o <= budget]
    if good:
        k, overhead = min(good)
        return StrideChoice(k, overhead, True, probes)
    widest = max(probes)
    return StrideChoice(widest[0], widest[1], False, probes)


def cycles_for(
    variants: int, step_ns: float, time_budget_ns: float, *, minimum: int = 5, maximum: int = 50, lead_in: int = 2
) -> int:
    """How many cycles over all variants fit ``time_budget_ns`` (each cycle: lead-in steps plus one step per
    variant), between ``minimum`` and ``maximum``: medians need a few samples per op, small steps afford more."""
    if step_ns <= 0:
        return minimum
    fit = int(time_budget_ns // ((variants + lead_in) * step_ns))
    return max(minimum, min(maximum, fit))


# ----------------------------------------------------------------------------------------------------------------
# Stitching


@dataclass(frozen=True)
class SampledStep:
    """One sampled step: which variant ran, its length boundary to boundary, and the end event of every op it
    sampled, in ns from its own start boundary."""

    variant: int
    step_ns: int
    ends: dict[int, int]


@dataclass
class Stitched:
    rows: list[dict[str, Any]]  # one per op: index, op, layer, host_launched, start/end/duration/gap_before ns
    step_ns: int  # the stitched step: head + ops and gaps + tail
    busy_ns: int  # union of the stitched op intervals
    idle_ns: int  # step_ns - busy_ns
    sampled_steps: int
    instrumented_step_ns: float  # median over the sampled steps, boundary to boundary
    variant_step_ns: dict[int, float]  # median per variant
    position_noise_ns: float  # median over ops of the IQR of an op's end position across its steps


def _median_int(values: Sequence[int | float]) -> int:
    return round(statistics.median(values))


def _iqr(values: Sequence[int]) -> float:
    if len(values) < 2:
        return 0.0
    q1, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 75])
    return float(q3 - q1)


def stitch(ops: Sequence[OpTiming], steps: Sequence[SampledStep], stride: int, durations_ns: Sequence[int]) -> Stitched:
    """One step from many sampled ones: per (variant, op) the median end, gaps from ``pair_sources``, the ops
    chained from the head (boundary to op 0's start) on. Raises ``StitchRefused`` when a needed end is missing."""
    n = len(ops)
    if n == 0:
        raise StitchRefused("the step has no ops")
    if len(durations_ns) != n:
        raise StitchRefused(f"{len(durations_ns)} durations for {n} ops")
    if not steps:
        raise StitchRefused("no sampled steps")
    plan = sampling_plan(n, stride)
    samples: dict[tuple[int, int], list[int]] = {}
    lengths: dict[int, list[int]] = {}
    for step in steps:
        if not 0 <= step.variant < len(plan):
            raise StitchRefused(f"a step of variant {step.variant}, but a stride of {stride} has {len(plan)}")
        if set(step.ends) != set(plan[step.variant]):
            raise StitchRefused(
                f"a step of variant {step.variant} timed ops {sorted(step.ends)[:6]}..., not the ops of its plan"
            )
        lengths.setdefault(step.variant, []).append(step.step_ns)
        for index, end in step.ends.items():
            samples.setdefault((step.variant, index), []).append(int(end))
        samples.setdefault((step.variant, n), []).append(int(step.step_ns))  # the next boundary as op n
    missing = [v for v in range(len(plan)) if v not in lengths]
    if missing:
        raise StitchRefused(f"no steps of variant(s) {missing[:8]}: not every op was sampled")
    ends = {key: _median_int(values) for key, values in samples.items()}
    durations = [max(0, int(d)) for d in durations_ns]
    head = ends[(0, 0)] - durations[0]
    gaps = [0] * n
    tail = 0
    for i, (mine, previous) in enumerate(pair_sources(n, stride), start=1):
        if i == n:
            tail = ends[(mine, n)] - ends[(previous, n - 1)]
        else:
            gaps[i] = ends[(mine, i)] - durations[i] - ends[(previous, i - 1)]
    gaps[0] = head + tail
    rows: list[dict[str, Any]] = []
    cursor = head
    for i, op in enumerate(ops):
        start = cursor if i == 0 else cursor + gaps[i]
        finish = start + durations[i]
        rows.append(
            {
                "index": i,
                "op": op.op,
                "layer": op.layer,
                "host_launched": op.host_launched,
                "start_ns": start,
                "end_ns": finish,
                "duration_ns": durations[i],
                "gap_before_ns": gaps[i],
            }
        )
        cursor = finish
    step_ns = cursor + tail
    busy = _union_ns([(r["start_ns"], r["end_ns"]) for r in rows])
    all_lengths = [x for values in lengths.values() for x in values]
    return Stitched(
        rows=rows,
        step_ns=step_ns,
        busy_ns=busy,
        idle_ns=step_ns - busy,
        sampled_steps=len(steps),
        instrumented_step_ns=float(statistics.median(all_lengths)),
        variant_step_ns={v: float(statistics.median(x)) for v, x in sorted(lengths.items())},
        position_noise_ns=float(statistics.median(_iqr(v) for (_, i), v in samples.items() if i < n)),
    )


def _union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def instrumented_rows(ops: Sequence[OpTiming], steps: Sequence[SampledStep], durations_ns: Sequence[int]) -> Stitched:
    """Dense mode: every op timed in every step (one variant); the picture is the instrumented step, events and
    all, each op's end the median over the steps."""
    return stitch(ops, steps, 1, durations_ns)


def sound_corrections(rows: Sequence[dict[str, Any]], segment_of: Sequence[int], node_ns: float) -> list[int | None]:
    """Dense mode only: the gap less one event node's GPU time, where that is sound: a graph-replayed op whose
    previous op is in the same captured graph (nothing on the host can add to that gap, and the one event node
    between them adds its fixed GPU time). None elsewhere: behind a host launch the delay is not linear."""
    out: list[int | None] = []
    for i, row in enumerate(rows):
        same_graph = i > 0 and not row["host_launched"] and segment_of[i] == segment_of[i - 1]
        out.append(max(0, round(row["gap_before_ns"] - node_ns)) if same_graph else None)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Same step every time: kernel sequences from CUPTI


def split_steps(names: Sequence[str], steps: int) -> list[list[str]]:
    """Kernel names of ``steps`` back-to-back steps, split evenly; refuses when they do not divide."""
    if steps < 1 or not names:
        raise StitchRefused("CUPTI saw no kernels")
    if len(names) % steps:
        raise StitchRefused(
            f"CUPTI saw {len(names)} kernels in {steps} steps: the number of kernels per step is not constant"
        )
    per = len(names) // steps
    return [list(names[i * per : (i + 1) * per]) for i in range(steps)]


def first_difference(a: Sequence[str], b: Sequence[str]) -> str | None:
    """Where two kernel sequences part, in words; None when they are the same."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"kernel {index}: {x!r} vs {y!r}"
    if len(a) != len(b):
        return f"{len(a)} kernels vs {len(b)}"
    return None


def sequence_problem(clean_steps: Sequence[Sequence[str]], variant_steps: Mapping[int, Sequence[str]]) -> str | None:
    """Why stitching is unsound, or None: every clean step must run the same kernel sequence, and so must every
    instrumented variant (the events must not change what runs)."""
    if not clean_steps:
        return "no clean steps under CUPTI to check the kernel sequence against"
    reference = clean_steps[0]
    for number, other in enumerate(clean_steps[1:], start=2):
        diff = first_difference(reference, other)
        if diff is not None:
            return f"the clean step is not the same kernel sequence every time (step 1 vs step {number}: {diff})"
    for variant, names in sorted(variant_steps.items()):
        diff = first_difference(reference, names)
        if diff is not None:
            return f"sampled variant {variant} ran a different kernel sequence from the clean step ({diff})"
    return None


# ----------------------------------------------------------------------------------------------------------------
# CUPTI kernels to ops


def counts_from_clusters(kernels: Sequence[tuple[str, int, int]], n_ops: int, separation_ns: int) -> list[int]:
    """Kernels per op from a counting pass in which the ops ran one by one with a sync and a pause between them:
    kernels closer than ``separation_ns`` (start minus the previous end) belong to one op. Refuses when the
    clusters are not exactly ``n_ops``."""
    if not kernels:
        raise StitchRefused("CUPTI saw no kernels in the counting pass")
    counts = [1]
    for (_, _, prev_end), (_, start, _) in zip(kernels, kernels[1:]):
        if start - prev_end >= separation_ns:
            counts.append(1)
        else:
            counts[-1] += 1
    if len(counts) != n_ops:
        raise StitchRefused(f"the counting pass split into {len(counts)} groups of kernels for {n_ops} ops")
    return counts


def group_ops(kernels: Sequence[tuple[int, int]], counts: Sequence[int]) -> list[tuple[int, int]]:
    """One step's kernels (start, end), in order, into op intervals: first start to last end of each op's."""
    if sum(counts) != len(kernels):
        raise StitchRefused(f"{len(kernels)} kernels in the step but the ops account for {sum(counts)}")
    out, at = [], 0
    for count in counts:
        mine = kernels[at : at + count]
        out.append((min(s for s, _ in mine), max(e for _, e in mine)))
        at += count
    return out


@dataclass
class CuptiReference:
    """Uninstrumented steps under CUPTI: busy per step, and per op (when grouped) median duration and gap."""

    steps: int
    step_ns: float  # median step time under CUPTI (boundary events)
    busy_ns: float  # median over steps of the union of kernel intervals
    kernels_per_step: int
    op_busy_ns: float | None = None  # union of op intervals (intra-op gaps count as busy, as for the events)
    op_duration_ns: list[float] | None = None  # per op index, median over steps
    op_gap_ns: list[float] | None = None  # per op index, median over steps (op 0: from the previous step's end)
    grouping: str | None = None  # how kernels were grouped into ops, or why they were not


def cupti_reference(
    step_kernels: Sequence[Sequence[tuple[int, int]]], step_times_ns: Sequence[float], counts: Sequence[int] | None
) -> CuptiReference:
    """From the kernels of back-to-back clean steps (one list per step, CUPTI clock) and their boundary times."""
    from launchprobe.analysis.intervals import interval_stats

    busy = []
    for kernels in step_kernels:
        starts = np.asarray([s for s, _ in kernels], dtype=np.int64)
        ends = np.asarray([e for _, e in kernels], dtype=np.int64)
        busy.append(interval_stats(starts, ends).busy_ns)
    ref = CuptiReference(
        steps=len(step_kernels),
        step_ns=float(statistics.median(step_times_ns)),
        busy_ns=float(statistics.median(busy)),
        kernels_per_step=len(step_kernels[0]) if step_kernels else 0,
    )
    if counts is None:
        ref.grouping = "not grouped: kernels per op unknown"
        return ref
    try:
        per_step = [group_ops(kernels, counts) for kernels in step_kernels]
    except StitchRefused as error:
        ref.grouping = f"not grouped: {error}"
        return ref
    n = len(counts)
    ref.op_busy_ns = float(statistics.median(_union_ns(ops) for ops in per_step))
    ref.op_duration_ns = [float(statistics.median(step[i][1] - step[i][0] for step in per_step)) for i in range(n)]
    gaps: list[list[int]] = [[] for _ in range(n)]
    for number, step in enumerate(per_step):
        for i in range(1, n):
            gaps[i].append(step[i][0] - max(e for _, e in step[:i]))
        if number:
            gaps[0].append(step[0][0] - max(e for _, e in per_step[number - 1]))
    ref.op_gap_ns = [float(statistics.median(g)) if g else 0.0 for g in gaps]
    ref.grouping = "by a counting pass (ops one by one, sync between); its kernel sequence matches the step's"
    return ref


# ----------------------------------------------------------------------------------------------------------------
# The checks


def _close(a: float, b: float, abs_ns: float, rel: float) -> bool:
    return abs(a - b) <= max(abs_ns, rel * abs(b))


def op_class_checks(rows: Sequence[dict[str, Any]], ref: CuptiReference) -> list[dict[str, Any]]:
    """Per op class (name), the median over its ops of the stitched gap and duration against CUPTI's."""
    if ref.op_gap_ns is None or ref.op_duration_ns is None or len(ref.op_gap_ns) != len(rows):
        return []
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row["op"], []).append(i)
    out = []
    for name, members in groups.items():
        events_gap = float(statistics.median(rows[i]["gap_before_ns"] for i in members))
        cupti_gap = float(statistics.median(ref.op_gap_ns[i] for i in members))
        events_dur = float(statistics.median(rows[i]["duration_ns"] for i in members))
        cupti_dur = float(statistics.median(ref.op_duration_ns[i] for i in members))
        out.append(
            {
                "op": name,
                "count": len(members),
                "events_gap_ns_median": events_gap,
                "cupti_gap_ns_median": cupti_gap,
                "gap_diff_ns": events_gap - cupti_gap,
                "gap_agrees": _close(events_gap, cupti_gap, OP_GAP_ABS_NS, OP_GAP_REL),
                "events_duration_ns_median": events_dur,
                "cupti_duration_ns_median": cupti_dur,
                "duration_diff_ns": events_dur - cupti_dur,
                "duration_agrees": _close(events_dur, cupti_dur, OP_GAP_ABS_NS, OP_GAP_REL),
            }
        )
    return out


def clean_check(stitched: Stitched, clean_step_ns: float, ref: CuptiReference) -> dict[str, Any]:
    """The stitched step against the clean step and CUPTI: the CuptiCheck record's fields.

    - CUPTI's own step against clean: within 5%, its timestamps describe the clean step (trusted); otherwise only
      its busy time is used (kernel durations do not depend on the host), and the op-for-op check is not made.
    - stitched gap total (idle of the stitched step) against the clean idle: clean step time minus CUPTI busy,
      both at op granularity where the kernels could be grouped into ops.
    - stitched busy against CUPTI busy; per op class median gap and duration against CUPTI's (when trusted).
    """
    cupti_overhead = ref.step_ns / clean_step_ns - 1.0 if clean_step_ns else None
    trusted = cupti_overhead is not None and abs(cupti_overhead) <= CUPTI_TRUST
    busy_ref = ref.op_busy_ns if ref.op_busy_ns is not None else ref.busy_ns
    clean_idle = clean_step_ns - busy_ref
    tolerance = max(GAP_TOTAL_ABS_NS, GAP_TOTAL_REL * abs(clean_idle))
    gap_diff = stitched.idle_ns - clean_idle
    busy_rel = abs(stitched.busy_ns - busy_ref) / busy_ref if busy_ref else None
    ops = op_class_checks(stitched.rows, ref) if trusted else []
    ops_agree = all(o["gap_agrees"] for o in ops) if ops else None
    total_ok = abs(gap_diff) <= tolerance
    busy_ok = busy_rel is not None and busy_rel <= BUSY_REL
    if trusted:
        trust = (
            f"CUPTI's step is {cupti_overhead:+.1%} off clean (within {CUPTI_TRUST:.0%}): its timestamps describe "
            "the clean step, op for op"
        )
    else:
        trust = (
            f"CUPTI's step is {cupti_overhead:+.1%} off clean (beyond {CUPTI_TRUST:.0%}): its gaps are not the clean "
            "step's, so only its busy time (kernel durations) is used and the op-for-op check is not made"
            if cupti_overhead is not None
            else "no clean step time to set CUPTI's against"
        )
    return {
        "available": True,
        "reference": "clean steps under torch.profiler (CUPTI), no events",
        "steps": ref.steps,
        "clean_step_ns": clean_step_ns,
        "cupti_step_ns": ref.step_ns,
        "cupti_overhead_fraction": cupti_overhead,
        "cupti_trusted": trusted,
        "trust_note": trust,
        "events_ops": len(stitched.rows),
        "cupti_kernels": ref.kernels_per_step,
        "grouping": ref.grouping,
        "events_busy_ns": float(stitched.busy_ns),
        "cupti_busy_ns": ref.busy_ns,
        "cupti_op_busy_ns": ref.op_busy_ns,
        "busy_rel_diff": busy_rel,
        "busy_agrees": busy_ok,
        "events_total_gap_ns": float(stitched.idle_ns),
        "clean_idle_ns": clean_idle,
        "cupti_total_gap_ns": ref.step_ns - busy_ref,
        "total_gap_diff_ns": gap_diff,
        "total_gap_tolerance_ns": tolerance,
        "total_gap_agrees": total_ok,
        "ops": ops,
        "ops_agree": ops_agree,
        "agrees": bool(total_ok and busy_ok and ops_agree is not False),
    }


def summarise(stitched: Stitched, step_ns: float) -> dict[str, Any]:
    """The op table and gap distribution of a stitched (or instrumented) step."""
    return {
        "ops": aggregate_ops(stitched.rows, step_ns),
        "gaps": gap_distribution([r["gap_before_ns"] for r in stitched.rows]),
    }
