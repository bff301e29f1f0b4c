"""The gap between piecewise steps on three recorded passes (tests/fixtures/field/step_boundary_h200.json.gz: 1B
piecewise b1 at 14:31 and 14:32 UTC, 8B piecewise b1 at 14:12 UTC, H200, 2026-12-03; docs/performance.md). CUPTI
measures that gap from the previous step's last kernel end to the first kernel's start; the events measure it from
the step's boundary event, which completes with the previous step's last graph. Numpy on CUPTI's kernels and the
events' readings, and launchprobe's ``cycle_clean_gaps`` on the same gaps."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launchprobe.analysis import sampled

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "step_boundary_h200.json.gz"
PASSES = {"1b_1431": 0, "1b_1432": 1, "8b_1412": 2}


@cache
def _cells() -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads(gzip.decompress(FIXTURE.read_bytes()))["cells"]
    return cells


def _reference_head(cell: dict[str, Any]) -> float:
    """CUPTI's 64 back-to-back clean steps: the median gap from a step's last kernel end to the next's first start."""
    steps = np.asarray(cell["reference"])
    return float(np.median(steps[1:, 0] - steps[:-1, 1]))


def _cycle_heads(cell: dict[str, Any]) -> np.ndarray:
    """The CUPTI cycle's clean steps that ran right after a clean step: the gap into each."""
    cycle = cell["cycle"]
    return np.asarray(
        [b[1] + b[2] - (a[1] + a[4]) for a, b in zip(cycle, cycle[1:]) if a[0] < 0 and b[0] < 0], dtype=float
    )


def _boundary_lag(cell: dict[str, Any]) -> np.ndarray:
    """Head-variant steps under CUPTI: the events' end of op h (from the boundary event) less CUPTI's (from the step
    before's last kernel end). Negative: the boundary event lagged the last kernel by that much more than the
    events' end event lagged op h."""
    cycle, head = cell["cycle"], cell["head_variant"]
    return np.asarray([b[5] - (b[1] + b[3] - (a[1] + a[4])) for a, b in zip(cycle, cycle[1:]) if b[0] == head], float)


@pytest.mark.parametrize("name", ["1b_1431", "8b_1412"])
def test_the_reference_head_is_the_one_the_pass_reported(name: str) -> None:
    cell = _cells()[PASSES[name]]
    assert cell["as_run"]["cupti_gap_ns_median"] == pytest.approx(_reference_head(cell), abs=1)


def test_cuptis_gap_between_steps_moved_within_a_pass_where_the_boundary_event_lagged() -> None:
    """In 1B b1 at 14:32 CUPTI's later clean steps read the gap between steps 1.5 us over its own reference (in 88%
    of them beyond the bar of it), and on the head-variant steps the boundary event lagged 1.06 us more than the last
    kernel; at 14:31, on the same cell, neither: the events and CUPTI put op h's end within 0.2 us."""
    steady, moved = _cells()[PASSES["1b_1431"]], _cells()[PASSES["1b_1432"]]
    for cell, lag, shifted in ((steady, 0.0, False), (moved, -1_060.0, True)):
        heads, reference = _cycle_heads(cell), _reference_head(cell)
        share = float(np.mean(np.abs(heads - reference) > sampled.OP_GAP_ABS_NS))
        assert share >= 0.5 if shifted else share < 0.25, (share, reference)
        assert bool(np.median(heads) - reference > 1_000) is shifted, (np.median(heads), reference)
        assert np.median(_boundary_lag(cell)) == pytest.approx(lag, abs=200)
        assert len(_boundary_lag(cell)) >= 60 and len(heads) > 300
    # the events read op h's end from the boundary event alike in both passes (within 0.2 us): what moved is the
    # time from the last kernel's end to the boundary event's completion, which the events cannot see
    ends = [np.median([row[5] for row in c["cycle"] if len(row) == 6]) for c in (steady, moved)]
    assert abs(ends[0] - ends[1]) <= 200, ends


@pytest.mark.parametrize("name", list(PASSES))
def test_cycle_clean_gaps_takes_op_0s_class_from_the_gaps_between_clean_steps(name: str) -> None:
    cell = _cells()[PASSES[name]]
    heads, reference = _cycle_heads(cell), _reference_head(cell)
    ours = sampled.cycle_clean_gaps(["embed", "x"], [[(0, 1), (2, 3)]], [reference, 1.0], heads.tolist())["embed"]
    assert ours["steps"] == len(heads) and ours["cycle_gap_ns_median"] == pytest.approx(np.median(heads))
    assert ours["off_bar_fraction"] == pytest.approx(np.mean(np.abs(heads - reference) > 1_000))
    # the not-decided rule's threshold: crossed in the pass whose reference moved, not in the other two
    assert bool(ours["off_bar_fraction"] >= sampled.CUPTI_CYCLE_UNSTEADY) is (name == "1b_1432")


@pytest.mark.parametrize("name", list(PASSES))
def test_the_pass_reads_the_boundary_lag_numpy_reads(name: str) -> None:
    """launchprobe's ``boundary_lag`` on the same steps: CUPTI's end of op h from the step before's last kernel less
    the events' from the boundary event, the median over the head variant's steps; +1.06 us in the pass whose
    CUPTI head moved, within 0.1 us of none in the other two."""
    cell = _cells()[PASSES[name]]
    h, head, cycle = cell["head_op"], cell["head_variant"], cell["cycle"]
    n = h + 2  # enough ops for the plan: 0 .. h and one after
    plan = sampled.Plan(n, 1, [[] for _ in range(head)] + [[h]], ["plain"] * head + ["head"])
    seen: dict[int, list[list[tuple[int, int]]]] = {head: []}
    before: dict[int, list[int | None]] = {head: []}
    read = []
    for j, row in enumerate(cycle):
        if row[0] != head:
            continue
        seen[head].append([(0, 0)] * h + [(0, row[1] + row[3])])
        before[head].append(cycle[j - 1][1] + cycle[j - 1][4] if j else None)
        read.append(sampled.SampledStep(head, 0, {h: row[5]}))
    lag = sampled.boundary_lag(plan, seen, before, read)
    assert lag is not None and lag.steps == len(_boundary_lag(cell))
    assert lag.lag_ns == pytest.approx(-float(np.median(_boundary_lag(cell))))
    assert (lag.lag_ns > 900) is (name == "1b_1432") and (abs(lag.lag_ns) < 100) is (name != "1b_1432")
