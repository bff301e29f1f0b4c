"""Timer readings of the gap between steps, across two steps, on the H200 (tests/fixtures/field/step_pair_h200.json.gz:
all 12 graph cells in two processes, 2026-12-04 11:48-11:52 UTC, six cells with the lead variant at 12:03, and five
piecewise cells each after the pass in its process at 12:29-12:37, ``benchmarks/field/step_pair.py`` and
``pass_and_bridge.py``; docs/gaps.md, "Timer pairs"). Why no timer pair of the pass reads op 0's gap:
a timer as the step's last node lengthens the boundary it is to read, a second one lengthens it by a different
amount, and a bridge around the last op, which leaves the boundary alone, still misses CUPTI's clean gap by
several microseconds in full graph batch 8, where op 0 does not run without CUPTI as long as under it. Numpy on
the per-step readings and CUPTI's rows, not launchprobe's code; the lab tool's table against numpy."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "field" / "step_pair_h200.json.gz"
BAR_NS = 1000.0  # the op bar: within 1 us or 15%


@cache
def _processes() -> list[list[dict[str, Any]]]:
    data: list[list[dict[str, Any]]] = json.loads(gzip.decompress(FIXTURE.read_bytes()))["processes"]
    return data


def _cells() -> list[dict[str, Any]]:
    return [cell for process in _processes() for cell in process]


@cache
def _lead_cells() -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads(gzip.decompress(FIXTURE.read_bytes()))["lead"]["cells"]
    return cells


def _gap_at(rows: list[list[int]], last_end: int) -> float:
    """CUPTI's gap at a timed boundary: op 0's start (rows' second-last column) less the last op's end."""
    a = np.asarray(rows, dtype=np.int64)
    return float(np.median(a[:, -2] - a[:, last_end]))


def _numpy(cell: dict[str, Any]) -> dict[str, float]:
    raw = cell["raw"]
    b = raw["cupti_boundaries_ns"]
    rows = np.asarray(b["tail"] + [r[:1] + r[2:] for r in b["tail2"]] + b["bridge"], dtype=np.int64)
    duration = float(np.median(rows[:, -1] - rows[:, -2]))  # op 0 in the head steps under CUPTI
    clean = float(np.median(raw["clean_gaps_ns"]))
    pair = float(np.median(raw["pairs_ns"])) - duration
    pair2 = float(np.median(raw["pairs2_ns"])) - duration
    return {
        "clean": clean,
        "cycle": float(np.median(raw["clean_cycle_gaps_ns"])),
        "timed": _gap_at(b["tail"], 0),
        "timed2": _gap_at(b["tail2"], 0),
        "bridged": _gap_at(b["bridge"], 1),  # the bridge's timer ends before the last op: column 1 is its end
        "pair": pair,
        "extrapolated": 2 * pair - pair2,
        "bridge": float(np.median(raw["bridges_ns"]) - np.median(raw["spans_ns"])) - duration,
        "like_for_like": float(np.median(raw["pairs_under_cupti_ns"])) - duration - _gap_at(b["tail"], 0),
    }


def _beyond_bar(reading: float, reference: float) -> bool:
    return abs(reading - reference) > max(BAR_NS, 0.15 * abs(reference))


def test_the_fixture_holds_every_graph_cell_twice() -> None:
    cells = [[c["cell"] for c in process] for process in _processes()]
    assert len(cells) == 2 and cells[0] == cells[1] and len(cells[0]) == 12
    assert {c.split(":")[1] for c in cells[0]} == {"piecewise", "full"}


def test_a_trailing_timer_lengthens_the_boundary_it_is_to_read_and_a_second_by_another_amount() -> None:
    """CUPTI's gap at the boundary after a timer that is the step's last node, less at the bridge's (no timer
    there): +0.78 to +1.62 us in all 24 cells; a second trailing timer adds +0.26 to +1.54 more, in full graph
    about half what the first adds, so twice the one-timer reading less the two-timer one is no timer-free value."""
    first, second = [], []
    for cell in _cells():
        n = _numpy(cell)
        first.append(n["timed"] - n["bridged"])
        second.append(n["timed2"] - n["timed"])
    assert min(first) > 700 and max(first) < 1700
    assert min(second) > 200
    full = [s / f for cell, f, s in zip(_cells(), first, second) if ":full:" in cell["cell"]]
    assert max(full) < 0.8  # the second timer adds less than the first wherever the step is one graph


def test_a_bridge_leaves_the_boundary_as_cuptis_clean_steps_have_it() -> None:
    """With no timer at the boundary (the bridge's is before the last op), CUPTI's gap there lies within 0.55 us
    of its clean reference or of the clean steps of the same cycles, in every cell (the reference itself took the
    low of its two values in one pass: 1B piecewise b1, -1.44 against the reference, +0.06 against the cycle)."""
    for cell in _cells():
        n = _numpy(cell)
        assert min(abs(n["bridged"] - n["clean"]), abs(n["bridged"] - n["cycle"])) < 550, cell["cell"]


def test_the_timers_read_what_cupti_sees_at_the_boundary_they_time() -> None:
    """Under CUPTI, the one-timer pair less op 0's duration less CUPTI's own gap at that boundary: 0.0 to +0.7 us,
    within the bar in every cell. The timers read the boundary right; it is the boundary that the timer moved."""
    values = [_numpy(cell)["like_for_like"] for cell in _cells()]
    assert min(values) > -100 and max(values) < 750


def test_no_timer_reading_of_the_gap_between_steps_holds_the_op_bar_in_full_graph_batch_8() -> None:
    """The pair, the extrapolation and the bridge, each against CUPTI's clean gap: in full graph b8 (both shapes,
    both processes) every one misses by more than 2 us (the bridge +2.91 to +5.94), while under CUPTI the same
    readings agree like for like. Elsewhere the bridge held the bar in 17 of 20 cells. The events, which the pass
    keeps for op 0, held it in both full b8 cells of every matrix on record (docs/performance.md)."""
    misses = 0
    for cell in _cells():
        n = _numpy(cell)
        if ":full:8" in cell["cell"]:
            for reading in ("pair", "extrapolated", "bridge"):
                assert n[reading] - n["clean"] > 2000, (cell["cell"], reading)
        else:
            misses += _beyond_bar(n["bridge"], n["clean"])
    assert misses == 3


def test_op_0_with_a_timer_right_before_it_runs_5_us_longer_without_cupti_in_8b_full_batch_8() -> None:
    """The lead variant (a timer right before op 0 and one after it, in one graph): its reading without CUPTI less
    under CUPTI is +4.98 us in 8B full b8, where the bridge read +5.76 over CUPTI's clean gap, and -1.02 to +0.66
    in the five other cells. So there the duration taken off every timer reading, CUPTI's, is not what op 0 runs
    without CUPTI; in 1B full b8 (+0.66) it does not explain the bridge's +3.78."""
    moved = {}
    for cell in _lead_cells():
        raw = cell["raw"]
        assert len(raw["leads_ns"]) == 96 and len(raw["leads_under_cupti_ns"]) == 32
        moved[cell["cell"]] = float(np.median(raw["leads_ns"]) - np.median(raw["leads_under_cupti_ns"]))
    assert moved.pop("llama-3-8b:full:8") > 4000
    assert len(moved) == 5 and max(abs(v) for v in moved.values()) < 1100


@cache
def _with_pass() -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads(gzip.decompress(FIXTURE.read_bytes()))["with_pass"]["cells"]
    return cells


def test_in_one_process_the_gap_between_piecewise_steps_took_each_value_at_a_different_moment() -> None:
    """Each cell ran the pass, then the bridge, in one process. CUPTI's clean reference of the pass and the one
    the bridge took seconds later differ by 0.99-1.35 us in four of the five cells, the high value (5.8-5.9 us) in
    one and the low (4.5-4.8) in the other, either way round; the bridge, without CUPTI, read 4.40-4.85 us here
    against 5.22-6.98 in 13 of the 14 piecewise passes of the other processes. The gap itself, not only CUPTI's
    view of it, takes values about 1 us apart. The events read it 0.21-1.17 us below the bridge in every cell."""
    moved, below, bridges = 0, [], []
    for cell in _with_pass():
        op0, bridge = cell["pass"]["op0"], _numpy(cell["bridge"])
        moved += abs(op0["cupti_gap_ns_median"] - bridge["clean"]) > 900
        below.append(op0["events_gap_ns_median"] - bridge["bridge"])
        bridges.append(bridge["bridge"])
    assert len(_with_pass()) == 5 and moved == 4
    assert max(below) < -150 and min(below) > -1250
    assert max(bridges) < 4900
    elsewhere = [_numpy(c)["bridge"] for c in _cells() + _lead_cells() if ":piecewise:" in c["cell"]]
    assert len(elsewhere) == 14 and sum(v > 5200 for v in elsewhere) == 13


def test_the_lab_tools_table_is_numpys() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("step_pair_lab", ROOT / "benchmarks/field/step_pair.py")
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    for cell in _cells() + _lead_cells() + [c["bridge"] for c in _with_pass()]:
        n = _numpy(cell)
        table = lab.summary(cell["raw"])
        assert table == {k: cell[k] for k in table}  # the fixture's table is the tool's
        assert table["pair_gap_ns"] == pytest.approx(n["pair"], abs=1)
        assert table["extrapolated_gap_ns"] == pytest.approx(n["extrapolated"], abs=1)
        assert table["bridge_gap_ns"] == pytest.approx(n["bridge"], abs=1)
        assert table["cupti_timed_less_clean_ns"] == pytest.approx(n["timed"] - n["clean"], abs=1)
        assert table["cupti_bridged_less_clean_ns"] == pytest.approx(n["bridged"] - n["clean"], abs=1)
        assert table["like_for_like_ns"] == pytest.approx(n["like_for_like"], abs=1)
        if "leads_ns" in cell["raw"]:
            leads = np.asarray(cell["raw"]["cupti_leads_ns"])  # the two timers' ends, op 0's start and end
            assert table["lead_ns"] == pytest.approx(float(np.median(cell["raw"]["leads_ns"])), abs=1)
            assert table["lead_op0_duration_ns"] == pytest.approx(float(np.median(leads[:, 3] - leads[:, 2])), abs=1)
