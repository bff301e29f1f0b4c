"""Timer pairs (analysis/timer_pairs.py) on constructed steps: which ops they cover, what they read, the split."""

from __future__ import annotations

import math
import statistics

import pytest

from launchprobe.analysis import timer_pairs
from launchprobe.analysis.sampled import SampledStep, StitchRefused


def test_targets_are_graphed_ops_after_graphed_ops_spread_over_variants() -> None:
    # piecewise-like: ops 0-3 graphed, 4 host-launched, 5-9 graphed
    graphed = [True] * 4 + [False] + [True] * 5
    variants = timer_pairs.pair_targets(graphed, spacing=3)
    flat = sorted(i for v in variants for i in v)
    assert flat == [1, 2, 3, 4, 6, 7, 8, 9]  # 4: host-launched after a graphed op; not 5 (after one), never 0
    assert variants[-1] == [4] and timer_pairs.after_piece_variants(graphed, variants) == [len(variants) - 1]
    variants = variants[:-1]
    for v in variants:
        assert len({i % 3 for i in v}) == 1
        assert all(b - a >= 3 for a, b in zip(v, v[1:]))
    assert timer_pairs.marked_ops([3, 6]) == [2, 3, 5, 6]
    assert timer_pairs.pair_targets([True, False, True], after_pieces=False) == []
    assert timer_pairs.pair_targets([True, False, True]) == [[1]]
    with pytest.raises(ValueError, match="spacing"):
        timer_pairs.pair_targets(graphed, spacing=1)


def test_host_launched_targets_come_in_variants_of_their_own_a_few_a_step_spread_over_it() -> None:
    # piecewise-like, five layers: graphed attn_norm, qkv, rotary, then host-launched kv_write and attention
    graphed = [True] + [True, True, True, False, False] * 5 + [True]
    variants = timer_pairs.pair_targets(graphed, spacing=4)
    after = timer_pairs.after_piece_variants(graphed, variants)
    kv_writes = [i for i in range(1, len(graphed)) if not graphed[i] and graphed[i - 1]]
    assert kv_writes == [4, 9, 14, 19, 24]
    hosted = [variants[v] for v in after]
    assert hosted == [[4, 19], [9, 24], [14]]  # at most HOST_TIMERS_PER_STEP each, far apart
    assert all(len(v) <= timer_pairs.HOST_TIMERS_PER_STEP for v in hosted)
    assert all(all(graphed[i] for i in v) for k, v in enumerate(variants) if k not in after)
    assert not any(i - 1 >= 0 and not graphed[i - 1] for v in variants for i in v)  # never after a host-launched op


def test_a_host_launched_pair_is_not_read_where_its_variant_ran_over_the_budget() -> None:
    variants = [[2, 22], [5], [9, 30]]
    per_variant = {0: 0.05, 1: 0.019, 2: 0.021}  # the graphed variant 0 is over budget too, but has no host timer
    assert timer_pairs.host_behind(variants, [1, 2], per_variant, budget=0.02) == [9, 30]
    assert timer_pairs.host_behind(variants, [], per_variant, budget=0.02) == []


def _steps(ends_by_variant: dict[int, list[dict[int, int]]], reference: float | None = None) -> list[SampledStep]:
    return [
        SampledStep(variant=v, step_ns=0, ends=ends, reference_ns=reference)
        for v, steps in ends_by_variant.items()
        for ends in steps
    ]


def test_readings_are_the_timers_difference_as_read_whatever_the_steps_reference() -> None:
    variants = [[2], [5]]
    steps = _steps(
        {0: [{1: 1_000_000, 2: 1_003_000}, {1: 2_000_000, 2: 2_003_400}], 1: [{4: 7_000, 5: 9_000}]},
        reference=1_100.0,  # a step 10% slower than some clean one: the pair is on the GPU, not scaled
    )
    readings = timer_pairs.pair_readings(steps, variants)
    assert readings == {2: [3000, 3400], 5: [2000]}
    gaps = timer_pairs.pair_gaps(readings, [0, 0, 2500, 0, 0, 1800])
    assert gaps == {2: pytest.approx(700.0), 5: pytest.approx(200.0)}


def test_split_keeps_each_pairs_difference_and_the_stitchs_sum() -> None:
    stitched = [3000.0, 400.0, -200.0, 650.0, 100.0]
    pairs = {1: 900.0, 2: 150.0, 4: 300.0}  # each about 0.3-0.5 us long, as on the H200
    split = timer_pairs.split(pairs, stitched)
    assert split.mean_excess_ns == pytest.approx((500 + 350 + 200) / 3)
    assert sum(split.gaps_ns.values()) == pytest.approx(stitched[1] + stitched[2] + stitched[4])
    assert split.gaps_ns[1] - split.gaps_ns[2] == pytest.approx(750.0)  # the pairs' differences kept
    assert split.raw_ns == pairs
    with pytest.raises(ValueError, match="no timer pair"):
        timer_pairs.split({}, stitched)


def test_class_checks_against_cupti_with_the_op_bar() -> None:
    names = ["embed", "norm", "gemm", "norm", "gemm"]
    split = timer_pairs.TimerSplit(
        {1: 100.0, 2: 900.0, 3: 300.0, 4: 1100.0}, {1: 400.0, 2: 1200.0, 3: 600.0, 4: 1400.0}, 300.0
    )
    cupti = [None, 200.0, -400.0, 400.0, -200.0]
    rows = {r["op"]: r for r in timer_pairs.class_checks(names, split, cupti)}
    assert rows["norm"]["gap_ns_median"] == pytest.approx(200.0)
    assert rows["norm"]["raw_gap_ns_median"] == pytest.approx(500.0)
    assert rows["norm"]["gap_agrees"] is True  # 200 against 300
    assert rows["gemm"]["gap_diff_ns"] == pytest.approx(1000.0 + 300.0)
    assert rows["gemm"]["gap_agrees"] is False  # 1.3 us off
    bare = timer_pairs.class_checks(names, split, None)
    assert all("gap_agrees" not in r for r in bare)


def test_solo_variants_are_those_timing_a_one_per_step_op() -> None:
    names = ["embed", "norm", "proj", "norm", "proj", "final_norm", "lm_head"]
    variants = [[2, 4], [3], [5], [6, 1]]
    assert timer_pairs.solo_variants(names, variants) == [2, 3]


def _timer_step(ops: list[tuple[int, int]], after: list[int], names: list[str]) -> list[tuple[str, int, int]]:
    """One step's CUPTI rows: each op's kernel, a timer kernel 300 ns after the ops in ``after``."""
    rows = []
    for i, ((start, end), name) in enumerate(zip(ops, names)):
        rows.append((name, start, end))
        if i in after:
            rows.append(("_timer_kernel", end + 100, end + 300))
    return rows


def test_durations_are_taken_in_the_timer_steps_with_the_timers_set_aside() -> None:
    names = ["a", "b", "c", "d"]
    counts = [1, 1, 1, 1]
    variants = [[1], [3]]
    # variant 0 marks ops 0 and 1; op 1 runs 5 us, then 7 us: median 6 us. Variant 1 marks 2 and 3.
    steps = [
        (0, _timer_step([(0, 1_000), (1_500, 6_500), (7_000, 8_000), (8_500, 9_000)], [0, 1], names)),
        (0, _timer_step([(0, 1_000), (1_500, 8_500), (9_000, 10_000), (10_500, 11_000)], [0, 1], names)),
        (1, _timer_step([(0, 1_000), (1_500, 3_000), (3_500, 4_500), (5_000, 7_000)], [2, 3], names)),
    ]
    assert timer_pairs.timer_step_durations(steps, counts, names, variants) == {1: 6_000.0, 3: 2_000.0}
    # taken off the readings instead of the clean durations
    gaps = timer_pairs.pair_gaps({1: [6_500.0], 3: [2_400.0]}, {1: 6_000.0, 3: 2_000.0})
    assert gaps == {1: 500.0, 3: 400.0}


def test_timer_steps_that_launch_other_kernels_are_refused() -> None:
    names = ["a", "b", "c"]
    ops = [(0, 1_000), (1_500, 2_000), (2_500, 3_000)]
    other = [(0, (_timer_step(ops, [0, 1], ["a", "x", "c"])))]
    with pytest.raises(StitchRefused, match="other kernels"):
        timer_pairs.timer_step_durations(other, [1, 1, 1], names, [[1]])
    one_timer = [(0, _timer_step(ops, [1], names))]
    with pytest.raises(StitchRefused, match="ran 1 timers, not 2"):
        timer_pairs.timer_step_durations(one_timer, [1, 1, 1], names, [[1]])


def test_class_checks_carry_the_duration_shift_in_the_timer_steps() -> None:
    split = timer_pairs.split({1: 1_000.0, 3: 1_200.0}, [0.0, 1_100.0, 0.0, 1_100.0])
    rows = timer_pairs.class_checks(["x", "p", "x", "p"], split, [0, 1_000, 0, 1_000], {1: 3_000.0, 3: 4_000.0})
    assert rows[0]["op"] == "p" and rows[0]["duration_shift_ns"] == 3_500.0
    assert "duration_shift_ns" not in timer_pairs.class_checks(["x", "p", "x", "p"], split, None)[0]


def _timer_class(op: str, gap: float, cupti: float) -> dict[str, object]:
    return {"op": op, "count": 1, "gap_ns_median": gap, "raw_gap_ns_median": gap, "cupti_gap_ns_median": cupti,
            "gap_diff_ns": gap - cupti, "gap_agrees": abs(gap - cupti) <= max(1_000, 0.15 * abs(cupti))}  # fmt: skip


def test_judge_takes_cuptis_effect_where_the_events_found_cupti_moves_the_class() -> None:
    classes = [_timer_class("lm_head", -300.0, 1_300.0), _timer_class("qkv", 2_000.0, 450.0)]
    event_ops = [
        {"op": "lm_head", "cupti_trusted_here": False, "cupti_effect_ns": 2_200.0, "gap_verdict": "agree"},
        {"op": "qkv", "cupti_trusted_here": True, "cupti_effect_ns": 1_400.0, "gap_verdict": "agree"},
    ]  # fmt: skip
    lm_head, qkv = timer_pairs.judge(classes, event_ops)
    assert lm_head["gap_verdict"] == "agree like for like"  # -0.3 + 2.2 us = 1.9 us against CUPTI's 1.3
    assert lm_head["gap_under_cupti_diff_ns"] == pytest.approx(600.0) and lm_head["cupti_effect_ns"] == 2_200.0
    assert qkv["gap_verdict"] == "disagree" and "cupti_effect_ns" not in qkv  # CUPTI trusted: no second chance
    far = timer_pairs.judge([_timer_class("lm_head", -3_000.0, 1_300.0)], event_ops)[0]
    assert far["gap_verdict"] == "disagree"  # -3.0 + 2.2 us is still 2.1 us off
    assert (
        timer_pairs.judge([_timer_class("x", 0.0, 0.0) | {"cupti_gap_ns_median": None}], [])[0].get("gap_verdict")
        is None
    )


def test_span_effects_are_the_pairs_under_cupti_less_without_less_the_typical_pairs_per_class() -> None:
    names = ["x", "p", "lm"] * 2
    clean = {1: [1_000.0, 1_100.0, 900.0], 4: [1_000.0] * 3, 2: [120_000.0, 121_000.0, 119_000.0]}
    under = {1: [1_200.0, 1_300.0, 1_100.0], 4: [1_400.0] * 3, 2: [121_500.0, 122_500.0, 120_500.0], 5: [9.0]}
    effects = timer_pairs.span_effects(names, clean, under)
    assert set(effects.classes) == {"p", "lm"}  # op 5 has no clean reading: no effect for it
    assert effects.typical_ns == pytest.approx(400.0)  # the median of +200, +400, +1500: the three read both ways
    assert effects.classes["p"].effect_ns == pytest.approx(300.0 - effects.typical_ns)  # the median of +200 and +400
    assert effects.classes["lm"].effect_ns == pytest.approx(1_500.0 - effects.typical_ns)
    one = 1.2533 * statistics.pstdev(clean[2]) / math.sqrt(3)  # each median's error, combined
    assert effects.classes["lm"].noise_ns == pytest.approx(math.hypot(one, one))
    op_1 = math.hypot(*[1.2533 * statistics.pstdev(r[1]) / math.sqrt(3) for r in (clean, under)])
    assert effects.classes["p"].noise_ns == pytest.approx(math.sqrt(op_1**2 / 2) / math.sqrt(2))  # op 4's is 0
    assert timer_pairs.span_effects(names, clean, {}) == timer_pairs.SpanEffects({}, 0.0)


def test_judge_takes_the_timers_own_cupti_effect_before_the_events() -> None:
    classes = [_timer_class("lm_head", -800.0, 1_400.0), _timer_class("o_proj", 3_000.0, 1_400.0)]
    events = [{"op": "lm_head", "cupti_trusted_here": False, "cupti_effect_ns": 2_500.0, "gap_verdict": "agree"}]
    own = {"lm_head": timer_pairs.SpanEffect(1_300.0, 200.0), "o_proj": timer_pairs.SpanEffect(900.0, 600.0)}
    lm_head, o_proj = timer_pairs.judge(classes, events, own)
    # -0.8 us plain, 2.2 off; with the timers' own +1.3 (6 sigma) 0.5 us: like for like. The events' +2.5 unused
    assert lm_head["gap_verdict"] == "agree like for like" and lm_head["cupti_effect_ns"] == 1_300.0
    assert lm_head["cupti_effect_source"] == timer_pairs.CUPTI_EFFECT_TIMERS
    assert lm_head["gap_under_cupti_diff_ns"] == pytest.approx(-900.0) and lm_head["cupti_effect_noise_ns"] == 200.0
    # an effect within 2 of its noise moves nothing: o_proj's 1.6 us miss stands, its effect reported
    assert o_proj["gap_verdict"] == "disagree" and o_proj["cupti_effect_ns"] == 900.0
    assert "gap_under_cupti_diff_ns" not in o_proj
    # the timers' own effect can fail the class too: +5 us takes -0.8 to 4.2 us, 2.8 off CUPTI's 1.4
    far = timer_pairs.judge(classes[:1], events, {"lm_head": timer_pairs.SpanEffect(5_000.0, 100.0)})[0]
    assert far["gap_verdict"] == "disagree" and far["gap_under_cupti_diff_ns"] == pytest.approx(2_800.0)
    # a class the timers did not read under CUPTI keeps the events' effect
    kept = timer_pairs.judge(classes[:1], events, {})[0]
    assert kept["cupti_effect_source"] == timer_pairs.CUPTI_EFFECT_EVENTS and kept["cupti_effect_ns"] == 2_500.0


def test_with_events_judges_every_class_by_the_better_reading() -> None:
    timers = timer_pairs.judge([_timer_class("qkv", 500.0, 450.0), _timer_class("lm_head", 3_000.0, 450.0)], [])
    events = [
        {"op": "embed", "gap_verdict": "agree", "gap_diff_ns": -200.0},
        {"op": "qkv", "gap_verdict": "disagree", "gap_diff_ns": 1_300.0},  # the timers read it: theirs counts
        {"op": "o_proj", "gap_verdict": "disagree", "gap_diff_ns": -1_240.0},
        {"op": "lm_head", "gap_verdict": "agree", "gap_diff_ns": 100.0},
    ]
    both = timer_pairs.with_events(timers, events)
    assert both.ops_agree is False and both.from_events == ["embed", "o_proj"]
    assert both.misses == [("o_proj", "events", -1_240.0), ("lm_head", "timers", 2_550.0)]
    good = timer_pairs.with_events(timers[:1], [events[0], events[1]])
    assert good.ops_agree is True and good.misses == []
    assert timer_pairs.with_events(timers, [{"op": "embed"}]).ops_agree is None  # a class with no verdict
    # an events' class not decided (CUPTI's own later clean steps leave its reference): the whole not decided,
    # unless another class misses
    open_ = {"op": "o_proj", "gap_verdict": "not decided", "gap_diff_ns": -1_240.0}
    undecided = timer_pairs.with_events(timers[:1], [events[0], events[1], open_])
    assert undecided.ops_agree is None and undecided.misses == [] and undecided.from_events == ["embed", "o_proj"]
    assert timer_pairs.with_events(timers, [events[0], open_, events[3]]).ops_agree is False  # lm_head misses


def test_timer_step_gaps_are_cuptis_gap_before_each_target_with_the_timers_set_aside() -> None:
    names = ["a", "b", "c", "d"]
    variants = [[1], [3]]
    steps = [
        (0, _timer_step([(0, 1_000), (1_500, 6_500), (7_000, 8_000), (8_500, 9_000)], [0, 1], names)),
        (0, _timer_step([(0, 1_000), (2_500, 8_500), (9_000, 10_000), (10_500, 11_000)], [0, 1], names)),
        # op 1 ends after op 2 and after op 3 starts: op 3's gap is from the latest end before it, not op 2's
        (1, _timer_step([(0, 1_000), (1_500, 6_500), (3_500, 4_000), (5_000, 7_000)], [2, 3], names)),
    ]
    # the timer after op 0 runs 1.1-1.3 us: it sits inside op 1's gap and is not its end
    assert timer_pairs.timer_step_gaps(steps, [1, 1, 1, 1], variants) == {1: [500.0, 1_500.0], 3: [-1_500.0]}
    # a target at op 0 has no gap inside the step
    assert timer_pairs.timer_step_gaps(steps[:1], [1, 1, 1, 1], [[0, 1]]) == {1: [500.0]}


def test_timer_step_shifts_take_the_typical_ops_shift_out_and_move_a_class_beyond_its_error_and_the_bar() -> None:
    names = ["x", "kv", "q", "kv", "q", "lm"]
    reference = [0.0, 2_500.0, 400.0, 2_500.0, 400.0, 1_300.0]
    gaps = {
        1: [4_000.0, 4_100.0, 4_050.0],  # +1.55 us: the class runs apart in the timer steps
        3: [3_900.0, 4_000.0, 3_950.0],  # +1.45 us
        2: [700.0, 700.0, 700.0],  # +0.3 us, the typical op's (the timer between the ops)
        4: [650.0, 750.0, 700.0],  # +0.3 us
        5: [1_650.0, 1_550.0, 1_600.0],  # +0.3 us
    }
    shifts = timer_pairs.timer_step_shifts(names, gaps, reference)
    assert shifts.typical_ns == pytest.approx(300.0)
    kv, q, lm = shifts.classes["kv"], shifts.classes["q"], shifts.classes["lm"]
    assert kv.gap_ns == pytest.approx(4_000.0) and kv.shift_ns == pytest.approx(1_200.0) and kv.moved
    assert q.shift_ns == pytest.approx(0.0) and not q.moved and lm.shift_ns == pytest.approx(0.0) and not lm.moved
    q1, _, q3 = statistics.quantiles(gaps[1], n=4, method="inclusive")  # the median's error from its IQR
    one = 1.2533 * (q3 - q1) / 1.349 / math.sqrt(3)
    assert kv.noise_ns == pytest.approx(math.sqrt((one**2 + one**2) / 2) / math.sqrt(2))
    # the reference's own error counts; a shift within two errors does not move the class
    wide = timer_pairs.timer_step_shifts(names, gaps, reference, [0.0, 2_000.0, 0.0, 2_000.0, 0.0, 0.0])
    assert wide.classes["kv"].shift_ns == pytest.approx(1_200.0) and not wide.classes["kv"].moved
    # nor one within the op bar of its reference (1 us or 15%: 1 us here), however small its error
    near = timer_pairs.timer_step_shifts(names, {**gaps, 1: [3_750.0] * 3, 3: [3_750.0] * 3}, reference)
    assert near.classes["kv"].shift_ns == pytest.approx(950.0) and not near.classes["kv"].moved
    # the bar is 15% of a long reference: 1.8 us at 12 us
    long = timer_pairs.timer_step_shifts(names, {**gaps, 1: [13_800.0] * 3, 3: [13_800.0] * 3},
                                         [0.0, 12_000.0, 400.0, 12_000.0, 400.0, 1_300.0])  # fmt: skip
    assert long.classes["kv"].shift_ns == pytest.approx(1_500.0) and not long.classes["kv"].moved
    assert timer_pairs.timer_step_shifts(names, {}, reference) == timer_pairs.StepShifts({}, 0.0)


def test_a_shifted_class_carries_its_gap_against_cuptis_view_of_the_timer_steps_and_keeps_its_verdict() -> None:
    # 8B piecewise b64 on the H200 (2026-12-03 17:15 UTC): the timers' kv_write 3.73 us against CUPTI's clean 2.42,
    # where CUPTI saw the timer steps run it +0.67 +/- 0.01 us apart (beyond the typical op's): +0.64 against that,
    # which explains the miss and does not let it off (the shift is the timer steps' own, in the reading too)
    shifts = {
        "kv_write": timer_pairs.StepShift(3_590.0, 670.0, 10.0, False),
        "qkv": timer_pairs.StepShift(700.0, 670.0, 10.0, False),  # as shifted, but it agrees plainly
        # each of these misses by 1.2-1.3 us and is within the bar of its reference plus the shift, but its shift is
        # under the 0.5 us floor, within two of its errors, or beyond the bar (moved: the events' to judge): none
        # carries the difference
        "lm_head": timer_pairs.StepShift(2_160.0, 450.0, 20.0, False),
        "down": timer_pairs.StepShift(900.0, 600.0, 400.0, False),
        "gate_up": timer_pairs.StepShift(900.0, 1_200.0, 10.0, True),
    }
    classes = [
        _timer_class("kv_write", 3_730.0, 2_420.0),
        _timer_class("qkv", 500.0, 450.0),
        _timer_class("lm_head", 1_310.0 + 1_200.0, 1_310.0),
        _timer_class("down", 1_000.0 + 1_300.0, 1_000.0),
        _timer_class("gate_up", 1_000.0 + 1_300.0, 1_000.0),
    ]
    kv, qkv, lm_head, down, gate_up = timer_pairs.judge(classes, [], None, shifts)
    assert kv["gap_verdict"] == "disagree"
    assert kv["gap_timer_steps_diff_ns"] == pytest.approx(3_730.0 - (2_420.0 + 670.0))
    assert qkv["gap_verdict"] == "agree" and qkv["gap_timer_steps_diff_ns"] == pytest.approx(500.0 - 1_120.0)
    assert lm_head["gap_verdict"] == "disagree" and "gap_timer_steps_diff_ns" not in lm_head
    assert down["gap_verdict"] == "disagree" and "gap_timer_steps_diff_ns" not in down
    assert gate_up["gap_verdict"] == "disagree" and gate_up["timer_steps_moved"]
    # a shift the other way: 3.73 against 2.42 - 0.67 is further still
    (away,) = timer_pairs.judge(
        [_timer_class("kv_write", 3_730.0, 2_420.0)],
        [],
        None,
        {"kv_write": timer_pairs.StepShift(1_750.0, -670.0, 10.0, False)},
    )
    assert away["gap_verdict"] == "disagree" and away["gap_timer_steps_diff_ns"] == pytest.approx(1_980.0)
    # every class takes the timers' miss there, the shift beside it
    event = [{"op": "kv_write", "gap_verdict": "agree", "gap_diff_ns": 400.0}]
    both = timer_pairs.with_events([kv], event)
    assert both.ops_agree is False and both.misses == [("kv_write", "timers", pytest.approx(1_310.0))]


def test_a_class_the_timer_steps_ran_apart_takes_the_events_verdict_in_every_class() -> None:
    apart = {
        "kv_write": timer_pairs.StepShift(3_800.0, 1_000.0, 50.0, True),
        "qkv": timer_pairs.StepShift(700.0, 20.0, 40.0, False),
    }
    timers = timer_pairs.judge(
        [_timer_class("kv_write", 3_600.0, 2_500.0), _timer_class("qkv", 500.0, 450.0)], [], None, apart
    )
    kv, qkv = timers
    # the timers' own verdict stands, though the reading is within the bar of the reference plus the shift (3.5 us):
    # a class moved beyond the bar is the events' to judge, not let off by its own shift
    assert kv["gap_verdict"] == "disagree" and "gap_timer_steps_diff_ns" not in kv
    assert kv["timer_steps_moved"] and kv["timer_steps_shift_ns"] == 1_000.0
    assert kv["cupti_timer_steps_gap_ns_median"] == 3_800.0 and kv["timer_steps_shift_noise_ns"] == 50.0
    assert qkv["timer_steps_moved"] is False
    events = [
        {"op": "kv_write", "gap_verdict": "agree like for like", "gap_diff_ns": 1_040.0},
        {"op": "qkv", "gap_verdict": "disagree", "gap_diff_ns": 1_300.0},
    ]
    both = timer_pairs.with_events(timers, events)
    # kv_write is the events' now (it agrees like for like); qkv stays the timers' (which agree)
    assert both.ops_agree is True and both.from_events == ["kv_write"]
    # and it can fail there: the events' miss counts
    missed = timer_pairs.with_events(timers, [{**events[0], "gap_verdict": "disagree"}, events[1]])
    assert missed.ops_agree is False and missed.misses == [("kv_write", "events", 1_040.0)]
    # without the shifts, the timers' miss counts
    plain = timer_pairs.judge([_timer_class("kv_write", 3_600.0, 2_500.0)], [])
    assert timer_pairs.with_events(plain, events[:1]).misses == [("kv_write", "timers", 1_100.0)]
