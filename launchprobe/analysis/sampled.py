"""Sampled per-kernel gaps: which ops get an end event in which step, how the steps are stitched into one clean
step, how the spacing m is chosen, and the checks against CUPTI. Pure Python on event streams (integer ns);
measure/kernel_pass.py produces the streams on a GPU. docs/gaps.md has the method and its argument.

The scheme, for a step of n ops, a reach r (2 <= r) and a spacing m (r + 2 <= m <= n - r): every gap is measured
inside one step, between two events r or r - 1 ops apart, and taken as the difference of two such local
measurements that share their first event:
- a "far" variant v records end events after ops j and j + r, a "near" variant v after ops j and j + r - 1, for
  every anchor j = v, v + m, v + 2m, ... <= n - 1 - r (0 <= v < m). Within one step, d_far = end_{j+r} - end_j
  and d_near = end_{j+r-1} - end_j; the gap before op i = j + r is d_far - d_near - duration_i. Both steps are
  alike up to op i - 1, event after op j included (whatever it costs, GPU time, a broken PDL overlap, host time,
  it is in both), and neither has an event between op i - 1 and op i: nothing to correct, and no drift of the step
  accumulates, since both ends are measured from an event r ops earlier in the same step. One thing differs: the
  anchor's host time delays every later launch, and reaches the GPU at the first op after j where the host is
  behind; if that is op i, the far end carries it and the near end does not. Eager steps therefore take a reach
  of a whole layer (``default_reach``), so that the near pair has mostly let that delay in already. The anchor's
  event leaves the GPU idle, so the ops just after it start cold (no programmatic early launch); the reach puts
  the measured gap r - 1 ops past that restart.
- "solo" variants record one event after op 0, ..., op r - 1 (nothing ahead): the head (boundary to op 0's
  start) and the gaps before ops 1 .. r - 1.
- the gap between steps (before op 0) is measured like the others, across the boundary: a "wrap_far" variant
  records an event after op n - r and is always followed, in the same cycle, by the solo variant of op 0, whose
  event is r ops after that anchor; a "wrap_near" variant records events after ops n - r and n - 1. The tail (op
  n - 1's end to the next boundary) is that gap less the head, kept only where it stands out of its noise
  (``TAIL_SIGMAS``; both differences span the last op, whose duration noise enters twice), else 0: the boundary
  event completes when the last op does. (A step of r ops or fewer has no room for the pair: its tail comes from a
  solo variant of op n - 1 and the event-free "plain" variant's length.) A kept tail closes the stitched step and
  its gap total; op 0's gap is the head alone: on the H200 the measured tail did not follow what the head missed of
  CUPTI's gap between steps, and adding it took op 0's gap further from CUPTI's (tests/test_tail_field.py).
- where the step starts with a captured graph piece whose last op is h, followed by a host-launched op
  (piecewise), a "head" variant times op h's end alone, by a host event recorded right after the piece's replay,
  and always runs right after the plain variant, so that the step before it and its own first piece are the clean
  runner's graphs (under CUPTI on the H200, a step whose first piece was captured afresh with an event node in it
  started 1.2-2.4 us sooner, docs/gaps.md). The head is then op h's end less the durations of ops 0 .. h and the
  gaps before ops 1 .. h (differences inside recaptured pieces, where an earlier start cancels). Timing the
  piece's end, not the host-launched op after it, keeps that op's gap out of the head: its far pair reads it long
  where the far anchor's next event lies past the piece's end (docs/performance.md). The wrap_far variant is then
  followed by a "wrap_head" variant, another timing op h alone so, whose own median end closes the wrap
  pair.
- the "plain" variant, no events, runs among the others as the clean step does.
- "piece" variants (piecewise, ``piece_boundaries``): each times two graph pieces after attention from attention's
  end to a host event right after the clean piece's replay, nothing inside the piece; stitched into nothing, they
  give CUPTI's effect on the gap into those pieces (``piece_cupti_effects``). They run the extra rounds too.
The variants measuring an op that occurs once per step (``one_per_step_variants``) run in extra rounds
(``extra_rounds``): their class median has no other layers to average the noise over.
Dense (``dense_plan``): every op timed in one step; the event after op i - 1 sits in the gap before op i.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from launchprobe.analysis import standout
from launchprobe.analysis.intervals import interval_stats, union_ns
from launchprobe.analysis.kernel_gaps import OpTiming, aggregate_ops, gap_distribution
from launchprobe.run.schema import (
    CHECKS_AGREE,
    CHECKS_DISAGREE,
    CHECKS_NOT_DECIDED,
    CUPTI_EFFECT_HEAD_VARIANT,
    CUPTI_EFFECT_PIECE_VARIANT,
    CUPTI_EFFECT_STITCHED,
    GAP_AGREE,
    GAP_AGREE_ACROSS_CAPTURES,
    GAP_AGREE_LIKE_FOR_LIKE,
    GAP_DISAGREE,
    GAP_NOT_DECIDED,
    OVERHEAD_BASIS_POOLED,
    OVERHEAD_BASIS_SLOWEST,
)

OVERHEAD_BUDGET = 0.02  # the sampled step stays within 2% of clean (issue 12)
OVERHEAD_TARGET = 0.01  # k is first chosen for half the budget, leaving room for noise
# A probe is accepted within this: across the 42-194 variants of a graph cell the slowest read up to 0.6 points over
# its probe of the densest variant, in 8B eager up to 0.8 over its probe of the paired variants (H200, on a moving
# 1B eager host the slowest of 200-300 reads high by noise: ``Overheads``; docs/performance.md), so the probe leaves
# that much of the budget.
OVERHEAD_ACCEPT = 0.014
CUPTI_TRUST = 0.05  # CUPTI's own step within 5% of clean: its timestamps describe the clean step
GAP_TOTAL_REL, GAP_TOTAL_ABS_NS = 0.10, 50_000  # stitched gap total vs clean idle: 10% or 50 us, the larger
GAP_TOTAL_SIGMAS = 2.0  # the gap total is decided at two of its standard errors (``gap_total_verdict``)
SCATTER_MIN_POSITIONS = 4  # an op class's positions say how far they scatter from this many (``position_scatter_ns``)
NOISE_OVERLAP_DRAWS = 200  # draws of the gaps' errors for the overlap they make (``noise_overlap_ns``)
BUSY_REL = 0.05  # stitched busy vs CUPTI busy, beyond the overlap the gaps' noise makes (``busy_verdict``)
# Within a cycle a clean block runs before every CLEAN_EVERY variants and after the last: each sampled step is set
# against the clean steps timed just before and after its group, tens of ms away, not against one clean step per
# cycle. An eager host on the H200 machine switched between speeds that last about 0.1-1 s (1B eager: 2.3 and 3.7
# ms a step, docs/performance.md).
CLEAN_EVERY = 8
# The host held still when its clean references' p10-p90 spread is within this (graph modes on the H200: about 1%;
# eager there: 14-80%).
HOST_STEADY_SPREAD = 0.05
# No variant stands out (none costs more than the others, as far as this host's noise shows) where shuffling the
# variant labels over the same steps ranks a variant as high as the highest measured more often than this. On the
# H200 all 24 recorded graph passes and 3 of 4 steady eager ones read at the test's floor; 13 of 14 eager passes
# whose host moved by 18-67% read 0.08-0.94, the other 0.04 (docs/performance.md).
STANDOUT_P = 0.05
OP_GAP_ABS_NS, OP_GAP_REL = 1_000, 0.15  # per op class median gap (and duration) vs CUPTI: 1 us or 15%
# CUPTI moves a class's gap where the events read it, with and without CUPTI, further apart than this many standard
# errors of that difference and, unless the head or piece variants read it (nothing but CUPTI differs there), than
# the op bar: CUPTI's value is then not that class's clean gap.
CUPTI_EFFECT_SIGMAS = 2.0
# A class whose events miss CUPTI's reference is not decided where at least this share of CUPTI's own clean steps
# later in the pass (the CUPTI cycle's) put it beyond the bar of that reference. On the H200 (1B eager b64,
# 2026-12-03 06:38 UTC) attention read 0.34 us by the events, 1.46 by CUPTI's reference and -0.72 in 99% of
# CUPTI's later clean steps; in 167 other class checks of 14 passes with CUPTI trusted none reached a half.
CUPTI_CYCLE_UNSTEADY = 0.5
# A second capture moves a class's CUPTI gap where the shift is beyond CUPTI_EFFECT_SIGMAS of its error and at least
# this much (or beyond the bar). On the H200 a piece start's move between its two values was 0.70-1.35 us, and
# CUPTI's timestamp steps moved the classes inside a piece by up to 0.2 us (docs/performance.md).
CAPTURE_MOVE_MIN_NS = 500
# An eager stride probe runs this many of the candidate plan's paired variants, as the cycles run them: a variant
# run back to back with itself after two clean steps (the graph modes' probe) hides its host cost in the queue the
# clean steps left. On the H200 (8B eager, spacings 18-21) that probe read +0.5 to +1.1% where the cycles' paired
# variants then read +1.6 to +1.9% pooled and their slowest +2.1 to +2.7% (docs/performance.md).
PROBE_VARIANTS = 16
# A stride probe tells the target only where its standard error is within this share of it; a noisier one counts
# as over every bound (``choose_stride``). On the H200's 1B eager b1, on hosts moving 49% and 67% (2026-12-03), the
# probes read -2.8% +/- 1.4% at m = 18 and +0.4% +/- 0.6% at m = 42, and the cycles there then ran +4.4% and
# +2.1% pooled, over the budget. Replayed on the recorded probes of 69 eager passes (2026-12-02/03), the rule
# widens m past the spacing they ran in 6, all on hosts moving 11-69%, those two among them; graph-mode probes
# read to 0.1%.
PROBE_RESOLVES = 0.5
# Piece boundaries timed per piece variant (two host events each): few enough to cost the step nothing measurable.
PIECES_PER_STEP = 2
# The variants that measure an op occurring once per step (embed, final_norm, lm_head) run until they have about
# this many steps: lm_head's duration varies by 1-2.6 us from step to step (sd, CUPTI, H200), and its gap is a
# difference of medians that carry that noise, with no other layers to average it over (docs/performance.md).
ONE_PER_STEP_SAMPLES = 64
# The tail (last op's end to the boundary event) closes the stitched step as measured only where it stands this
# many standard errors from zero; otherwise as zero: the boundary event completes when the last op does.
TAIL_SIGMAS = 3.0


T = TypeVar("T")


class StitchRefused(Exception):
    """The sampled steps cannot be stitched into one step; the message says why."""


# ----------------------------------------------------------------------------------------------------------------
# Which ops are sampled in which step


# Anchor to measured op, in ops. After an event node the launch pipeline refills over about two kernels: on a
# chain of identical kernels (H200) reach 2 and 3 read every gap 0.23-0.34 us long, reach 4 and 6 within 0.06 us;
# and at reach 2 a PDL-launched op two after the anchor (attention at batch 64) read 4-5 us long
# (docs/performance.md, 2026-12-01 12:37 and 12:43 UTC).
DEFAULT_REACH = 4


def default_reach(ops: Sequence[OpTiming]) -> int:
    """The reach for a step: ``DEFAULT_REACH``, or, where every op is host-launched (eager), one layer's ops + 1,
    so that the near pair spans a whole layer. The anchor's record call costs the host time, which delays every
    later launch; the GPU sees that delay from the first op after the anchor where the host is behind (the queue
    absorbs it before), and along the step it only grows, to at most the record's cost. Where that op is the far
    pair's last (the host caught up with the GPU just there), the far end carries the delay and the near end does
    not: the gap reads long by up to the record's cost. Once the near pair spans a layer, the op of the same class
    one layer earlier has mostly let the delay in already. On a simulated eager host that catches up once a layer,
    the stitched total read 90-130 us long at reach 4 and within its noise at 11 (tests/test_sampled_gaps.py);
    the H200 runs are in docs/gaps.md."""
    if not ops or not all(op.host_launched for op in ops):
        return DEFAULT_REACH
    per_layer = max(Counter(op.layer for op in ops if op.layer >= 0).values(), default=0)
    return max(DEFAULT_REACH, per_layer + 1)


def default_order(ops: Sequence[OpTiming]) -> str:
    """The cycles' variant order (``variant_order``): ``alternate`` where every op is host-launched (eager),
    ``rotate`` elsewhere. On an eager host the step run right before a pair's step moves the pair's reading: with
    far steps run right before their near ones in every cycle (``rotate``) the stitched 1B eager step read
    +3.6 to +7.8% long on the H200, with the near ones first (``reverse``) -8.7 to +0.2%, interleaved in the same
    passes; cycles alternating between the two read the whole pass -1.5 to +3.7% (docs/gaps.md). Graph steps keep
    ``rotate``, under which every graph cell met its bars."""
    if ops and all(op.host_launched for op in ops):
        return "alternate"
    return "rotate"


def min_spacing(reach: int = DEFAULT_REACH) -> int:
    """The narrowest spacing: pairs of one variant never touch (anchor j's events end at j + r < j + m)."""
    return reach + 2


@dataclass(frozen=True)
class Plan:
    """The instrumented variants of a step: per variant, the ops with an end event after them, and its role."""

    n_ops: int
    spacing: int  # m: anchors of one variant are m ops apart (1: dense)
    variants: list[list[int]]
    roles: list[str]  # plain | solo | head | wrap_head | far | near | wrap_far | wrap_near | piece | dense
    reach: int = DEFAULT_REACH  # r: a far pair's events are r ops apart, a near pair's r - 1

    def index(self, role: str, first: int) -> int:
        """The variant of ``role`` whose first event is after op ``first``."""
        for v, (r, ops) in enumerate(zip(self.roles, self.variants)):
            if r == role and ops and ops[0] == first:
                return v
        raise KeyError((role, first))

    @property
    def densest(self) -> list[int]:
        return max(self.variants, key=len)

    @property
    def head_op(self) -> int | None:
        """The op whose end the head variant times (module docstring), or None: the head is op 0's solo end."""
        return self.variants[self.roles.index("head")][0] if "head" in self.roles else None

    @property
    def after_replay(self) -> set[int]:
        """The variants that time a graph piece's last op by a host event after its replay: head, wrap_head and
        piece."""
        return {v for v, role in enumerate(self.roles) if role in ("head", "wrap_head", "piece")}

    @property
    def piece_variants(self) -> list[int]:
        """The variants that time piece boundaries (``piece_boundaries``) for ``piece_cupti_effects``."""
        return [v for v, role in enumerate(self.roles) if role == "piece"]

    @property
    def follows(self) -> dict[int, int]:
        """Variants that must run right after another in a cycle: after the wrap_far variant, the one whose first
        event closes the wrap pair (wrap_head where there is a head variant, else the solo of op 0); and the head
        variant after the plain one."""
        out: dict[int, int] = {}
        if "head" in self.roles:
            out[self.roles.index("plain")] = self.roles.index("head")
        if "wrap_far" in self.roles:
            after = self.roles.index("wrap_head") if "wrap_head" in self.roles else self.index("solo", 0)
            out[self.roles.index("wrap_far")] = after
        return out


def widest_spacing(n_ops: int, reach: int = DEFAULT_REACH) -> int:
    """The widest useful spacing: one anchor per variant."""
    return max(min_spacing(reach), n_ops - reach)


def head_op(ops: Sequence[OpTiming]) -> int | None:
    """The last op of a step-opening graph piece that a host-launched op follows (piecewise: ``rotary``, before
    ``kv_write``), whose end a head variant times by a host event recorded right after the piece's replay; None
    where op 0 is host-launched, nothing is, or the piece is op 0 alone."""
    for i, op in enumerate(ops):
        if op.host_launched:
            return i - 1 if i > 1 else None
    return None


def spread_over_steps(items: Sequence[T], per_step: int) -> list[list[T]]:
    """``items`` dealt into as few groups of at most ``per_step`` as hold them, each group's items spread over the
    step (every k-th), for variants that may carry only a few of them a step."""
    count = -(-len(items) // per_step)
    return [list(items[v::count]) for v in range(count)]


def piece_boundaries(ops: Sequence[OpTiming]) -> list[tuple[int, int]]:
    """Each graph piece that a host-launched op precedes (piecewise: attention, then o_proj .. the next layer's
    rotary), as (that op, the piece's last op): a piece variant times both ends by host events, the second right
    after the clean piece's replay, so that no event sits inside the piece (``piece_cupti_effects``)."""
    out = []
    for i in range(1, len(ops)):
        if ops[i - 1].host_launched and not ops[i].host_launched:
            last = i
            while last + 1 < len(ops) and not ops[last + 1].host_launched:
                last += 1
            out.append((i - 1, last))
    return out


def pair_plan(
    n_ops: int,
    spacing: int,
    reach: int = DEFAULT_REACH,
    head: int | None = None,
    pieces: Sequence[tuple[int, int]] = (),
) -> Plan:
    """The variants of the paired-event scheme (module docstring); ``spacing`` is clamped to
    [r + 2, n - r]. A step shorter than r + 1 ops is measured by solo variants alone. ``head`` (``head_op``): the
    op a head variant times, for a step that opens with a graph piece (piecewise). ``pieces``
    (``piece_boundaries``): the piece variants' boundaries, ``PIECES_PER_STEP`` a variant, spread over the step."""
    if n_ops < 1 or spacing < 1:
        raise ValueError("a sampling plan needs at least one op and a spacing of at least 1")
    if reach < 2:
        raise ValueError("the reach of a pair is at least 2 ops (a near pair of 1 op)")
    if head is not None and not 0 < head < n_ops:
        raise ValueError(f"a head variant times an op after op 0 and inside the step, not op {head}")
    m = max(min_spacing(reach), min(spacing, n_ops - reach))
    variants: list[list[int]] = [[]]
    roles = ["plain"]
    wraps = n_ops > reach
    for op in sorted({*range(min(reach, n_ops))} | (set() if wraps else {n_ops - 1})):
        variants.append([op])
        roles.append("solo")
    if head is not None:
        variants.append([head])
        roles.append("head")
    if wraps:
        variants += [[n_ops - reach], [n_ops - reach, n_ops - 1]]
        roles += ["wrap_far", "wrap_near"]
        if head is not None:
            variants.append([head])
            roles.append("wrap_head")
    last_anchor = n_ops - 1 - reach
    for v in range(min(m, max(0, last_anchor + 1))):
        anchors = range(v, last_anchor + 1, m)
        variants += [
            sorted({j + d for j in anchors for d in (0, reach)}),
            sorted({j + d for j in anchors for d in (0, reach - 1)}),
        ]
        roles += ["far", "near"]
    for group in spread_over_steps(pieces, PIECES_PER_STEP):
        variants.append(sorted(i for a, b in group for i in (a, b)))
        roles.append("piece")
    return Plan(n_ops, m, variants, roles, reach)


def probe_variants(plan: Plan, count: int = PROBE_VARIANTS) -> list[int]:
    """The far and near variants an eager stride probe runs (``kernel_pass.cycled``): all of ``plan``'s, or, where
    there are more than ``count``, both variants of ``count // 2`` anchor offsets spread evenly over the spacing."""
    far = [v for v, role in enumerate(plan.roles) if role == "far"]
    near = [v for v, role in enumerate(plan.roles) if role == "near"]
    pairs = list(zip(far, near))
    keep = max(1, count // 2)
    if len(pairs) > keep:
        pairs = [pairs[i * len(pairs) // keep] for i in range(keep)]
    return [v for pair in pairs for v in pair]


def dense_plan(n_ops: int) -> Plan:
    if n_ops < 1:
        raise ValueError("a sampling plan needs at least one op")
    return Plan(n_ops, 1, [list(range(n_ops))], ["dense"])


def pairing_note(plan: Plan, order_kind: str = "rotate") -> str:
    if plan.roles == ["dense"]:
        return "dense: every op timed in one step; the event after op i-1 sits in the gap before op i"
    return (
        f"paired events, anchors {plan.spacing} ops apart, reach {plan.reach}: each gap is end_(j+{plan.reach}) - "
        f"end_j less end_(j+{plan.reach - 1}) - end_j, each measured inside one step from the same anchor event "
        "after op j; no event sits in the measured gap"
        + (
            f"; a reach of {plan.reach} spans a layer: an eager anchor's host time reaches the GPU where the host "
            "falls behind, so the near pair has mostly let it in before the measured op"
            if plan.reach > DEFAULT_REACH
            else ""
        )
        + (
            "; the cycles alternate direction, so that each far step runs right before its near one in half of "
            "them and right after it in the other half: on an eager host the step run just before moves a pair's "
            "reading (llama-3.2-1b eager on the H200: far first read the stitched step 4-8% long, near first 0-9% "
            "short, docs/gaps.md)"
            if order_kind == "alternate"
            else ""
        )
        + (
            f"; the head from op {plan.head_op}'s end alone, a host event after the first graph piece's replay (the "
            "piece not captured afresh), less the durations and gaps before it"
            if plan.head_op is not None
            else ""
        )
        + (
            f"; {len(plan.piece_variants)} piece variants time each graph piece after a host-launched op from that "
            "op's end to a host event after the clean piece's replay, for CUPTI's effect on the piece's start"
            if plan.piece_variants
            else ""
        )
    )


def cycle_groups(order: Sequence[int], every: int, follows: Mapping[int, int] | None = None) -> list[list[int]]:
    """A cycle's variants (``order``) in groups of ``every``, a clean block to run before each group and after the
    last; a group never ends between a variant and the one that must follow it (``Plan.follows``)."""
    if every < 1:
        raise ValueError("a group holds at least one variant")
    bound = dict(follows or {})
    groups: list[list[int]] = []
    current: list[int] = []
    for variant in order:
        current.append(variant)
        if len(current) >= every and variant not in bound:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


ORDERS = ("rotate", "shuffle", "reverse", "alternate")


def variant_order(
    variants: int,
    cycle: int,
    follows: Mapping[int, int] | None = None,
    members: Sequence[int] | None = None,
    order_kind: str = "rotate",
) -> list[int]:
    """The variants of one cycle (``members``, default all ``variants``): ``rotate`` starts the list at the cycle's
    place (each variant keeps its neighbours: a far variant always runs right before its near one); ``shuffle``
    permutes it afresh each cycle (seeded by the cycle); ``reverse`` is ``rotate`` backwards; ``alternate`` is
    ``rotate`` in even cycles and ``reverse`` in odd ones (the two side by side in one pass). Then a variant in
    ``follows``' values runs right after its key (``Plan.follows``)."""
    if order_kind not in ORDERS:
        raise ValueError(f"a variant order is one of {ORDERS}, not {order_kind!r}")
    chosen = list(range(variants)) if members is None else sorted(set(members))
    order = [chosen[(cycle + j) % len(chosen)] for j in range(len(chosen))] if chosen else []
    if order_kind == "shuffle":
        random.Random(cycle).shuffle(order)
    elif order_kind == "reverse" or (order_kind == "alternate" and cycle % 2):
        order.reverse()
    for before, after in (follows or {}).items():
        if before in order and after in order:
            order.remove(after)
            order.insert(order.index(before) + 1, after)
    return order


def one_per_step_variants(plan: Plan, names: Sequence[str]) -> list[int]:
    """The variants that measure the gap before an op whose name occurs once in the step (embed, final_norm,
    lm_head): its class median is that one gap, with no other layers to average its noise over (``extra_rounds``)."""
    if plan.roles == ["dense"]:
        return []
    counts = Counter(names)
    solo = {ops[0]: v for v, (role, ops) in enumerate(zip(plan.roles, plan.variants)) if role == "solo"}

    def measuring(i: int) -> set[int]:
        """The variants whose measurements give the gap before op i."""
        if i == 0:
            wraps = {v for v, role in enumerate(plan.roles) if role in ("wrap_far", "wrap_near")}
            if plan.head_op is None:
                return {solo[0]} | wraps
            inner = set().union(*(measuring(k) for k in range(1, plan.head_op + 1)))
            heads = {v for v, role in enumerate(plan.roles) if role in ("plain", "head", "wrap_head")}
            return heads | wraps | inner
        if i < plan.reach or i in solo:
            return {solo[i], solo[i - 1]}
        return {v for v, (role, ops) in enumerate(zip(plan.roles, plan.variants))
                if role in ("far", "near") and i - plan.reach in ops[0::2]}  # fmt: skip

    wanted: set[int] = set()
    for i, name in enumerate(names):
        if counts[name] == 1:
            wanted |= measuring(i)
    return sorted(wanted)


def extra_rounds(cycles: int, samples: int = ONE_PER_STEP_SAMPLES) -> int:
    """Rounds over ``one_per_step_variants`` to run after each of ``cycles`` cycles so that they have about
    ``samples`` steps each. A variant's events can be read once between syncs (a captured graph records into the
    same events at every replay), so a variant runs at most once per round; each round is a short cycle."""
    return max(0, math.ceil(samples / max(1, cycles)) - 1)


# ----------------------------------------------------------------------------------------------------------------
# Choosing the spacing m


def initial_spacing(
    op_costs_ns: Sequence[float], clean_step_ns: float, target: float = OVERHEAD_TARGET, reach: int = DEFAULT_REACH
) -> int:
    """The smallest spacing m whose predicted cost per step is within ``target`` of the clean step: a variant has
    two events per anchor, about 2 n / m events, so the cost is about 2 sum(op_costs) / m.

    ``op_costs_ns`` is what one end event after each op is predicted to add: the host cost of a record for a
    host-launched op (all of it shows when the host is behind), the GPU cost of an event node inside a graph.
    """
    widest = widest_spacing(len(op_costs_ns), reach)
    if clean_step_ns <= 0 or target <= 0:
        return widest
    m = math.ceil(2 * sum(max(0.0, c) for c in op_costs_ns) / (target * clean_step_ns))
    return max(min_spacing(reach), min(widest, m))


@dataclass
class StrideChoice:
    stride: int
    overhead_fraction: float  # measured at the chosen stride (its densest variant)
    within_budget: bool
    probes: list[tuple[int, float, float]] = field(default_factory=list)  # (m, overhead, its error), probe order


def choose_stride(
    widest: int,
    start: int,
    measure: Callable[[int], tuple[float, float]],
    *,
    lowest: int = min_spacing(),
    budget: float = OVERHEAD_BUDGET,
    accept: float = OVERHEAD_ACCEPT,
    target: float = OVERHEAD_TARGET,
    search_down: bool = True,
    max_probes: int = 6,
) -> StrideChoice:
    """The spacing m from measurement: from ``start`` (``initial_spacing``), widen m while the measured overhead is
    over ``accept`` (the budget less the spread between variants); then, if ``search_down``, halve m while the
    overhead stays within ``target`` (an eager host that runs ahead of the GPU absorbs event records, and the
    worst-case prediction was too cautious).

    ``measure(m)`` returns the measured overhead fraction of the probe at spacing m (the densest variant; in eager
    the paired variants as the cycles run them, ``PROBE_VARIANTS``) and its standard error; a probe counts at its
    overhead plus that error, so that a noisy host (whose probes read anything from -1% to +2% for one m) does not
    talk the choice into a spacing the cycles then find too dense. The chosen m is the smallest probed one within
    ``accept`` (a probe of the search down: within ``target``, the bound it searched by; the search down never
    probes again a spacing it widened from), else the smallest one probed while widening within the budget; if
    even ``widest`` is over the budget, m = widest and ``within_budget`` is False. A probe whose error is over
    ``PROBE_RESOLVES`` of the target cannot tell the target from nothing and counts as over every bound: m widens
    from it and the search down stops at it; where no probe could tell, m is the widest probed, within the budget
    by its overhead plus its error. On the H200 (8B eager b8, 2026-12-02 07:26 UTC) a probe of the search down read
    +1.1% at m = 18, within ``accept`` but not ``target``; the cycles then ran +1.5% pooled and +2.5% in the slowest
    variant."""
    if widest <= lowest:
        return StrideChoice(widest, 0.0, True)
    probes: list[tuple[int, float, float]] = []
    noisy: set[int] = set()  # the probes too noisy to tell the target from nothing (``PROBE_RESOLVES``)

    def probe(k: int) -> float:
        overhead, error = measure(k)
        probes.append((k, overhead, error))
        if abs(error) > target * PROBE_RESOLVES:
            noisy.add(len(probes) - 1)
        return overhead + abs(error)

    def last_noisy() -> bool:  # over every bound: m widens from it, the search down stops at it
        return len(probes) - 1 in noisy

    k = max(lowest, min(widest, start))
    upper = probe(k)
    while (upper > accept or last_noisy()) and k < widest and len(probes) < max_probes:
        grow = math.ceil(k * upper / target) if upper > 0 else 2 * k
        k = min(widest, max(2 * k, grow))
        upper = probe(k)
    widened = len(probes)
    too_dense = {kk for kk, _, _ in probes[: widened - 1]}  # widened from: over ``accept`` or noisy when probed
    if search_down and upper <= target and not last_noisy():
        while k > lowest and len(probes) < max_probes:
            lower = max(lowest, k // 2)
            if lower in too_dense or probe(lower) > target or last_noisy():
                break
            k = lower
    readings = [(kk, o + abs(e), o) for kk, o, e in probes]
    resolved = [(n, r) for n, r in enumerate(readings) if n not in noisy]
    good = [r for n, r in resolved if r[1] <= (accept if n < widened else target)] or [
        r for n, r in resolved if n < widened and r[1] <= budget
    ]
    if good:
        k, _, overhead = min(good)
        return StrideChoice(k, overhead, True, probes)
    last = max(readings)  # the sparsest probed: over the budget, or no probe could tell
    return StrideChoice(last[0], last[2], last[1] <= budget, probes)


def cycles_for(
    variants: int,
    step_ns: float,
    time_budget_ns: float,
    *,
    minimum: int = 5,
    maximum: int = 50,
    lead_in: int = 2,
    every: int = CLEAN_EVERY,
) -> int:
    """How many cycles over all variants fit ``time_budget_ns`` after one warm-up pass over them (each cycle: one
    step per variant, and a clean block of ``lead_in`` steps before every ``every`` variants and after the last),
    between ``minimum`` and ``maximum``: medians need a few samples per op, small steps afford more."""
    if step_ns <= 0:
        return minimum
    per_cycle = variants + lead_in * (math.ceil(variants / max(1, every)) + 1)
    fit = int((time_budget_ns - variants * step_ns) // (per_cycle * step_ns))
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
    reference_ns: float | None = None  # the clean steps timed just before and after its group, averaged


def steps_to_fit(error: float, room: float, sigmas: float = 2.0) -> float | None:
    """About how many times the steps bring ``sigmas`` standard errors within ``room``, the error falling with the
    square root of the steps; None where nothing would (no error, or no room)."""
    return (sigmas * error / room) ** 2 if error > 0 and room > 0 else None


@dataclass(frozen=True)
class Overheads:
    """What the sampled steps cost against the clean steps timed beside them (``local_overheads``)."""

    pooled: float  # median over all sampled steps of step / its clean reference, less 1
    slowest: float  # the slowest variant's median of that ratio, less 1
    slowest_variant: int
    slowest_error: float  # the standard error of that median
    per_variant: dict[int, float]
    pooled_error: float  # the standard error of the pooled median
    standout_p: float  # ``standout.highest_group``: how often shuffled labels rank a variant as high
    shuffled_slowest_q95: float  # the slowest median with labels shuffled (p95), less 1

    @property
    def none_stands_out(self) -> bool:
        """No variant stands out from the others on this host's noise (``STANDOUT_P``); a single variant (dense)
        is judged as the slowest."""
        return len(self.per_variant) > 1 and self.standout_p > STANDOUT_P

    def within(self, budget: float) -> bool | None:
        """Whether the sampled steps keep to ``budget``: never where the pooled overhead is over it. Where no
        variant stands out (``none_stands_out``), the slowest reads high by the noise of many medians alone, and the
        steps are judged by the pooled overhead at two of its standard errors. Otherwise by the slowest variant:
        over where it is over by more than two of its own standard errors. None, not decided, where the error that
        decides is over half the budget (slowest) or puts the pooled past it: a host that moves leaves nothing to
        decide on."""
        if self.pooled > budget:
            return False
        if self.none_stands_out:
            if self.pooled + 2 * self.pooled_error <= budget:
                return True
            return None
        if self.slowest - 2 * self.slowest_error > budget:
            return False
        if self.slowest_error > budget / 2:
            return None
        return True

    def steps_to_decide(self, budget: float) -> float | None:
        """For a budget ``within`` leaves undecided: about how many times the steps per variant would decide it,
        each error falling with their square root and the overheads holding (pooled: two errors inside what the
        budget leaves above it; slowest: its error within half the budget). None where it is decided, or where
        nothing would."""
        if self.within(budget) is not None:
            return None
        if self.none_stands_out:
            return steps_to_fit(self.pooled_error, budget - self.pooled)
        return steps_to_fit(self.slowest_error, budget)

    @property
    def basis(self) -> str:
        """What ``within`` judged by."""
        return OVERHEAD_BASIS_POOLED if self.none_stands_out else OVERHEAD_BASIS_SLOWEST


def local_overheads(steps: Sequence[SampledStep], clean_ns: float) -> Overheads:
    """Each sampled step against its own clean reference (``reference_ns``; ``clean_ns`` where it has none): the
    host may move between groups of a cycle, so a step is set against the clean steps timed around it. Whether one
    variant stands out is a permutation test on the steps' ranks (``standout.highest_group``)."""
    if not steps:
        raise ValueError("no sampled steps")
    ratios: dict[int, list[float]] = {}
    for s in steps:
        reference = s.reference_ns if s.reference_ns else clean_ns
        ratios.setdefault(s.variant, []).append(s.step_ns / reference)
    medians = {v: float(statistics.median(r)) - 1.0 for v, r in sorted(ratios.items())}
    slowest = max(medians, key=lambda v: medians[v])
    every = [x for r in ratios.values() for x in r]
    test = standout.highest_group([v for v, r in ratios.items() for _ in r], every)
    return Overheads(
        pooled=float(statistics.median(every)) - 1.0,
        slowest=medians[slowest],
        slowest_variant=slowest,
        slowest_error=median_error(ratios[slowest]),
        per_variant=medians,
        pooled_error=median_error(every),
        standout_p=test.p,
        shuffled_slowest_q95=test.highest_median_q95 - 1.0,
    )


def clean_spread(references_ns: Sequence[float]) -> float:
    """How far the host moved over a pass: the p10-p90 spread of its clean reference steps over their median."""
    if len(references_ns) < 2:
        return 0.0
    p10, p50, p90 = np.percentile(np.asarray(references_ns, dtype=np.float64), [10, 50, 90])
    return float((p90 - p10) / p50) if p50 > 0 else 0.0


@dataclass
class Stitched:
    rows: list[dict[str, Any]]  # one per op: index, op, layer, host_launched, start/end/duration/gap_before/gap_noise
    step_ns: int  # the stitched step: head + ops and gaps + tail
    busy_ns: int  # union of the stitched op intervals
    idle_ns: int  # step_ns - busy_ns
    gap_total_ns: int  # step_ns less the durations: the gaps summed at their signed values, and a kept tail
    sampled_steps: int
    instrumented_step_ns: float  # median over the sampled steps, boundary to boundary
    variant_step_ns: dict[int, float]  # median per variant
    position_noise_ns: float  # median IQR across steps of each measured end (solo, dense) and local difference
    # sampled: the wrap pair's closure of the step where it stands out of its noise (TAIL_SIGMAS), else 0; in the
    # step and the gap total, not in op 0's gap. Dense: the last op's end to the boundary, in op 0's gap
    tail_ns: int = 0
    tail_measured_ns: int | None = None  # what the wrap pair (or the plain step) measured it at; None: dense
    tail_noise_ns: float = 0.0  # its standard error
    # the gap total's standard error: the medians it is made of, each from its own steps (the opening op's end, the
    # gaps after it, a kept tail; dense: the step's length)
    gap_total_noise_ns: float = 0.0
    # the gap total's error that the paired positions' scatter within their op classes shows beyond their own
    # standard errors (``position_scatter_ns``); 0 for dense plans
    gap_total_scatter_ns: float = 0.0


def _median_int(values: Sequence[int | float]) -> int:
    return round(statistics.median(values))


def _iqr(values: Sequence[int | float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 75])
    return float(q3 - q1)


def median_error(values: Sequence[int | float]) -> float:
    """The standard error of a median, from the spread: 1.2533 sigma / sqrt(N), sigma = IQR / 1.349 (normal)."""
    if len(values) < 2:
        return 0.0
    return 1.2533 * _iqr(values) / 1.349 / math.sqrt(len(values))


def _total_noise_parts(
    plan: Plan,
    end_error: Mapping[tuple[int, int], float],
    noise: Sequence[float],
    opening: tuple[int, int],
    solo: Mapping[int, int],
) -> list[float]:
    """The independent errors a sampled step's gap total is made of. The step is the opening op's end (op 0's solo
    end, or the head variant's op h), then each later gap and duration, then a kept tail; the solo ends up to op
    r - 1 telescope (their gaps are differences of consecutive solo ends), so only the last of them and the solo
    end of the opening op count, and op 0's solo end cancels altogether."""
    n, closing = len(noise), opening[1]
    last = min(plan.reach, n) - 1  # the last op whose gap is read from solo ends
    if closing >= last:
        return [end_error[opening], *noise[closing + 1 :]]
    parts = [end_error[(solo[last], last)], *noise[last + 1 :]]
    if opening != (solo[closing], closing):  # a head variant's end, less the solo end of the same op
        parts += [end_error[opening], end_error[(solo[closing], closing)]]
    return parts


def stitch(
    ops: Sequence[OpTiming],
    steps: Sequence[SampledStep],
    plan: Plan,
    durations_ns: Sequence[int],
    clean_ns: float | None = None,
    end_shift_ns: Sequence[int | None] | None = None,
    pair_bias_ns: Sequence[int | None] | None = None,
) -> Stitched:
    """One step from many sampled ones (module docstring): medians over the steps of each end (solo, dense) and of
    each within-step difference (far, near, wrap), the gaps from them with their standard errors, the ops chained
    from the head (boundary to op 0's start) on. ``steps`` are in the order they ran (a wrap_far step's far end is
    in the step after it). Raises ``StitchRefused`` when a needed measurement is missing.

    With ``clean_ns`` (the clean steps' median), each measurement of a step that has a ``reference_ns`` is scaled
    by clean_ns / reference_ns: read at the host speed of the clean step, not at the speed the host had around that
    step. Where the host holds still the references are the clean step and nothing changes; where it moves (an
    eager host switching between 2.3 and 3.7 ms steps) a launch-bound interval stretches with the whole step.

    ``end_shift_ns`` (``end_shifts``): per op, how much earlier it ends (negative: later) when an event follows it
    than in the clean step (under PDL the event keeps the next op from starting early). A measured end is then the
    clean end less that shift, so the gap before op i gains shift_i - shift_(i-1), the head shift_0 and the tail
    loses shift_(n-1); None or missing: no shift (dense plans are never shifted: their picture is the instrumented
    step).

    ``pair_bias_ns`` (``anchor_effects``): per op i >= r, how much longer its far pair's anchor leaves the GPU idle
    than its near pair's, taken out of the gap before op i (the head follows, being op h's end less the gaps before
    it). Only for steps read while CUPTI ran: there the idle after an event node grows with the kernels that follow
    it before the next event."""
    n = len(ops)
    if n == 0:
        raise StitchRefused("the step has no ops")
    if plan.n_ops != n:
        raise StitchRefused(f"a plan for {plan.n_ops} ops, but the step has {n}")
    if len(durations_ns) != n:
        raise StitchRefused(f"{len(durations_ns)} durations for {n} ops")
    if not steps:
        raise StitchRefused("no sampled steps")
    ends_at: dict[tuple[int, int], list[int]] = {}  # (variant, op) -> end from the boundary (solo, dense)
    local: dict[tuple[str, int], list[int]] = {}  # (far | near, anchor) -> end_(j+d) - end_j in one step
    dense_steps: list[dict[int, int]] = []
    lengths: dict[int, list[int]] = {}
    follows = plan.follows
    closing = plan.head_op if plan.head_op is not None else 0  # the op whose end closes the wrap pair's far end
    for number, step in enumerate(steps):
        if not 0 <= step.variant < len(plan.variants):
            raise StitchRefused(f"a step of variant {step.variant}, but the plan has {len(plan.variants)}")
        wanted = plan.variants[step.variant]
        if sorted(step.ends) != wanted:
            raise StitchRefused(
                f"a step of variant {step.variant} timed ops {sorted(step.ends)[:6]}..., not the ops of its plan"
            )
        lengths.setdefault(step.variant, []).append(step.step_ns)
        role = plan.roles[step.variant]
        scale = clean_ns / step.reference_ns if clean_ns and step.reference_ns else 1.0
        if role in ("far", "near", "wrap_near"):
            for j, target in zip(wanted[0::2], wanted[1::2]):
                local.setdefault((role, j), []).append(round((int(step.ends[target]) - int(step.ends[j])) * scale))
        elif role == "wrap_far":  # anchor in this step, far end after the first timed op of the next
            after = steps[number + 1] if number + 1 < len(steps) else None
            if after is None or after.variant != follows[step.variant] or closing not in after.ends:
                raise StitchRefused(
                    f"a wrap_far step not followed by the step timing op {closing}'s end alone: the gap between steps"
                )
            anchor = wanted[0]
            across = step.step_ns - int(step.ends[anchor]) + int(after.ends[closing])
            local.setdefault((role, anchor), []).append(round(across * scale))
        else:
            for index, at in step.ends.items():
                ends_at.setdefault((step.variant, index), []).append(round(int(at) * scale))
            if role == "dense":
                dense_steps.append(step.ends)
    missing = [v for v in range(len(plan.variants)) if v not in lengths]
    if missing:
        raise StitchRefused(f"no steps of variant(s) {missing[:8]}: not every op was sampled")
    durations = [max(0, int(d)) for d in durations_ns]
    end = {key: _median_int(values) for key, values in ends_at.items()}
    end_error = {key: median_error(values) for key, values in ends_at.items()}
    diff = {key: _median_int(values) for key, values in local.items()}
    diff_error = {key: median_error(values) for key, values in local.items()}
    length = {v: _median_int(values) for v, values in lengths.items()}
    gaps = [0] * n
    noise = [0.0] * n
    tail_measured, tail_noise = None, 0.0
    total_noise = 0.0
    if plan.roles == ["dense"]:
        head = end[(0, 0)] - durations[0]
        for i in range(1, n):
            gaps[i] = end[(0, i)] - durations[i] - end[(0, i - 1)]
            noise[i] = median_error([int(e[i]) - int(e[i - 1]) for e in dense_steps])
        tail = length[0] - end[(0, n - 1)]
        noise[0] = math.hypot(end_error[(0, 0)], end_error[(0, n - 1)], median_error(lengths[0]))
        total_noise = median_error(lengths[0])  # the ends telescope: the step is its median length
    else:
        reach = plan.reach
        solo = {ops[0]: v for v, (role, ops) in enumerate(zip(plan.roles, plan.variants)) if role == "solo"}
        opening = (plan.roles.index("head"), closing) if plan.head_op is not None else (solo[0], 0)
        wrap_closing = (follows[plan.roles.index("wrap_far")], closing) if "wrap_far" in plan.roles else opening
        for i in range(1, min(reach, n)):
            now, before = (solo[i], i), (solo[i - 1], i - 1)
            gaps[i] = end[now] - durations[i] - end[before]
            noise[i] = math.hypot(end_error[now], end_error[before])
        for i in range(reach, n):
            far, near = ("far", i - reach), ("near", i - reach)
            gaps[i] = diff[far] - diff[near] - durations[i]
            noise[i] = math.hypot(diff_error[far], diff_error[near])
        # the head: the end of the opening op (op 0, or the head variant's op h) less what precedes it in the step
        head_noise = math.hypot(end_error[opening], *noise[1 : closing + 1])
        if "wrap_far" in plan.roles:  # the tail measured across the boundary, kept where it stands out of its noise
            far, near = ("wrap_far", n - reach), ("wrap_near", n - reach)
            tail_measured = diff[far] - diff[near] - end[wrap_closing]
            tail_noise = math.hypot(diff_error[far], diff_error[near], end_error[wrap_closing])
        else:  # too short a step to wrap: the last op's solo end and the plain length
            last = (solo[n - 1], n - 1)
            tail_measured = length[0] - end[last]
            tail_noise = math.hypot(end_error[last], median_error(lengths[0]))
    shifts = [0] * n
    if end_shift_ns is not None and plan.roles != ["dense"]:
        if len(end_shift_ns) != n:
            raise StitchRefused(f"{len(end_shift_ns)} end shifts for {n} ops")
        shifts = [int(x) if x is not None else 0 for x in end_shift_ns]
        for i in range(1, n):
            gaps[i] += shifts[i] - shifts[i - 1]
    if pair_bias_ns is not None and plan.roles != ["dense"]:
        if len(pair_bias_ns) != n:
            raise StitchRefused(f"{len(pair_bias_ns)} pair biases for {n} ops")
        for i in range(plan.reach, n):
            gaps[i] -= int(pair_bias_ns[i] or 0)
    if plan.roles != ["dense"]:  # the opening op's clean end, less the durations and gaps before it
        # an end timed by a host event after its graph piece's replay is the clean end: no event sits after the op
        # in its graph (a graphed head op); files from before timed a host-launched op, whose end may shift
        shift = 0 if plan.head_op is not None and not ops[closing].host_launched else shifts[closing]
        head = end[opening] + shift - sum(durations[: closing + 1]) - sum(gaps[1 : closing + 1])
    if tail_measured is not None:  # sampled: measured against the last op's shifted end, kept out of its noise
        tail_measured -= shifts[n - 1]
        tail = tail_measured if abs(tail_measured) > TAIL_SIGMAS * tail_noise else 0
        gaps[0], noise[0] = head, head_noise  # a kept tail closes the step, it is no part of op 0's gap (below)
        total_noise = math.hypot(*_total_noise_parts(plan, end_error, noise, opening, solo), tail_noise if tail else 0)
    else:  # dense: the tail is an interval of the same step, the last op's end to its boundary
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
                "gap_noise_ns": round(noise[i], 1),
                "end_shift_ns": shifts[i] if end_shift_ns is not None else None,
            }
        )
        cursor = finish
    step_ns = cursor + tail
    busy = union_ns([r["start_ns"] for r in rows], [r["end_ns"] for r in rows])
    all_lengths = [x for values in lengths.values() for x in values]
    spreads = [_iqr(v) for v in ends_at.values()] + [_iqr(v) for v in local.values()]
    return Stitched(
        rows=rows,
        step_ns=step_ns,
        busy_ns=busy,
        idle_ns=step_ns - busy,
        gap_total_ns=step_ns - sum(durations),
        sampled_steps=len(steps),
        instrumented_step_ns=float(statistics.median(all_lengths)),
        variant_step_ns={v: float(statistics.median(x)) for v, x in sorted(lengths.items())},
        position_noise_ns=float(statistics.median(spreads)) if spreads else 0.0,
        tail_ns=tail,
        tail_measured_ns=tail_measured,
        tail_noise_ns=round(tail_noise, 1),
        gap_total_noise_ns=round(total_noise, 1),
        gap_total_scatter_ns=round(position_scatter_ns(rows, plan.reach), 1) if plan.roles != ["dense"] else 0.0,
    )


def position_scatter_ns(rows: Sequence[Mapping[str, Any]], reach: int) -> float:
    """The part of the gap total's error that its paired positions (ops ``reach`` and later) show beyond their own
    standard errors. Every layer runs the same ops, so the clean step gives each op class one gap at every layer
    (CUPTI's clean steps on the H200: within 0.01-0.17 us across a class's 32 layers in 8B piecewise b1). Per class
    of ``SCATTER_MIN_POSITIONS`` positions or more, the positions' variance about their mean (times their number)
    less their squared standard errors summed is error the medians' spread did not count, and it adds to the sum
    of the gaps: the square root of those excesses summed, each class's at least 0. On the H200 (8B piecewise b1,
    five passes of one process at reaches 4-12, 2026-12-03 12:47 UTC) a class's positions spread 1.0-2.9 times
    their standard errors (the median class 1.5-1.8), furthest where the pair's anchor is mlp_norm (positions 3-6
    us off their class, tight within their own steps); the scatter came to 14-18 us on the total against the
    medians' 10-13, and the five totals spread 23 us, 2.2 times the medians' error and 1.2 times the two together
    (tests/test_scatter_field.py). Where the clean step's layers differ in truth, that difference counts here too:
    an error on the safe side."""
    by_class: dict[str, list[tuple[float, float]]] = {}
    for row in rows[reach:]:
        by_class.setdefault(str(row["op"]), []).append((float(row["gap_before_ns"]), float(row["gap_noise_ns"] or 0)))
    excess = 0.0
    for values in by_class.values():
        if len(values) < SCATTER_MIN_POSITIONS:
            continue
        gaps = np.array([gap for gap, _ in values])
        errors = np.array([error for _, error in values])
        excess += max(0.0, float(np.var(gaps, ddof=1)) * len(values) - float(np.sum(errors**2)))
    return math.sqrt(excess)


def end_shifts(
    plan: Plan, clean_durations_ns: Sequence[float], variant_durations_ns: Mapping[int, Sequence[Sequence[int]]]
) -> list[int | None]:
    """Per op, how much shorter it runs (negative: longer) in the steps that time its end than in the clean step:
    the clean duration less the median of its durations in the variant steps that have an event after it and
    none after the op before it (so that only what follows the op differs). ``variant_durations_ns``: per
    variant, its steps' op durations (CUPTI kernels grouped into ops). None where no such variant step was seen.

    Put back into the gaps (``stitch``), the shift makes the gap before op i its far difference less its near one
    less op i's duration in the steps that measured them, not in other steps: under PDL an event after op i keeps
    op i + 1 from starting early beside it, and a long op's duration varies by microseconds from context to
    context (lm_head on the H200: 1-2.6 us from step to step; docs/performance.md)."""
    n = len(clean_durations_ns)
    samples: list[list[int]] = [[] for _ in range(n)]
    for v, steps in variant_durations_ns.items():
        alone = _timed_alone(plan, v, n)
        for durations in steps:
            if len(durations) == n:
                for i in alone:
                    samples[i].append(round(clean_durations_ns[i] - durations[i]))
    return [round(statistics.median(x)) if x else None for x in samples]


def _timed_alone(plan: Plan, variant: int, n: int) -> list[int]:
    """The ops a variant's steps time with no event after the op before (``end_shifts``, ``start_shifts``): only
    what follows such an op differs from the clean step. None in a dense or piece variant (its second end is a host
    event after a clean replay) or one not in the plan."""
    if not 0 <= variant < len(plan.roles) or plan.roles[variant] in ("dense", "piece"):
        return []
    marked = set(plan.variants[variant])
    return sorted(i for i in marked if 0 <= i < n and (i == 0 or i - 1 not in marked))


def start_shifts(
    plan: Plan,
    names: Sequence[str],
    clean_gaps_ns: Sequence[float],
    op_intervals: Mapping[int, Sequence[Sequence[tuple[int, int]]]],
) -> tuple[list[int | None], list[dict[str, Any]]]:
    """How much sooner each op starts (negative: the gap before it shorter) in the steps that time its end than in
    CUPTI's clean steps, and what that puts into each gap the pairs read. ``op_intervals``: per variant, per step
    it ran under CUPTI, each op's (start, end); ``clean_gaps_ns``: CUPTI's clean gap before each op
    (``CuptiReference.op_gap_ns``: its start less the latest end before it).

    An event marks an end, never a start. The pairs read the gap before op i as op i's start in its far steps less
    op i - 1's in its near ones, each taken as its end less its duration in those steps (``end_shifts``), which
    assumes the start is where it is in the clean step. Op i's shift is the median, over the steps that have an
    event after op i and none after op i - 1 (those ``end_shifts`` reads; op i's far steps among them), of CUPTI's
    gap before op i less the clean one. The gap before op i then reads long by op i - 1's shift (its near steps)
    and short by its own: its bias is its shift less its predecessor's. No event can see either, and taking them
    from CUPTI would put CUPTI's own gaps into the reading that the check sets against CUPTI, so they are reported
    and applied to nothing. On the H200 (2026-12-02, docs/performance.md) the PDL-launched norm, silu_mul and
    full-graph attention kernels started 0.34-0.78 us sooner with an event node after them, and the events' per-class
    misses followed the biases. Op 0 (the gap between steps) is left out.

    Returns the shift per op (None where unmeasured) and per class {op, shift_ns, bias_ns, ops}: medians over its
    ops (bias over those whose predecessor is measured too)."""
    n = len(names)
    moved: list[list[int]] = [[] for _ in range(n)]
    for v, steps in op_intervals.items():
        alone = [i for i in _timed_alone(plan, v, n) if i >= 1]
        for step in steps:
            if len(step) == n:
                gaps = gaps_within_step(step)
                for i in alone:
                    moved[i].append(int(gaps[i]))
    per_op: list[int | None] = [None] * n
    for i in range(1, n):
        if moved[i]:
            per_op[i] = round(statistics.median(moved[i]) - clean_gaps_ns[i])
    bias = start_biases(names, per_op)
    shifts: dict[str, list[int]] = {}
    biases: dict[str, list[int]] = {}
    for i, own in enumerate(per_op):
        if own is not None:
            shifts.setdefault(names[i], []).append(own)
            if (b := bias[i]) is not None:
                biases.setdefault(names[i], []).append(b)
    rows = [
        {"op": name, "shift_ns": float(statistics.median(values)),
         "bias_ns": float(statistics.median(biases[name])) if name in biases else None, "ops": len(values)}
        for name, values in shifts.items()
    ]  # fmt: skip
    return per_op, rows


FRESH_CAPTURE_CLEAR = (-2, -1, 0, 1)  # a position p counts where no event follows ops p - 2 .. p + 1


def fresh_capture_shifts(
    plan: Plan,
    names: Sequence[str],
    host_launched: Sequence[bool],
    segment_of: Sequence[int],
    clean_gaps_ns: Sequence[float],
    op_intervals: Mapping[int, Sequence[Sequence[tuple[int, int]]]],
) -> dict[str, Any] | None:
    """CUPTI's gap before each op in the variants' own captures, away from their events, less in the clean runner's.

    A variant captures afresh every graph piece that holds an op it times and replays the clean runner's graphs
    elsewhere (``measure/kernel_pass.py``, ``_marked_runner``). At a graphed op p of such a piece with no event
    after ops p - 2 .. p + 1, CUPTI's gap is the fresh capture's, with no event near it. Per op, the median of that
    gap over the variant steps of the CUPTI cycle (``op_intervals``: per variant, per step, each op's (start, end))
    less CUPTI's clean gap (``CuptiReference.op_gap_ns``). The picture is stitched from such captures, the clean
    reference is one capture: on the H200 (8B piecewise b1, 2026-12-04 02:53) the gap into each piece after the
    eager attention read 0.95 us lower in the fresh captures, 30 us over a step, and nothing inside the pieces
    moved (docs/performance.md). A diagnostic: it changes no reading and no verdict.

    Returns {positions, gap_sum_ns (the per-op differences summed), classes: [{op, count, shift_ns (median over
    its positions), sum_ns}]}, or None where no position qualifies (eager; no CUPTI cycle)."""
    n = len(names)
    if not (len(host_launched) == len(segment_of) == len(clean_gaps_ns) == n):
        raise ValueError("one host flag, segment and clean gap per op")
    samples: list[list[int]] = [[] for _ in range(n)]
    replay_clean = plan.after_replay  # their pieces are the clean runner's (a dense variant leaves no clear position)
    for v, steps in op_intervals.items():
        if not 0 <= v < len(plan.roles) or v in replay_clean:
            continue
        marked = set(plan.variants[v])
        fresh = {segment_of[i] for i in marked if 0 <= i < n and not host_launched[i]}
        clear = [
            p
            for p in range(1, n)
            if not host_launched[p] and segment_of[p] in fresh and not marked & {p + d for d in FRESH_CAPTURE_CLEAR}
        ]
        for step in steps:
            if len(step) == n and clear:
                gaps = gaps_within_step(step)
                for p in clear:
                    samples[p].append(gaps[p])
    shifts = {p: float(statistics.median(x)) - float(clean_gaps_ns[p]) for p, x in enumerate(samples) if x}
    if not shifts:
        return None
    by_class: dict[str, list[float]] = {}
    for p, shift in shifts.items():
        by_class.setdefault(names[p], []).append(shift)
    return {
        "positions": len(shifts),
        "gap_sum_ns": round(sum(shifts.values()), 1),
        "classes": [
            {
                "op": name,
                "count": len(values),
                "shift_ns": float(statistics.median(values)),
                "sum_ns": round(sum(values), 1),
            }
            for name, values in by_class.items()
        ],
    }


def start_biases(names: Sequence[str], per_op: Sequence[int | None]) -> list[int | None]:
    """Per op, its start shift less its predecessor's (``start_shifts``): what the two put into the gap before it."""
    if len(per_op) != len(names):
        raise ValueError("one start shift (or None) per op")
    out: list[int | None] = [None] * len(names)
    for i in range(1, len(names)):
        own, before = per_op[i], per_op[i - 1]
        if own is not None and before is not None:
            out[i] = own - before
    return out


def event_lags(
    plan: Plan,
    host_launched: Sequence[bool],
    steps: Sequence[SampledStep],
    op_ends: Sequence[Sequence[int]],
) -> list[dict[str, Any]]:
    """How the events' differences differ from CUPTI's on the same steps, by the kinds of their two ends.

    ``steps``: variant steps as the events read them while CUPTI ran, and ``op_ends``: CUPTI's end of every op in
    each of them (the same order). For every two consecutive events of a step, after ops a < b, the events'
    difference less CUPTI's, (E_b - E_a) - (end_b - end_a), is the lag of the event after b behind its op's end
    less the lag after a. The pairs cancel that lag where both ends are of one kind; a far and a near end of two
    kinds (a host-recorded event after a host-launched op, an event node after a graphed one) would carry the
    difference into the gap. Per kind pair ("node-host": a after a graphed op, b after a host-launched one): the
    median and how many differences. A diagnostic: nothing is corrected with it."""
    by_kind: dict[str, list[int]] = {}
    for step, ends in zip(steps, op_ends):
        if plan.roles[step.variant] in ("dense", "wrap_far", "piece"):
            continue
        marked = sorted(step.ends)
        for a, b in zip(marked, marked[1:]):
            if not (0 <= a < b < len(ends)):
                continue
            kind = f"{'host' if host_launched[a] else 'node'}-{'host' if host_launched[b] else 'node'}"
            by_kind.setdefault(kind, []).append((int(step.ends[b]) - int(step.ends[a])) - (int(ends[b]) - int(ends[a])))
    return [
        {"kinds": kind, "pairs": len(values), "lag_ns_median": float(statistics.median(values)),
         "lag_noise_ns": round(median_error(values), 1)}
        for kind, values in sorted(by_kind.items())
    ]  # fmt: skip


def anchor_effects(
    plan: Plan,
    names: Sequence[str],
    host_launched: Sequence[bool],
    op_intervals: Mapping[int, Sequence[Sequence[tuple[int, int]]]],
) -> tuple[list[int | None], list[dict[str, Any]]]:
    """How much longer the GPU idles after a far pair's anchor event than after its near pair's, from CUPTI's op
    intervals of the variant steps (``op_intervals``: per variant, per step it ran, each op's (start, end)).

    The pairs assume that the anchor's event costs the far and the near step the same (module docstring). Under
    CUPTI on the H200 it does not: inside a graph, the idle after an event node grew with the kernels that follow
    it before the next event (3.5 us at 3, 3.9-4.3 at 4, 5.1-5.6 at 12 or more in full graph; docs/performance.md),
    so a far pair, whose next event is r ops on, reads a gap 0.1-0.8 us longer than a near one, r - 1 ops on (1.1-1.3
    us for piecewise kv_write, whose far anchor runs to the end of its graph piece with no event node there), and
    the CUPTI cycle's stitched step came out 1-4% longer than CUPTI's clean one. Without CUPTI the stitched step was
    the clean one within 1.5%: the effect is CUPTI's, and it is taken out of the reading under CUPTI alone.

    Per anchor j whose op and next op are graphed (an event node between them), the median over far steps of the
    idle from op j's end to op j + 1's start less the same over near steps; per class of the op j + r whose gap the
    pair measures, the median over its anchors. Returns that per op (None where unmeasured: i < r, a host-launched
    anchor, no steps) and per class {op, effect_ns, anchors}."""
    n = len(names)
    node_after = [j + 1 < n and not host_launched[j] and not host_launched[j + 1] for j in range(n)]
    idle: dict[str, dict[int, list[int]]] = {"far": {}, "near": {}}
    for v, steps in op_intervals.items():
        if not 0 <= v < len(plan.roles) or plan.roles[v] not in idle:
            continue
        for step in steps:
            if len(step) != n:
                continue
            for j in plan.variants[v][0::2]:
                if 0 <= j < n and node_after[j]:
                    idle[plan.roles[v]].setdefault(j, []).append(step[j + 1][0] - step[j][1])
    by_class: dict[str, list[float]] = {}
    for j, far in idle["far"].items():
        near = idle["near"].get(j)
        if near and j + plan.reach < n:
            by_class.setdefault(names[j + plan.reach], []).append(statistics.median(far) - statistics.median(near))
    effect = {name: round(statistics.median(values)) for name, values in by_class.items()}
    per_op: list[int | None] = [None] * n
    for i in range(plan.reach, n):
        j = i - plan.reach
        if names[i] in effect and node_after[j]:
            per_op[i] = effect[names[i]]
    rows = [{"op": name, "effect_ns": float(effect[name]), "anchors": len(by_class[name])} for name in effect]
    return per_op, rows


def capture_shifts(
    names: Sequence[str],
    first_gaps_ns: Sequence[float],
    second_gaps_ns: Sequence[float],
    first_errors_ns: Sequence[float] | None = None,
    second_errors_ns: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Per op class, CUPTI's gap before the op in a second capture of the clean step's graphs less in the first
    (the median over the class's ops of the per-op differences), its standard error, whether it is beyond the op
    bar of the first's class median, and whether it is a move at all (``moved``: beyond ``CUPTI_EFFECT_SIGMAS`` of
    that error and ``CAPTURE_MOVE_MIN_NS``, or beyond the bar). On the H200 a capture afresh moved CUPTI's gap
    before a graph piece's first kernel by 1.0-1.35 us while the step's length, measured without CUPTI, moved by
    under 1 us a boundary (docs/performance.md): where it moves, CUPTI's value for the class depends on the
    capture. The two values of that gap are 0.9-1.4 us apart, and a move between them can be under the bar
    (0.70-0.95 us in 1B piecewise b1).

    The error: from the spread of the per-op differences in a class of ``SCATTER_MIN_POSITIONS`` ops or more (the
    layers of a step move together, so each op's own error would say less); from the ops' own errors (per-op
    medians over steps: ``CuptiReference.op_gap_error_ns``) in a smaller class, None without them."""
    if not (len(names) == len(first_gaps_ns) == len(second_gaps_ns)):
        raise ValueError("one gap per op in each capture")
    if (first_errors_ns is not None and len(first_errors_ns) != len(names)) or (
        second_errors_ns is not None and len(second_errors_ns) != len(names)
    ):
        raise ValueError("one error per op in each capture")
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if i:  # op 0's gap is the gap between steps
            members.setdefault(name, []).append(i)
    rows = []
    for name, ops in members.items():
        diffs = [second_gaps_ns[i] - first_gaps_ns[i] for i in ops]
        shift = float(statistics.median(diffs))
        first = float(statistics.median(first_gaps_ns[i] for i in ops))
        second = float(statistics.median(second_gaps_ns[i] for i in ops))
        error: float | None = None
        if len(ops) >= SCATTER_MIN_POSITIONS:
            error = median_error(diffs)
        elif first_errors_ns is not None and second_errors_ns is not None:
            error = float(statistics.median(math.hypot(first_errors_ns[i], second_errors_ns[i]) for i in ops))
        beyond = abs(shift) > max(OP_GAP_ABS_NS, OP_GAP_REL * abs(first))
        moved = beyond or (error is not None and abs(shift) > max(CAPTURE_MOVE_MIN_NS, CUPTI_EFFECT_SIGMAS * error))
        rows.append(
            {
                "op": name,
                "count": len(ops),
                "shift_ns": shift,
                "shift_error_ns": error,
                "beyond_bar": beyond,
                "moved": moved,
                "second_gap_ns_median": second,
            }
        )
    return rows


@dataclass(frozen=True)
class VariantEffect:
    """What CUPTI does to a span that variants time around clean graph pieces, no event inside them: the start of a
    piecewise step (the head variant, ``head_cupti_effect``) or of each piece after attention (the piece variants,
    ``piece_cupti_effects``)."""

    effect_ns: float  # the span read while CUPTI ran less without it
    noise_ns: float  # its standard error
    runs: int  # spans read without CUPTI
    runs_under_cupti: int


@dataclass(frozen=True)
class BoundaryLag:
    """Under CUPTI, how much later after the previous step's last kernel the step's boundary event completed than
    the events' end of the step's opening op did after that op (``boundary_lag``): part of the gap between steps
    that CUPTI counts and the events cannot see."""

    lag_ns: float  # the median over the steps read
    noise_ns: float  # its standard error
    steps: int


def boundary_lag(
    plan: Plan,
    seen_ops: Mapping[int, Sequence[Sequence[tuple[int, int]]]],
    previous_ends: Mapping[int, Sequence[int | None]],
    under_cupti: Sequence[SampledStep],
) -> BoundaryLag | None:
    """On the CUPTI cycle's steps of the variant that times the step's opening op alone (the head variant in
    piecewise, op h; else op 0's solo): CUPTI's end of that op from the previous step's last kernel end, less the
    events' end of it from the step's boundary event. That is the boundary event's lag behind the last kernel less
    the end event's own lag behind the op (a host event after the first piece's replay in piecewise, an event node
    in full graphs). The events take the boundary to complete when the last op does (module docstring); where it
    completes later than their end event does, the gap between steps has a part before the boundary that they
    cannot see. On the H200 this was -0.03 and +1.06 us in two passes of 1B piecewise b1 a minute apart, CUPTI's
    gap between steps 1.1 us longer in the second (docs/performance.md, 2026-12-03 from 13:57 UTC). ``seen_ops``:
    per variant, per step it ran under CUPTI, each op's (start, end); ``previous_ends``: per variant, per step, the
    latest kernel end of the step run right before it (None: none); ``under_cupti``: the events of those steps, in
    the order they ran. None where the variant's steps were not read both ways."""
    if plan.head_op is not None:
        variant, op = plan.roles.index("head"), plan.head_op
    else:
        try:
            variant, op = plan.index("solo", 0), 0
        except KeyError:
            return None
    kernels, before = seen_ops.get(variant, ()), previous_ends.get(variant, ())
    read = [s.ends.get(op) for s in under_cupti if s.variant == variant]
    if not kernels or len(kernels) != len(read) or len(before) != len(read):
        return None
    lags = [
        float(ops[op][1] - prev - end)
        for ops, prev, end in zip(kernels, before, read)
        if prev is not None and end is not None
    ]
    if len(lags) < 2:  # no error from one step
        return None
    return BoundaryLag(lag_ns=float(statistics.median(lags)), noise_ns=median_error(lags), steps=len(lags))


def head_cupti_effect(
    plan: Plan, steps: Sequence[SampledStep], under_cupti: Sequence[SampledStep]
) -> VariantEffect | None:
    """CUPTI's effect on the gap into a piecewise step, as the head variant reads it: the end of the first graph
    piece (``Plan.head_op``) from the step's boundary, by a host event after the clean piece's replay, while CUPTI
    ran less without it. The head variant has no event node in any piece, so nothing but CUPTI differs between
    the two readings; the stitched head under CUPTI also carries what CUPTI does to the solo variants' event nodes
    in their recaptured pieces, which CUPTI's clean steps do not have. On the H200 this was +0.86 to +1.23 us in
    17 of 18 passes (+0.35 in the other), while under CUPTI the events put that end within 0.26 us of CUPTI's own
    (docs/gaps.md). None without a head variant or without its runs on both sides."""
    op = plan.head_op
    if op is None:
        return None
    head = plan.roles.index("head")
    clean = [s.ends[op] for s in steps if s.variant == head and op in s.ends]
    cupti = [s.ends[op] for s in under_cupti if s.variant == head and op in s.ends]
    if not clean or not cupti:
        return None
    return VariantEffect(
        effect_ns=float(statistics.median(cupti) - statistics.median(clean)),
        noise_ns=math.hypot(median_error(clean), median_error(cupti)),
        runs=len(clean),
        runs_under_cupti=len(cupti),
    )


def piece_cupti_effects(
    plan: Plan, names: Sequence[str], steps: Sequence[SampledStep], under_cupti: Sequence[SampledStep]
) -> dict[str, VariantEffect]:
    """CUPTI's effect on the gap into a graph piece after a host-launched op, per class of the op opening the piece
    (piecewise: o_proj), as the piece variants read it. Per boundary, the span from that op's end to the piece's end
    (both host events, the piece the clean runner's); per step, its boundaries' spans less each boundary's median
    without CUPTI, averaged (the boundaries of one step move together); the effect is the median of that while
    CUPTI ran less without it, its noise from the steps' spread on both sides, as the head variant's. Nothing but
    CUPTI differs between the two readings; what CUPTI does inside the piece is in it too, which the timers bound:
    they read every in-piece class within the op bar of CUPTI's (docs/performance.md, 2026-12-02). On the H200,
    in a first form (pooled over the pieces, 07:45 UTC): +1.30 to +1.70 us where the host kept its lead. Empty
    without piece variants or their steps on both sides."""
    pieces = set(plan.piece_variants)

    def spans(step: SampledStep) -> list[tuple[tuple[int, int], int]]:
        marked = plan.variants[step.variant]
        return [
            ((first, last), int(step.ends[last]) - int(step.ends[first]))
            for first, last in zip(marked[0::2], marked[1::2])
            if first in step.ends and last in step.ends
        ]

    clean_spans: dict[tuple[int, int], list[int]] = {}
    for step in steps:
        if step.variant in pieces:
            for boundary, span in spans(step):
                clean_spans.setdefault(boundary, []).append(span)
    centre = {b: statistics.median(v) for b, v in clean_spans.items()}

    def deviations(source: Sequence[SampledStep]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for step in source:
            if step.variant not in pieces:
                continue
            by_class: dict[str, list[float]] = {}
            for boundary, span in spans(step):
                if boundary in centre:
                    by_class.setdefault(names[boundary[0] + 1], []).append(span - centre[boundary])
            for name, values in by_class.items():
                out.setdefault(name, []).append(statistics.fmean(values))
        return out

    clean, cupti = deviations(steps), deviations(under_cupti)
    return {
        name: VariantEffect(
            effect_ns=float(statistics.median(cupti[name]) - statistics.median(clean[name])),
            noise_ns=math.hypot(median_error(clean[name]), median_error(cupti[name])),
            runs=len(clean[name]),
            runs_under_cupti=len(cupti[name]),
        )
        for name in clean
        if cupti.get(name)
    }


def instrumented_rows(ops: Sequence[OpTiming], steps: Sequence[SampledStep], durations_ns: Sequence[int]) -> Stitched:
    """Dense mode: every op timed in every step (one variant); the picture is the instrumented step, events and
    all, each op's end the median over the steps."""
    return stitch(ops, steps, dense_plan(len(ops)), durations_ns)


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


def gaps_within_step(ops: Sequence[tuple[int, int]]) -> list[int]:
    """One step's op intervals (start, end), in order: per op, its start less the latest end of the ops before it
    (an op that starts before an earlier one ends has a negative gap). Op 0's gap lies between steps: 0 here."""
    latest = list(itertools.accumulate((end for _, end in ops), max))
    return [0] + [ops[i][0] - latest[i - 1] for i in range(1, len(ops))]


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
    op_gap_error_ns: list[float] | None = None  # per op index, that median's standard error (``median_error``)
    grouping: str | None = None  # how kernels were grouped into ops, or why they were not


def cupti_reference(
    step_kernels: Sequence[Sequence[tuple[int, int]]], step_times_ns: Sequence[float], counts: Sequence[int] | None
) -> CuptiReference:
    """From the kernels of back-to-back clean steps (one list per step, CUPTI clock) and their boundary times."""
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
    ref.op_busy_ns = float(statistics.median(union_ns([a for a, _ in ops], [b for _, b in ops]) for ops in per_step))
    ref.op_duration_ns = [float(statistics.median(step[i][1] - step[i][0] for step in per_step)) for i in range(n)]
    gaps: list[list[int]] = [[] for _ in range(n)]
    for number, step in enumerate(per_step):
        within = gaps_within_step(step)
        for i in range(1, n):
            gaps[i].append(within[i])
        if number:
            gaps[0].append(step[0][0] - max(e for _, e in per_step[number - 1]))
    ref.op_gap_ns = [float(statistics.median(g)) if g else 0.0 for g in gaps]
    ref.op_gap_error_ns = [median_error(g) for g in gaps]
    ref.grouping = "by a counting pass (ops one by one, sync between); its kernel sequence matches the step's"
    return ref


# ----------------------------------------------------------------------------------------------------------------
# The checks


def within_op_bar(value: float, reference: float) -> bool:
    """The op bar of issue 12: ``value`` within 1 us or 15% of ``reference`` (CUPTI's)."""
    return abs(value - reference) <= max(OP_GAP_ABS_NS, OP_GAP_REL * abs(reference))


def cycle_clean_gaps(
    names: Sequence[str],
    steps: Sequence[Sequence[tuple[int, int]]],
    reference_gap_ns: Sequence[float],
    head_gaps_ns: Sequence[float] = (),
) -> dict[str, dict[str, Any]]:
    """CUPTI's clean steps of the CUPTI cycle, later in the pass than its reference steps: per op class, the median
    over those steps of the class's median gap in each (``cycle_gap_ns_median``), and the share of them whose class
    median is beyond the op bar of the reference's (``off_bar_fraction``). ``steps``: each step's (start, end) per
    op. Op 0's gap lies between steps: it comes from ``head_gaps_ns`` (each clean step that ran right after another
    clean one: its first start less that step's last end), as its own class where op 0's name is its alone. A
    diagnostic: at a graph piece's start the same clean step takes one of two values about 1.1 us apart from step
    to step (docs/gaps.md)."""
    if not steps or len(reference_gap_ns) != len(names):
        return {}
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if i > 0:
            members.setdefault(name, []).append(i)
    per_step: dict[str, list[float]] = {name: [] for name in members}
    for step in steps:
        within = gaps_within_step(step)
        for name, ops in members.items():
            per_step[name].append(float(statistics.median(within[i] for i in ops)))
    references = {name: float(statistics.median(reference_gap_ns[i] for i in ops)) for name, ops in members.items()}
    if head_gaps_ns and names[0] not in members:
        per_step[names[0]] = [float(g) for g in head_gaps_ns]
        references[names[0]] = float(reference_gap_ns[0])
    out: dict[str, dict[str, Any]] = {}
    for name, values in per_step.items():
        reference = references[name]
        out[name] = {
            "steps": len(values),
            "cycle_gap_ns_median": float(statistics.median(values)),
            "off_bar_fraction": sum(not within_op_bar(x, reference) for x in values) / len(values),
        }
    return out


def _opens_pieces(rows: Sequence[Mapping[str, Any]], members: Sequence[int]) -> bool:
    """Every op of the class opens a graph piece after a host-launched op."""
    return all(i > 0 and rows[i - 1]["host_launched"] and not rows[i]["host_launched"] for i in members)


def _class_noise(rows: Sequence[dict[str, Any]], members: Sequence[int]) -> float:
    """Standard error of a class's median gap from its rows' own (``gap_noise_ns``), as the median of their mean."""
    spread = math.sqrt(sum(float(rows[i].get("gap_noise_ns") or 0.0) ** 2 for i in members))
    return 1.2533 * spread / len(members)


def op_class_checks(
    rows: Sequence[dict[str, Any]],
    ref: CuptiReference,
    *,
    compare_durations: bool = True,
    under_cupti: Sequence[dict[str, Any]] | None = None,
    capture_classes: Sequence[Mapping[str, Any]] = (),
    head_effect: VariantEffect | None = None,
    start_bias: Mapping[str, float | None] | None = None,
    piece_effects: Mapping[str, VariantEffect] | None = None,
    cycle_clean: Mapping[str, Mapping[str, Any]] | None = None,
    boundary: BoundaryLag | None = None,
) -> list[dict[str, Any]]:
    """Per op class (name), the median over its ops of the stitched gap (and, unless the durations are CUPTI's
    own, the duration) against CUPTI's.

    With ``under_cupti`` (the rows stitched from the pass's cycle read again while CUPTI ran), also that class's
    gap there against CUPTI's (like for like: CUPTI on both sides), and what CUPTI does to the class: the events'
    reading under CUPTI less their reading without it (``cupti_effect_ns``). Where that is beyond the op bar and
    ``CUPTI_EFFECT_SIGMAS`` of its noise, CUPTI's value is not the class's clean gap (``cupti_trusted_here``
    false; on the H200 CUPTI lengthened lm_head's by 0.9-2 us at batch 1 and 8), as CUPTI's step is not the clean
    one where it is 5% off. That effect is CUPTI's on the events' steps, which may be on the events rather than on
    the step (their anchors idle longer under CUPTI): either reading that agrees then stands, and the bar is a floor.

    With ``capture_classes`` (``capture_shifts`` of the capture check: CUPTI's clean gaps in a second capture of
    the same graphs), a class whose CUPTI value the second capture moved (``moved``: beyond two of its errors and
    ``CAPTURE_MOVE_MIN_NS``, or beyond the bar) has no one clean value: which capture the user's graph is decides
    it (on the H200, the gap before a graph piece's first kernel, by 0.7-1.35 us, docs/performance.md). The
    events' variants replay captures of their own. Such a class is then also checked against the second capture's
    value: CUPTI read both, so the reading is let off by no more than CUPTI's own move.

    With ``head_effect`` (piecewise: ``head_cupti_effect``), the class of op 0, whose gap is the head, takes CUPTI's
    effect from the head variant instead (``cupti_effect_source`` "head variant"), and its like-for-like reading is
    the clean head plus that effect: the head as the events would read it with only the step's start under CUPTI.
    That variant has no event node anywhere, so its effect is CUPTI's on the step alone, and beyond
    ``CUPTI_EFFECT_SIGMAS`` of its noise it moves the class at any size: on the H200 +0.67 to +0.96 us at 7-14
    standard errors, against a bar of 1 us, where the plain check missed by 1.00-1.25 us (docs/performance.md,
    session of 2026-12-02 from 06:05 UTC). Either reading that agrees stands, as for the other classes: the gap
    into a graph piece has two values about 1.1 us apart, which one set per process and, within one, by whether the
    step follows a sync, so CUPTI's effect in the variant's steps need not be its effect in the reference's.

    With ``piece_effects`` (piecewise: ``piece_cupti_effects``), the same for a class whose every op opens a graph
    piece after a host-launched op (o_proj): its effect from the piece variants (``cupti_effect_source`` "piece
    variant"), no event inside the piece either way. CUPTI's gap there has two values about 1.1 us apart, which
    one set per process and by whether the step follows a sync (docs/performance.md, 2026-12-02 from 07:00 and
    09:06 UTC).

    With ``cycle_clean`` (``cycle_clean_gaps``), each class carries CUPTI's value in the cycle's clean steps and the
    share of them beyond the bar of the reference's (``cupti_cycle_gap_ns_median``, ``cupti_cycle_off_bar_fraction``).
    Where the events miss the reference and at least ``CUPTI_CYCLE_UNSTEADY`` of those steps put the class beyond
    its bar, CUPTI does not hold its own value to the bar and the class is not decided.

    With ``start_bias`` (per class, ``start_shifts``' ``bias_ns``), each class carries its bias (``start_bias_ns``):
    what an event after an op does to its start puts into the gap as the pairs read it. It explains a miss; it
    changes no verdict.

    With ``boundary`` (``boundary_lag``), op 0's class carries it (``boundary_lag_ns``, ``boundary_lag_noise_ns``):
    the part of CUPTI's gap between steps before the boundary event the events measure from; and CUPTI's gap less it
    (``cupti_gap_less_boundary_lag_ns``: 4.61-4.83 us on the H200 in eleven piecewise passes, docs/gaps.md). It
    too explains a miss and changes no verdict: whether the clean step has that lag without CUPTI, nothing here
    reads.

    ``gap_verdict``: "agree" where the events' clean reading is within the bar of CUPTI's; "agree like for like"
    where it is not, CUPTI moves the class and the like-for-like reading is within the bar; "agree across
    captures" where neither holds, the second capture moved the class and the reading is within the bar of the
    second capture's value; "not decided" where none holds and CUPTI's own later clean steps put the class beyond
    the bar of its reference (``cycle_clean``); else "disagree"."""
    if ref.op_gap_ns is None or ref.op_duration_ns is None or len(ref.op_gap_ns) != len(rows):
        return []
    groups: dict[str, list[int]] = {}
    for i, stitched_row in enumerate(rows):
        groups.setdefault(stitched_row["op"], []).append(i)
    captured = {c["op"]: c for c in capture_classes}
    out = []
    for name, members in groups.items():
        events_gap = float(statistics.median(rows[i]["gap_before_ns"] for i in members))
        cupti_gap = float(statistics.median(ref.op_gap_ns[i] for i in members))
        events_dur = float(statistics.median(rows[i]["duration_ns"] for i in members))
        cupti_dur = float(statistics.median(ref.op_duration_ns[i] for i in members))
        row: dict[str, Any] = {
            "op": name,
            "count": len(members),
            "events_gap_ns_median": events_gap,
            "cupti_gap_ns_median": cupti_gap,
            "gap_diff_ns": events_gap - cupti_gap,
            "gap_agrees": within_op_bar(events_gap, cupti_gap),
        }
        row["gap_verdict"] = GAP_AGREE if row["gap_agrees"] else GAP_DISAGREE
        if start_bias is not None and start_bias.get(name) is not None:
            row["start_bias_ns"] = start_bias[name]
        if boundary is not None and members == [0]:
            row.update(
                boundary_lag_ns=boundary.lag_ns,
                boundary_lag_noise_ns=boundary.noise_ns,
                cupti_gap_less_boundary_lag_ns=cupti_gap - boundary.lag_ns,
            )
        later = (cycle_clean or {}).get(name)
        if later is not None:
            row["cupti_cycle_gap_ns_median"] = later["cycle_gap_ns_median"]
            row["cupti_cycle_off_bar_fraction"] = later["off_bar_fraction"]
        if head_effect is not None and members == [0]:
            effect, effect_noise = head_effect.effect_ns, head_effect.noise_ns
            like, source = events_gap + effect, CUPTI_EFFECT_HEAD_VARIANT
        elif piece_effects and name in piece_effects and _opens_pieces(rows, members):
            effect, effect_noise = piece_effects[name].effect_ns, piece_effects[name].noise_ns
            like, source = events_gap + effect, CUPTI_EFFECT_PIECE_VARIANT
        elif under_cupti is not None and len(under_cupti) == len(rows):
            like = float(statistics.median(under_cupti[i]["gap_before_ns"] for i in members))
            effect = like - events_gap
            effect_noise = math.hypot(_class_noise(rows, members), _class_noise(under_cupti, members))
            source = CUPTI_EFFECT_STITCHED
        else:
            source = None
        if source is not None:
            like_agrees = within_op_bar(like, cupti_gap)
            bar = max(OP_GAP_ABS_NS, OP_GAP_REL * abs(cupti_gap))
            clean_variant = source in (CUPTI_EFFECT_HEAD_VARIANT, CUPTI_EFFECT_PIECE_VARIANT)
            moved = abs(effect) > max(0.0 if clean_variant else bar, CUPTI_EFFECT_SIGMAS * effect_noise)
            row.update(
                events_gap_under_cupti_ns_median=like,
                gap_under_cupti_diff_ns=like - cupti_gap,
                gap_under_cupti_agrees=like_agrees,
                cupti_effect_ns=effect,
                cupti_effect_noise_ns=effect_noise,
                cupti_effect_source=source,
                cupti_trusted_here=not moved,
            )
            if moved and not row["gap_agrees"] and like_agrees:
                row["gap_verdict"] = GAP_AGREE_LIKE_FOR_LIKE
        other = captured.get(name)
        if other is not None and other.get("second_gap_ns_median") is not None:
            second = float(other["second_gap_ns_median"])
            second_agrees = within_op_bar(events_gap, second)
            flagged = other.get("moved")  # null in older records: beyond the bar decided
            moved_by_capture = bool(flagged if flagged is not None else other["beyond_bar"])
            row.update(
                cupti_second_capture_gap_ns_median=second,
                capture_moved=moved_by_capture,
                gap_second_capture_agrees=second_agrees,
            )
            if row["gap_verdict"] == GAP_DISAGREE and moved_by_capture and second_agrees:
                row["gap_verdict"] = GAP_AGREE_ACROSS_CAPTURES
        unsteady = later is not None and later["off_bar_fraction"] >= CUPTI_CYCLE_UNSTEADY
        if row["gap_verdict"] == GAP_DISAGREE and unsteady:
            row["gap_verdict"] = GAP_NOT_DECIDED
        if compare_durations:
            row.update(
                events_duration_ns_median=events_dur,
                cupti_duration_ns_median=cupti_dur,
                duration_diff_ns=events_dur - cupti_dur,
                duration_agrees=within_op_bar(events_dur, cupti_dur),
            )
        out.append(row)
    return out


def classes_verdict(gap_verdicts: Iterable[str]) -> bool | None:
    """Op classes judged together from their ``gap_verdict``s: False where one disagrees, else None (not decided)
    where one is not decided, else True."""
    seen = set(gap_verdicts)
    if GAP_DISAGREE in seen:
        return False
    return None if GAP_NOT_DECIDED in seen else True


def gap_total_verdict(diff_ns: float, tolerance_ns: float, noise_ns: float) -> bool | None:
    """Whether the stitched gap total is within ``tolerance_ns`` of the clean step's, at ``GAP_TOTAL_SIGMAS`` of
    its standard error ``noise_ns``: False where it is beyond by more than that; None, not decided, where that
    much error is more than the tolerance itself (a host that moves leaves too few alike steps per variant to
    check to it) or puts a miss within it; else True. On the H200's moving eager host that error was 93-272 us
    against 112-168 allowed, 2-11 us in graph modes (docs/performance.md, 2026-12-02 from 14:00 UTC)."""
    margin = GAP_TOTAL_SIGMAS * noise_ns
    if abs(diff_ns) - margin > tolerance_ns:
        return False
    if margin > tolerance_ns or abs(diff_ns) > tolerance_ns:
        return None
    return True


def gap_total_by_class(rows: Sequence[Mapping[str, Any]], cupti_gaps_ns: Sequence[float]) -> list[dict[str, Any]]:
    """Per op class, in order of first appearance: the stitched gaps summed over its positions, CUPTI's clean
    per-position median gaps summed over the same positions, and the first less the second (``diff_ns``). Over all
    classes the stitched sums add to the stitched gap total and CUPTI's to ``sum(cupti_gaps_ns)``, so the gap
    total's difference from clean splits exactly into the classes' ``diff_ns`` plus CUPTI's gap sum less the clean
    step's gap total (what CUPTI adds to the step)."""
    if len(rows) != len(cupti_gaps_ns):
        raise ValueError(f"{len(rows)} stitched positions against {len(cupti_gaps_ns)} of CUPTI's")
    totals: dict[str, dict[str, Any]] = {}
    for row, cupti in zip(rows, cupti_gaps_ns, strict=True):
        entry = totals.setdefault(
            str(row["op"]), {"op": str(row["op"]), "count": 0, "stitched_ns": 0.0, "cupti_ns": 0.0}
        )
        entry["count"] += 1
        entry["stitched_ns"] += float(row["gap_before_ns"])
        entry["cupti_ns"] += float(cupti)
    for entry in totals.values():
        entry["diff_ns"] = entry["stitched_ns"] - entry["cupti_ns"]
    return list(totals.values())


def noise_overlap_ns(rows: Sequence[Mapping[str, Any]], draws: int = NOISE_OVERLAP_DRAWS, seed: int = 0) -> float:
    """How much shorter the noise in the stitched gaps reads the union of the stitched ops (busy): from the stitched
    gaps, those negative by less than ``GAP_TOTAL_SIGMAS`` of their standard errors (``gap_noise_ns``) taken as 0
    (no overlap the noise may have made), each gap after the first moved by a normal error of its standard error,
    the ops chained again (each starts its gap after the one before ends), ``draws`` times: the union from those
    gaps less its mean over the draws. A gap read short pulls every later op back over time the ops before it
    cover, so the union loses more than one op's overlap with the next. An upper estimate: on simulated eager
    passes with host jitter about twice the shortfall noise made, and never short of it by more than 1% of busy
    (tests/test_sampled_gaps.py); on four recorded H200 eager passes 2-4 times what resampling the pass's own
    cycles does to its busy (tests/test_busy_field.py). From the stitched gaps as they stand, it read least where
    noise had made the most overlap."""
    if len(rows) < 2:
        return 0.0
    gaps = np.array([float(r["gap_before_ns"]) for r in rows])
    noise = np.array([float(r.get("gap_noise_ns") or 0.0) for r in rows])
    noise[0] = 0.0
    if not noise.any():
        return 0.0
    gaps = np.where((gaps < 0) & (gaps > -GAP_TOTAL_SIGMAS * noise), 0.0, gaps)
    durations = np.array([float(r["duration_ns"]) for r in rows])
    ahead = np.concatenate(([0.0], durations[:-1]))  # each op starts its gap after the one before ends

    def busy(chain_gaps: np.ndarray) -> int:
        starts = np.cumsum(chain_gaps + ahead)
        return union_ns(starts, starts + durations)

    rng = np.random.default_rng(seed)
    drawn = [busy(g) for g in gaps + rng.standard_normal((draws, gaps.size)) * noise]
    return float(busy(gaps) - np.mean(drawn))


def busy_verdict(diff_ns: float, tolerance_ns: float, overlap_ns: float) -> bool | None:
    """Whether the stitched busy is within ``tolerance_ns`` of CUPTI's, ``diff_ns`` from it as stitched, where the
    gaps' noise makes about ``overlap_ns`` of overlap (``noise_overlap_ns``): without that noise it would read
    between diff_ns and diff_ns + overlap_ns. True where all of that range is within the tolerance, False where all
    of it is beyond it on one side, else None: not decided (a shortfall the noise may have made, or a reading within
    the tolerance that the noise may hide an excess under)."""
    low, high = diff_ns, diff_ns + max(0.0, overlap_ns)
    if high < -tolerance_ns or low > tolerance_ns:
        return False
    if -tolerance_ns <= low and high <= tolerance_ns:
        return True
    return None


def gap_total_steps_to_decide(
    diff_ns: float, tolerance_ns: float, noise_ns: float, scatter_ns: float = 0.0
) -> float | None:
    """For a gap total ``gap_total_verdict`` leaves undecided: about how many times the steps per variant would
    decide it, the medians' error ``noise_ns`` falling with their square root, the positions' scatter
    ``scatter_ns`` (``position_scatter_ns``) taken not to, and the difference holding (within the tolerance, two
    errors inside it; beyond, two errors inside the excess). None where nothing would: no error, no tolerance, or
    a scatter that alone fills that room."""
    left = (_gap_total_room(diff_ns, tolerance_ns) / GAP_TOTAL_SIGMAS) ** 2 - scatter_ns**2
    if left <= 0:
        return None
    return steps_to_fit(noise_ns, GAP_TOTAL_SIGMAS * math.sqrt(left), GAP_TOTAL_SIGMAS)


def gap_total_scatter_bound(diff_ns: float, tolerance_ns: float, scatter_ns: float) -> bool:
    """Whether the positions' scatter alone keeps a gap total undecided at any number of steps: two of it fill the
    room ``gap_total_steps_to_decide`` would fit two errors into."""
    return scatter_ns > 0 and GAP_TOTAL_SIGMAS * scatter_ns >= _gap_total_room(diff_ns, tolerance_ns)


def _gap_total_room(diff_ns: float, tolerance_ns: float) -> float:
    """Where a gap total's two errors must fit to decide it: the tolerance, for a total within it; the excess, for
    one beyond."""
    return tolerance_ns if abs(diff_ns) <= tolerance_ns else abs(diff_ns) - tolerance_ns


def clean_check(
    stitched: Stitched,
    clean_step_ns: float,
    ref: CuptiReference,
    *,
    durations_from_reference: bool = False,
    under_cupti: Stitched | None = None,
    host_steady: bool | None = None,
    capture_classes: Sequence[Mapping[str, Any]] = (),
    head_effect: VariantEffect | None = None,
    start_bias: Mapping[str, float | None] | None = None,
    piece_effects: Mapping[str, VariantEffect] | None = None,
    cycle_clean: Mapping[str, Mapping[str, Any]] | None = None,
    boundary: BoundaryLag | None = None,
) -> dict[str, Any]:
    """The stitched step against the clean step and CUPTI: the CuptiCheck record's fields.

    With ``durations_from_reference`` the stitched durations are CUPTI's own, so they are not compared; what is
    compared is where the events put each op's end (the gap is the event-measured end-to-end time less CUPTI's
    duration), and the busy union, which depends on those positions wherever ops overlap.

    - CUPTI's own step against clean: within 5%, its timestamps describe the clean step (trusted); otherwise only
      its busy time is used (kernel durations do not depend on the host), and the op-for-op check is not made.
      Where the clean step moved over the pass (``host_steady`` false: the host, or the GPU's own speed, as in a
      step the GPU is busy for 96% of that read 7.4 and 9.4 ms in one H200 session) there is no one clean speed to
      set CUPTI's step against, and CUPTI is not trusted op for op either.
    - stitched gap total (its gaps summed, signed) against the clean step's: clean step time less CUPTI's op
      durations summed (where the kernels could not be grouped into ops, less CUPTI's busy). Where no op overlaps
      its predecessor this is the clean idle (clean step less CUPTI busy); the idle itself, the step less the
      union of its ops, is compared too, but where ops overlap (PDL) it depends on where the events put each op's
      end, which the event after it moves (docs/gaps.md), so it is reported beside the verdict, not in it. The
      total is judged at two of its standard errors (``gap_total_verdict``), and where its error is too large to
      check the tolerance it is not decided, and neither is the whole check unless something else disagrees.
    - stitched busy against CUPTI busy; per op class median gap and duration against CUPTI's (when trusted); with
      ``under_cupti`` (the same pass's steps read while CUPTI ran, stitched), what CUPTI does to each class, and
      where it moves a class beyond the bar, that class is checked like for like; with ``capture_classes``, a
      class a second capture of the graphs moves is checked against it too; with ``head_effect``,
      the head's class takes CUPTI's effect from the head variant, with ``piece_effects`` the class opening the
      pieces after host-launched ops from the piece variants; with ``start_bias``, each class carries what an
      event after an op does to its start, with ``boundary`` op 0's class the boundary event's lag
      (``op_class_checks``).
    """
    cupti_overhead = ref.step_ns / clean_step_ns - 1.0 if clean_step_ns else None
    within = cupti_overhead is not None and abs(cupti_overhead) <= CUPTI_TRUST
    trusted = within and host_steady is not False
    busy_ref = ref.op_busy_ns if ref.op_busy_ns is not None else ref.busy_ns
    clean_idle = clean_step_ns - busy_ref
    durations_ref = sum(ref.op_duration_ns) if ref.op_duration_ns is not None else busy_ref
    clean_gap_total = clean_step_ns - durations_ref
    tolerance = max(GAP_TOTAL_ABS_NS, GAP_TOTAL_REL * abs(clean_idle))
    gap_diff = stitched.gap_total_ns - clean_gap_total
    busy_rel = abs(stitched.busy_ns - busy_ref) / busy_ref if busy_ref else None
    by_class = (
        gap_total_by_class(stitched.rows, ref.op_gap_ns)
        if ref.op_gap_ns is not None and len(ref.op_gap_ns) == len(stitched.rows)
        else []
    )
    cupti_gap_sum = sum(c["cupti_ns"] for c in by_class) if by_class else None
    overlap = noise_overlap_ns(stitched.rows)
    like = under_cupti.rows if under_cupti is not None else None
    compare = not durations_from_reference
    ops = []
    if trusted:
        ops = op_class_checks(
            stitched.rows,
            ref,
            compare_durations=compare,
            under_cupti=like,
            capture_classes=capture_classes,
            head_effect=head_effect,
            start_bias=start_bias,
            piece_effects=piece_effects,
            cycle_clean=cycle_clean,
            boundary=boundary,
        )
    ops_agree = classes_verdict(o["gap_verdict"] for o in ops) if ops else None
    ops_undecided = bool(ops) and ops_agree is None
    likes = [o["gap_under_cupti_agrees"] for o in ops if "gap_under_cupti_agrees" in o]
    ops_under_cupti_agree = all(likes) if likes else None
    scatter = stitched.gap_total_scatter_ns
    total_error = math.hypot(stitched.gap_total_noise_ns, scatter)
    total_ok = gap_total_verdict(gap_diff, tolerance, total_error)
    busy_ok = busy_verdict(stitched.busy_ns - busy_ref, BUSY_REL * busy_ref, overlap) if busy_ref else False
    agrees: bool | None = False
    if busy_ok is not False and total_ok is not False and ops_agree is not False:
        agrees = None if total_ok is None or busy_ok is None or ops_undecided else True
    if within and not trusted:
        trust = (
            f"CUPTI's step is {cupti_overhead:+.1%} off clean, but the clean step moved over the pass (the host, or "
            "the GPU's own speed): with no one clean speed to set it against, its gaps are not taken as the clean "
            "step's and the op-for-op check is not made"
        )
    elif trusted:
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
        "durations_from_cupti": durations_from_reference,
        "events_busy_ns": float(stitched.busy_ns),
        "cupti_busy_ns": ref.busy_ns,
        "cupti_op_busy_ns": ref.op_busy_ns,
        "busy_rel_diff": busy_rel,
        "busy_agrees": busy_ok,
        "busy_noise_overlap_ns": round(overlap, 1),
        "events_total_gap_ns": float(stitched.gap_total_ns),
        "clean_gap_total_ns": clean_gap_total,
        "clean_idle_ns": clean_idle,
        "events_idle_ns": float(stitched.idle_ns),
        "idle_diff_ns": stitched.idle_ns - clean_idle,
        "cupti_total_gap_ns": ref.step_ns - busy_ref,
        "total_gap_diff_ns": gap_diff,
        "cupti_gap_sum_ns": cupti_gap_sum,
        "cupti_gap_part_ns": cupti_gap_sum - clean_gap_total if cupti_gap_sum is not None else None,
        "gap_total_by_class": by_class,
        # a sampled plan's kept tail is in the total and in no op's gap; a dense plan's is in op 0's
        "gap_total_tail_ns": stitched.tail_ns if by_class and stitched.tail_measured_ns is not None else None,
        "total_gap_tolerance_ns": tolerance,
        "total_gap_noise_ns": round(total_error, 1),
        "total_gap_scatter_ns": scatter,
        "total_gap_agrees": total_ok,
        "total_gap_steps_to_decide": (
            gap_total_steps_to_decide(gap_diff, tolerance, stitched.gap_total_noise_ns, scatter)
            if total_ok is None
            else None
        ),
        "total_gap_scatter_bound": (
            gap_total_scatter_bound(gap_diff, tolerance, scatter) if total_ok is None else None
        ),
        "ops": ops,
        "ops_agree": ops_agree,
        "ops_under_cupti_agree": ops_under_cupti_agree,
        "under_cupti_steps": under_cupti.sampled_steps if under_cupti is not None else None,
        "agrees": agrees,
    }


def summarise(stitched: Stitched, step_ns: float) -> dict[str, Any]:
    """The op table and gap distribution of a stitched (or instrumented) step."""
    return {
        "ops": aggregate_ops(stitched.rows, step_ns),
        "gaps": gap_distribution([r["gap_before_ns"] for r in stitched.rows]),
    }


def class_check_made(every_class_agrees: bool | None, cupti_trusted: bool | None, ops_checked: bool) -> bool:
    """Whether the every-class check against CUPTI was made: it has a verdict, or CUPTI is trusted op for op and
    classes were checked (``checks_verdict``)."""
    return every_class_agrees is not None or (cupti_trusted is not False and ops_checked)


def checks_verdict(
    within_budget: bool | None,
    gap_total_agrees: bool | None,
    busy_agrees: bool | None,
    every_class_agrees: bool | None,
    class_check_made: bool,
) -> str:
    """The verdict over a pass's checks against the clean step (issue 12): the sampled step within the budget, the
    gap total and busy, and every op class by the better reading where the class check was made (it is not where
    CUPTI is not trusted op for op, as the issue asks a class only where CUPTI's own step is within 5% of clean).
    Any no: "disagree"; else any undecided: "not decided"; else "agree"."""
    judged = [within_budget, gap_total_agrees, busy_agrees] + ([every_class_agrees] if class_check_made else [])
    if False in judged:
        return CHECKS_DISAGREE
    return CHECKS_NOT_DECIDED if None in judged else CHECKS_AGREE
