"""Timer pairs: each op's gap read between two timer kernels of one step, split so that the ops sum to the stitch.

The event pairs' far/near differences telescope: their signed sum is the step's, which the gap-total check tests.
Per op they carry what an event after an op does to it, which no event can see (docs/gaps.md: start shifts). A
*timer pair* puts a timer kernel (``kernels.triton.timer``) after op i - 1 and one after op i of the same captured
step; their difference less op i's duration reads the gap before op i. On the H200 that read every layer class
within 0.78 us of CUPTI's clean gap, 0.2-0.4 us long on average, and 0.56 us less that mean (docs/performance.md,
session from 2026-12-02 02:42 UTC). The pairs' sum is not the step's: each pair includes what its first timer costs
the op after it. So the pass takes the pairs' mean excess over the stitched gaps of the same ops out of every pair
(``split``): the per-op split is the pairs', the sum the stitch's.

A host-launched op right after a captured graph (piecewise kv_write) is read too: its second timer is launched by
the host, a few a step, in variants of their own (``pair_targets``), and not read where those steps ran over the
budget (``host_behind``).

Op i's duration, taken off its pair, is CUPTI's in the timer steps themselves (``timer_step_durations``), not in
the clean steps: recapturing a graph piece with timers can change how long an op in it runs. On the H200, 8B
piecewise, gate_up ran 3.1-5.0 us longer in the recaptures than in the clean runner's piece in three of four
captures; taking the clean duration off put all of that into its gap (docs/performance.md, session of 2026-12-02
from 03:59 UTC).

Pure functions over the steps the measurement layer ran (``measure.kernel_pass``); no torch.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launchprobe.analysis.sampled import (
    CAPTURE_MOVE_MIN_NS,
    CUPTI_EFFECT_SIGMAS,
    SampledStep,
    StitchRefused,
    classes_verdict,
    first_difference,
    gaps_within_step,
    group_ops,
    median_error,
    spread_over_steps,
    within_op_bar,
)
from launchprobe.run.schema import (
    CUPTI_EFFECT_EVENTS,
    CUPTI_EFFECT_TIMERS,
    GAP_AGREE,
    GAP_AGREE_LIKE_FOR_LIKE,
    GAP_DISAGREE,
)

PAIR_SPACING = 20  # ops between the targets of one variant: a timer's cost on the next ops has faded by then
PAIR_STEPS = 48  # steps of each timer-pair variant
SOLO_ROUNDS = 3  # more rounds of the variants that time a one-per-step op: four times the steps in all
CUPTI_ROUNDS = 16  # steps of each timer-pair variant under CUPTI, for the ops' durations in the timer steps
HOST_TIMERS_PER_STEP = 2  # host-launched timers in one step (pair_targets, after_pieces)
TIMER_KERNEL = "_timer_kernel"  # the timer kernel's name as CUPTI gives it (kernels.triton.timer)


def pair_targets(graphed: Sequence[bool], spacing: int = PAIR_SPACING, *, after_pieces: bool = True) -> list[list[int]]:
    """The ops whose gap timer pairs read, in variants. Op i with op i - 1 both inside captured graphs (op 0's gap
    lies between steps): variant v times every such target with i % spacing == v. With ``after_pieces``, also each
    host-launched op right after a captured graph (piecewise kv_write), its second timer launched by the host: those
    come after, in variants of their own with at most ``HOST_TIMERS_PER_STEP`` each, spread over the step, since a
    host launch costs the host time the graphed timers do not. Empty variants are left out."""
    if spacing < 2:
        raise ValueError(f"timer pairs need a spacing of at least 2 ops, got {spacing}")
    targets = [i for i in range(1, len(graphed)) if graphed[i] and graphed[i - 1]]
    variants = [[i for i in targets if i % spacing == v] for v in range(spacing)]
    if after_pieces:
        hosted = [i for i in range(1, len(graphed)) if not graphed[i] and graphed[i - 1]]
        variants += spread_over_steps(hosted, HOST_TIMERS_PER_STEP)
    return [v for v in variants if v]


def after_piece_variants(graphed: Sequence[bool], variants: Sequence[Sequence[int]]) -> list[int]:
    """The variants whose targets are host-launched ops (their second timer launched by the host)."""
    return [v for v, targets in enumerate(variants) if any(not graphed[i] for i in targets)]


def host_behind(
    variants: Sequence[Sequence[int]], after_pieces: Sequence[int], per_variant: Mapping[int, float], budget: float
) -> list[int]:
    """The ops of the after-piece variants whose steps ran more than ``budget`` over their clean references
    (``per_variant``: each variant's median step over clean, less 1): there the host fell behind, and a timer it
    launched after an op reads the launch, not the op's end, so their pairs are not read."""
    return sorted(i for v in after_pieces if per_variant.get(v, 0.0) > budget for i in variants[v])


def marked_ops(targets: Sequence[int]) -> list[int]:
    """The ops a variant puts a timer after: each target and the op before it."""
    return sorted({k for i in targets for k in (i - 1, i)})


def solo_variants(names: Sequence[str], variants: Sequence[Sequence[int]]) -> list[int]:
    """The variants whose targets include an op whose name occurs once in the step (final_norm, lm_head): that
    class's reading is one op's, with no layers to average its noise over, so these run ``SOLO_ROUNDS`` more."""
    counts = Counter(names)
    return [v for v, targets in enumerate(variants) if any(counts[names[i]] == 1 for i in targets)]


def timer_step_durations(
    steps: Sequence[tuple[int, Sequence[tuple[str, int, int]]]],
    counts: Sequence[int],
    clean_names: Sequence[str],
    variants: Sequence[Sequence[int]],
) -> dict[int, float]:
    """Per target op, the median of its duration over the steps of its variant as CUPTI saw them: ``steps`` are
    (variant, that step's rows (name, start, end)); the timer kernels are set aside and the rest must be the clean
    step's kernels (``clean_names``), grouped into ops by ``counts``. Refuses (``StitchRefused``) where a timer
    step launched other kernels, or its timers are not the variant's."""
    durations: dict[int, list[int]] = {}
    for variant, rows in steps:
        kernels = [(s, e) for name, s, e in rows if TIMER_KERNEL not in name]
        names = [name for name, _, _ in rows if TIMER_KERNEL not in name]
        timers = len(rows) - len(kernels)
        if names != list(clean_names):
            diff = first_difference(clean_names, names)
            raise StitchRefused(f"timer-pair variant {variant} launched other kernels than the clean step ({diff})")
        if timers != len(marked_ops(variants[variant])):
            raise StitchRefused(
                f"timer-pair variant {variant} ran {timers} timers, not {len(marked_ops(variants[variant]))}"
            )
        spans = group_ops(kernels, counts)
        for i in variants[variant]:
            durations.setdefault(i, []).append(spans[i][1] - spans[i][0])
    return {i: float(statistics.median(d)) for i, d in sorted(durations.items())}


def timer_step_gaps(
    steps: Sequence[tuple[int, Sequence[tuple[str, int, int]]]],
    counts: Sequence[int],
    variants: Sequence[Sequence[int]],
) -> dict[int, list[float]]:
    """Per target op, CUPTI's gap before it in each step of its variant, the timer kernels set aside: the op's first
    kernel start less the latest end of the ops before it (``steps`` as ``timer_step_durations`` takes them, already
    checked there). The timer between them is in that gap, as it is in the pair's reading."""
    out: dict[int, list[float]] = {}
    for variant, rows in steps:
        gaps = gaps_within_step(group_ops([(s, e) for name, s, e in rows if TIMER_KERNEL not in name], counts))
        for i in variants[variant]:
            if i > 0:
                out.setdefault(i, []).append(float(gaps[i]))
    return out


@dataclass(frozen=True)
class StepShift:
    gap_ns: float  # CUPTI's gap of the class in the timer steps: the median over its ops of each op's median there
    shift_ns: float  # the class's gap there less CUPTI's clean reference, less the typical op's (``StepShifts``)
    noise_ns: float  # its standard error
    moved: bool  # beyond CUPTI_EFFECT_SIGMAS of its noise and the op bar: the timer steps ran the class apart

    @property
    def shifted(self) -> bool:
        """Beyond ``CUPTI_EFFECT_SIGMAS`` of its noise and ``CAPTURE_MOVE_MIN_NS``, as a second capture moves a
        class (``sampled.capture_shifts``): the timer steps (their recaptured pieces, their timers' cost at this
        class) hold the class's gap elsewhere than the clean step does. True of every ``moved`` class too."""
        return abs(self.shift_ns) > max(CAPTURE_MOVE_MIN_NS, CUPTI_EFFECT_SIGMAS * self.noise_ns)


@dataclass(frozen=True)
class StepShifts:
    classes: dict[str, StepShift]
    typical_ns: float  # over the ops read, the median of their gap in the timer steps less in the clean reference


def timer_step_shifts(
    names: Sequence[str],
    gaps: Mapping[int, Sequence[float]],
    reference_gap_ns: Sequence[float],
    reference_error_ns: Sequence[float] | None = None,
) -> StepShifts:
    """Per op class, how far the timer steps, as CUPTI saw them, ran its gap from CUPTI's clean reference
    (``timer_step_gaps`` against ``CuptiReference.op_gap_ns``): per op the median there less the reference; the
    typical op's taken out (the timer between the two ops, which the split's mean excess takes out of the pairs; on
    the H200 +0.56-0.58 us at piecewise b1: the timer runs 0.86-0.93 us but starts while the op before it drains
    and ends a median 0.54-0.64 us after it, tests/test_timer_step_shift_field.py);
    the class's shift the median of what is left over its ops. Both sides are CUPTI's, so what CUPTI does to every
    step alike cancels: a class that moves here runs differently in the timer steps themselves (their recaptured
    pieces, their timers), and the pairs, which read those steps, do not read the clean step's gap there. Noise as
    ``span_effects``' but each median's from its interquartile range (``sampled.median_error``, as the
    reference's own error ``reference_error_ns``, where given): a host-launched op's gap scatters by microseconds
    in a few steps, and a standard deviation inflated by them would keep any shift of its from moving. A class
    moves where its shift is beyond ``CUPTI_EFFECT_SIGMAS`` of that and beyond the op bar of its reference: where
    the pairs could miss or agree by it. On the H200 (three piecewise cells, 2026-12-03 16:11 UTC) the classes'
    shifts ran from -0.40 to +0.56 us (errors 0.04 us or less, as run from standard deviations): the timer's own
    cost differs by class about that much (a timer after a GEMM fills late, docs/gaps.md), and no class moved by
    this rule."""
    per_op: dict[int, tuple[float, float, float]] = {}
    references: dict[str, list[float]] = {}
    for i, seen in gaps.items():
        if seen and i < len(reference_gap_ns):
            here = float(statistics.median(seen))
            ref_error = float(reference_error_ns[i]) if reference_error_ns is not None else 0.0
            per_op[i] = (here, here - float(reference_gap_ns[i]), math.hypot(median_error(seen), ref_error))
            references.setdefault(names[i], []).append(float(reference_gap_ns[i]))
    if not per_op:
        return StepShifts({}, 0.0)
    typical = float(statistics.median(shift for _, shift, _ in per_op.values()))
    groups: dict[str, list[tuple[float, float, float]]] = {}
    for i, (here, shift, noise) in per_op.items():
        groups.setdefault(names[i], []).append((here, shift - typical, noise))
    out = {}
    for name, rows in groups.items():
        noise = math.sqrt(sum(n**2 for _, _, n in rows) / len(rows)) / math.sqrt(len(rows))
        shift = float(statistics.median(s for _, s, _ in rows))
        reference = float(statistics.median(references[name]))
        out[name] = StepShift(
            gap_ns=float(statistics.median(h for h, _, _ in rows)),
            shift_ns=shift,
            noise_ns=noise,
            moved=not within_op_bar(reference + shift, reference) and abs(shift) > CUPTI_EFFECT_SIGMAS * noise,
        )
    return StepShifts(out, typical)


def pair_readings(steps: Sequence[SampledStep], variants: Sequence[Sequence[int]]) -> dict[int, list[float]]:
    """Per target op, its timers' difference in every step of its variant (``ends`` hold the timers' readings), as
    read. Not scaled to the clean step's speed as the stitch scales its differences: a pair spans op i's kernels and
    the gap before them, on the GPU, and that does not stretch with the step. On the H200 lm_head's pair (143 us in
    1B piecewise b64) showed no relation to its step's clean reference (correlation -0.05 to +0.10 in four cells),
    and scaling it by the events' clean step over the timer steps' references (1.006) read it 1.2 us long
    (docs/performance.md, session of 2026-12-02 from 07:00 UTC)."""
    out: dict[int, list[float]] = {}
    for step in steps:
        for i in variants[step.variant]:
            out.setdefault(i, []).append(float(step.ends[i] - step.ends[i - 1]))
    return out


def pair_gaps(
    readings: Mapping[int, Sequence[float]], durations_ns: Sequence[float] | Mapping[int, float]
) -> dict[int, float]:
    """Per target op, the median of its timers' differences less its duration (per op: a sequence over the step's
    ops, or a mapping holding at least the read ones)."""
    return {i: float(statistics.median(r)) - float(durations_ns[i]) for i, r in sorted(readings.items()) if r}


@dataclass(frozen=True)
class TimerSplit:
    gaps_ns: dict[int, float]  # per covered op: its pair's gap less the mean excess
    raw_ns: dict[int, float]  # per covered op: its pair's gap as read
    mean_excess_ns: float  # the pairs' mean over the stitched gaps of the same ops


def split(pairs: Mapping[int, float], stitched_gaps_ns: Sequence[float]) -> TimerSplit:
    """The pairs' gaps less their mean excess over the stitched gaps of the same ops: summed over those ops they
    are the stitch's, op by op they are the pairs'."""
    if not pairs:
        raise ValueError("no timer pair was read")
    excess = sum(pairs[i] - stitched_gaps_ns[i] for i in pairs) / len(pairs)
    return TimerSplit({i: g - excess for i, g in pairs.items()}, dict(pairs), excess)


def class_checks(
    names: Sequence[str],
    timer: TimerSplit,
    cupti_gap_ns: Sequence[int | float | None] | None,
    duration_shift_ns: Mapping[int, float] | None = None,
) -> list[dict[str, Any]]:
    """Per op class with covered ops: the median of its split gaps (and of the raw pairs) against CUPTI's clean
    gaps of the same ops, within 1 us or 15% (the op bar); without CUPTI's gaps, the readings alone. With
    ``duration_shift_ns`` (per covered op, its duration in the timer steps less in the clean steps), the class's
    median shift (``duration_shift_ns``)."""
    groups: dict[str, list[int]] = {}
    for i in timer.gaps_ns:
        groups.setdefault(names[i], []).append(i)
    out = []
    for name, members in groups.items():
        gap = float(statistics.median(timer.gaps_ns[i] for i in members))
        row: dict[str, Any] = {
            "op": name,
            "count": len(members),
            "gap_ns_median": gap,
            "raw_gap_ns_median": float(statistics.median(timer.raw_ns[i] for i in members)),
        }
        if duration_shift_ns is not None and all(i in duration_shift_ns for i in members):
            row["duration_shift_ns"] = float(statistics.median(duration_shift_ns[i] for i in members))
        seen = [cupti_gap_ns[i] for i in members] if cupti_gap_ns is not None else []
        if seen and all(v is not None for v in seen):
            cupti = float(statistics.median(float(v) for v in seen if v is not None))
            row.update(
                cupti_gap_ns_median=cupti,
                gap_diff_ns=gap - cupti,
                gap_agrees=within_op_bar(gap, cupti),
            )
        out.append(row)
    return out


@dataclass(frozen=True)
class SpanEffect:
    effect_ns: float  # the class's pairs under CUPTI less without, less the typical pair's (``SpanEffects``)
    noise_ns: float  # its standard error


@dataclass(frozen=True)
class SpanEffects:
    classes: dict[str, SpanEffect]
    typical_ns: float  # the median over the pairs read both ways of their median under CUPTI less without


def span_effects(
    names: Sequence[str], clean: Mapping[int, Sequence[float]], under_cupti: Mapping[int, Sequence[float]]
) -> SpanEffects:
    """Per op class, what CUPTI does to the timer pairs' differences (``pair_readings``), read by the same timers in
    the timer steps run under CUPTI (``under_cupti``) and without it (``clean``): per op the median under CUPTI less
    without; the typical op's (their median) is taken out, as the split takes the pairs' mean excess out; the
    class's effect is the median of what is left over its ops.

    A pair spans the gap and the op, so this is CUPTI's effect on both: where CUPTI lengthens the op itself (a memset
    and a GEMM in one cuBLAS call, the gap between them lengthened), its duration taken off a clean pair reads the
    gap short by as much, and only this effect shows it. The typical op's is what CUPTI does to every pair alike: its
    cost on each timer kernel, which the split's mean excess, measured without CUPTI, does not hold. Taking it out
    also takes out CUPTI's typical effect on the gaps themselves, about 0.1 us on the H200 (CUPTI's step over clean,
    spread over the step's gaps). The median, not the mean: host-launched pairs scatter by microseconds under CUPTI.
    Noise: each median's standard error (1.2533 sd / sqrt(n)), combined, and for a class of k ops divided by
    sqrt(k); the typical op's, over 160-320 ops, is left out."""
    per_op: dict[int, tuple[float, float]] = {}
    for i, seen in under_cupti.items():
        plain = clean.get(i)
        if plain and seen:
            effect = float(statistics.median(seen)) - float(statistics.median(plain))
            per_op[i] = (effect, math.hypot(_median_error(seen), _median_error(plain)))
    if not per_op:
        return SpanEffects({}, 0.0)
    typical = float(statistics.median(e for e, _ in per_op.values()))
    groups: dict[str, list[tuple[float, float]]] = {}
    for i, (effect, noise) in per_op.items():
        groups.setdefault(names[i], []).append((effect - typical, noise))
    out = {}
    for name, rows in groups.items():
        spread = math.sqrt(sum(noise**2 for _, noise in rows) / len(rows))
        out[name] = SpanEffect(float(statistics.median(e for e, _ in rows)), spread / math.sqrt(len(rows)))
    return SpanEffects(out, typical)


def _median_error(values: Sequence[float]) -> float:
    return 1.2533 * statistics.pstdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def judge(
    classes: Sequence[dict[str, Any]],
    event_ops: Sequence[Mapping[str, Any]],
    own_effects: Mapping[str, SpanEffect] | None = None,
    step_shifts: Mapping[str, StepShift] | None = None,
) -> list[dict[str, Any]]:
    """Each class with CUPTI's gap beside it gets a ``gap_verdict``, as the events' op check gives its own: "agree"
    within the op bar; where CUPTI moves the class, "agree like for like" when the timers' gap plus CUPTI's effect
    on it is within the bar; else "disagree".

    CUPTI's effect: the timers' own (``own_effects``, ``span_effects``: the same pairs read under CUPTI, the typical
    pair's taken out), which moves the class where it is beyond ``CUPTI_EFFECT_SIGMAS`` of its noise, as the head
    and piece variants' effects do (CUPTI's effect on the same steps, not on another instrument's); else, for a
    class the timers did not read under CUPTI, the events' (``cupti_trusted_here`` false, their
    ``cupti_effect_ns``).

    With ``step_shifts`` (``timer_step_shifts``), each class carries how far CUPTI saw the timer steps run its gap
    from the clean reference (``cupti_timer_steps_gap_ns_median``, ``timer_steps_shift_ns``, its noise, and
    ``timer_steps_moved``; ``with_events`` leaves a moved class to the events, and its verdict here stands as
    above). A class whose timer steps CUPTI saw shifted (``StepShift.shifted``) but not moved also carries its gap
    against CUPTI's clean reference plus that shift (``gap_timer_steps_diff_ns``): against CUPTI's view of the
    steps the pairs read, the typical op's shift aside. That explains a miss and changes no verdict, as the events'
    start bias does not (``sampled.op_class_checks``): the shift holds the timer's own cost at the class as well as
    its steps' recaptured pieces, and the pairs' reading, which the report gives, carries it; set against the clean
    reference plus the shift, the reading would be tested against the instrumented steps, the clean gap cancelling
    out. (The two sides also take out slightly different typical costs: the pairs the split's mean excess over
    the events' stitched gaps, the shift the median op's under CUPTI, 40-60 ns apart on
    tests/test_timer_step_shift_field.py's passes.) On the H200 the timers' kv_write in 8B piecewise b64 missed by
    +1.32 us where CUPTI saw its timer steps run it +0.67 +/- 0.01 us apart: +0.64 against that
    (docs/performance.md, 2026-12-03 from 17:00 UTC)."""
    moved = {
        o["op"]: o for o in event_ops if o.get("cupti_trusted_here") is False and o.get("cupti_effect_ns") is not None
    }
    own = own_effects or {}
    out = []
    for row in classes:
        row = dict(row)
        step = (step_shifts or {}).get(row["op"])
        if row.get("cupti_gap_ns_median") is not None:
            cupti = float(row["cupti_gap_ns_median"])
            verdict = GAP_AGREE if row["gap_agrees"] else GAP_DISAGREE
            effect: float | None = None
            mine = own.get(row["op"])
            if mine is not None:
                row.update(
                    cupti_effect_ns=mine.effect_ns,
                    cupti_effect_noise_ns=mine.noise_ns,
                    cupti_effect_source=CUPTI_EFFECT_TIMERS,
                )
                if abs(mine.effect_ns) > CUPTI_EFFECT_SIGMAS * mine.noise_ns:
                    effect = mine.effect_ns
            elif row["op"] in moved:
                effect = float(moved[row["op"]]["cupti_effect_ns"])
                row.update(cupti_effect_ns=effect, cupti_effect_source=CUPTI_EFFECT_EVENTS)
            if effect is not None:
                like = float(row["gap_ns_median"]) + effect
                row["gap_under_cupti_diff_ns"] = like - cupti
                if verdict == GAP_DISAGREE and within_op_bar(like, cupti):
                    verdict = GAP_AGREE_LIKE_FOR_LIKE
            if step is not None and step.shifted and not step.moved:
                row["gap_timer_steps_diff_ns"] = float(row["gap_ns_median"]) - (cupti + step.shift_ns)
            row["gap_verdict"] = verdict
        if step is not None:
            row.update(
                cupti_timer_steps_gap_ns_median=step.gap_ns,
                timer_steps_shift_ns=step.shift_ns,
                timer_steps_shift_noise_ns=step.noise_ns,
                timer_steps_moved=step.moved,
            )
        out.append(row)
    return out


@dataclass(frozen=True)
class WithEvents:
    ops_agree: bool | None  # every class agrees: the timers' verdict where they read it, the events' elsewhere
    from_events: list[str]  # the classes whose verdict is the events'
    misses: list[tuple[str, str, float]]  # (class, "timers" or "events", its gap less CUPTI's, ns)


def with_events(classes: Sequence[Mapping[str, Any]], event_ops: Sequence[Mapping[str, Any]]) -> WithEvents:
    """Every op class of the step judged by the better reading: the timer pairs' where they read the class (they
    carry no event's move of an op's start), the events' op check elsewhere (ops after a host-launched one, op 0,
    host-launched ops the host fell behind on, and classes whose gap CUPTI saw the timer steps run apart from its
    clean reference, ``timer_steps_moved``: there the pairs read their own steps, not the clean one). None where a
    class has no verdict, or is not decided and none disagrees."""
    timers = {c["op"]: c for c in classes if c.get("gap_verdict") is not None and not c.get("timer_steps_moved", False)}
    verdicts: list[str] = []
    from_events: list[str] = []
    misses: list[tuple[str, str, float]] = []
    for event in event_ops:
        name = event["op"]
        if name in timers:
            row, source = timers[name], "timers"
        elif event.get("gap_verdict") is not None:
            row, source = event, "events"
            from_events.append(name)
        else:
            return WithEvents(None, from_events, misses)
        verdicts.append(row["gap_verdict"])
        if row["gap_verdict"] == GAP_DISAGREE:
            misses.append((name, source, float(row.get("gap_diff_ns") or 0.0)))
    return WithEvents(classes_verdict(verdicts) if verdicts else None, from_events, misses)
