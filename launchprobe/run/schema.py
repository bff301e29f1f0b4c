"""The saved run as code: typed records for everything one stage hands the next (docs/run-file.md).

``ClassifyRun`` and ``AnalyzeRun`` are tagged by ``kind``; every field a result may lack is optional with a None
default, so a run from ``--plan``, the CPU path or an older file is the same type with fewer values. Numbers that
follow from others (speed-ups, idle shares, a kernel pass's busy intervals) are computed once: by the producer
into a field, or here as a property, never again in a renderer.
"""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
RUN_KINDS = ("classify", "analyze")
MODE_ORDER = ("eager", "piecewise", "full")


class Record(msgspec.Struct, kw_only=True):
    """Base of every run record: keyword construction, attribute access, ``to_dict`` for generic renderers."""

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# The header every run has


class Tool(Record, kw_only=True):
    name: str = "launchprobe"
    version: str | None = None


class Environment(Record, kw_only=True):
    """Where the run was made (classify) or which GPUs the trace shows (analyze); unknown values are None."""

    device: str | None = None  # cuda | cpu
    gpu: str | None = None
    gpu_count: int | None = None
    gpus: dict[str, str | None] | None = None  # analyze: GPU index -> name
    sm_count: int | None = None
    l2_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    driver: str | None = None
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    platform: str | None = None

    @property
    def known(self) -> bool:
        return any(value is not None for value in msgspec.structs.astuple(self))


class RunHeader(Record, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    created: str = ""
    tool: Tool = msgspec.field(default_factory=Tool)
    command: list[str] = msgspec.field(default_factory=list)
    notices: list[str] = msgspec.field(default_factory=list)
    environment: Environment = msgspec.field(default_factory=Environment)

    def notice(self, text: str) -> None:
        """Add a notice once."""
        if text not in self.notices:
            self.notices.append(text)


def header_fields() -> dict[str, Any]:
    """Header values for a run made now by this process."""
    from launchprobe import __version__

    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tool": Tool(version=__version__),
        "command": ["launchprobe", *sys.argv[1:]],
    }


# ---------------------------------------------------------------------------------------------------------------
# kind: classify


KERNEL_SECONDS_MAX = 3600.0  # the most --kernel-seconds takes


class ClassifyConfigRecord(Record, kw_only=True):
    shape: str
    batches: list[int]
    context: int
    modes: list[str]
    dtype: str
    warmup_steps: int | None = None
    steps: int | None = None
    capture_sizes: list[int] | str | None = None
    device: str | None = None
    ceilings: str | None = None
    profile_steps: int | None = None
    plan: bool = False
    kernels: bool = False
    kernel_density: str | None = None  # sampled | dense, with kernels; absent in older files (dense)
    kernel_seconds: float | None = None  # device time for the sampled cycles of each (mode, batch); older: 5
    nvtx: str | None = None
    projections: str | None = None  # cublas | gemv; absent in older files
    pdl: bool | None = None  # programmatic dependent launch used; absent in older files


class ShapeRecord(Record, kw_only=True):
    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool = False
    rms_eps: float | None = None
    rope_theta: float | None = None
    description: str | None = None


class CeilingsRecord(Record, kw_only=True):
    source: str  # measured | cached | datasheet
    hbm_read_bytes_per_s: float
    matmul_flops_per_s: float
    launch_host_ns: float | None = None
    graph_node_ns: float | None = None
    measured_at: str | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    graph_node_gap_ns: float | None = None  # idle between consecutive graph nodes, by CUPTI


class Memory(Record, kw_only=True):
    weight_bytes: int
    distinct_layers: int
    kv_cache_bytes: int
    activation_bytes: int | None = None


class Unavailable(Record, kw_only=True):
    mode: str
    reason: str


class Speedup(Record, kw_only=True):
    batch: int
    piecewise_vs_eager: float | None = None
    full_vs_eager: float | None = None


class KernelRow(Record, kw_only=True):
    """One op of the step shown, times from the step's first event."""

    index: int
    op: str
    layer: int
    start_ns: int
    end_ns: int
    gap_before_ns: int
    host_launched: bool | None = None
    duration_ns: int | None = None
    gap_corrected_ns: int | None = None
    gap_noise_ns: float | None = None  # standard error of gap_before_ns, from the spread of its samples
    end_shift_ns: int | None = None  # how much earlier (negative: later) the op ends with an event after it (CUPTI)


class OpRow(Record, kw_only=True):
    op: str
    count: int
    duration_ns_median: float
    gap_ns_median: float
    gap_ns_total: float | None = None
    time_ns_total: float | None = None
    share_of_step: float | None = None
    bytes: int | None = None
    achieved_bandwidth_bytes_per_s: float | None = None


class GapStats(Record, kw_only=True):
    p50_ns: float
    p90_ns: float
    p99_ns: float
    max_ns: float
    total_ns: float
    count: int | None = None


class OpCheck(Record, kw_only=True):
    """One op class (name): the stitched step's median gap and duration against CUPTI's, uninstrumented."""

    op: str
    count: int
    events_gap_ns_median: float
    cupti_gap_ns_median: float
    gap_diff_ns: float
    gap_agrees: bool
    events_duration_ns_median: float | None = None
    cupti_duration_ns_median: float | None = None
    duration_diff_ns: float | None = None
    duration_agrees: bool | None = None
    # the same class stitched from the pass's cycle run again under CUPTI (like for like: CUPTI on both sides)
    events_gap_under_cupti_ns_median: float | None = None
    gap_under_cupti_diff_ns: float | None = None
    gap_under_cupti_agrees: bool | None = None
    # what CUPTI does to the class: the events' reading under CUPTI less theirs without it, with its noise; where it
    # is beyond the op bar and 2 standard errors (read by the head or piece variants: beyond 2 standard errors at any
    # size), CUPTI's value is not the class's clean gap (cupti_trusted_here)
    cupti_effect_ns: float | None = None
    cupti_effect_noise_ns: float | None = None
    # where that effect was read: "stitched under CUPTI" (the class in the cycle run again under CUPTI), or, for the
    # piecewise head's class, "head variant" (its first piece's end under CUPTI less without: the step's start
    # alone; the like-for-like reading is then the clean head plus it), or, for the class opening each piece after a
    # host-launched op (o_proj), "piece variant" (the span from that op's end to the piece's end, the same way)
    cupti_effect_source: str | None = None
    cupti_trusted_here: bool | None = None
    # CUPTI's value for the class in the CUPTI cycle's clean steps, later in the pass, and the share of those steps
    # beyond the bar of the reference's: a diagnostic (a piece's start takes one of two values from step to step)
    cupti_cycle_gap_ns_median: float | None = None
    cupti_cycle_off_bar_fraction: float | None = None
    # CUPTI's value for the class in a second capture of the clean graphs (the capture check), whether that capture
    # moved it (CaptureShift.moved; beyond the bar in files before 2026-12-03 14:30 UTC), and whether the events'
    # reading is within the bar of it
    cupti_second_capture_gap_ns_median: float | None = None
    capture_moved: bool | None = None
    gap_second_capture_agrees: bool | None = None
    # what an event after an op does to where it starts, in this class's gap (CUPTI's StartShift.bias_ns): the
    # events cannot see a start, so their reading carries it; reported beside the verdict, applied to nothing
    start_bias_ns: float | None = None
    # the events' gap less CUPTI's clean one plus what the variants' own captures do to it (FreshCaptureClass.shift_ns),
    # where they read the class: a diagnostic beside the verdict (null in eager and older files)
    gap_fresh_capture_diff_ns: float | None = None
    # op 0's class, under CUPTI (sampled.boundary_lag): how much longer the boundary event lagged the previous step's
    # last kernel than the events' end event lagged the opening op; part of CUPTI's gap between steps the events
    # cannot see; a diagnostic, like the above
    boundary_lag_ns: float | None = None
    boundary_lag_noise_ns: float | None = None
    cupti_gap_less_boundary_lag_ns: float | None = None  # CUPTI's gap between steps less that lag
    # agree | agree like for like (CUPTI moves the class; the like-for-like reading agrees) | agree across captures
    # (a second capture moves CUPTI's value; the reading agrees with that capture's) | disagree
    gap_verdict: str | None = None


class EventLag(Record, kw_only=True):
    """Two consecutive events of one step against CUPTI's ends of their ops, by the kinds of the two events."""

    kinds: str  # node-node | node-host | host-node | host-host (event node after a graphed op, host event)
    pairs: int
    lag_ns_median: float  # (E_b - E_a) - (end_b - end_a): the later event's lag less the earlier one's
    lag_noise_ns: float | None = None


class AnchorEffect(Record, kw_only=True):
    """Under CUPTI, how much longer the GPU idles after a far pair's anchor event than after a near pair's, for
    the pairs measuring one op class (``sampled.anchor_effects``); taken out of the like-for-like reading."""

    op: str
    effect_ns: float
    anchors: int


class FreshCaptureClass(Record, kw_only=True):
    """One op class in ``FreshCaptures``: the median over its positions of CUPTI's gap in the variants' fresh
    captures less in the clean runner's (``shift_ns``), and those differences summed."""

    op: str
    count: int
    shift_ns: float
    sum_ns: float


class FreshCaptures(Record, kw_only=True):
    """Under CUPTI, the gap before each graphed op in the variants' own captures of its piece, where no event sits
    near it, less in the clean runner's capture (``sampled.fresh_capture_shifts``): what the captures the picture is
    stitched from do to the gaps, beside the one capture the clean reference is. A diagnostic."""

    positions: int
    gap_sum_ns: float
    classes: list[FreshCaptureClass]


class StartShift(Record, kw_only=True):
    """Under CUPTI, how much sooner an op of one class starts in the steps that time its end than in the clean
    steps (``shift_ns``, negative: sooner), and what that puts into the class's gap as the pairs read it: its own
    shift less its predecessor's (``bias_ns``), medians over the class's ``ops`` (``sampled.start_shifts``)."""

    op: str
    shift_ns: float
    bias_ns: float | None = None
    ops: int


class TimerPairClass(Record, kw_only=True):
    """Per op class, the timer pairs' gap (split: less their mean excess) and as read, medians over the class's
    covered ops, against CUPTI's clean gaps of the same ops within the op bar (``timer_pairs.class_checks``)."""

    op: str
    count: int
    gap_ns_median: float
    raw_gap_ns_median: float
    cupti_gap_ns_median: float | None = None
    gap_diff_ns: float | None = None
    gap_agrees: bool | None = None
    duration_shift_ns: float | None = None  # the class's duration in the timer steps less in the clean steps (CUPTI)
    # CUPTI's effect on the class: the same pairs read under CUPTI less without it, less the pairs' mean of that
    # (source "timers under CUPTI"); or, for a class the timers did not read under CUPTI and the events' check found
    # CUPTI moves, the events'
    cupti_effect_ns: float | None = None
    cupti_effect_noise_ns: float | None = None  # its standard error (the timers' own effect)
    cupti_effect_source: str | None = None  # timers under CUPTI / events' op check
    # where that effect moves the class (the timers' own: beyond 2 of its noise): the timers' gap plus it less CUPTI's
    gap_under_cupti_diff_ns: float | None = None
    gap_verdict: str | None = None  # agree / agree like for like / disagree, as the events' OpCheck.gap_verdict
    # where CUPTI saw the timer steps shift the class (beyond 2 of its errors and 0.5 us, not moved): the timers' gap
    # less CUPTI's reference plus that shift; it explains a miss and changes no verdict
    gap_timer_steps_diff_ns: float | None = None
    # CUPTI's gap of the class in the timer steps themselves, the timer kernels set aside (median over its ops)
    cupti_timer_steps_gap_ns_median: float | None = None
    # that less CUPTI's clean reference, less the typical op's (the timer between the two ops); its standard error
    timer_steps_shift_ns: float | None = None
    timer_steps_shift_noise_ns: float | None = None
    # beyond 2 of its errors and the op bar of CUPTI's reference: the timer steps ran the class apart, and the
    # every-class verdict takes the events' reading of it (with_events_ops_agree, classes_from_events)
    timer_steps_moved: bool | None = None


class TimerPairs(Record, kw_only=True):
    """Graph modes: each op's gap read between a timer kernel after it and one after the op before it in the same
    step, less the pairs' mean excess over the stitched gaps of the same ops (docs/gaps.md, timer pairs)."""

    measured: bool
    note: str | None = None  # why not measured
    pdl: bool | None = None  # timers launched with programmatic dependent launch
    spacing: int | None = None  # ops between the targets of one variant
    variants: int | None = None
    steps: int | None = None  # timer-pair steps read
    clean_step_ms: float | None = None  # the clean step timed beside the timer steps (their references' median)
    solo_variants: int | None = None  # variants timing a one-per-step op, run SOLO_ROUNDS more rounds
    after_piece_variants: int | None = None  # variants timing host-launched ops right after a graph piece
    after_piece_behind: list[int] | None = None  # such ops (indices) not read: their variant's steps ran over budget
    durations_source: str | None = None  # whose op durations the pairs take off: the timer steps' or clean steps'
    ops_covered: int | None = None  # ops whose gap a pair read (predecessor graphed; the op graphed or host-launched)
    mean_excess_ns: float | None = None  # the pairs' mean over the stitched gaps of the same ops, taken out
    # the typical pair's CUPTI effect: over the pairs read both ways, the median of their under CUPTI less without
    cupti_typical_effect_ns: float | None = None
    # over the ops read, the median of CUPTI's gap in the timer steps less in its clean reference (the timers' cost)
    cupti_timer_steps_typical_shift_ns: float | None = None
    overhead_fraction: float | None = None  # the pair steps against their clean references (pooled median)
    variant_overhead_max_fraction: float | None = None
    gaps_ns: list[float | None] | None = None  # per op, its split gap; None where no pair read it
    classes: list[TimerPairClass] | None = None
    ops_agree: bool | None = None  # no class's verdict is disagree; None where CUPTI is not trusted op for op
    # every op class of the step: the timers' verdict where they read it, the events' (cupti_check.ops) elsewhere
    with_events_ops_agree: bool | None = None
    classes_from_events: list[str] | None = None  # the classes that verdict takes from the events


class CaptureShift(Record, kw_only=True):
    """Per op class, CUPTI's gap in a second capture of the clean step's graphs less in the first
    (``sampled.capture_shifts``)."""

    op: str
    count: int
    shift_ns: float
    beyond_bar: bool  # beyond the op bar (1 us or 15%)
    second_gap_ns_median: float | None = None  # the class's median gap in the second capture (null in older files)
    shift_error_ns: float | None = None  # the shift's standard error (null in older files)
    # beyond 2 of its standard errors and 0.5 us, or beyond the bar: CUPTI's gap for the class depends on the
    # capture (null in older files, where beyond_bar alone said so)
    moved: bool | None = None


class CaptureCheck(Record, kw_only=True):
    """CUPTI's per-op gaps in two captures of the clean step's graphs (no events in either), and the two steps'
    lengths against each other without CUPTI: a gap CUPTI moves between captures while the step does not is a
    property of the capture, not of the step."""

    classes: list[CaptureShift]
    step_shift_ns: float | None = None  # the second capture's step less the first's, alternating, without CUPTI
    step_shift_error_ns: float | None = None
    note: str | None = None


class ClassGapTotal(Record, kw_only=True):
    """One op class's part of the gap total: the stitched gaps at its positions summed, CUPTI's clean
    per-position median gaps at the same positions summed, and the first less the second (``diff_ns``, the class's
    part of ``CuptiCheck.total_gap_diff_ns``; ``sampled.gap_total_by_class``)."""

    op: str
    count: int
    stitched_ns: float
    cupti_ns: float
    diff_ns: float | None = None  # null in files before 2026-12-04 08:30 UTC


class CuptiCheck(Record, kw_only=True):
    """The kernel pass against the clean step and CUPTI's timestamps of uninstrumented steps (docs/gaps.md).

    Runs before the sampled pass (schema v1 files from then) compared the instrumented step with CUPTI's view of
    that same instrumented step: ``events_median_gap_ns``, ``cupti_median_gap_ns``, ``total_gap_rel_diff`` and
    ``median_gap_abs_diff_ns`` are theirs."""

    available: bool | None = None
    note: str | None = None
    reference: str | None = None  # what CUPTI watched
    steps: int | None = None  # clean steps under CUPTI
    clean_step_ns: float | None = None
    cupti_step_ns: float | None = None  # the step time under CUPTI (boundary events)
    cupti_overhead_fraction: float | None = None
    cupti_trusted: bool | None = None  # CUPTI's step within 5% of clean: its gaps describe the clean step
    trust_note: str | None = None
    grouping: str | None = None  # how CUPTI kernels were grouped into ops, or why not
    durations_from_cupti: bool | None = None  # the stitched durations are CUPTI's: only positions are compared
    events_ops: int | None = None
    cupti_kernels: int | None = None  # per step
    events_busy_ns: float | None = None
    cupti_busy_ns: float | None = None  # union of kernel intervals per step
    cupti_op_busy_ns: float | None = None  # union of op intervals (first kernel start to last kernel end)
    busy_rel_diff: float | None = None
    busy_agrees: bool | None = None  # beyond the overlap the gaps' noise makes; None: not decided (older: no None)
    busy_noise_overlap_ns: float | None = None  # that overlap: how short noise alone reads the stitched busy
    events_total_gap_ns: float | None = None  # the stitched gaps summed, signed (older files: the stitched idle)
    clean_gap_total_ns: float | None = None  # clean step less CUPTI's op durations summed: its gaps, signed
    clean_idle_ns: float | None = None  # clean step time minus CUPTI busy
    events_idle_ns: float | None = None  # the stitched step less the union of its op intervals
    idle_diff_ns: float | None = None  # events_idle_ns - clean_idle_ns (where ops overlap, positions matter)
    cupti_total_gap_ns: float | None = None  # CUPTI's own step time minus its busy
    total_gap_diff_ns: float | None = None
    # CUPTI's clean per-position median gaps summed, and that less clean_gap_total_ns (what CUPTI's own steps add to
    # the gaps): total_gap_diff_ns is the classes' stitched less CUPTI's sums, plus gap_total_tail_ns, plus the part
    cupti_gap_sum_ns: float | None = None
    cupti_gap_part_ns: float | None = None
    gap_total_by_class: list[ClassGapTotal] = msgspec.field(default_factory=list)
    gap_total_tail_ns: int | None = None  # a sampled plan's kept tail, in the total and no op's gap (dense: null)
    total_gap_tolerance_ns: float | None = None
    # the stitched gap total's standard error: its medians' and its positions' scatter together (null in older
    # files; before 2026-12-03 13:00 UTC the medians' alone)
    total_gap_noise_ns: float | None = None
    total_gap_scatter_ns: float | None = None  # the positions' scatter part of it (``sampled.position_scatter_ns``)
    total_gap_agrees: bool | None = None  # at two standard errors; None: not decided, its error too large
    total_gap_steps_to_decide: float | None = None  # undecided: about how many times the steps would decide it
    # undecided: the positions' scatter alone keeps it so, at any number of steps (``sampled.gap_total_scatter_bound``)
    total_gap_scatter_bound: bool | None = None
    ops: list[OpCheck] = msgspec.field(default_factory=list)
    # every class's gap_verdict an agreement; None: not compared op for op (CUPTI not trusted, or not grouped), or
    # a class not decided and none disagreeing
    ops_agree: bool | None = None
    ops_under_cupti_agree: bool | None = None  # every class within the bar like for like (events read under CUPTI)
    under_cupti_steps: int | None = None  # sampled steps read under CUPTI, stitched for that check
    events_median_gap_ns: float | None = None
    cupti_median_gap_ns: float | None = None
    total_gap_rel_diff: float | None = None
    median_gap_abs_diff_ns: float | None = None
    agrees: bool | None = None  # None: not decided (the gap total, busy or a class is not; nothing disagrees)


class StrideProbe(Record, kw_only=True):
    stride: int
    overhead_fraction: float  # measured: the probed variants at this stride against the clean step
    error_fraction: float | None = None  # the standard error of that measurement
    variants: int | None = None  # how many variants the probe ran: 1, the densest alone; more, as the cycles run


# what decided KernelPass.overhead_within_budget (analysis/sampled.py, Overheads.basis)
OVERHEAD_BASIS_SLOWEST = "slowest variant"
OVERHEAD_BASIS_POOLED = "pooled: no variant stands out"
# where an op check took CUPTI's effect on its class from (OpCheck.cupti_effect_source)
CUPTI_EFFECT_STITCHED = "stitched under CUPTI"
CUPTI_EFFECT_HEAD_VARIANT = "head variant"
CUPTI_EFFECT_PIECE_VARIANT = "piece variant"
# and a timer-pair class (TimerPairClass.cupti_effect_source): the same pairs read under CUPTI, or the events' check
CUPTI_EFFECT_TIMERS = "timers under CUPTI"
CUPTI_EFFECT_EVENTS = "events' op check"
# OpCheck.gap_verdict
GAP_AGREE = "agree"
GAP_AGREE_LIKE_FOR_LIKE = "agree like for like"
GAP_AGREE_ACROSS_CAPTURES = "agree across captures"
GAP_DISAGREE = "disagree"
# the events miss CUPTI's reference, and most of CUPTI's own clean steps later in the pass put the class beyond the
# bar of that reference: a reference that does not hold to the bar cannot check to it
GAP_NOT_DECIDED = "not decided"
# KernelPass.checks_verdict (analysis/sampled.py, checks_verdict)
CHECKS_AGREE, CHECKS_DISAGREE, CHECKS_NOT_DECIDED = "agree", "disagree", "not decided"


class KernelPass(Record, kw_only=True):
    """The per-kernel CUDA-event pass of one (mode, batch) (docs/gaps.md; every field in docs/run-file.md)."""

    source: str = "cuda-events"
    density: str | None = None  # sampled | dense; None in files from before sampling (dense, 2 events per op)
    picture: str | None = None  # stitched (the clean step, from sampled steps) | instrumented (events and all)
    perturbing: bool | None = None  # dense: the events change the step they time
    clean_step_ms: float | None = None
    clean_step_probe_ms: float | None = None  # the clean step in the stride probes' alternating blocks
    host_cpu: int | None = None  # the CPU the pass's host thread was pinned to
    instrumented_step_ms: float | None = None
    overhead_fraction: float | None = None  # sampled: median over the steps of step / its clean reference, less 1
    overhead_budget_fraction: float | None = None
    overhead_within_budget: bool | None = None  # by ``overhead_basis`` at 2 standard errors; None: not decided
    overhead_steps_to_decide: float | None = None  # not decided: about how many times the steps would decide it
    overhead_basis: str | None = None  # what decided it: "slowest variant" | "pooled: no variant stands out"
    overhead_error_fraction: float | None = None  # sampled: the standard error of overhead_fraction
    predicted_overhead_fraction: float | None = None  # at the chosen stride, from the measured event costs
    variant_overhead_max_fraction: float | None = None  # the slowest variant's median step against clean
    variant_overhead_max_error_fraction: float | None = None  # the standard error of the slowest variant's median
    variant_standout_p: float | None = None  # how often shuffled variant labels rank a variant as high (ranks)
    variant_overhead_shuffled_q95_fraction: float | None = None  # the slowest variant's median, labels shuffled (p95)
    clean_references: int | None = None  # clean steps timed among the sampled ones (before and after each group)
    clean_step_spread_fraction: float | None = None  # their p10-p90 spread over the median: how far the host moved
    host_steady: bool | None = None  # that spread within 5%: the clean step held still over the pass
    stride: int | None = None  # k: every k-th op timed per step
    variants: int | None = None  # instrumented variants of the step (k, plus one; captured graphs in graph modes)
    cycles: int | None = None  # passes over all variants
    sampled_steps: int | None = None
    one_per_step_variants: int | None = None  # variants measuring an op that occurs once per step (run more often)
    # piecewise: variants timing each graph piece after a host-launched op by host events (CUPTI's effect on its start)
    piece_variants: int | None = None
    one_per_step_runs: int | None = None  # steps each of them ran over the cycles
    stride_probes: list[StrideProbe] | None = None
    pairing: str | None = None  # how exactly paired ends see the same events ahead (analysis/sampled.py)
    reach: int | None = None  # ops from a pair's anchor to the op whose gap it measures
    event_cost_ns: float | None = None
    event_node_ns: float | None = None
    event_pair_offset_ns: float | None = None
    event_pair_offset_method: str | None = None
    events_per_op: int | None = None
    durations_source: str | None = None  # where the op durations come from: CUPTI of clean steps, or the events graph
    end_shift_source: str | None = None  # how the end shifts of the rows were measured, or why there are none
    # the events against CUPTI on the CUPTI cycle's steps, by the kinds of two consecutive events (a diagnostic)
    event_lags: list[EventLag] | None = None
    # under CUPTI, the far pairs' anchor idle less the near pairs', per class: out of the like-for-like reading
    cupti_anchor_effects: list[AnchorEffect] | None = None
    # under CUPTI, per class, how an event after an op moves its start, and what that puts into the class's gap
    # (a diagnostic: the events cannot see it, and taking it from CUPTI would put CUPTI's gap into the reading)
    cupti_start_shifts: list[StartShift] | None = None
    # graph modes with a CUPTI cycle (null in eager and older files): the variants' fresh captures against the clean one
    cupti_fresh_captures: FreshCaptures | None = None
    # graph modes: CUPTI's per-class gaps in a second capture of the clean graphs less in the first; a class it moves
    # is also checked against the second capture (OpCheck.gap_verdict "agree across captures")
    cupti_capture_check: CaptureCheck | None = None
    # graph modes: per-op gaps from timer-kernel pairs, split to sum to the stitch, and per class against CUPTI
    timer_pairs: TimerPairs | None = None
    stitched: bool | None = None
    refusal: str | None = None  # why the sampled steps were not stitched (then no rows)
    sequence_check: str | None = None  # how the same-kernel-sequence condition was checked
    position_noise_ns: float | None = None  # median over ops of the IQR of an op's end across its sampled steps
    step_ns: int | None = None  # the pictured step: stitched head + ops and gaps + tail
    busy_ns: int | None = None  # union of the pictured op intervals
    idle_ns: int | None = None  # step_ns - busy_ns
    gap_total_ns: int | None = None  # the pictured gaps, signed, and a kept tail: step_ns less durations
    tail_ns: int | None = None  # the wrap pair's tail where out of its noise (else 0): closes the step, not op 0's gap
    tail_measured_ns: int | None = None  # the tail as the wrap pair measured it
    tail_noise_ns: float | None = None  # its standard error
    span_ns: int | None = None
    kernels: list[KernelRow] = msgspec.field(default_factory=list)
    ops: list[OpRow] = msgspec.field(default_factory=list)
    gaps: GapStats | None = None
    gaps_corrected: GapStats | None = None
    cupti_check: CuptiCheck | None = None
    # sampled passes with a CUPTI check (None in older files): every op class against CUPTI by the better reading
    # (TimerPairs.with_events_ops_agree where the timer pairs judged, else CuptiCheck.ops_agree), whether that check
    # was made (not where CUPTI is not trusted op for op), and the verdict over the budget, the gap total, busy and
    # that check: "agree" | "disagree" | "not decided" (analysis/sampled.py, checks_verdict)
    every_class_agrees: bool | None = None
    every_class_checked: bool | None = None
    checks_verdict: str | None = None

    @property
    def busy_intervals(self) -> list[tuple[int, int]]:
        """The union of the kernels' intervals, in time order."""
        from launchprobe.analysis.intervals import union_intervals

        return union_intervals([(k.start_ns, k.end_ns) for k in self.kernels])

    @property
    def busy_total_ns(self) -> int:
        """The pictured step's busy time: the producer's ``busy_ns``, or (older files) the union of its kernels."""
        if self.busy_ns is not None:
            return self.busy_ns
        return sum(end - start for start, end in self.busy_intervals)

    @property
    def step_span_ns(self) -> int:
        """The pictured step's length: the stitched step, else the instrumented step time, or the last kernel's
        end if that is later."""
        busy = self.busy_intervals
        end = busy[-1][1] if busy else 0
        if self.step_ns:
            return max(end, self.step_ns)
        step = self.instrumented_step_ms
        return max(end, round(step * 1e6) if step else 0)

    @property
    def has_corrected_gaps(self) -> bool:
        return any(k.gap_corrected_ns is not None for k in self.kernels)


class WhatIf(Record, kw_only=True):
    """One prediction of what would help (launchprobe/analysis/predict.py): the step it predicts and why."""

    kind: str  # cuda-graphs | fusion | batch | padding
    title: str
    predictable: bool = True
    reason: str | None = None  # why not, when not predictable
    predicted_step_ns: int | None = None
    speedup: float | None = None  # current step time / predicted
    tokens_per_s: float | None = None  # batch what-ifs
    throughput_gain: float | None = None  # batch what-ifs: predicted tokens/s over current
    arithmetic: str | None = None
    assumptions: str | None = None


class ClassifyResult(Record, kw_only=True):
    """One (mode, batch): the cost model and floors (always), the measurement (absent in a plan)."""

    mode: str
    batch: int
    bucket: int
    padding_fraction: float
    bytes_per_step: int
    flops_per_step: int
    kernels_expected: int
    weight_bytes_per_step: int | None = None
    kv_bytes_per_step: int | None = None
    memory_floor_ms: float | None = None
    compute_floor_ms: float | None = None
    launch_floor_ms: float | None = None
    # measured
    step_ms_median: float | None = None
    step_ms_p90: float | None = None
    step_ms_iqr: float | None = None
    step_ms_samples: list[float] | None = None
    tokens_per_s: float | None = None
    kernels_per_step: float | None = None
    gpu_busy_ms: float | None = None
    idle_fraction: float | None = None
    achieved_bandwidth_bytes_per_s: float | None = None
    achieved_bandwidth_fraction: float | None = None
    achieved_flops_per_s: float | None = None
    achieved_flops_fraction: float | None = None
    busy_bandwidth_fraction: float | None = None
    verdict: str | None = None
    verdict_reason: str | None = None
    capture_s: float | None = None
    capture_bytes: int | None = None
    host_ms_per_step: float | None = None
    host_ns_per_kernel: float | None = None
    nvtx_overhead_fraction: float | None = None
    kernel_pass: KernelPass | None = None
    predicted_graph_step_ms: float | None = None  # eager/piecewise: the step as one CUDA graph (what_ifs)
    compute_bound_from_batch: int | None = None  # memory-bound: the smallest batch whose compute floor is larger
    what_ifs: list[WhatIf] = msgspec.field(default_factory=list)

    MEASURED: ClassVar[tuple[str, ...]] = ()  # the fields after launch_floor_ms, set below the class

    @property
    def key(self) -> str:
        return f"{self.mode} b={self.batch}"

    @property
    def measured(self) -> bool:
        return self.step_ms_median is not None

    @property
    def noise_fraction(self) -> float | None:
        """IQR over median of the step time."""
        if self.step_ms_iqr is None or not self.step_ms_median:
            return None
        return self.step_ms_iqr / self.step_ms_median

    @property
    def largest_floor(self) -> str | None:
        floors = {"memory": self.memory_floor_ms, "compute": self.compute_floor_ms, "launch": self.launch_floor_ms}
        known = {k: x for k, x in floors.items() if x is not None}
        return max(known, key=lambda k: known[k]) if known else None

    def sort_key(self) -> tuple[int, int, str]:
        order = MODE_ORDER.index(self.mode) if self.mode in MODE_ORDER else len(MODE_ORDER)
        return (self.batch, order, self.mode)


_FIELDS = msgspec.structs.fields(ClassifyResult)
ClassifyResult.MEASURED = tuple(f.name for f in _FIELDS[[f.name for f in _FIELDS].index("launch_floor_ms") + 1 :])


class ClassifyRun(RunHeader, kw_only=True, tag_field="kind", tag="classify"):
    config: ClassifyConfigRecord
    shape: ShapeRecord
    ceilings: CeilingsRecord | None = None
    memory: Memory | None = None
    rule: str | None = None
    results: list[ClassifyResult] = msgspec.field(default_factory=list)
    unavailable: list[Unavailable] = msgspec.field(default_factory=list)
    speedups: list[Speedup] = msgspec.field(default_factory=list)
    incomplete: bool = False  # interrupted (Ctrl-C): only the (mode, batch) rows finished before it

    @property
    def kind(self) -> Literal["classify"]:
        return "classify"

    @property
    def is_plan(self) -> bool:
        return self.config.plan

    def sorted_results(self) -> list[ClassifyResult]:
        """By batch, then eager, piecewise, full."""
        return sorted(self.results, key=ClassifyResult.sort_key)

    # Tables as pandas DataFrames (launchprobe/run/frames.py, docs/api.md)

    def frame(self, table: str = "results") -> pd.DataFrame:
        from launchprobe.run.frames import frame

        return frame(self, table)

    def results_frame(self) -> pd.DataFrame:
        """One row per (mode, batch): every scalar of a result, nested ones dotted (``kernel_pass.gaps.p50_ns``)."""
        return self.frame("results")

    def kernels_frame(self) -> pd.DataFrame:
        """The per-kernel pass's rows of the step shown, keyed by mode, batch and bucket (empty without --kernels)."""
        return self.frame("kernels")

    def ops_frame(self) -> pd.DataFrame:
        """The per-kernel pass's per-op table, keyed by mode, batch and bucket."""
        return self.frame("ops")


def speedups_of(results: list[ClassifyResult]) -> list[Speedup]:
    """Eager step time over each graph mode's, per batch (None where a mode is missing)."""
    by_key = {(r.mode, r.batch): r.step_ms_median for r in results}
    rows = []
    for batch in sorted({r.batch for r in results}):
        eager = by_key.get(("eager", batch))

        def ratio(mode: str, eager: float | None = eager, batch: int = batch) -> float | None:
            other = by_key.get((mode, batch))
            return eager / other if eager and other else None

        rows.append(Speedup(batch=batch, piecewise_vs_eager=ratio("piecewise"), full_vs_eager=ratio("full")))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# kind: analyze


class Source(Record, kw_only=True):
    path: str | None = None
    format: str | None = None  # nsys-rep | nsys-sqlite | kineto
    tool: str | None = None
    tool_version: str | None = None
    schema_version: int | str | None = None
    sqlite: str | None = None
    cuda_graph_trace: str | None = None
    rank: int | None = None
    world_size: int | None = None
    nsys_command: list[str] | None = None
    time_origin_ns: int | None = None  # the trace's first GPU op: tables show times from it
    comm_busy_fraction: float | None = None  # several files: this file's NCCL kernels' busy over its GPU busy


class AnalyzeConfigRecord(Record, kw_only=True):
    ranges: list[str] = msgspec.field(default_factory=list)
    steps: str | None = None  # --steps as resolved: annotations | auto | off (absent in older files)
    devices: list[int] | None = None
    short_gap_ns: int | None = None
    same_thread: bool | None = None  # None: auto (whole-process for ProfilerStep#N ranges, else the range's thread)
    quiet_ns: int | None = None  # the no-work heuristic's threshold (traces without thread-state data)


class Distribution(Record, kw_only=True):
    count: int = 0
    p50: int | None = None
    p90: int | None = None
    p99: int | None = None
    max: int | None = None
    mean: float | None = None


class TopKernel(Record, kw_only=True):
    name: str
    count: int
    total_ns: int
    mean_ns: int
    share: float | None = None


class IdleStretch(Record, kw_only=True):
    start_ns: int
    end_ns: int
    duration_ns: int
    kind: str
    next_op: str | None = None
    next_launch: str | None = None
    host_api_in_flight: str | None = None
    no_work_ns: int = 0  # the part during which the process issued no GPU work (kind no_work when >= half)


class PooledIdleStretch(Record, kw_only=True):
    """An idle stretch of a range summary, with the window it fell in."""

    window: str
    start_ns: int
    end_ns: int
    duration_ns: int
    kind: str
    next_op: str | None = None
    next_launch: str | None = None
    host_api_in_flight: str | None = None
    no_work_ns: int = 0


class OutlierInstance(Record, kw_only=True):
    """An instance of a range summary left out of its typical instance (warm-up, compilation, first call)."""

    window: str
    span_ns: int
    busy_ns: int
    verdict: str


class Metrics(Record, kw_only=True):
    dram_pct: float | None = None
    compute_pct: float | None = None
    compute_metric: str | None = None
    samples: int = 0


class Window(Record, kw_only=True):
    """One analysed NVTX range instance (or the whole trace) on one device."""

    name: str
    device: int
    start_ns: int
    end_ns: int
    span_ns: int
    kernels: int
    gpu_ops: int
    busy_ns: int
    idle_host_wait_ns: int
    idle_short_gap_ns: int
    idle_other_ns: int
    verdict: str
    verdict_reason: str
    instance: int | None = None
    pid: int | None = None
    tid: int | None = None
    memcpys: int = 0
    memsets: int = 0
    launches: dict[str, int] = msgspec.field(default_factory=dict)
    launch_calls: int | None = None
    kernels_per_launch: float | None = None
    ops_without_launch: int = 0
    launch_api_ns: Distribution = msgspec.field(default_factory=Distribution)
    queue_ns: Distribution = msgspec.field(default_factory=Distribution)
    idle_ns: int | None = None
    idle_fraction: float | None = None
    idle_stretches: int | None = None
    gap_p50_ns: int | None = None
    gap_p90_ns: int | None = None
    gap_p99_ns: int | None = None
    gap_max_ns: int | None = None
    top_kernels: list[TopKernel] = msgspec.field(default_factory=list)
    largest_idle: list[IdleStretch] = msgspec.field(default_factory=list)
    metrics: Metrics | None = None
    idle_no_work_ns: int = 0
    no_work_fraction: float | None = None
    no_work_source: str | None = None  # thread-state | quiet-heuristic (how idle_no_work_ns was found)
    active_ns: int | None = None  # span_ns - idle_no_work_ns: what the verdict rule works on
    # idle with the next op launched over 10 us before, or with no launch call in the trace (idle.queued_idle): it
    # waited on something else (a callback, an event, a sync), and a CUDA graph does not remove it
    idle_queued_ns: int = 0
    range_start_ns: int | None = None  # the range on the host (null for whole-trace windows)
    range_end_ns: int | None = None
    range_ns: int | None = None
    host_ahead_ns: int | None = None  # queue time of the window's first op: its start - its launch call's end
    attribution: str | None = None  # thread | process: whose launch calls inside the range count
    # detected steps (--steps): the window is the period the step owns, from the end of the previous step's work
    step_kind: str | None = None  # its kind's label
    detected_by: str | None = None  # the signal that cut it
    gpu_start_ns: int | None = None  # its own first op's start
    host_start_ns: int | None = None  # its host side: first call (or range) start and last call (or range) end
    host_end_ns: int | None = None
    outlier: bool | None = None  # warm-up / compilation: kept out of its kind's summary

    predicted_graph_step_ns: int | None = None  # eager work replayed as one CUDA graph (what_ifs)
    what_ifs: list[WhatIf] = msgspec.field(default_factory=list)
    rank: int | None = None  # several trace files: the file's rank (distributed info, else its position)
    comm_kernels: int = 0  # communication (NCCL) kernels: "nccl" in the name, any case
    comm_busy_ns: int = 0  # union of their intervals (summaries: the windows' total)

    @property
    def label(self) -> str:
        return _label(self.name, self.device, self.rank)

    def share(self, part_ns: int | None) -> float | None:
        """A part of the span as a fraction of it."""
        return part_ns / self.span_ns if part_ns is not None and self.span_ns else None


class StepPicture(Record, kw_only=True):
    """One typical step of a step kind along time (the report's strip, ``--plot``'s step-kinds.png): the instance
    whose step time is nearest the kind's p50, and its GPU busy intervals from the step's start."""

    window: str  # the step's window: "<name> #<instance>"
    instance: int
    start_ns: int  # the period the step owns (its window's start_ns / end_ns)
    end_ns: int
    busy_ns: int  # union of its ops in that period (its window's busy_ns), exact whatever the cap merged
    busy_intervals: list[tuple[int, int]] = msgspec.field(default_factory=list)  # (start, end) from start_ns
    intervals: int = 0  # intervals of the union before the cap
    merged_idle_ns: int = 0  # idle in the shortest gaps merged away to keep busy_intervals within the cap

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def busy_fraction(self) -> float | None:
        return self.busy_ns / self.span_ns if self.span_ns > 0 else None


class Summary(Record, kw_only=True):
    """The instances of one range name (instance counters pooled) on one device."""

    name: str
    device: int
    instances: int
    names: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_host_wait_ns: int
    idle_short_gap_ns: int
    idle_other_ns: int
    kernels: int
    gpu_ops: int
    launch_calls: int
    verdict: str
    verdict_reason: str
    span_p50_ns: int | None = None
    span_p90_ns: int | None = None
    busy_p50_ns: int | None = None
    busy_p90_ns: int | None = None
    idle_fraction: float | None = None
    gap_p50_ns: int | None = None
    gap_p90_ns: int | None = None
    kernels_per_instance: float | None = None
    launches: dict[str, int] = msgspec.field(default_factory=dict)
    verdicts: dict[str, int] = msgspec.field(default_factory=dict)
    slowest: str | None = None
    top_kernels: list[TopKernel] | None = None  # None in runs saved before pooling
    largest_idle: list[PooledIdleStretch] | None = None
    idle_no_work_ns: int = 0
    typical_instances: int | None = None  # instances that are not outliers
    # the typical instance's idle not spent waiting for a launch: queued or no work (median of the typical instances)
    idle_not_launch_p50_ns: int | None = None
    idle_fraction_p50: float | None = None  # median idle share of the typical instances
    no_work_fraction_p50: float | None = None
    host_ahead_p50_ns: int | None = None
    range_p50_ns: int | None = None
    outliers: list[OutlierInstance] = msgspec.field(default_factory=list)
    totals_verdict: str | None = None  # the rule applied to the totals over all instances (the old summary verdict)
    step_kind: str | None = None  # e.g. "decode, graph replay, 84 ops"
    detected_by: str | None = None  # annotation, or the structural signal with its detail
    host_p50_ns: int | None = None  # p50 of the steps' host-side time
    typical_step: StepPicture | None = None  # step kinds: the instance nearest the p50, along time

    predicted_graph_step_ns: int | None = None  # the typical instance replayed as one CUDA graph
    what_ifs: list[WhatIf] = msgspec.field(default_factory=list)
    rank: int | None = None  # several trace files: the file's rank (distributed info, else its position)
    comm_kernels: int = 0  # communication (NCCL) kernels: "nccl" in the name, any case
    comm_busy_ns: int = 0  # union of their intervals (summaries: the windows' total)

    @property
    def label(self) -> str:
        return _label(self.name, self.device, self.rank)

    def share(self, part_ns: int | None) -> float | None:
        return part_ns / self.span_ns if part_ns is not None and self.span_ns else None


class RankSkew(Record, kw_only=True):
    """One summary name across ranks (several trace files): the slowest rank sets the step."""

    name: str
    rank_span_p50_ns: dict[str, int] = msgspec.field(default_factory=dict)  # rank (as text) -> its span p50
    slowest_rank: int | None = None
    skew: float | None = None  # max p50 / min p50 - 1


def _label(name: str, device: int, rank: int | None) -> str:
    return f"{name} (device {device})" if rank is None else f"{name} (rank {rank}, device {device})"


class AnalyzeRun(RunHeader, kw_only=True, tag_field="kind", tag="analyze"):
    source: Source = msgspec.field(default_factory=Source)
    config: AnalyzeConfigRecord = msgspec.field(default_factory=AnalyzeConfigRecord)
    windows: list[Window] = msgspec.field(default_factory=list)
    summaries: list[Summary] = msgspec.field(default_factory=list)
    sources: list[Source] = msgspec.field(default_factory=list)  # several files: one per file (source: the first)
    rank_skew: list[RankSkew] = msgspec.field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        """The ranks of a run merged from several files (empty for one file)."""
        return sorted({w.rank for w in self.windows if w.rank is not None})

    @property
    def kind(self) -> Literal["analyze"]:
        return "analyze"

    # Tables as pandas DataFrames (launchprobe/run/frames.py, docs/api.md)

    def frame(self, table: str = "windows") -> pd.DataFrame:
        from launchprobe.run.frames import frame

        return frame(self, table)

    def windows_frame(self) -> pd.DataFrame:
        """One row per window: every scalar field, nested records dotted (``launch_api_ns.p50``, ``launches.*``)."""
        return self.frame("windows")

    def summaries_frame(self) -> pd.DataFrame:
        """One row per range name and device (range windows only)."""
        return self.frame("summaries")

    def idle_stretches_frame(self) -> pd.DataFrame:
        """The longest idle stretches each window keeps, with their cause, keyed by ``window_index`` (its row in
        ``windows_frame()``), window name, instance and device."""
        return self.frame("idle_stretches")

    def top_kernels_frame(self) -> pd.DataFrame:
        """Each window's top kernels by total time, keyed like ``idle_stretches_frame()``."""
        return self.frame("top_kernels")


Run = ClassifyRun | AnalyzeRun
