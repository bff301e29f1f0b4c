"""The lab tool benchmarks/field/probe_kernels.py: its readings of a gap on constructed step timelines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "field" / "probe_kernels.py"


@pytest.fixture(scope="module")
def lab():
    spec = importlib.util.spec_from_file_location("probe_kernels_lab", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def timeline(gaps: list[float], durations: list[float]) -> tuple[list[float], list[float]]:
    """Clean starts and ends of a chain of ops, op 0 starting at 0."""
    starts, ends, t = [], [], 0.0
    for k, (g, d) in enumerate(zip(gaps, durations)):
        t += g if k else 0.0
        starts.append(t)
        t += d
        ends.append(t)
    return starts, ends


GAPS = [0.0, 400.0, -300.0, 650.0, 120.0, 900.0, -50.0, 300.0]
DURS = [5000.0, 2000.0, 800.0, 3000.0, 1500.0, 700.0, 2500.0, 1200.0]


def marks(ends: list[float], after: list[int], cost_after: dict[int, float], noise: float = 0.0) -> dict[int, float]:
    """The marks' readings of one step: each op's end, later by the cost of every mark before it (an anchor's
    cost delays everything after it), plus a constant offset of the step."""
    read = {}
    for i in after:
        delay = sum(c for k, c in cost_after.items() if k < i and k in after)
        read[i] = 1e6 + noise + ends[i] + delay
    return read


def test_farnear_cancels_the_anchor_cost(lab) -> None:
    _, ends = timeline(GAPS, DURS)
    i = 6
    j = i - lab.REACH
    cost = {j: 5000.0}  # an event node's cost on everything after it
    far = [marks(ends, [j, i], cost, noise) for noise in (0.0, 37.0, -12.0)]
    near = [marks(ends, [j, i - 1], cost, noise) for noise in (5.0, -3.0, 21.0)]
    assert lab.farnear_gap(far, near, i, DURS[i]) == pytest.approx(GAPS[i])


def test_an_end_move_is_read_as_gap_and_the_end_shift_takes_it_back(lab) -> None:
    _, ends = timeline(GAPS, DURS)
    i = 6
    j = i - lab.REACH
    moved = list(ends)
    moved[i] += 700.0  # the mark after op i delays op i's end
    far = [marks(moved, [j, i], {})]
    near = [marks(ends, [j, i - 1], {})]
    reading = lab.farnear_gap(far, near, i, DURS[i])
    assert reading == pytest.approx(GAPS[i] + 700.0)
    clean_dur = dict(enumerate(DURS))
    shift = lab.end_shifts(clean_dur, DURS[i] + 700.0, DURS[i - 1], i)
    assert reading + shift == pytest.approx(GAPS[i])


def test_a_start_move_puts_the_end_shift_into_the_gap(lab) -> None:
    """The start bias: the mark makes op i start 600 ns sooner and end where it did; its duration grows by 600,
    the duration-based shift reads that as an end move and the gap comes out 600 short."""
    _, ends = timeline(GAPS, DURS)
    i = 6
    j = i - lab.REACH
    far = [marks(ends, [j, i], {})]
    near = [marks(ends, [j, i - 1], {})]
    reading = lab.farnear_gap(far, near, i, DURS[i])
    assert reading == pytest.approx(GAPS[i])
    clean_dur = dict(enumerate(DURS))
    shift = lab.end_shifts(clean_dur, DURS[i] + 600.0, DURS[i - 1], i)
    assert reading + shift == pytest.approx(GAPS[i] - 600.0)


def test_pair_reads_the_gap_plus_what_the_first_mark_costs_the_op(lab) -> None:
    _, ends = timeline(GAPS, DURS)
    i = 3
    steps = [marks(ends, [i - 1, i], {}, noise) for noise in (0.0, 11.0, -7.0)]
    assert lab.pair_gap(steps, i, DURS[i]) == pytest.approx(GAPS[i])
    steps = [marks(ends, [i - 1, i], {i - 1: 450.0}, noise) for noise in (0.0, 11.0)]
    assert lab.pair_gap(steps, i, DURS[i]) == pytest.approx(GAPS[i] + 450.0)


@pytest.mark.parametrize(("n_ops", "tile"), [(163, 20), (323, 20), (8, 3), (2, 5), (21, 20)])
def test_tile_windows_cover_every_gap_once(lab, n_ops: int, tile: int) -> None:
    windows = lab.tile_windows(n_ops, tile)
    flat = [i for w in windows for i in w]
    assert flat == list(range(1, n_ops))
    assert all(0 < len(w) <= tile for w in windows)
    assert all(b[0] == a[-1] + 1 for a, b in zip(windows, windows[1:]))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("far_event", [2, 6]), ("near_tw", [2, 5]), ("pair_wt", [5, 6]), ("single_event", [6])],
)
def test_placements(lab, kind: str, expected: list[int]) -> None:
    assert lab.placements(kind, 6) == expected
