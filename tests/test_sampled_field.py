"""The sampled per-kernel pass on event streams recorded on an H200, against CUPTI's kernels of the same runs.

tests/fixtures/field/sampled_h200.json.gz holds three cells of the 13:17 UTC matrix of docs/performance.md
(llama-3-8b full and piecewise at batch 1, llama-3.2-1b full at batch 64; PDL on): every sampled step's end
events as they ran, the plan, the clean step timed in each cycle, and CUPTI's kernels of eight clean steps.
chain_h200.json.gz holds a graph of 120 identical kernels through the pass at reach 2 and at reach 4.
sampled_refs_h200.json.gz holds three cells of a later recording (the 14:02 UTC matrix) with clean steps timed
among the variants, one where the eager host moved between speeds and two where it held still.
sampled_shift_h200.json.gz holds one cell with the end shifts the pass measured. sampled_cupti_h200.json.gz holds
two cells of a pass whose cycle also ran again while CUPTI ran, read by the same events. sampled_head_h200.json.gz
holds a piecewise cell with the head variant past the first graph piece. sampled_anchor_h200.json.gz holds two
cells with CUPTI's idle after every anchor of the CUPTI cycle's far and near steps. sampled_overhead_h200.json.gz
holds the six eager cells of the 18:58 UTC matrix, each sampled step with its clean reference, for the overhead
budget. sampled_capture_h200.json.gz holds four piecewise cells with CUPTI's clean steps in two captures of the
same graphs; sampled_head_effect_h200.json.gz the piecewise head variant's readings with and without CUPTI;
sampled_start_shift_h200.json.gz CUPTI's clean steps and the CUPTI cycle's steps around every timed end. The
reference values here are
computed with numpy from the raw streams, not with launchprobe's code; the stitching is launchprobe's.
Provenance is inside each file.
"""

from __future__ import annotations

import gzip
import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pass_halves import random_halves
from scipy import stats

from launchprobe.analysis import sampled
from launchprobe.analysis.kernel_gaps import OpTiming

FIXTURES = Path(__file__).parent / "fixtures" / "field"


@cache
def _load(name: str) -> dict[str, Any]:
    return json.loads(gzip.decompress((FIXTURES / name).read_bytes()))


def _cell(mode: str, bucket: int, n_ops: int, fixture: str = "sampled_h200.json.gz") -> dict[str, Any]:
    for cell in _load(fixture)["cells"]:
        if (cell["mode"], cell["bucket"], len(cell["names"])) == (mode, bucket, n_ops):
            return cell
    raise KeyError((mode, bucket, n_ops))


CELLS = [("full", 1, 323), ("piecewise", 1, 323), ("full", 64, 163)]


def _stitch(cell: dict[str, Any]) -> sampled.Stitched:
    names, layers, hosts = cell["names"], cell["layers"], cell["host_launched"]
    ops = [OpTiming(name, layer, host) for name, layer, host in zip(names, layers, hosts)]
    raw = cell["plan"]
    plan = sampled.Plan(len(ops), raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
    steps = [sampled.SampledStep(v, length, {int(op): at for op, at in ends}) for v, length, ends, *_ in cell["steps"]]
    return sampled.stitch(ops, steps, plan, cell["durations"])


def _numpy_gaps(cell: dict[str, Any]) -> list[float]:
    """Each op's gap from the raw streams: medians of the far and near differences (and across the boundary for
    op 0), rounded as the pass rounds them, less the op's duration."""
    n, reach = len(cell["names"]), cell["reach"]
    far: dict[int, list[int]] = {}
    near: dict[int, list[int]] = {}
    solo: dict[int, list[int]] = {}
    wrap_far: list[int] = []
    wrap_near: list[int] = []
    steps = cell["steps"]
    for k, (_, length, ends) in enumerate(steps):
        at = {int(op): t for op, t in ends}
        ops = sorted(at)
        if len(ops) == 1 and ops[0] == n - reach:  # the wrap's anchor: its far end is op 0 of the next step
            after = {int(op): t for op, t in steps[k + 1][2]}
            wrap_far.append(length - at[n - reach] + after[0])
        elif len(ops) == 1:
            solo.setdefault(ops[0], []).append(at[ops[0]])
        elif ops == [n - reach, n - 1]:
            wrap_near.append(at[n - 1] - at[n - reach])
        else:
            for j, target in zip(ops[0::2], ops[1::2]):
                (far if target - j == reach else near).setdefault(j, []).append(at[target] - at[j])
    med = lambda values: round(float(np.median(values)))  # noqa: E731
    dur = cell["durations"]
    head = med(solo[0]) - dur[0]
    tail = med(wrap_far) - med(wrap_near) - dur[0] - head  # the boundary, measured across it, less the head
    noise = float(np.hypot.reduce([_median_error(x) for x in (wrap_far, wrap_near, solo[0])]))
    assert abs(tail) <= 3 * noise  # within 3 sigma of zero in these cells (a kept one closes the step alone)
    gaps = [float(head)]
    gaps += [float(med(solo[i]) - med(solo[i - 1]) - dur[i]) for i in range(1, reach)]
    gaps += [float(med(far[i - reach]) - med(near[i - reach]) - dur[i]) for i in range(reach, n)]
    return gaps


def _median_error(values: list[int]) -> float:
    """Standard error of a median of normal samples: 1.2533 sigma / sqrt(N), sigma from the IQR (/1.349)."""
    q1, q3 = np.percentile(values, [25, 75])
    return 1.2533 * float(q3 - q1) / 1.349 / len(values) ** 0.5


def _cupti_ops(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every op in every clean CUPTI step: its first kernel's start to its last kernel's end."""
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64)  # steps x kernels x 2
    edges = np.cumsum([0, *cell["counts"]])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    return starts, ends


@pytest.mark.parametrize("key", CELLS)
def test_recorded_streams_stitch_to_the_gaps_numpy_computes(key: tuple[str, int, int]) -> None:
    cell = _cell(*key)
    stitched = _stitch(cell)
    assert [r["gap_before_ns"] for r in stitched.rows] == pytest.approx(_numpy_gaps(cell), abs=1)
    periods = sum(r["gap_before_ns"] + r["duration_ns"] for r in stitched.rows)
    assert stitched.step_ns == periods + stitched.tail_ns  # the ops' periods and a kept tail, no step's length
    assert stitched.gap_total_ns == stitched.step_ns - sum(cell["durations"])
    # the pass that recorded the cell took the tail as measured, always
    moved = (stitched.tail_measured_ns or 0) - stitched.tail_ns
    recorded = cell["result"]["step_ns"], cell["result"]["gap_total_ns"]
    assert (stitched.step_ns + moved, stitched.gap_total_ns + moved) == recorded


@pytest.mark.parametrize("key", CELLS)
def test_recorded_steps_add_up_to_the_clean_step(key: tuple[str, int, int]) -> None:
    # the stitched step, a sum of ~320 local differences, against the clean step timed in the same cycles
    cell = _cell(*key)
    clean = float(np.median(cell["clean_in_cycles"]))
    assert abs(_stitch(cell).step_ns / clean - 1) <= 0.02


@pytest.mark.parametrize("key", [("full", 1, 323), ("full", 64, 163)])
def test_recorded_gap_total_matches_the_clean_steps(key: tuple[str, int, int]) -> None:
    # signed gap total against the clean step less CUPTI's op durations (numpy, from CUPTI's kernels); the
    # tolerance is the issue's: 10% of the clean idle (clean step less CUPTI's busy) or 50 us
    cell = _cell(*key)
    starts, ends = _cupti_ops(cell)
    durations = np.median(ends - starts, axis=0)
    assert durations.round() == pytest.approx(cell["durations"], abs=1)  # the pass used CUPTI's medians
    clean = float(np.median(cell["clean_in_cycles"]))
    busy = []
    for s, e in zip(starts, ends):  # union of one step's op intervals
        order = np.argsort(s)
        total, reach_end = 0, -(1 << 62)
        for a, b in zip(s[order], e[order]):
            total += max(0, b - max(a, reach_end))
            reach_end = max(reach_end, b)
        busy.append(total)
    clean_idle = clean - float(np.median(busy))
    tolerance = max(50_000.0, 0.1 * clean_idle)
    assert abs(_stitch(cell).gap_total_ns - (clean - durations.sum())) <= tolerance


def test_pdl_shift_moves_gaps_between_neighbours_and_keeps_their_sum() -> None:
    # llama-3.2-1b full graph at batch 64: the event after kv_write stops attention's early launch, the event
    # after attention stops o_proj's. Per layer, the stitched gap before attention reads long and the one before
    # o_proj short against CUPTI's clean steps; the two together are close (docs/gaps.md, what events cannot see)
    cell = _cell("full", 64, 163)
    rows = _stitch(cell).rows
    starts, ends = _cupti_ops(cell)
    cupti_gap = np.median(starts[:, 1:] - np.maximum.accumulate(ends, axis=1)[:, :-1], axis=0)
    error = {i: rows[i]["gap_before_ns"] - cupti_gap[i - 1] for i in range(1, len(rows))}
    attention = [i for i, r in enumerate(rows) if r["op"] == "attention"]
    assert all(rows[i + 1]["op"] == "o_proj" for i in attention)
    long = statistics.median(error[i] for i in attention)
    short = statistics.median(error[i + 1] for i in attention)
    together = statistics.median(error[i] + error[i + 1] for i in attention)
    assert long > 2_000 and short < -2_000
    assert abs(together) < 0.25 * min(long, -short)


def test_reach_4_measures_past_the_refill_that_biases_reach_2() -> None:
    # 120 identical ~1 us kernels in one graph: the stitched step against the clean step timed in the same cycles
    runs = {c["reach"]: c for c in _load("chain_h200.json.gz")["chains"]}
    excess = {}
    for reach, run in runs.items():
        n = len(run["durations"])
        ops = [OpTiming(f"k{i % 10}", i // 10, False) for i in range(n)]
        plan = sampled.Plan(n, run["plan"]["spacing"], run["plan"]["variants"], run["plan"]["roles"], reach)
        steps = [sampled.SampledStep(v, length, {int(o): t for o, t in ends}) for v, length, ends, *_ in run["steps"]]
        step = sampled.stitch(ops, steps, plan, run["durations"]).step_ns
        excess[reach] = (step - float(np.median(run["clean_in_cycles"]))) / n
    assert excess[2] > 150  # ns a gap (229 on the H200)
    assert abs(excess[4]) < 30  # (4.5)


# ------------------------------------------------------------------------------------------------------------------
# Clean references among the variants (sampled_refs_h200.json.gz: a recording with a clean block before every 8
# variants of a cycle; on that machine the 1B eager host moved between speeds, the 8B cells' host held still)


def _ref_cell(mode: str, bucket: int, n_ops: int) -> dict[str, Any]:
    return _cell(mode, bucket, n_ops, "sampled_refs_h200.json.gz")


REF_CELLS = [("eager", 8, 163), ("eager", 1, 323), ("piecewise", 8, 323)]


def _ref_steps(cell: dict[str, Any]) -> list[sampled.SampledStep]:
    return _ref_steps_of(cell["steps"])


def _ref_steps_of(steps: list[Any]) -> list[sampled.SampledStep]:
    return [sampled.SampledStep(v, length, {int(o): t for o, t in ends}, ref) for v, length, ends, ref in steps]


def _ref_stitch(cell: dict[str, Any], scaled: bool) -> sampled.Stitched:
    ops = [OpTiming(n, layer, h) for n, layer, h in zip(cell["names"], cell["layers"], cell["host_launched"])]
    raw = cell["plan"]
    plan = sampled.Plan(len(ops), raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
    clean = float(np.median(cell["clean_in_cycles"])) if scaled else None
    return sampled.stitch(ops, _ref_steps(cell), plan, cell["durations"], clean)


def _numpy_total_noise(cell: dict[str, Any]) -> float:
    """Independently, the gap total's standard error from the raw streams: the step is op r - 1's solo end (the
    solo ends before it telescope), then per later op a far difference less a near one, each median's error from
    its own steps (no tail is kept in these cells: ``_numpy_gaps`` checks it)."""
    n, reach = len(cell["names"]), cell["reach"]
    far: dict[int, list[int]] = {}
    near: dict[int, list[int]] = {}
    last_solo: list[int] = []
    for _, _, ends, *_ in cell["steps"]:
        at = {int(op): t for op, t in ends}
        ops = sorted(at)
        if ops == [reach - 1]:
            last_solo.append(at[reach - 1])
        elif len(ops) > 1 and ops != [n - reach, n - 1]:
            for j, target in zip(ops[0::2], ops[1::2]):
                (far if target - j == reach else near).setdefault(j, []).append(at[target] - at[j])
    errors = [_median_error(last_solo)]
    errors += [float(np.hypot(_median_error(far[j]), _median_error(near[j]))) for j in range(n - reach)]
    return float(np.hypot.reduce(errors))


@pytest.mark.parametrize("key", REF_CELLS)
def test_the_gap_totals_error_from_the_streams_and_from_halves_of_the_pass(key: tuple[str, int, int]) -> None:
    """The stitched gap total's standard error (``gap_total_noise_ns``) on recorded passes, one of them on an eager
    host that moved 60%: against numpy's from the same streams, and against the spread of the totals stitched from
    two halves of the pass's cycles (30 random halvings, numpy's seed): the error's meaning, not its arithmetic."""
    cell = _ref_cell(*key)
    stitched = _ref_stitch(cell, scaled=False)
    assert stitched.gap_total_noise_ns == pytest.approx(_numpy_total_noise(cell), rel=1e-3)
    ops = [OpTiming(n, layer, h) for n, layer, h in zip(cell["names"], cell["layers"], cell["host_launched"])]
    raw = cell["plan"]
    plan = sampled.Plan(len(ops), raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
    differences = []
    for parts in random_halves(cell["steps"], 30):
        totals = [sampled.stitch(ops, _ref_steps_of(part), plan, cell["durations"]).gap_total_ns for part in parts]
        differences.append(totals[0] - totals[1])
    # two halves' totals differ by about twice the whole pass's error (each half has half its steps)
    halves = float(np.std(differences)) / 2
    assert 0.5 * halves < stitched.gap_total_noise_ns < 2 * halves, (stitched.gap_total_noise_ns, halves)


@pytest.mark.parametrize("key", REF_CELLS)
def test_every_step_against_the_clean_steps_around_it(key: tuple[str, int, int]) -> None:
    cell = _ref_cell(*key)
    steps = cell["steps"]
    lengths = np.array([s[1] for s in steps], dtype=np.float64)
    references = np.array([s[3] for s in steps], dtype=np.float64)
    cleans = np.array(cell["clean_in_cycles"], dtype=np.float64)
    # numpy: each step's reference is the mean of two of the clean steps timed in its cycle
    pairs = {(a + b) / 2 for a, b in zip(cleans, cleans[1:])}
    assert all(r in pairs for r in references)
    ratios: dict[int, list[float]] = {}
    for (v, *_), ratio in zip(steps, lengths / references):
        ratios.setdefault(v, []).append(float(ratio))
    expected = {v: float(np.median(r)) - 1 for v, r in ratios.items()}
    got = sampled.local_overheads(_ref_steps(cell), float(np.median(cleans)))
    assert got.per_variant == pytest.approx(expected, abs=1e-12)
    assert got.pooled == pytest.approx(float(np.median(lengths / references)) - 1, abs=1e-12)
    plain = cell["plan"]["roles"].index("plain")
    assert abs(got.per_variant[plain]) < 0.01  # the event-free variant costs nothing against its references
    p10, p50, p90 = np.percentile(cleans, [10, 50, 90])
    assert sampled.clean_spread(list(cleans)) == pytest.approx((p90 - p10) / p50)


def _standout_p_numpy(labels: np.ndarray, ratios: np.ndarray, shuffles: int, seed: int) -> float:
    """Independently: scipy's average ranks, each variant's mean rank standardized by its count, the highest of
    them against shuffled labels (numpy, its own seed)."""
    ranks = stats.rankdata(ratios)
    n = len(ratios)
    variants = np.unique(labels)

    def highest(lab: np.ndarray) -> float:
        zs = []
        for v in variants:
            r = ranks[lab == v]
            sd = np.sqrt((n * n - 1) / 12 * (n - len(r)) / (len(r) * (n - 1)))
            zs.append((r.mean() - (n + 1) / 2) / sd)
        return max(zs)

    measured = highest(labels)
    rng = np.random.default_rng(seed)
    hits = sum(highest(rng.permutation(labels)) >= measured - 1e-9 for _ in range(shuffles))
    return (1 + hits) / (1 + shuffles)


@pytest.mark.parametrize("key", REF_CELLS)
def test_no_variant_stands_out_on_the_moving_eager_hosts_and_one_does_in_piecewise(key: tuple[str, int, int]) -> None:
    # 14:02 on the H200: eager 1B b8 (host moving 50%+) and 8B b1; piecewise 8B b8 (steady), whose densest
    # variants carry more event nodes than the others
    cell = _ref_cell(*key)
    steps = cell["steps"]
    labels = np.array([s[0] for s in steps])
    ratios = np.array([s[1] / s[3] for s in steps], dtype=np.float64)
    got = sampled.local_overheads(_ref_steps(cell), float(np.median(cell["clean_in_cycles"])))
    independent = _standout_p_numpy(labels, ratios, 200, seed=99)
    if key[0] == "eager":
        assert got.standout_p > 0.2 and independent > 0.2  # far from the 0.05 line, by either shuffle
        assert got.basis == "pooled: no variant stands out"
        # the old rule could not decide: the slowest variant's 5-10 steps leave it an error over 1%
        assert got.slowest_error > 0.01 and got.slowest > 0.02
        assert got.shuffled_slowest_q95 is not None and got.slowest <= got.shuffled_slowest_q95
        assert got.within(sampled.OVERHEAD_BUDGET) is True
        assert got.pooled + 2 * got.pooled_error <= sampled.OVERHEAD_BUDGET
    else:
        assert got.standout_p < 0.01 and independent < 0.01
        assert got.basis == "slowest variant" and got.within(sampled.OVERHEAD_BUDGET) is True
    assert abs(got.standout_p - independent) < 0.15


def _overhead_cell(shape: str, bucket: int) -> dict[str, Any]:
    for cell in _load("sampled_overhead_h200.json.gz")["cells"]:
        if (cell["shape"], cell["bucket"]) == (shape, bucket):
            return cell
    raise KeyError((shape, bucket))


@pytest.mark.parametrize("bucket", [1, 8, 64])
@pytest.mark.parametrize("shape", ["llama-3.2-1b", "llama-3-8b"])
def test_the_budget_on_the_1858_eager_cells(shape: str, bucket: int) -> None:
    # the six eager cells of the 18:58 matrix: hosts that moved 25-57% (all but 8B b64, which held still)
    cell = _overhead_cell(shape, bucket)
    labels = np.array([s[0] for s in cell["steps"]])
    ratios = np.array([s[1] / s[2] for s in cell["steps"]], dtype=np.float64)
    steps = [sampled.SampledStep(v, length, {}, ref) for v, length, ref in cell["steps"]]
    got = sampled.local_overheads(steps, float(np.median(cell["clean_in_cycles"])))
    # numpy: the pooled median and each variant's
    assert got.pooled == pytest.approx(float(np.median(ratios)) - 1, abs=1e-12)
    slowest = max(float(np.median(ratios[labels == v])) for v in np.unique(labels)) - 1
    assert got.slowest == pytest.approx(slowest, abs=1e-12)
    independent = _standout_p_numpy(labels, ratios, 200, seed=7)
    moved = sampled.clean_spread(cell["clean_in_cycles"]) > sampled.HOST_STEADY_SPREAD
    events = max(cell["events_per_variant"])
    if not moved:  # 8B b64: the densest variants (22 events) cost more, and stand out
        assert got.standout_p < 0.01 and independent < 0.01 and got.basis == "slowest variant"
        assert got.within(sampled.OVERHEAD_BUDGET) is True
        return
    assert got.none_stands_out and independent > 0.05  # neither shuffle finds a variant above the others
    assert got.shuffled_slowest_q95 is not None and got.slowest <= got.shuffled_slowest_q95 + 0.01
    if shape == "llama-3.2-1b" and bucket == 8:  # at most 2 events a variant, the slowest +24%: its noise
        assert events <= 2 and got.slowest > 0.2 and got.slowest - 2 * got.slowest_error > 0.02
    if got.pooled > sampled.OVERHEAD_BUDGET:  # 8B b1 (m = 23, 28 events a variant): the pooled +3% is over
        assert (shape, bucket) == ("llama-3-8b", 1) and got.within(sampled.OVERHEAD_BUDGET) is False
    else:
        assert got.within(sampled.OVERHEAD_BUDGET) is True


def test_a_moving_eager_host_is_read_at_the_clean_speed() -> None:
    # llama-3.2-1b eager b8: the clean steps timed among the variants spread by more than half their median
    cell = _ref_cell("eager", 8, 163)
    cleans = np.array(cell["clean_in_cycles"], dtype=np.float64)
    clean = float(np.median(cleans))
    assert sampled.clean_spread(list(cleans)) > 0.3
    clean_gaps = clean - sum(cell["durations"])  # numpy: the clean step less CUPTI's op durations
    unscaled, scaled = _ref_stitch(cell, False), _ref_stitch(cell, True)
    assert unscaled.step_ns / clean - 1 > 0.15  # every measurement at the speed the host had then
    assert abs(scaled.step_ns / clean - 1) < 0.06
    assert abs(scaled.gap_total_ns - clean_gaps) < 0.1 * clean_gaps < abs(unscaled.gap_total_ns - clean_gaps)


@pytest.mark.parametrize("key", [("eager", 1, 323), ("piecewise", 8, 323)])
def test_a_host_that_holds_still_is_not_moved_by_the_scaling(key: tuple[str, int, int]) -> None:
    cell = _ref_cell(*key)
    clean = float(np.median(cell["clean_in_cycles"]))
    assert sampled.clean_spread(cell["clean_in_cycles"]) < sampled.HOST_STEADY_SPREAD
    unscaled, scaled = _ref_stitch(cell, False), _ref_stitch(cell, True)
    assert abs(scaled.step_ns - unscaled.step_ns) / clean < 0.003
    assert abs(scaled.step_ns / clean - 1) < 0.01
    tolerance = max(50_000, 0.1 * (clean - sum(cell["durations"])))
    assert abs(scaled.gap_total_ns - (clean - sum(cell["durations"]))) < tolerance


# ------------------------------------------------------------------------------------------------------------------
# End shifts (sampled_shift_h200.json.gz: llama-3.2-1b full b64 with PDL, where the event after attention moves its
# end by about 5 us; the shifts as the pass measured them from the variants' CUPTI kernels, one step each)


def test_end_shifts_put_the_pdl_overlapped_gaps_back_op_for_op() -> None:
    cell = _cell("full", 64, 163, "sampled_shift_h200.json.gz")
    n, names = len(cell["names"]), cell["names"]
    # numpy: CUPTI's clean gaps, each op from its first kernel's start to its last kernel's end (the counting
    # pass's kernels per op), the median over the 8 clean steps, per op class
    bounds = np.cumsum([0, *cell["counts"]])
    steps = np.array(cell["cupti_kernels"], dtype=np.float64)  # steps x kernels x (start, end)
    starts = steps[:, bounds[:-1], 0]
    ends = np.stack([steps[:, bounds[k] : bounds[k + 1], 1].max(axis=1) for k in range(n)], axis=1)
    cupti_gaps = np.median(starts[:, 1:] - ends[:, :-1], axis=0)  # before ops 1 .. n-1

    def class_diffs(shifts: list[int | None] | None) -> dict[str, float]:
        ops = [OpTiming(a, b, h) for a, b, h in zip(names, cell["layers"], cell["host_launched"])]
        raw = cell["plan"]
        plan = sampled.Plan(n, raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
        picture = sampled.stitch(ops, _ref_steps(cell), plan, cell["durations"], cell["clean_ns"], shifts)
        gaps = np.array([r["gap_before_ns"] for r in picture.rows[1:]], dtype=np.float64)
        out = {}
        for name in set(names[1:]):
            members = [i - 1 for i in range(1, n) if names[i] == name]
            out[name] = float(np.median(gaps[members]) - np.median(cupti_gaps[members])) / 1e3
        return out

    shifts = cell["end_shifts"]
    attention = [shifts[i] for i in range(n) if names[i] == "attention"]
    # attention's CUPTI duration is over 3 us longer in the variant steps with an event after it than in the clean
    # steps: what the event after it does to its end
    assert statistics.median(attention) < -3_000
    plain, shifted = class_diffs(None), class_diffs(shifts)
    assert abs(plain["attention"]) > 3 and abs(plain["o_proj"]) > 3  # the PDL shift, op for op
    assert abs(shifted["attention"]) < 1 and abs(shifted["o_proj"]) < 1
    assert sum(abs(d) <= 1 for d in shifted.values()) >= sum(abs(d) <= 1 for d in plain.values()) + 3


# What CUPTI does to the gap it is the reference for (sampled_cupti_h200.json.gz: llama-3.2-1b full b8 and
# llama-3-8b full b1, PDL on; the pass's own cycles and the same pass's cycle run again while CUPTI ran, both read
# by the same events)


def _cupti_ops_relative(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64) + np.asarray(cell["cupti_step_origins"])[:, None, None]
    edges = np.cumsum([0, *cell["counts"]])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    return starts, ends


def _last_op_gap(cell: dict[str, Any], steps: list[Any]) -> tuple[int, int]:
    """numpy: the gap before the last op, far difference less near (anchor n - 1 - r) less its CUPTI duration,
    no end shifts; and how many far steps it had."""
    n, reach = len(cell["names"]), cell["reach"]
    anchor = n - 1 - reach
    far, near = [], []
    for _, _, ends, *_ in steps:
        at = {int(op): t for op, t in ends}
        if anchor in at and n - 1 in at:
            far.append(at[n - 1] - at[anchor])
        elif anchor in at and n - 2 in at:
            near.append(at[n - 2] - at[anchor])
    return round(float(np.median(far))) - round(float(np.median(near))) - cell["durations"][n - 1], len(far)


@pytest.mark.parametrize("key", [("full", 8, 163), ("full", 1, 323)])
def test_cupti_lengthens_the_last_ops_gap_that_it_is_the_reference_for(key: tuple[str, int, int]) -> None:
    cell = _cell(*key, fixture="sampled_cupti_h200.json.gz")
    n = len(cell["names"])
    starts, ends = _cupti_ops_relative(cell)
    cupti_gap = float(np.median(starts[:, n - 1] - ends[:, n - 2]))  # CUPTI's clean steps: lm_head after final_norm
    assert np.median(ends - starts, axis=0).round() == pytest.approx(cell["durations"], abs=1)
    plain, runs = _last_op_gap(cell, cell["steps"])
    under, under_runs = _last_op_gap(cell, cell["cupti_steps"])
    assert runs >= 64 and under_runs == 25  # the extra rounds of the one-per-step variants
    # the same events read the last op's far difference 0.8 us or more longer while CUPTI ran
    assert under - plain >= 800
    # with the end shifts the pass measured (from the CUPTI cycle): like for like within 1 us of CUPTI's gap,
    # the pass's own steps more than 1 us short of it
    shift = cell["end_shifts"][n - 1] - cell["end_shifts"][n - 2]
    assert abs(under + shift - cupti_gap) <= 1_000 < abs(plain + shift - cupti_gap)
    # launchprobe's stitching of both step sets gives the numpy gap, unshifted
    ops = [OpTiming(a, b, h) for a, b, h in zip(cell["names"], cell["layers"], cell["host_launched"])]
    raw = cell["plan"]
    plan = sampled.Plan(n, raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
    for steps, expected in ((cell["steps"], plain), (cell["cupti_steps"], under)):
        picture = sampled.stitch(ops, _ref_steps_of(steps), plan, cell["durations"])
        assert picture.rows[-1]["gap_before_ns"] == pytest.approx(expected, abs=1)


# The piecewise head (sampled_head_h200.json.gz: llama-3.2-1b piecewise b8 at 17:31 UTC, with the head variant
# after the plain one and the wrap_head variant after wrap_far)


def _ends_by_variant(cell: dict[str, Any], scale: bool) -> dict[tuple[int, int], list[int]]:
    """numpy-side: every recorded end of every single-event step, read at the clean speed as the pass reads them."""
    out: dict[tuple[int, int], list[int]] = {}
    for v, _, ends, reference in cell["steps" if scale else "cupti_steps"]:
        factor = cell["clean_step_ns"] / reference if scale and reference else 1.0
        for op, at in ends:
            out.setdefault((v, int(op)), []).append(round(at * factor))
    return out


def test_the_piecewise_head_is_the_same_past_a_clean_or_a_recaptured_first_piece_and_short_of_cuptis() -> None:
    cell = _load("sampled_head_h200.json.gz")["cells"][0]
    roles, variants = cell["plan"]["roles"], cell["plan"]["variants"]
    head, wrap_head = roles.index("head"), roles.index("wrap_head")
    assert variants[head] == variants[wrap_head] == [4] and cell["names"][4] == "kv_write"
    assert not any(cell["host_launched"][:4]) and cell["host_launched"][4]
    # the head variant ran right after the plain variant, every time
    steps = cell["steps"]
    assert all(steps[k - 1][0] == roles.index("plain") for k, s in enumerate(steps) if s[0] == head)
    ends = _ends_by_variant(cell, scale=True)
    med = lambda values: round(float(np.median(values)))  # noqa: E731
    solo = {variants[v][0]: v for v, role in enumerate(roles) if role == "solo"}
    dur, shift = cell["durations"], [s or 0 for s in cell["end_shifts"]]
    # numpy: the gaps before ops 1-3 from the solo ends (recaptured first piece), before op 4 from the far and near
    # differences anchored at op 0
    gaps = [med(ends[(solo[i], i)]) - dur[i] - med(ends[(solo[i - 1], i - 1)]) + shift[i] - shift[i - 1]
            for i in range(1, 4)]  # fmt: skip
    far: list[int] = []
    near: list[int] = []
    for v, _, at, reference in steps:
        marks = dict((int(op), t) for op, t in at)
        factor = cell["clean_step_ns"] / reference
        if roles[v] in ("far", "near") and 0 in marks and variants[v][1] in (3, 4):
            (far if roles[v] == "far" else near).append(round((marks[variants[v][1]] - marks[0]) * factor))
    gaps.append(med(far) - med(near) - dur[4] + shift[4] - shift[3])
    past_piece = med(ends[(head, 4)]) + shift[4] - sum(dur[:5]) - sum(gaps)  # the first piece the clean runner's
    recaptured = med(ends[(solo[0], 0)]) + shift[0] - dur[0]  # op 0's end in a first piece captured afresh
    # launchprobe's stitching gives the numpy head (its tail taken as 0, as recorded)
    ops = [OpTiming(a, b, h) for a, b, h in zip(cell["names"], cell["layers"], cell["host_launched"])]
    plan = sampled.Plan(len(ops), cell["plan"]["spacing"], variants, roles, cell["reach"])
    picture = sampled.stitch(ops, _ref_steps_of(steps), plan, dur, cell["clean_step_ns"], cell["end_shifts"])
    assert picture.tail_ns == 0 and picture.rows[0]["gap_before_ns"] == pytest.approx(past_piece, abs=2)
    # the events read the same head past a clean first piece as in a recaptured one, within 0.5 us
    assert abs(past_piece - recaptured) <= 500, (past_piece, recaptured)
    # CUPTI's clean steps put the gap into a step (last kernel's end to the first kernel's start) more than 1 us
    # later: on the same kind of step the two disagree (docs/gaps.md); in full-graph steps they do not
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64)
    cupti_gap = float(np.median(kernels[1:, 0, 0] - kernels[:-1, -1, 1]))
    assert cupti_gap - past_piece > 1_000, (cupti_gap, past_piece)


# The anchor effect under CUPTI (sampled_anchor_h200.json.gz: llama-3.2-1b full b8 and llama-3-8b piecewise b8 of
# the 18:36 UTC matrix)


def _numpy_class_gaps(cell: dict[str, Any]) -> dict[str, float]:
    """CUPTI's clean gap per op class: kernels grouped into ops by the counts, each op's start less the latest end
    before it in the step, the median over steps per op, then over the class's ops."""
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64)  # steps x kernels x (start, end)
    bounds = np.cumsum([0, *cell["counts"]])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    gaps = np.median(starts[:, 1:] - np.maximum.accumulate(ends, axis=1)[:, :-1], axis=0)
    op0 = np.median(starts[1:, 0] - ends[:-1].max(axis=1))
    per_op = [float(op0), *map(float, gaps)]
    names = cell["names"]
    return {c: float(np.median([per_op[i] for i in range(len(names)) if names[i] == c])) for c in dict.fromkeys(names)}


@pytest.mark.parametrize(("mode", "n_ops"), [("full", 163), ("piecewise", 323)])
def test_cuptis_anchor_effect_taken_out_the_like_for_like_reading_meets_cuptis_clean_gaps(
    mode: str, n_ops: int
) -> None:
    cell = _cell(mode, 8, n_ops, "sampled_anchor_h200.json.gz")
    names, hosted, reach = cell["names"], cell["host_launched"], cell["reach"]
    raw = cell["plan"]
    plan = sampled.Plan(n_ops, raw["spacing"], raw["variants"], raw["roles"], reach)
    # numpy: per anchor with an event node after it, far steps' median idle less near steps', by the class measured
    idle: dict[tuple[str, int], list[int]] = {}
    for v, values in cell["anchor_idle"]:
        for j, ns in zip(raw["variants"][v][0::2], values):
            idle.setdefault((raw["roles"][v], j), []).append(ns)
    by_class: dict[str, list[float]] = {}
    for (role, j), far in idle.items():
        if role == "far" and ("near", j) in idle and j + reach < n_ops and not hosted[j] and not hosted[j + 1]:
            by_class.setdefault(names[j + reach], []).append(np.median(far) - np.median(idle[("near", j)]))
    expected = {c: round(float(np.median(v))) for c, v in by_class.items()}
    # launchprobe's, from op intervals carrying those idles
    intervals: dict[int, list[list[tuple[int, int]]]] = {}
    for v, values in cell["anchor_idle"]:
        step = [(0, 0)] * n_ops
        for j, ns in zip(raw["variants"][v][0::2], values):
            if ns is not None:
                step[j], step[j + 1] = (0, 0), (ns, ns)
        intervals.setdefault(v, []).append(step)
    per_op, rows = sampled.anchor_effects(plan, names, hosted, intervals)
    assert {r["op"]: r["effect_ns"] for r in rows} == expected
    # the far pairs' anchors idle longer: every graphed class measured, 0.1-0.8 us on the H200 (the median 0.3-0.5)
    assert len(expected) >= 9 and statistics.median(expected.values()) > 250
    # the cycle read under CUPTI, stitched with and without the effect, against CUPTI's clean gaps per class
    ops = [OpTiming(a, b, h) for a, b, h in zip(names, cell["layers"], hosted)]
    steps = _ref_steps_of(cell["cupti_steps"])
    cupti = _numpy_class_gaps(cell)
    within = {}
    for label, bias in (("landed", None), ("taken out", per_op)):
        stitched = sampled.stitch(ops, steps, plan, cell["durations"], None, cell["end_shifts"], pair_bias_ns=bias)
        reading = {c: statistics.median(r["gap_before_ns"] for r in stitched.rows if r["op"] == c) for c in cupti}
        within[label] = sum(abs(reading[c] - cupti[c]) <= max(1_000, 0.15 * abs(cupti[c])) for c in cupti)
        over = stitched.step_ns / statistics.median(cell["cupti_step_ns"]) - 1
        # the paired gaps read long by the effect: the step 2-4% over CUPTI's clean one, within 1.5% without it
        assert (abs(over) < 0.015) if bias is not None else (over > 0.015), (label, over)
    assert within["taken out"] == len(cupti) > within["landed"], within


# Two captures of the same clean graphs under CUPTI (sampled_capture_h200.json.gz: llama-3.2-1b piecewise b1, b8,
# b64 and llama-3-8b piecewise b8 of the 23:35 UTC run, with the pass's capture check as it ran)


def _capture_kernels(cell: dict[str, Any], which: str) -> np.ndarray:
    """steps x kernels x (start, end), ns from the first kernel: stored as the differences of the flattened array."""
    return np.cumsum(np.asarray(cell[f"{which}_kernel_deltas"], dtype=np.int64)).reshape(cell[f"{which}_shape"])


def _numpy_op_gaps(kernels: np.ndarray, counts: list[int]) -> np.ndarray:
    """Per op, the median over steps of its first kernel's start less the latest end before it (op 0: in the step
    before)."""
    bounds = np.cumsum([0, *counts])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    inside = np.median(starts[:, 1:] - np.maximum.accumulate(ends, axis=1)[:, :-1], axis=0)
    return np.concatenate([[np.median(starts[1:, 0] - ends[:-1].max(axis=1))], inside])


def _numpy_capture_shifts(cell: dict[str, Any]) -> dict[str, float]:
    first = _numpy_op_gaps(_capture_kernels(cell, "cupti"), cell["counts"])
    second = _numpy_op_gaps(_capture_kernels(cell, "second"), cell["counts"])
    names = cell["names"]
    classes = dict.fromkeys(names[1:])
    return {c: float(np.median([second[i] - first[i] for i in range(1, len(names)) if names[i] == c])) for c in classes}


CAPTURE_CELLS = [("llama-3.2-1b", 1), ("llama-3.2-1b", 8), ("llama-3.2-1b", 64), ("llama-3-8b", 8)]


def _capture_cell(shape: str, bucket: int) -> dict[str, Any]:
    cells = _load("sampled_capture_h200.json.gz")["cells"]
    return next(c for c in cells if (c["shape"], c["bucket"]) == (shape, bucket))


def _capture_rows(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """launchprobe's capture check on the two captures' kernels: CUPTI's clean references, then the class shifts."""
    refs = []
    for which in ("cupti", "second"):
        kernels = [[(int(s), int(e)) for s, e in step] for step in _capture_kernels(cell, which)]
        refs.append(sampled.cupti_reference(kernels, cell[f"{which}_step_ns"], cell["counts"]))
    first, second = refs[0].op_gap_ns, refs[1].op_gap_ns
    assert first is not None and second is not None  # grouped by the counts
    return sampled.capture_shifts(cell["names"], first, second, refs[0].op_gap_error_ns, refs[1].op_gap_error_ns)


def _numpy_moves(cell: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per class: the median per-op shift and its standard error, from the ops' differences (4 ops or more) or
    from the one op's medians over steps; numpy alone."""

    def per_step(which: str) -> np.ndarray:  # steps x ops-after-the-first: each op's gap in each step
        kernels, bounds = _capture_kernels(cell, which), np.cumsum([0, *cell["counts"]])
        starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
        ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
        return starts[:, 1:] - np.maximum.accumulate(ends, axis=1)[:, :-1]

    def error(x: np.ndarray) -> float:
        q1, q3 = np.percentile(x, [25, 75])
        return float(1.2533 * (q3 - q1) / 1.349 / np.sqrt(len(x)))

    first, second = per_step("cupti"), per_step("second")
    names = cell["names"][1:]
    out = {}
    for c in dict.fromkeys(names):
        cols = [j for j, n in enumerate(names) if n == c]
        diffs = np.median(second[:, cols], axis=0) - np.median(first[:, cols], axis=0)
        if len(cols) >= 4:
            out[c] = (float(np.median(diffs)), error(diffs))
        else:
            out[c] = (float(diffs[0]), float(np.hypot(error(first[:, cols[0]]), error(second[:, cols[0]]))))
    return out


@pytest.mark.parametrize(("shape", "bucket"), CAPTURE_CELLS)
def test_a_capture_moves_a_class_beyond_its_error_and_the_piece_boundaries_by_most(shape: str, bucket: int) -> None:
    cell = _capture_cell(shape, bucket)
    truth = _numpy_moves(cell)
    rows = {r["op"]: r for r in _capture_rows(cell)}
    for c, (shift, error) in truth.items():
        assert rows[c]["shift_error_ns"] == pytest.approx(error, abs=1), (c, rows[c], error)
        move = abs(shift) > max(2 * error, 500) or rows[c]["beyond_bar"]
        assert rows[c]["moved"] == move and rows[c]["beyond_bar"] == (abs(shift) > 1_000), (c, rows[c], shift, error)
    names, hosted = cell["names"], cell["host_launched"]
    boundary = {names[i] for i in range(1, len(names)) if hosted[i] != hosted[i - 1]}
    # a class inside a graph piece or between two host launches moves by 0.2 us at most, whatever its error says
    assert all(abs(s) <= 200 for c, (s, _) in truth.items() if c not in boundary)
    if (shape, bucket) == ("llama-3.2-1b", 1):
        # both boundaries moved within the bar (0.70 and 0.94 us) and far beyond their errors (0.03 us): a move
        # between a piece start's two values that the bar alone did not see
        assert {c for c in boundary if rows[c]["moved"] and not rows[c]["beyond_bar"]} == {"kv_write", "o_proj"}
        assert all(700 - 10 <= abs(truth[c][0]) < 1_000 and abs(truth[c][0]) > 20 * truth[c][1] for c in boundary)


@pytest.mark.parametrize(("shape", "bucket"), CAPTURE_CELLS)
def test_the_capture_check_is_the_numpy_shift_between_the_two_captures_kernels(shape: str, bucket: int) -> None:
    cell = _capture_cell(shape, bucket)
    truth = _numpy_capture_shifts(cell)
    # what the pass reported on the GPU, and what launchprobe's code gives on the same kernels today
    recorded = {row["op"]: row["shift_ns"] for row in cell["capture_check"]["classes"]}
    rows = _capture_rows(cell)
    assert recorded.keys() == truth.keys() == {r["op"] for r in rows}
    assert all(abs(recorded[c] - truth[c]) <= 1 for c in truth), {c: (recorded[c], truth[c]) for c in truth}
    assert all(abs(r["shift_ns"] - truth[r["op"]]) <= 1 for r in rows)
    assert [r["op"] for r in rows if r["beyond_bar"]] == [c for c, s in truth.items() if abs(s) > sampled.OP_GAP_ABS_NS]


@pytest.mark.parametrize(("shape", "bucket"), CAPTURE_CELLS)
def test_a_capture_afresh_moves_cuptis_gaps_at_the_piece_boundaries_alone(shape: str, bucket: int) -> None:
    cell = _capture_cell(shape, bucket)
    shifts = {r["op"]: r["shift_ns"] for r in _capture_rows(cell)}
    names, hosted = cell["names"], cell["host_launched"]
    # a boundary: the op is launched otherwise than the one before it (graph piece to host launch, or back)
    boundary = {names[i] for i in range(1, len(names)) if hosted[i] != hosted[i - 1]}
    inside = {c: s for c, s in shifts.items() if c not in boundary}
    assert boundary == {"kv_write", "o_proj"} and len(inside) == 10  # embed, op 0, is the gap between steps
    assert max(map(abs, inside.values())) <= 200, inside
    if (shape, bucket) == ("llama-3.2-1b", 1):  # here the second capture moved both boundaries by 0.7-0.95 us
        assert min(abs(shifts[c]) for c in boundary) >= 3 * max(map(abs, inside.values())), shifts


# The piecewise head with and without CUPTI (sampled_head_effect_h200.json.gz: the six piecewise cells of the 23:35
# UTC run, the head variant timing the first piece's end by a host event after its clean replay)


@pytest.mark.parametrize("k", range(6))
def test_cupti_delays_the_first_piece_which_the_head_variant_sees_and_the_events_head_is_the_rest(k: int) -> None:
    cell = _load("sampled_head_effect_h200.json.gz")["cells"][k]
    first, head_end, last = (np.asarray(cell[key], dtype=np.int64) for key in
                             ("cupti_first_start_ns", "cupti_head_op_end_ns", "cupti_last_end_ns"))  # fmt: skip
    clean = np.asarray(cell["head_end_ns"])
    under = np.asarray(cell["head_end_under_cupti_ns"])
    # numpy: CUPTI's clean steps, from the step before's last kernel end: the gap into the step, the first piece's end
    cupti_gap, cupti_end = np.median(first[1:] - last[:-1]), np.median(head_end[1:] - last[:-1])
    assert cupti_gap == cell["cupti_gap_ns"]  # the pass's reference, as reported
    # under CUPTI the events put the head variant's end where CUPTI puts the clean steps' (within 0.3 us) ...
    assert abs(np.median(under) - cupti_end) <= 300, (np.median(under), cupti_end)
    # ... and without CUPTI 0.8 us or more sooner: what CUPTI does to the step's start
    effect = float(np.median(under) - np.median(clean))
    assert effect >= 800, effect
    # launchprobe's effect from the same steps
    op = cell["head_op"]
    plan = sampled.Plan(op + 1, 1, [[], [op]], ["plain", "head"])
    steps = [sampled.SampledStep(1, 0, {op: int(t)}) for t in clean]
    steps_under = [sampled.SampledStep(1, 0, {op: int(t)}) for t in under]
    measured = sampled.head_cupti_effect(plan, steps, steps_under)
    assert measured is not None and measured.effect_ns == pytest.approx(effect, abs=1) and measured.noise_ns > 0
    # beyond twice the rule's threshold in every cell (5-8 errors): the head's class is judged like for like
    assert measured.effect_ns > 2 * sampled.CUPTI_EFFECT_SIGMAS * measured.noise_ns, measured
    # the pass's clean head (less the tail it kept, -1.3 us in 8B b8) misses CUPTI's gap by 0.7 us or more; with
    # CUPTI's effect added it is within 0.5 us of it
    head = cell["events_head_gap_ns"] - cell["tail_ns"]
    assert abs(head - cupti_gap) >= 700 and abs(head + effect - cupti_gap) <= 500, (head, effect, cupti_gap)


# Where an event after an op moves its start (sampled_start_shift_h200.json.gz: three full-graph and two piecewise
# cells of the 2026-12-02 00:45 UTC run, CUPTI's clean steps and the CUPTI cycle's steps around each timed end)

START_CELLS = [("full", 8, 163), ("full", 1, 323), ("full", 8, 323), ("piecewise", 8, 163), ("piecewise", 1, 323)]


def _start_cell(mode: str, bucket: int, n_ops: int) -> dict[str, Any]:
    return _cell(mode, bucket, n_ops, "sampled_start_shift_h200.json.gz")


def _numpy_start_shifts(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """CUPTI's clean gap before each op (its start less the latest end before it; op groups from the counts) and
    each op's start shift: its gap in the cycle's steps that time its end, less the clean gap (nan: unmeasured)."""
    n, counts = len(cell["names"]), np.asarray(cell["counts"])
    flat = np.cumsum(np.asarray(cell["cupti_clean_kernels_diff_ns"], dtype=np.int64))
    kernels = flat.reshape(cell["cupti_clean_steps"], int(counts.sum()), 2)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    latest = np.maximum.accumulate(ends, axis=1)
    clean_gap = np.concatenate([[0.0], np.median(starts[:, 1:] - latest[:, :-1], axis=0)])
    per_op: dict[int, list[int]] = {}
    for _, i, start, *before in cell["cycle_marked_ops"]:
        per_op.setdefault(i, []).append(start - max(before))
    shift = np.full(n, np.nan)
    for i, gaps in per_op.items():
        shift[i] = np.median(gaps) - clean_gap[i]
    return clean_gap, shift


@pytest.mark.parametrize("where", START_CELLS)
def test_start_shifts_are_the_numpy_gaps_of_the_steps_that_time_an_end(where: tuple[str, int, int]) -> None:
    cell = _start_cell(*where)
    names, n = cell["names"], len(cell["names"])
    clean_gap, shift = _numpy_start_shifts(cell)
    # launchprobe's, each recorded step as a variant of its own that times op i alone, over whole-step intervals
    # (the ops before the recorded window end before it; those after are not read)
    rows = cell["cycle_marked_ops"]
    plan = sampled.Plan(n, 1, [[i] for _, i, *_ in rows], ["far"] * len(rows))
    steps: dict[int, list[list[tuple[int, int]]]] = {}
    for k, (_, i, start, *before) in enumerate(rows):
        lo = i - len(before)
        step = (
            [(-1, -1)] * lo
            + [(e - 1, e) for e in before]
            + [(start, start + 1)]
            + [(start + 2, start + 3)] * (n - i - 1)
        )
        steps[k] = [step]
    per_op, classes = sampled.start_shifts(plan, names, clean_gap.tolist(), steps)
    measured = [i for i in range(n) if not np.isnan(shift[i])]
    assert measured and [per_op[i] for i in measured] == [round(shift[i]) for i in measured]
    assert all(per_op[i] is None for i in range(n) if i not in measured)
    by_class = {c["op"]: c["shift_ns"] for c in classes}
    for name in set(names[i] for i in measured):
        assert by_class[name] == pytest.approx(np.median([round(shift[i]) for i in measured if names[i] == name]))


def _numpy_biases(cell: dict[str, Any]) -> dict[str, float]:
    """Per class, the median over its ops of the start shift less the predecessor's (numpy, both measured)."""
    names = cell["names"]
    _, shift = _numpy_start_shifts(cell)
    per_class: dict[str, list[float]] = {}
    for i in range(2, len(names)):
        if not (np.isnan(shift[i]) or np.isnan(shift[i - 1])):
            per_class.setdefault(names[i], []).append(shift[i] - shift[i - 1])
    return {name: float(np.median(values)) for name, values in per_class.items()}


IN_PIECE = ("attn_norm", "qkv", "rotary", "mlp_norm", "gate_up", "silu_mul", "down")


@pytest.mark.parametrize("where", START_CELLS)
def test_the_events_per_class_misses_follow_where_an_event_moves_an_ops_start(where: tuple[str, int, int]) -> None:
    cell = _start_cell(*where)
    bias = _numpy_biases(cell)
    checks = {o["op"]: o for o in cell["op_checks"] if o["op"] in bias and o["op"] not in ("final_norm", "lm_head")}
    miss = {op: o["events_gap_ns_median"] - o["cupti_gap_ns_median"] for op, o in checks.items()}
    # under CUPTI the PDL-launched norms and silu_mul (and attention, in full graph) start 0.4-0.8 us sooner with
    # an event after them; the rest within 0.15 us
    _, shift = _numpy_start_shifts(cell)
    by_class: dict[str, list[float]] = {}
    for i, name in enumerate(cell["names"]):
        if not np.isnan(shift[i]):
            by_class.setdefault(name, []).append(shift[i])
    moved = {name for name, values in by_class.items() if np.median(values) <= -350}
    pdl = {"attn_norm", "mlp_norm", "silu_mul"} | ({"attention"} if where[0] == "full" else set())
    assert pdl <= moved, moved
    if where[0] == "full":
        # every layer class's miss follows its bias: the pass's misses (recorded) against numpy's biases
        m, b = np.asarray(list(miss.values())), np.asarray([bias[op] for op in miss])
        assert np.corrcoef(m, b)[0, 1] >= 0.85
        assert np.sqrt(np.mean((m - b) ** 2)) <= 0.6 * np.sqrt(np.mean(m**2))
    else:
        # inside the graph pieces, every class the bias moves by 0.3 us or more misses CUPTI the same way; the piece
        # boundaries (kv_write after a piece, o_proj opening one) miss by more than it (docs/gaps.md)
        for op in IN_PIECE:
            if abs(bias[op]) >= 300:
                assert np.sign(miss[op]) == np.sign(bias[op]), (op, miss[op], bias[op])
        assert all(abs(miss[op] - bias[op]) >= 500 for op in ("kv_write", "o_proj"))
