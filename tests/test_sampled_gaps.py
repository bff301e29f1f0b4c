"""The sampled kernel pass on constructed event streams: rotation, stitching, refusal, k selection, the checks.

tests/stream_sim.py models a host thread feeding one CUDA stream (launch costs, event records with host and GPU
cost, a bounded launch queue, graph replays with event nodes); the stitched step must reproduce the clean step's
gaps in the regimes where the argument of analysis/sampled.py holds, and the dense step must not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from field_numpy import interval_union
from stream_sim import Stream, clean_gaps, clean_steps, run_sampled

from launchprobe.analysis.kernel_gaps import OpTiming
from launchprobe.analysis.sampled import (
    DEFAULT_REACH,
    ORDERS,
    BoundaryLag,
    CuptiReference,
    Plan,
    SampledStep,
    Stitched,
    StitchRefused,
    VariantEffect,
    anchor_effects,
    boundary_lag,
    busy_verdict,
    capture_shifts,
    checks_verdict,
    choose_stride,
    clean_check,
    clean_spread,
    counts_from_clusters,
    cupti_reference,
    cycle_clean_gaps,
    cycle_groups,
    cycles_for,
    default_order,
    default_reach,
    dense_plan,
    end_shifts,
    event_lags,
    extra_rounds,
    first_difference,
    fresh_capture_shifts,
    gap_total_by_class,
    gap_total_steps_to_decide,
    gap_total_verdict,
    group_ops,
    head_cupti_effect,
    head_op,
    initial_spacing,
    instrumented_rows,
    local_overheads,
    noise_overlap_ns,
    one_per_step_variants,
    op_class_checks,
    pair_plan,
    pairing_note,
    piece_boundaries,
    piece_cupti_effects,
    position_scatter_ns,
    probe_variants,
    sequence_problem,
    sound_corrections,
    split_steps,
    start_biases,
    start_shifts,
    stitch,
    variant_order,
)


def timings(n: int, host: bool = True) -> list[OpTiming]:
    return [OpTiming(f"op{i % 5}", i // 5, host_launched=host) for i in range(n)]


# --- rotation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reach", [2, 3, 5])
@pytest.mark.parametrize(("n", "m"), [(3, 4), (10, 4), (11, 5), (12, 7), (40, 38), (323, 28), (323, 400)])
def test_pair_plan_measures_every_gap_inside_one_step(n: int, m: int, reach: int) -> None:
    plan = pair_plan(n, m, reach)
    assert plan.reach == reach
    assert plan.spacing == max(reach + 2, min(m, n - reach))
    assert plan.roles[0] == "plain" and plan.variants[0] == []
    solos = {*range(min(reach, n))} | ({n - 1} if n <= reach else set())
    assert {tuple(plan.variants[plan.index("solo", op)]) for op in solos} == {(op,) for op in solos}
    if n > reach:  # the gap between steps: anchor n - r, far end after op 0 of the next step
        wrap_far, wrap_near = plan.roles.index("wrap_far"), plan.roles.index("wrap_near")
        assert plan.variants[wrap_far] == [n - reach] and plan.variants[wrap_near] == [n - reach, n - 1]
        assert plan.follows == {wrap_far: plan.index("solo", 0)}
        for cycle in range(3):
            order = variant_order(len(plan.variants), cycle, plan.follows)
            assert sorted(order) == list(range(len(plan.variants)))
            assert order[order.index(wrap_far) + 1] == plan.index("solo", 0)
    for i in range(reach, n):  # the gap before op i: anchor i - r in one far and one near variant
        far = plan.variants[plan.index("far", (i - reach) % plan.spacing)]
        near = plan.variants[plan.index("near", (i - reach) % plan.spacing)]
        assert {i - reach, i} <= set(far) and not set(range(i - reach + 1, i)) & set(far)  # none in between
        assert {i - reach, i - 1} <= set(near) and i not in near
    for ops, role in zip(plan.variants, plan.roles):
        if role in ("far", "near"):
            anchors = ops[0::2]
            assert all(b - a == plan.spacing for a, b in zip(anchors, anchors[1:]))  # pairs never touch
            assert all(t - j == (reach if role == "far" else reach - 1) for j, t in zip(ops[0::2], ops[1::2]))
    assert dense_plan(n).variants == [list(range(n))]


def test_variant_order_rotates() -> None:
    assert variant_order(4, 0) == [0, 1, 2, 3]
    assert variant_order(4, 1) == [1, 2, 3, 0]
    assert sorted(variant_order(5, 3)) == list(range(5))


def test_variant_orders_permute_every_variant_and_keep_followers_after_their_leaders() -> None:
    plan = pair_plan(40, 15, 11)
    n = len(plan.variants)
    for kind in ORDERS:
        for cycle in range(4):
            order = variant_order(n, cycle, plan.follows, order_kind=kind)
            assert sorted(order) == list(range(n))
            assert all(order[order.index(leader) + 1] == follower for leader, follower in plan.follows.items())
    far, near = plan.roles.index("far"), plan.roles.index("near")
    assert plan.variants[far][0] == plan.variants[near][0]  # one anchor: the two steps of a pair

    def near_first(order: list[int]) -> bool:
        return order.index(near) == order.index(far) - 1

    assert [near_first(variant_order(n, c, plan.follows)) for c in range(4)] == [False] * 4  # rotate: far first
    assert [near_first(variant_order(n, c, plan.follows, order_kind="reverse")) for c in range(4)] == [True] * 4
    alternate = [near_first(variant_order(n, c, plan.follows, order_kind="alternate")) for c in range(4)]
    assert alternate == [False, True, False, True]
    assert (
        variant_order(n, 3, plan.follows, order_kind="shuffle")
        == variant_order(n, 3, plan.follows, order_kind="shuffle")
        != variant_order(n, 4, plan.follows, order_kind="shuffle")
    )  # seeded by the cycle
    with pytest.raises(ValueError, match="variant order"):
        variant_order(n, 0, order_kind="sideways")


def test_default_order_alternates_where_every_op_is_host_launched() -> None:
    assert default_order(_layered(20)) == "alternate"  # eager
    assert default_order([*_layered(20), *_layered(10, host=False)]) == "rotate"  # graph pieces in the step
    assert default_order([]) == "rotate"


def test_variant_order_over_some_variants_keeps_a_follower_after_its_leader() -> None:
    assert variant_order(10, 0, members=[9, 3, 7]) == [3, 7, 9]
    assert variant_order(10, 1, members=[3, 7, 9]) == [7, 9, 3]
    assert variant_order(10, 1, {7: 3}, members=[3, 7, 9]) == [7, 3, 9]
    assert variant_order(10, 0, {7: 3}, members=[3, 9]) == [3, 9]  # no leader: the follower runs on its own
    assert variant_order(10, 0, members=[]) == []


LAYER_OPS = ["attn_norm", "qkv", "rotary", "kv_write", "attention", "o_proj", "mlp_norm", "gate_up", "silu_mul", "down"]


def test_one_per_step_variants_are_those_measuring_embed_final_norm_and_lm_head() -> None:
    names = ["embed", *LAYER_OPS * 3, "final_norm", "lm_head"]
    n, reach = len(names), 4
    plan = pair_plan(n, 8, reach)
    wanted = {plan.index("solo", 0), plan.roles.index("wrap_far"), plan.roles.index("wrap_near")}
    for i in (n - 2, n - 1):  # final_norm, lm_head: the far and near variants with anchor i - r
        wanted |= {plan.index(role, (i - reach) % plan.spacing) for role in ("far", "near")}
    assert one_per_step_variants(plan, names) == sorted(wanted)
    # a one-per-step op among the first r: its solo and the one before
    short = pair_plan(10, 6, reach)
    boundary = {short.index("solo", 0), short.roles.index("wrap_far"), short.roles.index("wrap_near")}
    assert one_per_step_variants(short, ["a", "x", *["b"] * 8]) == sorted(boundary | {short.index("solo", 1)})
    assert one_per_step_variants(dense_plan(n), names) == []
    assert one_per_step_variants(plan, ["op"] * n) == []


def test_extra_rounds_bring_one_per_step_variants_to_the_samples_wanted() -> None:
    assert extra_rounds(13) == 4  # 13 x 5 = 65 >= 64
    assert extra_rounds(5) == 12
    assert extra_rounds(64) == 0 and extra_rounds(100) == 0
    assert extra_rounds(10, samples=10) == 0


@pytest.mark.parametrize("tail_ns", [0, 5_000])
def test_the_tail_is_kept_only_where_it_stands_out_of_its_noise(tail_ns: int) -> None:
    # A graph step, host ahead; one-per-step variants run in extra rounds. lm_head's duration varies by +/-2 us
    # from step to step in the wrap pair's steps (as on the H200), so the wrap pair reads the tail (last op's end
    # to the boundary) with noise. With node_gap_ns 0 an event node fires as its op ends, as the boundary event
    # does: the true tail is 0, and the pair's noisy reading of it is dropped. A boundary made 5 us later after the
    # wrap_far step (constructed: a tail the events before it cannot see) stands out of the noise and is kept, to
    # close the stitched step and its gap total; op 0's gap stays the head (tests/test_tail_field.py: on the H200
    # the kept tails took op 0's gap further from CUPTI's).
    import random

    names = ["embed", *LAYER_OPS * 3, "final_norm", "lm_head"]
    n = len(names)
    durations = [*_durations(n - 1), 250_000]
    kw: dict[str, Any] = {"graph": True, "node_gap_ns": 0}
    _, kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), 4)
    truth = clean_gaps(kernels)
    plan = pair_plan(n, 8, 4)
    extra, cycles = one_per_step_variants(plan, names), 4
    steps, _ = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), plan.variants, cycles,
        follows=plan.follows, extra=extra, rounds=extra_rounds(cycles),
    )  # fmt: skip
    runs = {v: sum(s.variant == v for s in steps) for v in range(len(plan.variants))}
    assert {runs[v] for v in extra} == {cycles * (1 + extra_rounds(cycles))} and runs[0] == cycles
    rng = random.Random(1)
    noisy = []
    wrap_far, wrap_near = plan.roles.index("wrap_far"), plan.roles.index("wrap_near")
    for s in steps:
        if s.variant in (wrap_far, wrap_near):  # lm_head longer or shorter: the boundary and its end event move
            e = round(rng.gauss(0, 2_000)) + (tail_ns if s.variant == wrap_far else 0)
            s = SampledStep(s.variant, s.step_ns + e, {i: t + (e if i == n - 1 else 0) for i, t in s.ends.items()},
                            s.reference_ns)  # fmt: skip
        noisy.append(s)
    result = stitch([OpTiming(name, 0, False) for name in names], noisy, plan, durations)
    assert result.tail_measured_ns is not None and 0 < result.tail_noise_ns < 1_000
    if tail_ns:
        assert result.tail_ns == result.tail_measured_ns == pytest.approx(tail_ns, abs=3 * result.tail_noise_ns)
    else:
        assert result.tail_measured_ns != 0 and result.tail_ns == 0
    assert result.rows[0]["gap_before_ns"] == pytest.approx(truth[0], abs=1)  # the head alone: exact, either way
    periods = sum(r["gap_before_ns"] + r["duration_ns"] for r in result.rows)
    assert result.step_ns == periods + result.tail_ns
    assert result.gap_total_ns == sum(r["gap_before_ns"] for r in result.rows) + result.tail_ns
    assert [r["gap_before_ns"] for r in result.rows[1:]] == pytest.approx(truth[1:], abs=1)


def test_plan_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        pair_plan(0, 4)
    with pytest.raises(ValueError):
        pair_plan(3, 0)
    with pytest.raises(ValueError):
        pair_plan(10, 4, reach=1)
    with pytest.raises(ValueError):
        dense_plan(0)


# --- stitching on simulated streams -----------------------------------------------------------------------------


def _gaps(result: Stitched) -> list[int]:
    """The stitched gaps, op 0's as the gap between steps: its row (the head) plus the tail that closes the step. In
    the stream model an event node fires ``node_gap_ns`` (1 us) after its op and the host boundary event as the
    stream reaches it, so the head reads that much long and the wrap pair's tail closes it; on the H200 the two
    kinds of event lag alike (docs/performance.md) and the tail does not track the head (tests/test_tail_field.py),
    which is why op 0's row is the head alone."""
    return [result.rows[0]["gap_before_ns"] + result.tail_ns, *(r["gap_before_ns"] for r in result.rows[1:])]


def _durations(n: int) -> list[int]:
    pattern = [2_500, 12_000, 2_000, 2_000, 6_000, 28_000, 2_500, 56_000, 2_500, 30_000]
    return [pattern[i % len(pattern)] for i in range(n)]


def _stitched_vs_clean(
    stream_kwargs: dict, n: int, k: int, cycles: int = 3, reach: int = 2
) -> tuple[list[int], list[float], float]:
    durations = _durations(n)
    clean = Stream(duration_ns=durations, launch_ns=[8_000] * n, **stream_kwargs)
    lengths, kernels = clean_steps(clean, 6)
    truth = clean_gaps(kernels)
    sampled = Stream(duration_ns=durations, launch_ns=[8_000] * n, **stream_kwargs)
    plan = pair_plan(n, k, reach)
    steps, _ = run_sampled(sampled, plan.variants, cycles, follows=plan.follows)
    result = stitch(timings(n), steps, plan, durations)
    return _gaps(result), truth, statistics.median(lengths)


@pytest.mark.parametrize("k", [4, 7, 38])
def test_launch_bound_eager_stitches_to_the_clean_gaps(k: int) -> None:
    # kernels of 2 us behind 8 us launches: the GPU waits on the host before every op, every event record
    # delays everything after it. The paired ends see the same delay: the gaps come out exactly.
    kw = {"record_ns": 5_000, "queue_depth": 10_000}
    n = 40
    durations = [2_000] * n
    clean = Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw)
    _, kernels = clean_steps(clean, 4)
    truth = clean_gaps(kernels)
    plan = pair_plan(n, k)
    steps, _ = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), plan.variants, 2, follows=plan.follows
    )
    rows = stitch(timings(n), steps, plan, durations).rows
    assert [r["gap_before_ns"] for r in rows[1:]] == pytest.approx(truth[1:], abs=1)
    # between steps the tail carries the event after the last op, and nothing else
    assert rows[0]["gap_before_ns"] == pytest.approx(truth[0], abs=1)


def test_gpu_bound_eager_and_full_graph_stitch_to_the_clean_gaps() -> None:
    n = 53
    # host far ahead (8 us launches, kernels of 2.5-56 us, deep queue): events cost only their GPU time
    gaps, truth, _ = _stitched_vs_clean({"record_ns": 5_000, "queue_depth": 64}, n, 5)
    assert gaps[1:] == pytest.approx(truth[1:], abs=1)
    # full graph: event nodes cost ~1.9 us of GPU time each and shift everything after them alike
    gaps, truth, _ = _stitched_vs_clean({"graph": True}, n, 4)
    assert gaps[1:] == pytest.approx(truth[1:], abs=1)
    assert gaps[0] == pytest.approx(truth[0], abs=1)


def test_graph_with_pdl_overlaps_stitches_to_the_clean_gaps() -> None:
    # programmatic dependent launch: every other kernel starts 1.5 us before its predecessor ends, unless an event
    # node sits before it, so an event costs more after some ops than after others. Events ahead of the two ends
    # being compared (the scheme before the pairs) carry that difference; pairs anchored in one step do not.
    n = 53
    overlaps = [1_500 * (i % 2) for i in range(n)]
    gaps, truth, _ = _stitched_vs_clean({"graph": True, "overlap_ns": overlaps}, n, 5)
    assert min(truth[1:]) < 0  # the clean step overlaps
    assert gaps[1:] == pytest.approx(truth[1:], abs=1)
    assert gaps[0] == pytest.approx(truth[0], abs=1)


@pytest.mark.parametrize("reach", [2, 4])
@pytest.mark.parametrize("last_piece", [0, 6])
def test_the_head_at_the_first_pieces_end_sees_neither_its_recapture_nor_the_next_ops_pair(
    reach: int, last_piece: int
) -> None:
    # piecewise, first piece ops 0..3: a step starts 1.5 us sooner after the boundary where its first graph piece
    # was captured afresh with an event node in it (or, last_piece, where the step before had one in its last
    # piece); and an event node in the piece whose next event lies past its end idles 1.2 us longer, so the far
    # pair of op 4 (host-launched on the GPU) reads its gap 1.2 us long. Op 0's solo end reads the head 1.5 us
    # short; a head variant timing op 4 (an event after it, as before) gets the recapture back but inherits op
    # 4's long gap; one timing op 3 by a host event after the piece's replay, right after the plain variant, reads
    # the head exactly, and the tail with it.
    n, durations = 53, _durations(53)
    kw: dict[str, Any] = {"graph": True, "start_ns": 5_000, "fresh_start_ns": 1_500, "first_piece": 4,
                          "last_piece": last_piece, "piece_end": 3, "past_piece_ns": 1_200}  # fmt: skip
    _, kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), 6)
    truth = clean_gaps(kernels)
    heads = {}
    for head, after in ((None, False), (4, False), (3, True)):
        plan = pair_plan(n, 9, reach, head)
        assert plan.head_op == head and ("head" in plan.roles) == (head is not None)
        stream = Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw)
        replayed = plan.after_replay if after else set()
        steps, _ = run_sampled(stream, plan.variants, 3, follows=plan.follows, after_replay=replayed)
        gaps = _gaps(stitch(timings(n), steps, plan, durations))
        assert gaps[4] == pytest.approx(truth[4] + 1_200, abs=1)  # op 4: its pair anchors in the piece
        assert gaps[1:4] + gaps[5:] == pytest.approx(truth[1:4] + truth[5:], abs=1)
        heads[head] = gaps[0]
    assert heads[None] == pytest.approx(truth[0] - 1_500, abs=1)
    assert heads[4] == pytest.approx(truth[0] - 1_200, abs=1)
    assert heads[3] == pytest.approx(truth[0], abs=1)


def test_a_head_variant_is_planned_at_the_end_of_a_step_opening_graph_piece_only() -> None:
    piecewise = [OpTiming(name, 0, host_launched=name in ("kv_write", "attention"))
                 for name in ("embed", "attn_norm", "qkv", "rotary", "kv_write", "attention", "o_proj")]  # fmt: skip
    assert head_op(piecewise) == 3  # rotary, the first piece's last op: timed after the piece's replay
    assert head_op(timings(7, host=True)) is None  # eager: op 0 is host-launched
    assert head_op(timings(7, host=False)) is None  # full graph: nothing is
    lone = [OpTiming("embed", 0, False), OpTiming("kv_write", 0, True), OpTiming("o_proj", 0, False)]
    assert head_op(lone) is None  # a first piece of op 0 alone: its solo end, no head variant
    plan = pair_plan(40, 8, 4, head=3)
    head_variant = plan.roles.index("head")
    assert plan.variants[head_variant] == [3]
    wrap_head = plan.roles.index("wrap_head")
    assert plan.variants[wrap_head] == [3]
    assert plan.after_replay == {head_variant, wrap_head}  # the two that time the piece's end from the host
    assert pair_plan(40, 8, 4).after_replay == set()
    # the head after the plain variant (clean graphs on both sides of its boundary); the wrap pair's own closer
    assert plan.follows == {plan.roles.index("plain"): head_variant, plan.roles.index("wrap_far"): wrap_head}
    # embed's gap comes from the head variant and the variants of the gaps before ops 1 .. 3 (the solos at reach
    # 4), not from kv_write's pair
    wanted = set(one_per_step_variants(plan, ["embed"] + ["x"] * 39))
    solos = {plan.index("solo", i) for i in range(4)}
    assert {0, head_variant, wrap_head, *solos} <= wanted
    assert plan.index("far", 0) not in wanted and plan.index("near", 0) not in wanted
    order = variant_order(len(plan.variants), 3, plan.follows, sorted(wanted))
    assert (
        order[order.index(0) + 1] == head_variant and order[order.index(plan.roles.index("wrap_far")) + 1] == wrap_head
    )
    with pytest.raises(ValueError, match="head variant"):
        pair_plan(40, 8, 4, head=0)


def test_end_shifts_from_the_variants_kernels_put_each_gap_back_where_pdl_had_it() -> None:
    # every other kernel starts 1.5 us early and, doing so, holds its predecessor 1 us longer (the PDL shift): an
    # event after that predecessor ends it 1 us earlier, so the pairs read the gap after it 1 us long and the one
    # before it 1 us short, their sum right. The variants' kernels (CUPTI's view) show each op 1 us shorter with an
    # event after it; with those shifts the gaps come out exactly.
    n, reach, m = 53, 4, 9
    durations = _durations(n)
    overlaps = [1_500 * (i % 2) for i in range(n)]
    slowdown = [1_000 if i + 1 < n and overlaps[i + 1] else 0 for i in range(n)]
    kw: dict[str, Any] = {"graph": True, "overlap_ns": overlaps, "slowdown_ns": slowdown}
    _, clean_kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), 6)
    truth = clean_gaps(clean_kernels)
    clean_durations = [end - start for start, end in clean_kernels[-1]]
    assert clean_durations == [d + s for d, s in zip(durations, slowdown)]
    plan = pair_plan(n, m, reach)
    steps, kernels = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), plan.variants, 3, follows=plan.follows
    )
    plain = stitch(timings(n), steps, plan, clean_durations)
    errors = [g - t for g, t in zip(_gaps(plain), truth)]
    assert max(abs(e) for e in errors[1:]) == pytest.approx(1_000, abs=1)  # the shift, without the correction
    assert sum(errors) == pytest.approx(0, abs=n)  # which the sum does not see
    seen: dict[int, list[list[int]]] = {}
    for s, k in zip(steps, kernels):
        seen.setdefault(s.variant, []).append([end - start for start, end in k])
    shifts = end_shifts(plan, clean_durations, seen)
    assert shifts == pytest.approx(slowdown, abs=1)
    fixed = stitch(timings(n), steps, plan, clean_durations, end_shift_ns=shifts)
    assert _gaps(fixed) == pytest.approx(truth, abs=2)
    assert [r["end_shift_ns"] for r in fixed.rows] == pytest.approx(slowdown, abs=1)
    assert fixed.step_ns == pytest.approx(plain.step_ns, abs=2)  # the step itself does not move
    with pytest.raises(StitchRefused):
        stitch(timings(n), steps, plan, clean_durations, end_shift_ns=shifts[:-1])


def test_end_shifts_only_from_steps_whose_op_before_has_no_event() -> None:
    plan = pair_plan(12, 6)
    clean = [10_000] * 12
    far = plan.roles.index("far")  # events after ops 0 and 4, 6 and 10
    seen = {far: [[9_000] * 12], plan.roles.index("plain"): [[1] * 12]}
    shifts = end_shifts(plan, clean, seen)
    assert [i for i, x in enumerate(shifts) if x is not None] == plan.variants[far]
    assert all(shifts[i] == 1_000 for i in plan.variants[far])
    # the last op too (events after ops 8 and 11), from the median of all the steps seen
    wrap_near = plan.roles.index("wrap_near")
    steps = [[9_000] * 12, [8_000] * 12, [9_500] * 12]
    assert end_shifts(plan, clean, {wrap_near: steps})[-1] == 1_000
    assert end_shifts(plan, clean, {wrap_near: [[9_000] * 11]}) == [None] * 12  # a step of other ops: not read
    dense = Plan(12, 1, [list(range(12))], ["dense"])
    assert end_shifts(dense, clean, {0: [[9_000] * 12]}) == [None] * 12


def test_the_reach_carries_the_gap_past_the_refill_after_an_event() -> None:
    # after an event node the first two kernel-to-kernel edges are 300 and 250 ns long (the launch pipeline
    # refilling): a pair of reach r measures the (r - 1)-th edge after its anchor, so r = 2 and 3 read every gap
    # long by 300 and 250 ns, and r = 4 exactly. The step's own edges are refilled: the clean gaps have none of it.
    n = 53
    kw = {"graph": True, "refill_ns": [300, 250]}
    for reach, bias in ((2, 300), (3, 250), (4, 0), (6, 0)):
        gaps, truth, _ = _stitched_vs_clean(kw, n, 9, reach=reach)
        assert [g - t for g, t in zip(gaps[reach:], truth[reach:])] == pytest.approx([bias] * (n - reach), abs=1)
        assert gaps[1:reach] == pytest.approx(truth[1:reach], abs=1)  # from the solo variants
        assert gaps[0] == pytest.approx(truth[0], abs=1)


def test_gap_total_is_signed_and_the_idle_with_overlaps_is_reported_beside_it() -> None:
    # op 1 starts 4 us before op 0 ends (PDL): the clean step's gaps sum to its step less the durations (signed,
    # 46 us), its idle (step less the union) is 4 us more. A stitched step whose ends are right agrees on both; one
    # whose events moved op 1 4 us later and op 2's gap 4 us shorter (what the event after an op does under PDL)
    # still agrees on the gap total, and only the idle (reported, not in the verdict) shows the lost overlap.
    ops = [(10_000, 30_000), (26_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [100_000.0] * 3, [1, 1, 1])
    assert ref.op_duration_ns is not None and ref.op_busy_ns == 50_000 and sum(ref.op_duration_ns) == 54_000
    right = _stitched_like(ops, 100_000)
    check = clean_check(right, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["clean_gap_total_ns"] == 46_000 and check["events_total_gap_ns"] == 46_000
    assert check["clean_idle_ns"] == 50_000 and check["idle_diff_ns"] == 0 and check["total_gap_agrees"]
    moved = _stitched_like([(10_000, 30_000), (30_000, 54_000), (60_000, 70_000)], 100_000)
    check = clean_check(moved, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["events_total_gap_ns"] == 46_000 and check["total_gap_diff_ns"] == 0
    assert check["total_gap_agrees"] and check["idle_diff_ns"] == -4_000


def test_dense_events_perturb_and_the_stitched_total_matches_clean_idle() -> None:
    n, durations = 40, [2_000] * 40
    kw = {"record_ns": 5_000, "queue_depth": 10_000}
    lengths, kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), 4)
    truth = clean_gaps(kernels)
    dense_steps, _ = run_sampled(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), dense_plan(n).variants, 3)
    dense = instrumented_rows(timings(n), dense_steps, durations)
    # every gap carries the event record after the previous op: +5 us on an 8 us launch
    assert statistics.median(r["gap_before_ns"] for r in dense.rows[1:]) == pytest.approx(
        statistics.median(truth[1:]) + 5_000, abs=1
    )
    assert dense.instrumented_step_ns > 1.5 * statistics.median(lengths)
    plan = pair_plan(n, 38)  # one pair per variant: two events per step
    steps, _ = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), plan.variants, 3, follows=plan.follows
    )
    sampled = stitch(timings(n), steps, plan, durations)
    clean_idle = statistics.median(lengths) - sum(durations)
    assert sampled.idle_ns == pytest.approx(clean_idle, abs=1)
    assert sampled.busy_ns == sum(durations)
    assert sampled.sampled_steps == 3 * len(plan.variants)
    assert sampled.instrumented_step_ns / statistics.median(lengths) - 1 < 0.05


def test_mixed_regime_with_jitter_stays_close() -> None:
    # launches 8 us, kernels 2.5-56 us: the host is behind on short kernels and ahead on long ones; host jitter
    n = 60
    durations = _durations(n)
    kw = {"record_ns": 5_000, "queue_depth": 6, "jitter_ns": 1_000, "seed": 3}
    _, kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), 20)
    per_op = [statistics.median(clean_gaps(kernels[: j + 2])[i] for j in range(19)) for i in range(n)]
    plan = pair_plan(n, 6)
    steps, _ = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, **kw), plan.variants, 9, follows=plan.follows
    )
    rows = stitch(timings(n), steps, plan, durations).rows
    errors = [abs(r["gap_before_ns"] - t) for r, t in zip(rows[1:], per_op[1:])]
    assert statistics.median(errors) < 1_000
    total = sum(r["gap_before_ns"] for r in rows[1:])
    assert total == pytest.approx(sum(per_op[1:]), rel=0.10, abs=5_000)


def _layered(n: int, host: bool = True) -> list[OpTiming]:
    """Ops of 10 per layer, as the workload's (its per-step ops aside)."""
    return [OpTiming(f"op{i % 10}", i // 10, host_launched=host) for i in range(n)]


def test_default_reach_spans_a_layer_where_every_op_is_host_launched() -> None:
    per_step = [OpTiming(name, -1, True) for name in ("embed", "final_norm", "lm_head")]
    assert default_reach([per_step[0], *_layered(320), *per_step[1:]]) == 11  # the near pair spans a layer
    assert default_reach(_layered(10)) == 11
    graphed = [*_layered(20), *_layered(10, host=False)]  # piecewise or full graph: graph pieces in the step
    assert default_reach(graphed) == DEFAULT_REACH
    assert default_reach([OpTiming(f"op{i % 2}", i // 2, True) for i in range(12)]) == DEFAULT_REACH  # never less
    assert default_reach([]) == DEFAULT_REACH
    # the run file's pairing note says why the reach is longer
    assert "spans a layer" in pairing_note(pair_plan(120, 30, 11))
    assert "alternate direction" in pairing_note(pair_plan(120, 30, 11), "alternate")  # eager's cycles
    assert "alternate direction" not in pairing_note(pair_plan(120, 30, 11))
    assert "spans a layer" not in pairing_note(pair_plan(120, 30, DEFAULT_REACH))


def test_the_anchors_host_time_reads_long_where_the_host_catches_up_unless_the_pair_spans_a_layer() -> None:
    """An eager host that falls behind on the small ops of a layer and catches up on its large GEMMs: the anchor's
    record call delays later launches, and the GPU sees the delay from the first op after the anchor where the host
    is behind. At reach 4 the far pair often ends on that op and the near pair before it, so the stitched total
    reads long; at a layer's reach (``default_reach``) the near pair has mostly let the delay in already."""
    n = 120
    pattern = [3_000, 20_000, 2_000, 3_000, 10_000, 15_000, 3_000, 50_000, 3_000, 25_000]
    durations = [pattern[i % 10] for i in range(n)]
    ops = _layered(n)
    kw: dict[str, Any] = {"record_ns": 4_000, "jitter_ns": 6_000, "queue_depth": 1_000}
    long_by, layer_by, layer_noise = [], [], []
    for seed in range(4):
        lengths, _ = clean_steps(Stream(duration_ns=durations, launch_ns=[13_000] * n, seed=100 + seed, **kw), 60)
        clean_total = statistics.median(lengths) - sum(durations)
        for reach in (4, default_reach(ops)):
            plan = pair_plan(n, 30, reach)
            stream = Stream(duration_ns=durations, launch_ns=[13_000] * n, seed=seed, **kw)
            steps, _ = run_sampled(stream, plan.variants, 10, follows=plan.follows)
            result = stitch(ops, steps, plan, durations)
            diff = result.gap_total_ns - clean_total
            if reach == 4:
                assert diff > 3 * result.gap_total_noise_ns, (seed, diff, result.gap_total_noise_ns)
                long_by.append(diff)
            else:
                assert abs(diff) < 3 * result.gap_total_noise_ns, (seed, diff, result.gap_total_noise_ns)
                layer_by.append(diff)
                layer_noise.append(result.gap_total_noise_ns)
    # over the four passes: reach 4 long by about 0.3 of the clean gaps, a layer's reach within the mean's error
    assert statistics.mean(long_by) > 60_000
    mean_error = statistics.mean(layer_noise) / 2  # the error of a mean of four
    assert abs(statistics.mean(layer_by)) < 2 * mean_error


def test_stitched_rows_chain_into_one_step() -> None:
    n, k = 23, 4
    durations = _durations(n)
    plan = pair_plan(n, k)
    steps, _ = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, graph=True), plan.variants, 2, follows=plan.follows
    )
    s = stitch(timings(n, host=False), steps, plan, durations)
    rows = s.rows
    assert [r["index"] for r in rows] == list(range(n))
    for prev, row in zip(rows, rows[1:]):
        assert row["start_ns"] == prev["end_ns"] + row["gap_before_ns"]
        assert row["end_ns"] - row["start_ns"] == row["duration_ns"]
    assert s.step_ns == sum(durations) + sum(r["gap_before_ns"] for r in rows) + s.tail_ns  # a kept tail closes it
    assert s.tail_ns == -1_000  # the model's event node lag, closed by the tail ...
    assert rows[0]["start_ns"] == rows[0]["gap_before_ns"]  # ... and op 0's row the head: boundary to its start
    assert s.idle_ns == s.step_ns - s.busy_ns
    assert set(s.variant_step_ns) == set(range(len(plan.variants)))


# --- refusal ------------------------------------------------------------------------------------------------


def test_refuses_when_the_kernel_sequence_changes() -> None:
    clean = [["a", "b", "c"], ["a", "b", "c"]]
    assert sequence_problem(clean, {0: ["a", "b", "c"], 1: ["a", "b", "c"]}) is None
    changed = sequence_problem([["a", "b", "c"], ["a", "x", "c"]], {})
    assert changed is not None and "not the same kernel sequence every time" in changed and "'x'" in changed
    variant = sequence_problem(clean, {0: ["a", "b", "c"], 3: ["a", "b", "c", "splitk_reduce"]})
    assert variant is not None and "variant 3" in variant and "3 kernels vs 4" in variant
    assert sequence_problem([], {}) is not None
    assert first_difference(["a"], ["a"]) is None
    with pytest.raises(StitchRefused, match="not constant"):
        split_steps(["a"] * 7, 2)
    assert split_steps(["a", "b", "a", "b"], 2) == [["a", "b"], ["a", "b"]]


def test_refuses_missing_variants_and_foreign_steps() -> None:
    ops, durations = timings(6), [1_000] * 6
    plan = pair_plan(6, 4)
    last = len(plan.variants) - 1
    order = [v for v in variant_order(len(plan.variants), 0, plan.follows) if v != last]
    steps = [SampledStep(v, 50_000, {i: 5_000 * (i + 1) for i in plan.variants[v]}) for v in order]
    with pytest.raises(StitchRefused, match="variant"):  # the last variant never ran
        stitch(ops, steps, plan, durations)
    wrap = plan.roles.index("wrap_far")
    apart = [s for s in steps if s.variant != wrap] + [s for s in steps if s.variant == wrap]
    with pytest.raises(StitchRefused, match="gap between steps"):  # the wrap pair's far end is in the next step
        stitch(ops, apart, plan, durations)
    bad = [*steps, SampledStep(last, 50_000, {0: 1})]
    with pytest.raises(StitchRefused, match="not the ops of its plan"):
        stitch(ops, bad, plan, durations)
    with pytest.raises(StitchRefused):
        stitch(ops, [], plan, durations)
    with pytest.raises(StitchRefused):
        stitch(ops, steps, plan, [1])
    with pytest.raises(StitchRefused, match="a plan for 7 ops"):
        stitch(ops, steps, pair_plan(7, 4), durations)


# --- choosing k -----------------------------------------------------------------------------------------------


def test_initial_spacing_from_the_measured_event_cost() -> None:
    # 323 host-launched ops, 10 us per record, a 4.8 ms step: 1% is 48 us, so at most 4.8 events, 2 per anchor
    assert initial_spacing([10_000.0] * 323, 4.8e6) == 135
    assert initial_spacing([1_900.0] * 323, 4.8e6) == 26  # event nodes in a graph
    assert initial_spacing([0.0] * 10, 1e6) == 6  # reach 4 + 2: pairs of a variant never touch
    assert initial_spacing([1e9] * 10, 1e6) == 6  # n - r, but never below r + 2
    assert initial_spacing([1e9] * 20, 1e6) == 16  # n - r: one pair per variant
    assert initial_spacing([1e9] * 20, 1e6, reach=2) == 18
    assert initial_spacing([1.0], 1e6) == 6


def test_the_eager_probe_runs_both_variants_of_anchor_offsets_spread_over_the_spacing() -> None:
    few = pair_plan(19, 13, reach=11)  # anchors 0..7 only: all 16 paired variants
    assert probe_variants(few) == [v for v, role in enumerate(few.roles) if role in ("far", "near")]
    many = pair_plan(323, 40, reach=11)  # 40 offsets: 8 of them, far and near each
    picked = probe_variants(many)
    assert len(picked) == 16 and [many.roles[v] for v in picked] == ["far", "near"] * 8
    firsts = [many.variants[v][0] for v in picked[::2]]
    assert firsts == [5 * i for i in range(8)]  # anchor offsets 0, 5, .., 35 of 0..39
    assert all(many.variants[far][0] == many.variants[near][0] for far, near in zip(picked[::2], picked[1::2]))
    assert len(probe_variants(many, count=4)) == 4


def test_choose_stride_widens_until_within_budget() -> None:
    cost = 10_000 * 323 / 4.8e6  # overhead if every op were sampled, host-bound
    choice = choose_stride(321, 10, lambda k: (cost / k, 0.0), search_down=False)
    assert choice.within_budget and choice.overhead_fraction <= 0.02
    assert [k for k, _, _ in choice.probes][0] == 10 and choice.stride > 10
    assert all(o > 0.02 for k, o, _ in choice.probes if k < choice.stride)


def test_choose_stride_searches_down_when_the_host_absorbs_events() -> None:
    # an eager host far ahead of the GPU: events cost nothing until k < 8
    choice = choose_stride(321, 68, lambda k: (0.001 if k >= 8 else 0.05, 0.0), lowest=2)
    assert choice.stride == 8 and choice.within_budget
    assert [k for k, _, _ in choice.probes] == [68, 34, 17, 8, 4]
    assert [k for k, _, _ in choose_stride(321, 68, lambda k: (0.001, 0.0)).probes] == [
        68,
        34,
        17,
        8,
        6,
    ]  # never below 6


def test_choose_stride_widens_from_a_probe_too_noisy_to_tell_the_target() -> None:
    # the H200's 1B eager b1 on a host moving 49% (2026-12-03 09:58 UTC): from 36 (-0.2% +/- 1.1%) the search down
    # took m = 18 on -2.8% +/- 1.4%, and the cycles ran +4.4% pooled. Neither probe can tell 1% from nothing: m widens
    readings = {36: (-0.002, 0.011), 18: (-0.0276, 0.0138), 9: (0.023, 0.015), 72: (0.004, 0.003)}
    choice = choose_stride(152, 36, lambda k: readings[k], lowest=9)
    assert [k for k, _, _ in choice.probes] == [36, 72] and choice.stride == 72 and choice.within_budget
    # the same readings with errors within half the target: the search goes down to 18, as before
    quiet = {k: (o, 0.004) for k, (o, _) in readings.items()}
    assert choose_stride(152, 36, lambda k: quiet[k], lowest=9).stride == 18
    # a noisy probe on the way down stops the search there and is not taken
    down = {36: (-0.002, 0.003), 18: (-0.0276, 0.0138)}
    choice = choose_stride(152, 36, lambda k: down[k], lowest=9)
    assert [k for k, _, _ in choice.probes] == [36, 18] and choice.stride == 36
    # where no probe can tell (the host at 10:56: +0.4% +/- 0.6% at 42), m is the widest probed, judged by its
    # overhead plus its error
    noisy = {42: (0.004, 0.006), 84: (0.003, 0.007), 152: (0.002, 0.008)}
    choice = choose_stride(152, 42, lambda k: noisy[k], lowest=9)
    assert [k for k, _, _ in choice.probes] == [42, 84, 152] and choice.stride == 152 and choice.within_budget
    choice = choose_stride(152, 42, lambda k: (0.02, 0.01), lowest=9)
    assert choice.stride == 152 and not choice.within_budget


def test_choose_stride_counts_a_probe_at_its_overhead_plus_its_error() -> None:
    # the eager host of the H200 (8B, batch 8): probes read +0.6% at m = 21 where the cycles then read +1.9%;
    # with an error of 1% a reading of +0.6% is not within the 1% target, and the search down stops there
    readings = {85: (0.0, 0.004), 42: (0.001, 0.004), 21: (0.006, 0.01)}
    choice = choose_stride(170, 85, lambda k: readings[k], lowest=6)
    assert [k for k, _, _ in choice.probes] == [85, 42, 21]
    assert choice.stride == 42 and choice.within_budget
    # a probe whose error alone is over the budget widens m
    assert choose_stride(170, 42, lambda k: (0.0, 0.03 if k < 170 else 0.001)).stride == 170
    # the same host at 07:26 UTC: +1.1% at m = 18 searching down from 36 is within the accept bound, not within the
    # target it searched by, and the cycles then ran +2.5% in the slowest variant: m stays 36
    readings = {36: (-0.001, 0.002), 18: (0.011, 0.002)}
    choice = choose_stride(152, 36, lambda k: readings[k], lowest=6)
    assert [k for k, _, _ in choice.probes] == [36, 18] and choice.stride == 36 and choice.within_budget
    # the search down does not probe again a spacing it widened from (a second, luckier reading would take it)
    readings2 = {10: [(0.015, 0.0), (0.009, 0.0)], 20: [(0.005, 0.0)]}
    choice = choose_stride(152, 10, lambda k: readings2[k].pop(0), lowest=6)
    assert [k for k, _, _ in choice.probes] == [10, 20] and choice.stride == 20
    # while widening, a probe within accept is taken as before
    widening = {10: (0.03, 0.0), 30: (0.012, 0.0)}
    assert choose_stride(152, 10, lambda k: widening[k], search_down=False).stride == 30


def test_choose_stride_reports_when_even_one_event_is_too_much() -> None:
    choice = choose_stride(50, 40, lambda k: (0.03, 0.0))
    assert choice.stride == 50 and not choice.within_budget and choice.overhead_fraction == 0.03
    assert choose_stride(4, 5, lambda k: (1.0, 0.0)).stride == 4


def test_cycles_fit_the_time_budget() -> None:
    assert cycles_for(10, 1e6, 1.2e9) == 50  # capped
    assert cycles_for(300, 5e6, 2e9) == 5  # floor
    # one warm-up pass (10 steps), then 10 variants + 3 clean blocks of 2 a cycle (groups of 8 and 2): 290 // 16
    assert cycles_for(10, 1e6, 0.3e9) == 18
    assert cycles_for(10, 1e6, 0.3e9, every=10) == 20  # one group: 2 clean blocks, 290 // 14


# --- CUPTI grouping and the checks ------------------------------------------------------------------------------


def test_counting_pass_clusters_kernels_into_ops() -> None:
    kernels = [
        ("a", 0, 10),
        ("gemm", 1_000_000, 1_000_050),
        ("splitk", 1_000_052, 1_000_060),
        ("c", 2_000_000, 2_000_001),
    ]
    assert counts_from_clusters(kernels, 3, 300_000) == [1, 2, 1]
    with pytest.raises(StitchRefused, match="3 groups of kernels for 4 ops"):
        counts_from_clusters(kernels, 4, 300_000)
    assert group_ops([(0, 10), (20, 30), (31, 40), (50, 60)], [1, 2, 1]) == [(0, 10), (20, 40), (50, 60)]
    with pytest.raises(StitchRefused):
        group_ops([(0, 10)], [1, 1])


def _reference_steps(step: int, ops: list[tuple[int, int]], steps: int) -> list[list[tuple[int, int]]]:
    return [[(s + j * step, e + j * step) for s, e in ops] for j in range(steps)]


def test_cupti_reference_per_op_medians_and_gap_before_op_0() -> None:
    # 3 ops, the middle one two kernels with 1 us between them; step 100 us
    ops = [(10_000, 20_000), (25_000, 40_000), (41_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [100_000.0] * 3, [1, 2, 1])
    assert ref.kernels_per_step == 4 and ref.steps == 3
    assert ref.busy_ns == 10_000 + 15_000 + 9_000 + 10_000
    assert ref.op_busy_ns == 10_000 + 25_000 + 10_000
    assert ref.op_duration_ns == [10_000, 25_000, 10_000]
    assert ref.op_gap_ns == [40_000, 5_000, 10_000]  # op 0: from the previous step's last end (70 -> 110)
    ungrouped = cupti_reference(_reference_steps(100_000, ops, 2), [100_000.0] * 2, None)
    assert ungrouped.op_gap_ns is None and ungrouped.grouping and "unknown" in ungrouped.grouping


def _stitched_like(ops: list[tuple[int, int]], step_ns: int) -> object:
    from launchprobe.analysis.intervals import union_ns
    from launchprobe.analysis.sampled import Stitched

    rows: list[dict[str, Any]] = []
    prev_end = ops[-1][1] - step_ns
    for i, (s, e) in enumerate(ops):
        rows.append({"index": i, "op": "x" if i % 2 else "y", "layer": 0, "host_launched": True, "start_ns": s,
                     "end_ns": e, "duration_ns": e - s, "gap_before_ns": s - prev_end})  # fmt: skip
        prev_end = e
    busy = union_ns([s for s, _ in ops], [e for _, e in ops])
    gap_total = sum(int(r["gap_before_ns"]) for r in rows)
    return Stitched(rows, step_ns, busy, step_ns - busy, gap_total, 10, float(step_ns), {}, 0.0)


def test_clean_check_agrees_trusts_and_disagrees() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    stitched = _stitched_like(ops, 100_000)
    check = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["cupti_trusted"] and check["agrees"] and check["ops_agree"]
    assert check["clean_idle_ns"] == 55_000 and check["events_total_gap_ns"] == 55_000
    assert {o["op"] for o in check["ops"]} == {"x", "y"}
    # CUPTI slowed its step by 30%: not trusted op for op, still used for busy
    slow = cupti_reference(_reference_steps(130_000, ops, 3), [130_000.0] * 3, [1, 1, 1])
    check = clean_check(stitched, 100_000.0, slow)  # type: ignore[arg-type]
    assert not check["cupti_trusted"] and check["ops"] == [] and check["ops_agree"] is None
    assert "beyond 5%" in check["trust_note"] and check["agrees"]
    # within 5%, but the clean step moved over the pass: no one clean speed to set CUPTI's step against
    moved = clean_check(stitched, 100_000.0, ref, host_steady=False)  # type: ignore[arg-type]
    assert not moved["cupti_trusted"] and moved["ops"] == [] and moved["ops_agree"] is None
    assert "the clean step moved over the pass (the host, or the GPU" in moved["trust_note"] and moved["agrees"]
    assert clean_check(stitched, 100_000.0, ref, host_steady=True)["cupti_trusted"]  # type: ignore[arg-type]
    # stitched gaps 80 us too large in total: beyond 10% / 50 us
    wrong = _stitched_like([(10_000, 20_000), (105_000, 130_000), (140_000, 150_000)], 180_000)
    check = clean_check(wrong, 100_000.0, ref)  # type: ignore[arg-type]
    assert not check["total_gap_agrees"] and not check["agrees"] and check["total_gap_tolerance_ns"] == 50_000
    assert not all(o["gap_agrees"] for o in check["ops"])


def test_the_gap_total_splits_exactly_into_its_classes_and_cuptis_own_steps() -> None:
    # CUPTI's clean steps: ops at 10-20, 25-50, 60-70 us of a 100 us step; the clean step without CUPTI is 95 us
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [100_000.0] * 3, [1, 1, 1])
    # the stitched step reads op 2's gap 3 us longer (classes y, x, y)
    stitched = _stitched_like([(10_000, 20_000), (25_000, 50_000), (63_000, 73_000)], 103_000)
    check = clean_check(stitched, 95_000.0, ref)  # type: ignore[arg-type]
    parts = {c["op"]: c for c in check["gap_total_by_class"]}
    assert parts["y"] == {
        "op": "y", "count": 2, "stitched_ns": 40_000 + 13_000, "cupti_ns": 40_000 + 10_000, "diff_ns": 3_000
    }  # fmt: skip
    assert parts["x"] == {"op": "x", "count": 1, "stitched_ns": 5_000, "cupti_ns": 5_000, "diff_ns": 0}
    assert check["cupti_gap_sum_ns"] == 55_000 and check["gap_total_tail_ns"] is None  # no wrap pair: not sampled
    assert check["cupti_gap_part_ns"] == 55_000 - check["clean_gap_total_ns"] == 5_000  # what CUPTI adds
    classes = sum(c["stitched_ns"] - c["cupti_ns"] for c in check["gap_total_by_class"])
    assert classes + check["cupti_gap_sum_ns"] - check["clean_gap_total_ns"] == pytest.approx(
        check["total_gap_diff_ns"]
    )  # 3 us at y, 5 us CUPTI adds to the step: the 8 us the total reads over clean
    assert check["total_gap_diff_ns"] == 8_000
    # positions that do not match CUPTI's: no parts, and the function itself refuses
    ungrouped = cupti_reference(_reference_steps(100_000, ops, 3), [100_000.0] * 3, None)
    check = clean_check(stitched, 95_000.0, ungrouped)  # type: ignore[arg-type]
    assert check["gap_total_by_class"] == [] and check["cupti_gap_sum_ns"] is None
    with pytest.raises(ValueError, match="3 stitched positions against 2"):
        gap_total_by_class(stitched.rows, [1.0, 2.0])  # type: ignore[attr-defined]


def test_the_gap_total_is_decided_at_two_of_its_standard_errors() -> None:
    assert gap_total_verdict(20_000, 50_000, 5_000) is True
    assert gap_total_verdict(-49_000, 50_000, 1_000) is True  # within, and two errors (2 us) fit inside 50
    assert gap_total_verdict(80_000, 50_000, 5_000) is False  # beyond by 30 us, more than two errors (10)
    assert gap_total_verdict(-80_000, 50_000, 5_000) is False  # signed either way
    assert gap_total_verdict(55_000, 50_000, 5_000) is None  # beyond, but within two errors of the tolerance
    # an error too large to check the tolerance with: not decided, within or beyond it
    assert gap_total_verdict(20_000, 50_000, 30_000) is None
    assert gap_total_verdict(100_000, 50_000, 30_000) is None
    assert gap_total_verdict(200_000, 50_000, 30_000) is False  # beyond even so
    # how many times the steps would decide an undecided one, the error falling with their square root
    assert gap_total_steps_to_decide(308, 478_000, 300_000) == pytest.approx((2 * 300 / 478) ** 2)  # within
    assert gap_total_steps_to_decide(578_000, 478_000, 100_000) == pytest.approx(4.0)  # beyond: two errors in 100
    assert gap_total_steps_to_decide(578_000, 478_000, 400_000) == pytest.approx(64.0)
    assert gap_total_steps_to_decide(0, 0, 100_000) is None  # no tolerance: nothing decides it
    assert gap_total_steps_to_decide(20_000, 50_000, 0.0) is None
    # where the stitched total is that noisy, the whole check is not decided unless something else disagrees
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    stitched = _stitched_like(ops, 100_000)
    assert clean_check(stitched, 100_000.0, ref)["total_gap_noise_ns"] == 0.0  # type: ignore[arg-type]
    stitched.gap_total_noise_ns = 30_000.0  # type: ignore[attr-defined]
    check = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["total_gap_agrees"] is None and check["agrees"] is None and check["total_gap_noise_ns"] == 30_000
    assert check["total_gap_steps_to_decide"] == pytest.approx(
        gap_total_steps_to_decide(check["total_gap_diff_ns"], check["total_gap_tolerance_ns"], 30_000)
    )
    slow = _stitched_like([(10_000, 30_000), (35_000, 70_000), (80_000, 100_000)], 100_000)  # busy 20% over
    slow.gap_total_noise_ns = 30_000.0  # type: ignore[attr-defined]
    assert clean_check(slow, 100_000.0, ref)["agrees"] is False  # type: ignore[arg-type]


def test_busy_verdict_takes_the_overlap_the_gaps_noise_makes_as_a_shortfall_it_may_explain() -> None:
    # without the noise the busy would read between diff and diff + overlap: decided where all of that is on one side
    assert busy_verdict(-20_000, 50_000, 10_000) is True
    assert busy_verdict(-20_000, 50_000, 80_000) is None  # within, but the noise may hide an excess of 10 us
    assert busy_verdict(-120_000, 50_000, 100_000) is None  # short by 120 us, of which the noise may make 100
    assert busy_verdict(-120_000, 50_000, 40_000) is False  # short by 80 us even without the noise's overlap
    assert busy_verdict(60_000, 50_000, 0.0) is False  # over: noise never makes the union longer
    assert busy_verdict(0, 50_000, 0.0) is True
    # in the check: a stitched busy 12.5% short of CUPTI's (ten ops pulled 2 us back, 1 us into the op before) whose
    # gaps carry enough noise to make that overlap is not decided, and neither is the whole check; the same
    # shortfall from exact gaps disagrees (CUPTI's step 30% long: not compared op for op, its busy the reference)
    ops = [(5_000 * i, 5_000 * i + 4_000) for i in range(20)]
    ref = cupti_reference(_reference_steps(130_000, ops, 3), [130_000.0] * 3, [1, 1, 1])
    short = _stitched_like([(s - 2_000 * (i % 2), e - 2_000 * (i % 2)) for i, (s, e) in enumerate(ops)], 100_000)
    exact = clean_check(short, 100_000.0, ref)  # type: ignore[arg-type]
    assert exact["busy_agrees"] is False and exact["agrees"] is False and exact["busy_noise_overlap_ns"] == 0
    assert exact["busy_rel_diff"] == pytest.approx(0.125)
    for row in short.rows[1:]:  # type: ignore[attr-defined]
        row["gap_noise_ns"] = 2_000.0
    noisy = clean_check(short, 100_000.0, ref)  # type: ignore[arg-type]
    assert noisy["busy_noise_overlap_ns"] > 10_000 - 4_000  # more than the shortfall beyond the bar (4 us of 80)
    assert noisy["busy_agrees"] is None and noisy["agrees"] is None


def test_the_gaps_noise_overlaps_the_stitched_ops_by_about_what_noise_overlap_ns_says() -> None:
    """An eager host behind its GPU (launches 6 us, kernels 3 us: gaps of about 3 us, no op overlapping another in
    the clean step) whose launches jitter by 6 us: stitched from 6 cycles, each gap carries a few us of error and
    the union of the stitched ops reads short of the clean busy (the durations summed). Over 30 passes
    ``noise_overlap_ns`` reads one to four times that shortfall on average, rises with it, and a 1% bound on busy,
    which the shortfall alone breaks in most passes, is never called broken."""
    n, reach, cycles = 40, 11, 6
    durations = [3_000] * n
    plan = pair_plan(n, 2 * reach, reach)
    shortfalls, overlaps, old_misses, verdicts = [], [], 0, []
    for seed in range(30):
        stream = Stream(duration_ns=durations, launch_ns=[6_000] * n, jitter_ns=6_000, seed=seed)
        steps, _ = run_sampled(stream, plan.variants, cycles, follows=plan.follows)
        result = stitch(timings(n), steps, plan, durations)
        starts = np.array([r["start_ns"] for r in result.rows])
        busy = interval_union(starts, starts + np.array(durations))
        assert busy == pytest.approx(result.busy_ns)
        truth = float(sum(durations))
        shortfalls.append(truth - busy)
        overlaps.append(noise_overlap_ns(result.rows))
        old_misses += abs(busy - truth) > 0.01 * truth
        verdicts.append(busy_verdict(busy - truth, 0.01 * truth, overlaps[-1]))
    assert np.mean(shortfalls) > 0.01 * sum(durations) and old_misses > 15
    assert np.mean(shortfalls) <= np.mean(overlaps) <= 4 * np.mean(shortfalls), (shortfalls, overlaps)
    assert np.corrcoef(shortfalls, overlaps)[0, 1] > 0.3
    assert False not in verdicts
    # no jitter: the gaps are exact, nothing overlaps, and the noise makes no overlap
    clean_stream = Stream(duration_ns=durations, launch_ns=[6_000] * n)
    steps, _ = run_sampled(clean_stream, plan.variants, cycles, follows=plan.follows)
    exact = stitch(timings(n), steps, plan, durations)
    assert exact.busy_ns == sum(durations) and noise_overlap_ns(exact.rows) == 0


@pytest.mark.parametrize(("jitter", "n", "reach"), [(0, 24, 4), (6_000, 24, 4), (6_000, 40, 11)])
def test_the_gap_totals_noise_is_its_spread_over_repeated_passes(jitter: int, n: int, reach: int) -> None:
    """The stitched gap total's standard error (``gap_total_noise_ns``), set against the spread of the totals of
    40 passes alike but for the host's jitter: an eager host behind its GPU, so that what the host does shows. At
    reach 4 and at an eager layer's reach (11)."""
    durations = [3_000] * n
    plan = pair_plan(n, 2 * reach, reach)
    totals, noises = [], []
    for seed in range(40):
        stream = Stream(duration_ns=durations, launch_ns=[6_000] * n, jitter_ns=jitter, seed=seed)
        steps, _ = run_sampled(stream, plan.variants, 6, follows=plan.follows)
        result = stitch(timings(n), steps, plan, durations)
        totals.append(result.gap_total_ns)
        noises.append(result.gap_total_noise_ns)
    spread, typical = float(np.std(totals)), float(np.median(noises))
    if not jitter:  # nothing varies from step to step: no error, and every pass reads the same total
        assert spread == 0 and typical == 0
        return
    assert 0.6 * spread < typical < 1.6 * spread, (typical, spread)


@pytest.mark.parametrize("offset_ns", [0, 4_000])
def test_the_positions_scatter_is_the_error_a_fixed_error_per_pair_adds(offset_ns: int) -> None:
    """40 passes alike but for the host's jitter and, with ``offset_ns``, a fixed error on every far pair's end that
    each pass draws afresh (normal, that standard deviation), as a variant's own graph capture would put one: the
    medians' error does not see it, the positions' scatter within their classes does, and the two together are the
    spread of the totals over the passes."""
    n, reach = 60, 4
    durations = [3_000] * n
    plan = pair_plan(n, 2 * reach, reach)
    totals, noises, errors = [], [], []
    for seed in range(40):
        stream = Stream(duration_ns=durations, launch_ns=[6_000] * n, jitter_ns=3_000, seed=seed)
        steps, _ = run_sampled(stream, plan.variants, 6, follows=plan.follows)
        rng = np.random.default_rng(1_000 + seed)
        offsets: dict[tuple[int, int], int] = {}
        moved = []
        for step in steps:
            ends = dict(step.ends)
            if plan.roles[step.variant] == "far":
                for target in sorted(ends)[1::2]:
                    key = (step.variant, target)
                    offsets.setdefault(key, round(rng.normal(0, offset_ns)) if offset_ns else 0)
                    ends[target] += offsets[key]
            moved.append(SampledStep(step.variant, step.step_ns, ends, step.reference_ns))
        result = stitch(timings(n), moved, plan, durations)
        assert result.gap_total_scatter_ns == pytest.approx(position_scatter_ns(result.rows, reach), abs=0.1)
        totals.append(result.gap_total_ns)
        noises.append(result.gap_total_noise_ns)
        errors.append(math.hypot(result.gap_total_noise_ns, result.gap_total_scatter_ns))
    spread, noise, error = float(np.std(totals)), float(np.median(noises)), float(np.median(errors))
    assert 0.75 * spread < error < 1.3 * spread, (error, spread)
    if offset_ns:
        assert noise < 0.5 * spread, (noise, spread)  # the medians' error alone: far too small
    else:
        assert 0.75 * spread < noise < 1.3 * spread, (noise, spread)


def test_position_scatter_counts_what_a_class_spreads_beyond_its_positions_errors() -> None:
    def rows(gaps: list[float], errors: list[float], op: str = "x") -> list[dict[str, Any]]:
        return [{"op": op, "gap_before_ns": g, "gap_noise_ns": e} for g, e in zip(gaps, errors)]

    # eight positions 1 us apart about their mean (variance 1.14 us^2 with ddof 1), errors 0.5 us: 8 * 1.14 - 2 us^2
    spread = rows([1_000, 3_000] * 4, [500.0] * 8)
    assert position_scatter_ns(spread, 0) == pytest.approx(math.sqrt(8 * 8 / 7 * 1e6 - 8 * 0.25e6))
    assert position_scatter_ns(rows([2_000] * 8, [500.0] * 8), 0) == 0.0  # alike: the errors explain it all
    assert position_scatter_ns(rows([1_000, 3_000] * 4, [2_000.0] * 8), 0) == 0.0  # within their errors
    assert position_scatter_ns(rows([0, 9_000, 0], [0.0] * 3), 0) == 0.0  # too few positions to say
    # classes add; the ops before the reach (read from solo ends, not pairs) are left out
    both = spread + rows([0, 2_000] * 4, [500.0] * 8, op="y")
    assert position_scatter_ns(both, 0) == pytest.approx(math.sqrt(2) * position_scatter_ns(spread, 0))
    assert position_scatter_ns(rows([50_000], [0.0]) + spread, 1) == position_scatter_ns(spread, 0)


def test_the_check_judges_the_gap_total_at_its_medians_error_and_its_scatter_together() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    stitched = _stitched_like(ops, 100_000)
    stitched.gap_total_noise_ns = 12_000.0  # type: ignore[attr-defined]
    stitched.gap_total_scatter_ns = 16_000.0  # type: ignore[attr-defined]
    check = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["total_gap_noise_ns"] == 20_000.0 and check["total_gap_scatter_ns"] == 16_000.0
    # the medians' error alone would have decided it (two errors, 24 us, within 50); together (40 us) not beyond
    assert abs(check["total_gap_diff_ns"]) < 50_000 and check["total_gap_agrees"] is True
    stitched.gap_total_scatter_ns = 30_000.0  # type: ignore[attr-defined]
    check = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["total_gap_agrees"] is None  # two errors, 65 us, more than the 50 allowed
    # the scatter alone fills the room (two of it, 60 us, past 50): more steps would not decide it
    assert check["total_gap_steps_to_decide"] is None and check["total_gap_scatter_bound"] is True
    stitched.gap_total_scatter_ns = 24_000.0  # type: ignore[attr-defined]
    check = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert check["total_gap_agrees"] is None and check["total_gap_scatter_bound"] is False  # 48 us: steps would
    assert check["total_gap_steps_to_decide"] is not None
    # the medians' error falls with the steps, the scatter does not: 4x the steps halve the first
    assert gap_total_steps_to_decide(0, 50_000, 20_000, 15_000) == pytest.approx(20_000**2 / (25_000**2 - 15_000**2))
    assert gap_total_steps_to_decide(0, 50_000, 20_000, 0.0) == pytest.approx((2 * 20 / 50) ** 2)


def test_the_like_for_like_check_reads_the_events_taken_under_cupti_beside_the_verdict() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    stitched = _stitched_like(ops, 100_000)
    # read under CUPTI, the gap before op 1 (class x) 3 us long (what CUPTI did to it); class y's as CUPTI's
    under = _stitched_like([(10_000, 20_000), (28_000, 53_000), (63_000, 73_000)], 103_000)
    check = clean_check(stitched, 100_000.0, ref, under_cupti=under)  # type: ignore[arg-type]
    by_op = {o["op"]: o for o in check["ops"]}
    assert by_op["x"]["events_gap_under_cupti_ns_median"] == 8_000 and not by_op["x"]["gap_under_cupti_agrees"]
    assert by_op["x"]["gap_under_cupti_diff_ns"] == 8_000 - by_op["x"]["cupti_gap_ns_median"]
    assert by_op["x"]["gap_agrees"] and by_op["y"]["gap_under_cupti_agrees"]
    assert check["ops_under_cupti_agree"] is False and check["agrees"]  # beside the verdict, not in it
    assert check["under_cupti_steps"] == 10  # the sampled steps _stitched_like gives
    plain = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    assert plain["ops_under_cupti_agree"] is None and "gap_under_cupti_agrees" not in plain["ops"][0]


def test_a_class_cupti_moves_is_checked_like_for_like() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]  # CUPTI: the gap before op 1 (class x) is 5 us
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    short = _stitched_like([(10_000, 20_000), (22_000, 47_000), (57_000, 67_000)], 97_000)  # the events: 2 us
    # read while CUPTI ran, the same events put it at 5 us: CUPTI moved it by 3 us, and like for like it agrees
    moved = clean_check(short, 100_000.0, ref, under_cupti=_stitched_like(ops, 100_000))  # type: ignore[arg-type]
    x = {o["op"]: o for o in moved["ops"]}["x"]
    assert not x["gap_agrees"] and x["cupti_effect_ns"] == 3_000 and x["cupti_trusted_here"] is False
    assert x["gap_verdict"] == "agree like for like" and moved["ops_agree"]
    # CUPTI moved it, but like for like the events still miss by 3 us: the events are wrong there
    far = _stitched_like([(10_000, 20_000), (28_000, 53_000), (63_000, 73_000)], 103_000)
    wrong = clean_check(short, 100_000.0, ref, under_cupti=far)  # type: ignore[arg-type]
    x = {o["op"]: o for o in wrong["ops"]}["x"]
    assert x["cupti_trusted_here"] is False and x["gap_verdict"] == "disagree" and wrong["ops_agree"] is False
    # the events read it alike with and without CUPTI, 3 us from CUPTI's: CUPTI is trusted there, and they disagree
    same = clean_check(short, 100_000.0, ref, under_cupti=short)  # type: ignore[arg-type]
    x = {o["op"]: o for o in same["ops"]}["x"]
    assert x["cupti_trusted_here"] is True and x["gap_verdict"] == "disagree" and same["ops_agree"] is False


def test_a_class_a_second_capture_moves_is_checked_against_that_capture_too() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]  # CUPTI, first capture: x's gap 5 us
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    short = _stitched_like([(10_000, 20_000), (22_000, 47_000), (57_000, 67_000)], 97_000)  # the events: 2 us
    # a second capture of the same graphs puts x's gap at 2.4 us: beyond the bar, and the events agree with it
    moved = [{"op": "x", "count": 1, "shift_ns": -2_600.0, "beyond_bar": True, "second_gap_ns_median": 2_400.0}]
    check = clean_check(short, 100_000.0, ref, capture_classes=moved)  # type: ignore[arg-type]
    x = {o["op"]: o for o in check["ops"]}["x"]
    assert not x["gap_agrees"] and x["gap_verdict"] == "agree across captures" and check["ops_agree"]
    assert x["cupti_second_capture_gap_ns_median"] == 2_400 and x["capture_moved"] and x["gap_second_capture_agrees"]
    # CUPTI's x gap 3.1 us in the first capture, 2.3 in a second (0.8 us off: within the bar, beyond its error; a
    # move between the two values of a piece's start): CUPTI read the class at both, and the events' 2 us agree
    # with the second
    near_ref = cupti_reference(
        _reference_steps(100_000, [(10_000, 20_000), (23_100, 48_100), (58_100, 68_100)], 3), [101_000.0] * 3, [1, 1, 1]
    )
    near = [dict(moved[0], shift_ns=-800.0, beyond_bar=False, moved=True, second_gap_ns_median=2_300.0)]
    x = {o["op"]: o for o in clean_check(short, 100_000.0, near_ref, capture_classes=near)["ops"]}["x"]  # type: ignore[arg-type]
    assert not x["gap_agrees"] and x["gap_verdict"] == "agree across captures" and x["capture_moved"] is True
    # the same second value, not a move (within its error): no second value to take, the class disagrees
    for still in ([dict(near[0], moved=False)], [{k: v for k, v in near[0].items() if k != "moved"}]):
        # (the second: a check recorded before ``moved``, where beyond the bar decided, as it did then)
        x = {o["op"]: o for o in clean_check(short, 100_000.0, near_ref, capture_classes=still)["ops"]}["x"]  # type: ignore[arg-type]
        assert x["gap_verdict"] == "disagree" and x["capture_moved"] is False
    # ``moved`` null (a record of an older file): beyond the bar decides
    unknown = [dict(near[0], moved=None)]
    x = {o["op"]: o for o in clean_check(short, 100_000.0, near_ref, capture_classes=unknown)["ops"]}["x"]  # type: ignore[arg-type]
    assert x["gap_verdict"] == "disagree" and x["capture_moved"] is False
    # moved beyond the bar, but the events miss that capture's value too (2 us against 3.5): they disagree
    other = [dict(moved[0], shift_ns=-1_500.0, second_gap_ns_median=3_500.0)]
    x = {o["op"]: o for o in clean_check(short, 100_000.0, ref, capture_classes=other)["ops"]}["x"]  # type: ignore[arg-type]
    assert x["gap_verdict"] == "disagree" and x["gap_second_capture_agrees"] is False
    # a class the first capture's CUPTI value agrees with stays "agree"; a class the check has no row for is as before
    plain = clean_check(short, 100_000.0, ref)  # type: ignore[arg-type]
    assert "cupti_second_capture_gap_ns_median" not in plain["ops"][0]


def test_cupti_moves_a_class_only_beyond_the_noise_of_the_two_readings() -> None:
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    short = _stitched_like([(10_000, 20_000), (22_000, 47_000), (57_000, 67_000)], 97_000)
    under = _stitched_like(ops, 100_000)
    for stitched in (short, under):  # each reading's gap before op 1 uncertain by 1.5 us: 3 us is within 2 sigma
        stitched.rows[1]["gap_noise_ns"] = 1_500.0  # type: ignore[attr-defined]
    check = clean_check(short, 100_000.0, ref, under_cupti=under)  # type: ignore[arg-type]
    x = {o["op"]: o for o in check["ops"]}["x"]
    assert x["cupti_effect_noise_ns"] == pytest.approx(1.2533 * 1_500 * 2**0.5)
    assert x["cupti_trusted_here"] is True and x["gap_verdict"] == "disagree"


def test_event_lags_by_the_kinds_of_two_events_of_one_step() -> None:
    # ops 0-2 graphed, 3 host-launched, 4 graphed: a host event lags its op's end 1.2 us more than an event node
    host = [False, False, False, True, False]
    ends = [10_000, 20_000, 30_000, 40_000, 50_000]  # CUPTI's op ends in the step
    lag = [300, 300, 300, 1_500, 300]
    plan = Plan(5, 6, [[], [0, 2], [2, 3], [3, 4]], ["plain", "far", "near", "far"], 2)
    steps = [SampledStep(v, 60_000, {i: ends[i] + lag[i] - 5_000 for i in plan.variants[v]}) for v in (1, 2, 3)]
    out = {row["kinds"]: row for row in event_lags(plan, host, steps, [ends] * 3)}
    assert out["node-node"]["lag_ns_median"] == 0 and out["node-host"]["lag_ns_median"] == 1_200
    assert out["host-node"]["lag_ns_median"] == -1_200 and all(row["pairs"] == 1 for row in out.values())
    assert "host-host" not in out


@dataclass
class _GraphPass:
    clean_kernels: list[list[tuple[float, float]]]
    truth: list[float]
    plan: Plan
    steps: list[SampledStep]
    seen: dict[int, list[list[tuple[int, int]]]]  # per variant, per step it ran: each op's (start, end), as CUPTI
    names: list[str]


def _graph_pass(n: int, reach: int, m: int, **stream: Any) -> _GraphPass:
    """A full-graph step of ``_durations(n)`` in the simulator: its clean gaps, and the paired plan's sampled steps
    (3 cycles) with their kernels grouped per variant as CUPTI would see them."""
    durations = _durations(n)
    _, clean_kernels = clean_steps(Stream(duration_ns=durations, launch_ns=[8_000] * n, graph=True, **stream), 6)
    plan = pair_plan(n, m, reach)
    steps, kernels = run_sampled(
        Stream(duration_ns=durations, launch_ns=[8_000] * n, graph=True, **stream), plan.variants, 3,
        follows=plan.follows,
    )  # fmt: skip
    seen: dict[int, list[list[tuple[int, int]]]] = {}
    for s, k in zip(steps, kernels):
        seen.setdefault(s.variant, []).append([(round(a), round(b)) for a, b in k])
    return _GraphPass(clean_kernels, clean_gaps(clean_kernels), plan, steps, seen, [op.op for op in timings(n)])


def test_anchor_effects_take_the_far_pairs_longer_idle_out_of_the_gaps() -> None:
    # under CUPTI an event node idles 450 ns longer per kernel before the next event: a far pair's anchor (next
    # event r ops on) 450 ns longer than a near pair's (r - 1 on), so every paired gap reads 450 ns long and the
    # head, op h's end less the gaps before it, that much short where h >= r
    n, reach, m = 43, 4, 9
    durations = _durations(n)
    run = _graph_pass(n, reach, m, segment_ns=450)
    truth, plan, steps, seen, names = run.truth, run.plan, run.steps, run.seen, run.names
    per_op, rows = anchor_effects(plan, names, [False] * n, seen)
    assert {row["op"]: row["effect_ns"] for row in rows} == {f"op{c}": 450 for c in range(5)}
    assert per_op[:reach] == [None] * reach and per_op[reach:] == [450] * (n - reach)
    plain = stitch(timings(n), steps, plan, durations)
    errors = [r["gap_before_ns"] - t for r, t in zip(plain.rows, truth)]
    assert errors[reach:] == pytest.approx([450] * (n - reach), abs=2)
    fixed = stitch(timings(n), steps, plan, durations, pair_bias_ns=per_op)
    assert _gaps(fixed) == pytest.approx(truth, abs=2)
    # an anchor that is host-launched, or followed by a host-launched op, has no event node after it: unmeasured
    host = [i in (9, 20) for i in range(n)]
    per_op, rows = anchor_effects(plan, names, host, seen)
    assert per_op[9 + reach] is None and per_op[8 + reach] is None and per_op[20 + reach] is None
    assert per_op[10 + reach] == 450
    with pytest.raises(StitchRefused):
        stitch(timings(n), steps, plan, durations, pair_bias_ns=per_op[:-1])


def _intervals(gaps: list[int], durations: list[int]) -> list[tuple[int, int]]:
    out, end = [], 0
    for gap, duration in zip(gaps, durations):
        start = end + gap
        out.append((start, start + duration))
        end = max(end, start + duration)
    return out


def test_start_shifts_read_where_an_event_after_an_op_moves_its_start() -> None:
    # an event after an x op makes it start 400 ns sooner; with an event after its predecessor too, 1 us sooner
    # (steps the shifts must not read); a dense step moves everything and is not read either
    names = ["embed", "x", "y", "x", "y", "x", "y", "z"]
    clean_gap = [0, -200, 300, -200, 300, -200, 300, 300]
    durations = [1_000] * 8
    plan = Plan(8, 4, [[], [1, 5], [2, 4], [1, 2], list(range(8))], ["plain", "far", "near", "far", "dense"], 4)

    def step(marked: list[int], dense: bool) -> list[tuple[int, int]]:
        gaps = list(clean_gap)
        for i in marked:
            gaps[i] -= (
                5_000 if dense else 1_000 if names[i] == "x" and i - 1 in marked else 400 if names[i] == "x" else 0
            )
        return _intervals(gaps, durations)

    seen = {v: [step(marked, plan.roles[v] == "dense")] * 3 for v, marked in enumerate(plan.variants)}
    per_op, rows = start_shifts(plan, names, [float(g) for g in clean_gap], seen)
    assert per_op == [None, -400, 0, None, 0, -400, None, None]
    by = {row["op"]: row for row in rows}
    assert by["x"] == {"op": "x", "shift_ns": -400.0, "bias_ns": -400.0, "ops": 2}  # op 5: -400 less op 4's 0
    assert by["y"] == {"op": "y", "shift_ns": 0.0, "bias_ns": 400.0, "ops": 2}  # op 2: 0 less op 1's -400
    assert "z" not in by and "embed" not in by
    assert start_biases(names, per_op) == [None, None, 400, None, None, -400, None, None]
    with pytest.raises(ValueError):
        start_biases(names, per_op[:-1])


def test_the_op_check_carries_the_start_bias_and_keeps_its_verdict() -> None:
    names = ["embed", "x", "y", "x", "y"]
    rows = [{"op": o, "gap_before_ns": g, "duration_ns": 1_000, "gap_noise_ns": 0.0}
            for o, g in zip(names, [3_000, -200, 1_700, -200, 1_700])]  # fmt: skip
    ref = CuptiReference(
        steps=8, step_ns=10_000.0, busy_ns=5_000.0, kernels_per_step=5,
        op_duration_ns=[1_000.0] * 5, op_gap_ns=[3_000.0, 600.0, 300.0, 600.0, 300.0],
    )  # fmt: skip
    checks = {c["op"]: c for c in op_class_checks(rows, ref, start_bias={"x": -800.0, "y": 800.0, "z": None})}
    assert checks["x"]["start_bias_ns"] == -800 and checks["y"]["start_bias_ns"] == 800
    assert checks["y"]["gap_verdict"] == "disagree" and checks["x"]["gap_verdict"] == "agree"  # 1.4 us vs 0.8 us off
    assert "start_bias_ns" not in checks["embed"]
    assert all("start_bias_ns" not in c for c in op_class_checks(rows, ref))


def test_corrections_only_inside_one_graph() -> None:
    gaps = ((0, False), (3_000, False), (9_000, True), (2_500, False), (1_000, False))
    rows = [{"gap_before_ns": g, "host_launched": h} for g, h in gaps]
    # segments: ops 0-1 in graph 0, op 2 eager, ops 3-4 in graph 1
    assert sound_corrections(rows, [0, 0, 1, 2, 2], 1_900) == [None, 1_100, None, None, 0]


def test_cycle_groups_keep_a_follower_with_its_leader() -> None:
    assert cycle_groups(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # 3 must run right after 7: the group that would end at 7 takes 3 too
    groups = cycle_groups([4, 5, 6, 7, 3, 8, 9, 0, 1, 2], 4, {7: 3})
    assert groups == [[4, 5, 6, 7, 3], [8, 9, 0, 1], [2]]
    with pytest.raises(ValueError):
        cycle_groups([0, 1], 0)


def test_local_overheads_against_each_steps_own_reference() -> None:
    # the host runs at 1 ms steps, then at 1.5 ms: each step set against the clean steps beside it reads its
    # own cost (variant 1: +1%), where one clean figure for the pass would read +/-25% by regime
    steps = [
        SampledStep(v, round(ref * (1.01 if v == 1 else 1.0)), {}, reference_ns=ref)
        for ref in (1e6, 1e6, 1.5e6, 1.5e6, 1.5e6)
        for v in (0, 1, 2)
    ]
    o = local_overheads(steps, 1.25e6)
    assert o.slowest_variant == 1
    assert o.slowest == pytest.approx(0.01, abs=1e-6)
    assert o.per_variant[0] == pytest.approx(0.0, abs=1e-6)
    assert o.pooled == pytest.approx(0.0, abs=1e-6)
    assert o.slowest_error == pytest.approx(0.0, abs=1e-6)
    assert o.within(0.02) and not o.within(0.005)
    # without references (older streams) every step is set against the one clean figure given
    bare = [SampledStep(s.variant, s.step_ns, {}) for s in steps]
    assert local_overheads(bare, 1.25e6).slowest == pytest.approx(1.5e6 * 1.01 / 1.25e6 - 1, abs=1e-6)
    with pytest.raises(ValueError):
        local_overheads([], 1e6)


def test_the_budget_allows_the_slowest_variant_its_own_noise() -> None:
    # variant 1 reads +1%, +5%, +3%, +0%, +4% against its references: median +3%, IQR 3 points; eight variants
    # read +0% every time, so variant 1 stands out of them and is judged on its own
    factors = {v: [1.0] * 5 for v in (0, *range(2, 9))} | {1: [1.01, 1.05, 1.03, 1.00, 1.04]}
    steps = [SampledStep(v, round(1e6 * f), {}, reference_ns=1e6) for v, fs in factors.items() for f in fs]
    o = local_overheads(steps, 1e6)
    assert not o.none_stands_out and o.basis == "slowest variant"
    assert o.slowest_variant == 1 and o.slowest == pytest.approx(0.03)
    expected_error = 1.2533 * (0.04 - 0.01) / 1.349 / 5**0.5  # numpy's IQR of the five ratios: 0.01 to 0.04
    assert o.slowest_error == pytest.approx(expected_error, rel=1e-6)
    assert 0.03 - 2 * expected_error <= 0.02 < 0.03  # over by less than two errors
    assert expected_error > 0.01 and o.within(0.02) is None  # but the error is over half the budget: not decided
    assert o.within(0.05) is True and o.within(0.001) is False
    # how many times the steps would decide it: the error within half the budget; and so many alike steps do
    factor = o.steps_to_decide(0.02)
    assert factor is not None and factor == pytest.approx((2 * expected_error / 0.02) ** 2)
    assert o.steps_to_decide(0.05) is None and o.steps_to_decide(0.001) is None  # decided already
    more = [SampledStep(s.variant, s.step_ns, {}, reference_ns=1e6) for s in steps for _ in range(math.ceil(factor))]
    assert local_overheads(more, 1e6).within(0.02) is not None
    fewer = [SampledStep(s.variant, s.step_ns, {}, reference_ns=1e6) for s in steps for _ in range(math.floor(factor))]
    assert local_overheads(fewer, 1e6).within(0.02) is None
    steady = [SampledStep(1, 1_030_000, {}, reference_ns=1e6)] * 5
    assert not local_overheads(steady, 1e6).within(0.02)  # +3% every time: over, whatever the noise rule


def _moving_host(costly: float = 0.0) -> list[SampledStep]:
    # an eager host that moves: each step against the clean steps around its group reads +0.4% times a factor
    # spread by +/-6% (log-normal), 325 variants of 5 steps each, as llama-3.2-1b eager b8 on the H200; variant 7
    # costs ``costly`` more
    rng = np.random.default_rng(21)
    steps = []
    for v in range(325):
        for factor in np.exp(rng.normal(0.0, 0.06, 5)):
            steps.append(SampledStep(v, round(1e6 * 1.004 * factor * (1 + costly * (v == 7))), {}, reference_ns=1e6))
    return steps


def test_alike_variants_on_a_moving_host_are_judged_by_the_pooled_overhead() -> None:
    o = local_overheads(_moving_host(), 1e6)
    # the slowest of 325 alike medians reads far over the budget, at a few of its own (5-step) errors
    assert o.slowest > 0.08 and o.slowest - 2 * o.slowest_error > 0.02
    assert o.shuffled_slowest_q95 is not None and o.shuffled_slowest_q95 > 0.08  # what the slowest of alike reads
    assert o.none_stands_out and o.basis == "pooled: no variant stands out"
    assert o.pooled == pytest.approx(0.004, abs=0.004) and o.pooled_error < 0.003
    assert o.within(0.02) is True
    assert o.within(o.pooled + o.pooled_error) is None  # the pooled within, not at two of its errors: not decided
    assert o.steps_to_decide(o.pooled + o.pooled_error) == pytest.approx(4.0)  # half the error: four times the steps
    assert o.steps_to_decide(0.02) is None and o.steps_to_decide(o.pooled - 0.001) is None
    assert o.within(o.pooled - 0.001) is False


def test_a_costly_variant_on_a_moving_host_stands_out() -> None:
    o = local_overheads(_moving_host(costly=0.3), 1e6)
    assert not o.none_stands_out and o.standout_p < 0.01
    assert o.slowest_variant == 7 and o.within(0.02) is False  # judged by the slowest: +30%, over at two errors


def test_a_single_variant_is_judged_as_the_slowest() -> None:
    # dense: one variant; its steps +1.5% +/- 1.2 points: not decided at 2% (the error over half of it)
    steps = [SampledStep(0, round(1e6 * f), {}, reference_ns=1e6) for f in (1.00, 1.03, 1.015, 0.99, 1.04)]
    o = local_overheads(steps, 1e6)
    assert o.standout_p == 1.0 and not o.none_stands_out and o.basis == "slowest variant"
    assert o.within(0.02) is None


def test_clean_spread() -> None:
    assert clean_spread([1e6] * 9) == 0.0
    assert clean_spread([1e6]) == 0.0
    values = [1.0e6] * 5 + [1.5e6] * 5
    p10, p50, p90 = 1.0e6, 1.25e6, 1.5e6
    assert clean_spread(values) == pytest.approx((p90 - p10) / p50)


def test_a_host_that_moves_within_a_cycle_reads_no_overhead_against_local_references() -> None:
    # an eager launch-bound host whose launches take 8 us in the first groups of every cycle and 12 us in the last
    # ones: against the clean steps timed around each group the variants cost what their event records cost (a
    # few per step; the group just before the switch reads low, its reference half slow), while against the
    # median clean step of the pass those in the slow groups read +50%
    n, reach = 40, 4
    durations = [2_000] * n
    plan = pair_plan(n, 18, reach)

    def regime(stream: Stream, cycle: int, group: int) -> None:
        stream.launch_ns = [8_000 if group < 3 else 12_000] * n

    sim = Stream(duration_ns=durations, launch_ns=[8_000] * n, record_ns=1_000, queue_depth=10_000)
    steps, _ = run_sampled(sim, plan.variants, 4, follows=plan.follows, at_group=regime)
    references = [s.reference_ns for s in steps if s.reference_ns]
    assert clean_spread(references) > 0.3
    local = local_overheads(steps, statistics.median(references))
    most_events = max(len(v) for v in plan.variants)
    assert local.slowest_variant != 0  # the event-free variant is not the slowest
    assert 0 <= local.slowest <= most_events * 1_000 / (n * 8_000) + 0.005
    bare = [SampledStep(s.variant, s.step_ns, s.ends) for s in steps]
    assert local_overheads(bare, statistics.median(references)).slowest > 0.1


def test_stitching_reads_every_measurement_at_the_clean_steps_host_speed() -> None:
    # launch-bound eager: launches of 12 us in three cycles of five, 8 us in the others. Scaled by clean /
    # reference, the fast cycles' measurements read at the slow (median) speed: the stitched step is the clean
    # step at that speed, each gap that speed's gap to within what does not scale (latency, the kernel itself)
    n, reach = 40, 4
    durations = [2_000] * n
    plan = pair_plan(n, 18, reach)

    def regime(stream: Stream, cycle: int, group: int) -> None:
        stream.launch_ns = [12_000 if cycle in (1, 2, 4) else 8_000] * n

    sim = Stream(duration_ns=durations, launch_ns=[8_000] * n, record_ns=1_000, queue_depth=10_000)
    steps, _ = run_sampled(sim, plan.variants, 5, follows=plan.follows, at_group=regime)
    clean = statistics.median(s.reference_ns for s in steps if s.reference_ns)
    slow = Stream(duration_ns=durations, launch_ns=[12_000] * n, record_ns=1_000, queue_depth=10_000)
    lengths, kernels = clean_steps(slow, 4)
    assert clean == pytest.approx(statistics.median(lengths), rel=0.01)
    truth = clean_gaps(kernels)
    scaled = stitch(timings(n), steps, plan, durations, clean)
    assert scaled.step_ns == pytest.approx(clean, rel=0.01)
    errors = [abs(r["gap_before_ns"] - t) for r, t in zip(scaled.rows, truth)]
    assert max(errors[reach:]) == 0  # pair differences: launch intervals, which scale with the host
    # the solo ends (ops 1 .. r - 1) run from the boundary and hold a latency and a kernel, which do not
    assert max(errors[1:reach]) < 0.5 * (2_000 + 2_000)
    # each measurement is multiplied by clean / its reference: a step timed when the clean step took half as long
    one = pair_plan(1, 6)  # the plain variant and the solo of op 0
    assert one.roles == ["plain", "solo"]
    half = [SampledStep(0, 10_000, {}, reference_ns=clean / 2), SampledStep(1, 10_000, {0: 6_000}, clean / 2)]
    assert stitch(timings(1), half, one, [1_000], clean).rows[0]["end_ns"] == 12_000
    assert stitch(timings(1), half, one, [1_000]).rows[0]["end_ns"] == 6_000


def test_capture_shifts_flag_a_class_whose_cupti_gap_moves_beyond_the_bar_between_two_captures() -> None:
    names = ["embed"] + ["attention", "o_proj", "down"] * 4
    first = [9_000.0] + [400.0, 2_900.0, 450.0] * 4
    # the second capture: o_proj's gap 1.1 us shorter in every layer, down's 0.3 us longer, attention's alike
    second = [1_000.0] + [400.0, 1_800.0, 750.0] * 4
    rows = {r["op"]: r for r in capture_shifts(names, first, second)}
    assert set(rows) == {"attention", "o_proj", "down"}  # op 0's gap is the gap between steps
    assert rows["o_proj"]["shift_ns"] == -1_100 and rows["o_proj"]["beyond_bar"] and rows["o_proj"]["count"] == 4
    assert rows["down"]["shift_ns"] == 300 and not rows["down"]["beyond_bar"]
    assert rows["attention"]["shift_ns"] == 0 and not rows["attention"]["beyond_bar"]
    # every layer moved alike: no spread, but 0.3 us is under the least move counted (CAPTURE_MOVE_MIN_NS)
    assert rows["down"]["shift_error_ns"] == 0 and not rows["down"]["moved"] and not rows["attention"]["moved"]
    moves = capture_shifts(names, first, [1_000.0] + [400.0, 2_200.0, 450.0] * 4)  # o_proj 0.7 us shorter
    assert {r["op"]: r["moved"] for r in moves} == {"attention": False, "o_proj": True, "down": False}
    assert not {r["op"]: r for r in moves}["o_proj"]["beyond_bar"]
    # the bar is 15% of the class's gap where that is more than 1 us: 1.1 us on a 9 us gap is within it; a class
    # of one op takes its error from the ops' own (medians over steps): 1.1 us at 0.5 us each is not a move
    wide = capture_shifts(["embed", "lm_head"], [0.0, 9_000.0], [0.0, 10_100.0], [0.0, 500.0], [0.0, 500.0])
    assert wide == [
        {
            "op": "lm_head",
            "count": 1,
            "shift_ns": 1_100.0,
            "shift_error_ns": pytest.approx(707.1, abs=0.1),
            "beyond_bar": False,
            "moved": False,
            "second_gap_ns_median": 10_100.0,
        }
    ]
    # at 0.2 us each it is; without the ops' errors a one-op class's move is the bar's alone
    assert capture_shifts(["embed", "lm_head"], [0.0, 9_000.0], [0.0, 10_100.0], [0.0, 200.0], [0.0, 200.0])[0]["moved"]
    with pytest.raises(ValueError):
        capture_shifts(["embed", "lm_head"], [0.0, 9_000.0], [0.0, 10_100.0], [200.0], [0.0, 200.0])
    assert capture_shifts(["embed", "lm_head"], [0.0, 9_000.0], [0.0, 10_100.0])[0]["shift_error_ns"] is None
    # layers that moved unlike: a shift within twice its error is no move
    spread = capture_shifts(["e"] + ["x"] * 6, [0.0] + [1_000.0] * 6, [0.0, 100, 700, 1_200, 1_400, 1_900, 2_200])
    assert spread[0]["shift_ns"] == 300 and spread[0]["shift_error_ns"] > 150 and not spread[0]["moved"]
    assert rows["o_proj"]["second_gap_ns_median"] == 1_800  # the class's median gap in the second capture
    with pytest.raises(ValueError):
        capture_shifts(names, first, second[:-1])


def _head_case() -> tuple[Any, Any, Any]:
    """CUPTI: the gap into the step (op 0, class h) 4 us, x's 5 us, y's 10 us; the events read h at 2.5 us."""
    ref_ops = [(4_000, 14_000), (19_000, 44_000), (54_000, 100_000)]
    ref = cupti_reference(_reference_steps(100_000, ref_ops, 3), [101_000.0] * 3, [1, 1, 1])
    events = _stitched_like([(2_500, 12_500), (17_500, 42_500), (52_500, 98_500)], 98_500)
    under = _stitched_like([(2_500, 12_500), (17_500, 42_500), (52_500, 98_500)], 98_500)
    for stitched in (events, under):
        stitched.rows[0]["op"] = "h"  # type: ignore[attr-defined]
    return ref, events, under


def test_the_heads_class_takes_cuptis_effect_from_the_head_variant() -> None:
    ref, events, under = _head_case()
    # the head variant's first piece ends 1.5 us later under CUPTI: CUPTI moved the step's start beyond the bar
    check = clean_check(events, 100_000.0, ref, under_cupti=under, head_effect=VariantEffect(1_500.0, 100.0, 60, 25))
    by_op = {o["op"]: o for o in check["ops"]}
    h = by_op["h"]
    assert not h["gap_agrees"] and h["cupti_effect_source"] == "head variant" and h["cupti_effect_ns"] == 1_500
    assert h["events_gap_under_cupti_ns_median"] == 4_000 and h["cupti_trusted_here"] is False
    assert h["gap_verdict"] == "agree like for like" and check["ops_agree"]
    # the other classes still take it from the cycle stitched under CUPTI
    assert by_op["x"]["cupti_effect_source"] == by_op["y"]["cupti_effect_source"] == "stitched under CUPTI"
    # the same effect within two of its errors: CUPTI is trusted at the step's start, and the head disagrees
    noisy = clean_check(events, 100_000.0, ref, under_cupti=under, head_effect=VariantEffect(1_500.0, 800.0, 60, 25))
    h = {o["op"]: o for o in noisy["ops"]}["h"]
    assert h["cupti_trusted_here"] is True and h["gap_verdict"] == "disagree" and noisy["ops_agree"] is False
    # under the bar (0.4 us) but beyond 2 errors: the head variant's effect moves the class at any size; the
    # like-for-like reading (1.1 us short) misses too
    small = clean_check(events, 100_000.0, ref, under_cupti=under, head_effect=VariantEffect(400.0, 50.0, 60, 25))
    h = {o["op"]: o for o in small["ops"]}["h"]
    assert h["cupti_trusted_here"] is False and h["gap_verdict"] == "disagree" and not h["gap_under_cupti_agrees"]
    # without a head effect the head's class is read from the stitched cycle like the others
    plain = clean_check(events, 100_000.0, ref, under_cupti=under)
    h = {o["op"]: o for o in plain["ops"]}["h"]
    assert h["cupti_effect_source"] == "stitched under CUPTI" and h["cupti_effect_ns"] == 0
    # CUPTI's own later clean steps put the gap between steps beyond the bar of its reference in most of them (as
    # in 1B piecewise b1 on the H200, 2026-12-03 14:32 UTC: 4.29 us in the reference, 5.82 in 88% of the cycle's):
    # the head the events miss is not decided; in a quarter of them it stays a miss
    for share, verdict in ((0.88, "not decided"), (0.25, "disagree")):
        later = {"h": {"cycle_gap_ns_median": 5_800.0, "off_bar_fraction": share}}
        noisy = clean_check(
            events,
            100_000.0,
            ref,
            under_cupti=under,
            head_effect=VariantEffect(1_500.0, 800.0, 60, 25),
            cycle_clean=later,
        )
        h = {o["op"]: o for o in noisy["ops"]}["h"]
        assert h["gap_verdict"] == verdict and h["cupti_cycle_gap_ns_median"] == 5_800


def test_a_head_effect_under_the_bar_but_beyond_its_noise_moves_the_heads_class() -> None:
    """As on the H200 at 06:13 UTC: the events read the head 1.5 us short of CUPTI's, and the head variant shows CUPTI
    lengthening it by 0.8 us at 11 errors: the plain check misses, like for like it is 0.7 us short."""
    ref, events, under = _head_case()
    check = clean_check(events, 100_000.0, ref, under_cupti=under, head_effect=VariantEffect(800.0, 70.0, 60, 25))
    h = {o["op"]: o for o in check["ops"]}["h"]
    assert not h["gap_agrees"] and h["cupti_trusted_here"] is False and h["gap_under_cupti_diff_ns"] == -700
    assert h["gap_verdict"] == "agree like for like" and check["ops_agree"]
    # read 0.5 us long instead: within the bar of CUPTI's value, 1.3 us long against it less CUPTI's effect; a gap
    # into a graph piece has two values about 1.1 us apart (docs/performance.md), so either reading may stand
    long_ = _stitched_like([(4_500, 14_500), (19_500, 44_500), (54_500, 100_500)], 100_500)
    long_.rows[0]["op"] = "h"  # type: ignore[attr-defined]
    effect = VariantEffect(800.0, 70.0, 60, 25)
    check = clean_check(long_, 100_000.0, ref, under_cupti=under, head_effect=effect)  # type: ignore[arg-type]
    h = {o["op"]: o for o in check["ops"]}["h"]
    assert h["gap_agrees"] and not h["gap_under_cupti_agrees"] and h["cupti_trusted_here"] is False
    assert h["gap_verdict"] == "agree" and check["ops_agree"]  # the plain reading stands: the gap has two modes
    # 0.8 us from the cycle stitched under CUPTI (class x): that may be CUPTI's effect on the events, under the bar
    # CUPTI stays trusted there
    x_long = _stitched_like([(2_500, 12_500), (18_300, 43_300), (53_300, 99_300)], 99_300)
    x_long.rows[0]["op"] = "h"  # type: ignore[attr-defined]
    check = clean_check(events, 100_000.0, ref, under_cupti=x_long, head_effect=effect)  # type: ignore[arg-type]
    x = {o["op"]: o for o in check["ops"]}["x"]
    assert x["cupti_effect_source"] == "stitched under CUPTI" and x["cupti_effect_ns"] == 800
    assert x["cupti_trusted_here"] is True


def test_the_head_effect_is_the_head_variants_end_under_cupti_less_without() -> None:
    plan = pair_plan(40, 20, 4, head=3)
    head = plan.roles.index("head")
    solo = plan.index("solo", 0)
    clean = [SampledStep(head, 100_000, {3: 10_000 + 10 * k}) for k in range(9)]
    clean += [SampledStep(solo, 100_000, {0: 99_000})]  # another variant's ends do not count
    under = [SampledStep(head, 100_000, {3: 11_000 + 20 * k}) for k in range(5)]  # medians 10_040 and 11_040
    effect = head_cupti_effect(plan, clean, under)
    assert effect is not None and effect.effect_ns == 1_000 and (effect.runs, effect.runs_under_cupti) == (9, 5)
    assert effect.noise_ns > 0
    assert head_cupti_effect(plan, clean, []) is None  # no head-variant run under CUPTI
    assert head_cupti_effect(pair_plan(40, 20, 4), clean, under) is None  # no head variant: op 0's solo end


def test_the_boundary_lag_is_cuptis_end_of_the_opening_op_from_the_last_kernel_less_the_events_from_the_boundary() -> (
    None
):
    plan = pair_plan(40, 20, 4, head=3)
    head, solo = plan.roles.index("head"), plan.index("solo", 0)
    # CUPTI: op 3 ends 18.8 us after the step before's last kernel; the events read it 17.7 us after the boundary
    # event in three steps, 17.8 in two: the boundary event lagged that kernel 1.0-1.1 us more than the end event op 3
    ops = [[(0, 1), (2, 3), (4, 5), (6, 1_018_800)]] * 6
    seen = {head: ops, solo: [[(0, 1)]]}
    before: dict[int, list[int | None]] = {head: [None, *[1_000_000] * 5], solo: [5]}
    read = [SampledStep(head, 0, {3: t}) for t in (1, 17_700, 17_700, 17_800, 17_700, 17_800)]
    read.insert(2, SampledStep(solo, 0, {0: 7}))  # another variant's step
    lag = boundary_lag(plan, seen, before, read)
    assert lag is not None and (lag.lag_ns, lag.steps) == (1_100.0, 5) and lag.noise_ns > 0
    # without a head variant: op 0's solo variant, op 0's end
    plain = pair_plan(40, 20, 4)
    zero = plain.index("solo", 0)
    seen0 = {zero: [[(3_000, 3_500)]] * 3}
    lag0 = boundary_lag(plain, seen0, {zero: [0, 0, 0]}, [SampledStep(zero, 0, {0: 3_500}) for _ in range(3)])
    assert lag0 is not None and lag0.lag_ns == 0 and lag0.steps == 3
    # not read both ways alike: no lag
    assert boundary_lag(plan, seen, before, read[:-1]) is None
    assert boundary_lag(plan, {}, before, read) is None
    assert boundary_lag(plan, seen, {head: [None] * 6, solo: [5]}, read) is None  # no step before any of them


def test_the_gap_between_steps_carries_the_boundary_lag_and_keeps_its_verdict() -> None:
    ref, events, under = _head_case()
    lag = BoundaryLag(lag_ns=1_060.0, noise_ns=30.0, steps=64)
    check = clean_check(events, 100_000.0, ref, under_cupti=under, boundary=lag)
    by_op = {o["op"]: o for o in check["ops"]}
    assert by_op["h"]["boundary_lag_ns"] == 1_060 and by_op["h"]["boundary_lag_noise_ns"] == 30
    assert by_op["h"]["cupti_gap_less_boundary_lag_ns"] == by_op["h"]["cupti_gap_ns_median"] - 1_060
    assert "boundary_lag_ns" not in by_op["x"] and "boundary_lag_ns" not in by_op["y"]
    plain = {o["op"]: o for o in clean_check(events, 100_000.0, ref, under_cupti=under)["ops"]}
    assert by_op["h"]["gap_verdict"] == plain["h"]["gap_verdict"] == "disagree"  # a diagnostic: the verdict stays


def _piecewise(layers: int) -> list[OpTiming]:
    """embed and layer 0's attn_norm, qkv, rotary; per layer kv_write and attention (host-launched), then o_proj ..
    down and the next layer's attn_norm .. rotary (the last layer: final_norm and lm_head) in one piece."""
    names = ["embed", "attn_norm", "qkv", "rotary"]
    for layer in range(layers):
        names += ["kv_write", "attention", "o_proj", "mlp_norm", "gate_up", "silu_mul", "down"]
        names += ["attn_norm", "qkv", "rotary"] if layer < layers - 1 else ["final_norm", "lm_head"]
    return [OpTiming(name, 0, host_launched=name in ("kv_write", "attention")) for name in names]


def test_piece_variants_time_each_piece_after_attention_by_host_events_alone() -> None:
    ops = _piecewise(5)
    pieces = piece_boundaries(ops)
    assert pieces == [(5, 13), (15, 23), (25, 33), (35, 43), (45, 52)]  # attention, the piece's last op
    assert all(ops[a].op == "attention" and ops[a + 1].op == "o_proj" for a, _ in pieces)
    assert piece_boundaries(timings(20, host=True)) == piece_boundaries(timings(20, host=False)) == []
    plan = pair_plan(len(ops), 10, 4, head=3, pieces=pieces)
    mine = plan.piece_variants
    assert len(mine) == 3 and [plan.roles[v] for v in mine] == ["piece"] * 3  # two boundaries a variant, at most
    assert sorted(i for v in mine for i in plan.variants[v]) == sorted(i for b in pieces for i in b)
    assert plan.variants[mine[0]] == [5, 13, 35, 43]  # spread over the step
    assert set(mine) <= plan.after_replay  # the piece's end: a host event after its clean replay
    assert "3 piece variants" in pairing_note(plan)
    # their steps give no end shift: the piece's last op ends where the clean piece's does
    n = len(ops)
    durations = {v: [[1_000] * n] for v in mine}
    assert end_shifts(plan, [1_500.0] * n, durations) == [None] * n


def test_the_piece_effect_is_the_piece_span_under_cupti_less_without() -> None:
    ops = _piecewise(5)
    names = [op.op for op in ops]
    plan = pair_plan(len(ops), 10, 4, head=3, pieces=piece_boundaries(ops))
    first, second, third = plan.piece_variants

    def steps(v: int, spans: list[int]) -> list[SampledStep]:
        marked = plan.variants[v]
        return [
            SampledStep(v, 100_000, {i: (10_000 * i + (span if k % 2 else 0)) for k, i in enumerate(marked)})
            for span in spans
        ]

    clean = steps(first, [20_000, 20_100, 20_200]) + steps(second, [21_000, 21_050]) + steps(third, [19_000])
    under = steps(first, [21_100, 21_200]) + steps(second, [22_100]) + steps(third, [20_050, 20_150])
    effects = piece_cupti_effects(plan, names, clean, under)
    assert set(effects) == {"o_proj"}  # keyed by the class opening the pieces
    effect = effects["o_proj"]
    # per step, its spans less each boundary's clean median: clean -100, 0, 100, -25, 25, 0; under CUPTI 1000,
    # 1100, 1075, 1050, 1150
    assert effect.effect_ns == 1_075 and (effect.runs, effect.runs_under_cupti) == (6, 5)
    assert 20 < effect.noise_ns < 100  # from the steps' spread on both sides
    assert piece_cupti_effects(plan, names, clean, []) == {}
    assert piece_cupti_effects(pair_plan(len(ops), 10, 4, head=3), names, clean, under) == {}  # no piece variants
    # one boundary a step, its spans noisy from step to step: the noise is the steps', never 0
    one = pair_plan(len(ops), 10, 4, head=3, pieces=piece_boundaries(ops)[:1])
    (only,) = one.piece_variants
    noisy_clean = [SampledStep(only, 100_000, {5: 0, 13: span}) for span in (20_000, 22_000, 18_000, 21_000)]
    noisy_under = [SampledStep(only, 100_000, {5: 0, 13: span}) for span in (20_100, 17_900, 22_200)]
    lone = piece_cupti_effects(one, names, noisy_clean, noisy_under)["o_proj"]
    assert lone.noise_ns > 1_000 > abs(lone.effect_ns)


def test_the_class_opening_the_pieces_takes_cuptis_effect_from_the_piece_variants() -> None:
    """As o_proj on the H200 (07:11 UTC): the events read it 1.3 us short of CUPTI's clean gap."""
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    events = _stitched_like([(10_000, 20_000), (23_700, 48_700), (58_700, 68_700)], 100_000)
    rows = events.rows  # type: ignore[attr-defined]
    rows[0]["op"], rows[1]["op"], rows[2]["op"] = "attention", "o_proj", "mlp_norm"
    rows[1]["host_launched"] = rows[2]["host_launched"] = False  # o_proj opens a piece after attention
    moved = clean_check(events, 100_000.0, ref, piece_effects={"o_proj": VariantEffect(1_100.0, 80.0, 40, 30)})  # type: ignore[arg-type]
    o_proj = {o["op"]: o for o in moved["ops"]}["o_proj"]
    assert not o_proj["gap_agrees"] and o_proj["cupti_effect_source"] == "piece variant"
    assert o_proj["cupti_trusted_here"] is False and o_proj["gap_under_cupti_diff_ns"] == pytest.approx(-200)
    assert o_proj["gap_verdict"] == "agree like for like"
    # an effect within two of its errors: CUPTI's value stands, and so does the miss
    noisy = clean_check(events, 100_000.0, ref, piece_effects={"o_proj": VariantEffect(300.0, 500.0, 40, 30)})  # type: ignore[arg-type]
    o_proj = {o["op"]: o for o in noisy["ops"]}["o_proj"]
    assert o_proj["cupti_trusted_here"] is True and o_proj["gap_verdict"] == "disagree"
    # a class that does not open a piece is not given the piece effect
    assert {o["op"]: o for o in moved["ops"]}["mlp_norm"].get("cupti_effect_source") is None


def test_cupti_clean_steps_later_in_the_pass_per_class_beside_the_reference() -> None:
    """As o_proj at 07:11 on the H200: the reference's 2.8 us, the cycle's clean steps 1.7 us in two of three."""
    names = ["attention", "o_proj", "mlp_norm", "attention", "o_proj", "mlp_norm"]

    def step(gap: int) -> list[tuple[int, int]]:  # attention 10 us, o_proj after ``gap``, mlp_norm 1 us after it
        out, at = [], 0
        for _ in range(2):
            out += [(at, at + 10_000), (at + 10_000 + gap, at + 15_000 + gap), (at + 16_000 + gap, at + 17_000 + gap)]
            at += 20_000 + gap
        return out

    reference = [0.0, 2_800.0, 1_000.0, 3_000.0, 2_800.0, 1_000.0]
    later = cycle_clean_gaps(names, [step(1_700), step(1_700), step(2_800)], reference)
    assert set(later) == {"o_proj", "mlp_norm", "attention"}  # op 0 alone is aside; its class has op 3 too
    assert later["o_proj"] == {"steps": 3, "cycle_gap_ns_median": 1_700.0, "off_bar_fraction": pytest.approx(2 / 3)}
    assert later["mlp_norm"]["off_bar_fraction"] == 0 and later["mlp_norm"]["cycle_gap_ns_median"] == 1_000
    assert cycle_clean_gaps(names, [step(1_800)], reference[:-1]) == {}  # the reference is not of this step
    # op 0's gap lies between steps: from the clean steps that followed a clean step, where op 0's name is its own
    alone = ["embed", *names[1:]]
    heads = cycle_clean_gaps(alone, [step(1_700)] * 3, [4_700.0, *reference[1:]], [5_800.0, 5_900.0, 4_800.0])
    assert heads["embed"] == {"steps": 3, "cycle_gap_ns_median": 5_800.0, "off_bar_fraction": pytest.approx(2 / 3)}
    assert "embed" not in cycle_clean_gaps(alone, [step(1_700)], [4_700.0, *reference[1:]])  # none measured
    assert cycle_clean_gaps(names, [step(1_700)], reference, [9_000.0])["attention"]["steps"] == 1  # a shared name
    # beside the verdict where the events agree with the reference
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    stitched = _stitched_like(ops, 100_000)
    elsewhere = {"x": {"cycle_gap_ns_median": 9_000.0, "off_bar_fraction": 1.0}}
    with_later = clean_check(stitched, 100_000.0, ref, cycle_clean=elsewhere)  # type: ignore[arg-type]
    plain = clean_check(stitched, 100_000.0, ref)  # type: ignore[arg-type]
    x = {o["op"]: o for o in with_later["ops"]}["x"]
    assert x["cupti_cycle_gap_ns_median"] == 9_000 and x["cupti_cycle_off_bar_fraction"] == 1.0
    assert [o["gap_verdict"] for o in with_later["ops"]] == [o["gap_verdict"] for o in plain["ops"]]


def test_a_miss_of_a_reference_cuptis_own_later_clean_steps_do_not_hold_is_not_decided() -> None:
    """As attention in 1B eager b64 at 06:38 on the H200: the events 0.34 us, CUPTI's reference 1.46 us, and -0.72 us
    in 99% of CUPTI's clean steps later in the pass. A reference that does not hold to the bar cannot check to it;
    where fewer than half of those steps leave it, a miss stays a miss."""
    ops = [(10_000, 20_000), (25_000, 50_000), (60_000, 70_000)]  # CUPTI: the gap before op 1 (class x) is 5 us
    ref = cupti_reference(_reference_steps(100_000, ops, 3), [101_000.0] * 3, [1, 1, 1])
    short = _stitched_like([(10_000, 20_000), (22_000, 47_000), (57_000, 67_000)], 97_000)  # the events: 2 us

    def check(share: float) -> dict[str, Any]:
        later = {"x": {"cycle_gap_ns_median": 1_000.0, "off_bar_fraction": share}}
        return clean_check(short, 100_000.0, ref, cycle_clean=later)  # type: ignore[arg-type]

    unsteady, steady = check(0.99), check(0.4)
    x = {o["op"]: o for o in unsteady["ops"]}["x"]
    assert not x["gap_agrees"] and x["gap_verdict"] == "not decided"
    assert unsteady["ops_agree"] is None and unsteady["agrees"] is None
    x = {o["op"]: o for o in steady["ops"]}["x"]
    assert x["gap_verdict"] == "disagree" and steady["ops_agree"] is False and steady["agrees"] is False
    # another class that disagrees outright still decides the whole
    far = _stitched_like([(10_000, 20_000), (22_000, 47_000), (47_000, 57_000)], 80_000)  # y: 16.5 us, CUPTI 25
    later = {"x": {"cycle_gap_ns_median": 1_000.0, "off_bar_fraction": 0.99}}
    both = clean_check(far, 100_000.0, ref, cycle_clean=later)  # type: ignore[arg-type]
    assert {o["op"]: o["gap_verdict"] for o in both["ops"]} == {"y": "disagree", "x": "not decided"}
    assert both["ops_agree"] is False and both["agrees"] is False


def test_an_event_that_moves_its_ops_start_puts_the_start_bias_into_the_gaps_and_not_into_their_sum() -> None:
    # ops of class op1 and op3 start 600 and 300 ns sooner with an event node after them (ending where they would
    # have): the events cannot see it, and the end shifts, taken from CUPTI's durations, read it as a later end
    n, reach, m = 43, 4, 9
    early = [600 if i % 5 == 1 else 300 if i % 5 == 3 else 0 for i in range(n)]
    early[-1] = 0  # the last op's shift would move the tail, which is measured apart
    run = _graph_pass(n, reach, m, early_ns=early)
    truth, plan, steps, seen, names = run.truth, run.plan, run.steps, run.seen, run.names
    clean_durations = [float(b - a) for a, b in run.clean_kernels[-1]]
    shifts = end_shifts(plan, clean_durations, {v: [[b - a for a, b in st] for st in sts] for v, sts in seen.items()})
    assert [shifts[i] for i in range(1, n - 1) if shifts[i] is not None] == [-early[i] for i in range(1, n - 1)]
    per_op, rows = start_shifts(plan, names, truth, seen)
    assert per_op[1:] == [-e for e in early[1:]]  # every op from 1 on is timed somewhere
    by_class = {row["op"]: row for row in rows}
    assert by_class["op1"]["shift_ns"] == -600 and by_class["op2"]["bias_ns"] == 600
    assert by_class["op3"]["bias_ns"] == -300 and by_class["op4"]["bias_ns"] == 300
    stitched = stitch(timings(n), steps, plan, [round(d) for d in clean_durations], end_shift_ns=shifts)
    errors = [g - t for g, t in zip(_gaps(stitched), truth)]
    bias = start_biases(names, per_op)
    assert bias[1] is None and errors[1] == pytest.approx(per_op[1], abs=2)  # op 0 (not moved) has no shift read
    assert errors[2:] == pytest.approx(bias[2:], abs=2)  # each gap reads its start bias
    assert abs(sum(errors)) <= 2 * n  # and their sum, the signed gap total, none of it


def test_the_verdict_over_a_passs_checks_fails_on_any_no_and_waits_on_any_undecided() -> None:
    assert checks_verdict(True, True, True, True, class_check_made=True) == "agree"
    assert checks_verdict(True, True, True, None, class_check_made=True) == "not decided"
    assert checks_verdict(True, None, True, False, class_check_made=True) == "disagree"  # a no outweighs an undecided
    assert checks_verdict(False, True, True, True, class_check_made=True) == "disagree"  # over the 2% budget
    # a class check not made (CUPTI's own step beyond 5% of clean) is no part of it, whatever it holds
    assert checks_verdict(True, True, True, False, class_check_made=False) == "agree"
    assert checks_verdict(True, True, None, None, class_check_made=False) == "not decided"


def test_fresh_capture_shifts_read_the_variants_own_captures_away_from_their_events() -> None:
    # 12 ops: 0-4 one graph piece, 5 host-launched, 6-11 another piece; each step's ops 1 us long, 500 ns apart
    names = ["a", "b", "c", "d", "e", "attn", "o", "p", "q", "r", "s", "t"]
    hosted = [i == 5 for i in range(12)]
    segment_of = [0] * 5 + [1] + [2] * 6
    plan = Plan(12, 6, [[], [7, 11], [0, 1], [5, 9]], ["plain", "far", "solo", "near"], 4)
    clean = [500.0] * 12

    def step(shift_at: dict[int, int]) -> list[tuple[int, int]]:
        out, t = [], 0
        for i in range(12):
            t += 500 + shift_at.get(i, 0)
            out.append((t, t + 1_000))
            t += 1_000
        return out

    # in its fresh capture of the second piece, the gap into "o" (op 6, after the host-launched op) reads 900 ns
    # lower, and the gap before "q" (op 8, right after variant 1's event after op 7) 5 us higher
    far = [step({6: -900, 8: 5_000}) for _ in range(5)]
    out = fresh_capture_shifts(plan, names, hosted, segment_of, clean, {0: [step({})] * 3, 1: far, 2: [step({})]})
    # a position p counts with no event after ops p - 2 .. p + 1: variant 1 (events after 7 and 11) leaves none in
    # its piece; the solo variant 2 (after 0 and 1) recaptured the first piece and leaves op 4 ("e") clear
    assert out is not None and out["positions"] == 1
    assert out["classes"] == [{"op": "e", "count": 1, "shift_ns": 0.0, "sum_ns": 0.0}]
    plan.variants[1] = [9]  # an event after op 9 alone leaves ops 6 and 7 clear, the rest of the piece near it
    out = fresh_capture_shifts(plan, names, hosted, segment_of, clean, {1: far})
    assert out is not None
    assert {c["op"]: c["shift_ns"] for c in out["classes"]} == {"o": -900.0, "p": 0.0} and out["gap_sum_ns"] == -900
    # the plain, head and piece variants replay the clean runner's graphs: nothing of theirs is read
    plan.roles[1] = "piece"
    assert fresh_capture_shifts(plan, names, hosted, segment_of, clean, {1: far}) is None
    with pytest.raises(ValueError, match="one host flag"):
        fresh_capture_shifts(plan, names, hosted[:5], segment_of, clean, {})
