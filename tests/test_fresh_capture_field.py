"""The variants' own captures against the clean capture, on two real passes (tests/fixtures/field/README.md,
fresh_capture_h200.json.gz): CUPTI's gap at the event-free positions of freshly captured graph pieces, computed
here with numpy from CUPTI's op intervals of the pass's CUPTI cycle, against ``sampled.fresh_capture_shifts``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launchprobe.analysis import sampled

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "fresh_capture_h200.json.gz"
REPLAYS_CLEAN = {"plain", "head", "wrap_head", "piece", "dense"}  # variants that capture no piece afresh


def _cells() -> list[dict[str, Any]]:
    return list(json.loads(gzip.decompress(FIXTURE.read_bytes()))["cells"])


def _intervals(coded: list[int]) -> np.ndarray:
    """[gap, duration, ...] back to an (n, 2) array of (start, end), running sums from the first start."""
    ends = np.cumsum(np.asarray(coded, dtype=np.int64))
    return ends.reshape(-1, 2)  # each op's start is the running sum up to its gap, its end up to its duration


def _gaps(step: np.ndarray) -> np.ndarray:
    """Each op's start less the latest end before it (op 0: 0)."""
    latest = np.maximum.accumulate(step[:, 1])
    return np.concatenate([[0], step[1:, 0] - latest[:-1]])


def _segments(host_launched: list[bool]) -> list[int]:
    """A segment number per op: each run of graphed ops one segment, each host-launched op its own."""
    out, segment = [], -1
    for i, hosted in enumerate(host_launched):
        if hosted or i == 0 or host_launched[i - 1]:
            segment += 1
        out.append(segment)
    return out


def _numpy_shifts(cell: dict[str, Any]) -> tuple[np.ndarray, dict[int, float]]:
    """CUPTI's clean gap per op (median over the clean steps), and per qualifying position the median of its gap in
    the variant steps less that."""
    hosted, segment = cell["host_launched"], _segments(cell["host_launched"])
    n = len(hosted)
    steps = [(v, _gaps(_intervals(coded))) for v, coded in cell["steps"]]
    clean = np.median(np.array([g for v, g in steps if v < 0]), axis=0)
    samples: dict[int, list[int]] = {}
    for v, gaps in steps:
        if v < 0 or cell["roles"][v] in REPLAYS_CLEAN:
            continue
        marked = set(cell["variants"][v])
        fresh = {segment[i] for i in marked if not hosted[i]}
        for p in range(1, n):
            if not hosted[p] and segment[p] in fresh and not marked & {p - 2, p - 1, p, p + 1}:
                samples.setdefault(p, []).append(int(gaps[p]))
    return clean, {p: float(np.median(x)) - float(clean[p]) for p, x in samples.items()}


@pytest.mark.parametrize("index", [0, 1])
def test_fresh_capture_shifts_match_numpy_on_the_cycles_intervals(index: int) -> None:
    cell = _cells()[index]
    clean, shifts = _numpy_shifts(cell)
    n = len(cell["names"])
    plan = sampled.Plan(n, cell["spacing"], cell["variants"], cell["roles"])
    intervals: dict[int, list[list[tuple[int, int]]]] = {}
    for v, coded in cell["steps"]:
        if v >= 0:
            intervals.setdefault(v, []).append([(int(s), int(e)) for s, e in _intervals(coded)])
    ours = sampled.fresh_capture_shifts(
        plan, cell["names"], cell["host_launched"], _segments(cell["host_launched"]), list(clean), intervals
    )
    assert ours is not None and ours["positions"] == len(shifts) > 200
    assert ours["gap_sum_ns"] == pytest.approx(sum(shifts.values()), abs=0.1)
    for row in ours["classes"]:
        mine = [x for p, x in shifts.items() if cell["names"][p] == row["op"]]
        assert row["count"] == len(mine) and row["shift_ns"] == pytest.approx(float(np.median(mine)))


def test_a_fresh_capture_moves_the_gap_into_a_piece_and_nothing_inside_it() -> None:
    piecewise, full = _cells()
    assert (piecewise["mode"], full["mode"]) == ("piecewise", "full")
    _, shifts = _numpy_shifts(piecewise)
    hosted = piecewise["host_launched"]
    entries = [x for p, x in shifts.items() if hosted[p - 1]]
    inside = [x for p, x in shifts.items() if not hosted[p - 1]]
    # the gap into each piece after the eager attention (o_proj) reads about a microsecond lower in a fresh capture
    assert len(entries) == 32 and np.median(entries) < -500 and sum(entries) < -20_000
    # inside the pieces no class moves 0.1 us: the classes' medians, and their sum over the step under 10 us
    by_class: dict[str, list[float]] = {}
    for p, x in shifts.items():
        if not hosted[p - 1]:
            by_class.setdefault(piecewise["names"][p], []).append(x)
    assert all(abs(float(np.median(x))) < 100 for x in by_class.values()) and abs(sum(inside)) < 10_000
    # full graph, one piece: no class moves 0.3 us (0.07-0.13 us over all the cycle's steps, docs/performance.md)
    _, shifts = _numpy_shifts(full)
    full_classes: dict[str, list[float]] = {}
    for p, x in shifts.items():
        full_classes.setdefault(full["names"][p], []).append(x)
    assert all(abs(float(np.median(x))) < 300 for x in full_classes.values())
