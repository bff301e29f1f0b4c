"""Timer pairs with the op durations of the timer steps themselves, on streams recorded on an H200, against CUPTI's
kernels of the clean steps, computed with numpy.

tests/fixtures/field/sampled_timer_steps_h200.json.gz holds two cells of the pass at bf4012c (provenance inside):
llama-3-8b piecewise at batch 8, where gate_up runs about 3 us longer in every recaptured piece than in the clean
runner's, and llama-3.2-1b piecewise at batch 1, where CUPTI lengthens lm_head's gap by about 2 us (the events'
check found it) so that the timers' reading is judged like for like. Each holds the timer-pair steps as the pass
read them, the clean durations (CUPTI's), the timer-step durations the pass took from CUPTI's view of the timer
steps (their raw kernels are not kept: too large), CUPTI's kernels of the 64 clean reference steps, the events' op
check and the timer_pairs record. The references here are numpy's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest

from tests.field_numpy import BAR_NS, cells_by_shape_and_batch, cupti_clean, timer_differences, within_bar


@cache
def _cells() -> dict[tuple[str, int], dict[str, Any]]:
    return cells_by_shape_and_batch("sampled_timer_steps_h200.json.gz")


def _class_misses(cell: dict[str, Any], durations: Mapping[int, float] | Sequence[float]) -> dict[str, float]:
    """Per class, the median of (reading - duration), less the pairs' mean excess over the stitched gaps, less
    CUPTI's clean median gap. The stitch's gaps are not in the fixture, only the recorded excess over them of the
    pairs as the pass took them (reading - timer-step duration): with other durations the excess moves by their
    mean difference."""
    readings = timer_differences(cell, scaled=True)  # as the pass at bf4012c read them
    taken = dict(cell["timer_durations"])
    pairs = {i: readings[i] - float(durations[i]) for i in readings}
    excess = cell["timer_pairs"]["mean_excess_ns"] + float(np.mean([taken[i] - float(durations[i]) for i in readings]))
    _, gaps = cupti_clean(cell)
    classes: dict[str, list[int]] = {}
    for i in readings:
        classes.setdefault(cell["names"][i], []).append(i)
    return {
        name: float(np.median([pairs[i] - excess for i in ops]) - np.median([gaps[i] for i in ops]))
        for name, ops in classes.items()
    }


@pytest.mark.parametrize("key", [("llama-3-8b", 8), ("llama-3.2-1b", 1)])
def test_the_pass_took_the_timer_steps_durations_off_the_pairs(key: tuple[str, int]) -> None:
    cell = _cells()[key]
    recorded = cell["timer_pairs"]
    assert "of the timer steps" in recorded["durations_source"]
    readings = timer_differences(cell, scaled=True)  # as the pass at bf4012c read them
    taken = dict(cell["timer_durations"])
    assert sorted(readings) == sorted(taken) == [i for i, g in enumerate(recorded["gaps_ns"]) if g is not None]
    excess = recorded["mean_excess_ns"]
    assert max(abs(recorded["gaps_ns"][i] - (readings[i] - taken[i] - excess)) for i in readings) < 1.0
    # the one-per-step ops were read in four times the steps of the others
    per_op = {i: 0 for i in readings}
    for _, _, ends in cell["timer_steps"]:
        marks = dict(ends)
        for i in marks:
            if i in per_op and i - 1 in marks:
                per_op[i] += 1
    solo = [i for i in readings if cell["names"].count(cell["names"][i]) == 1]
    assert solo and all(per_op[i] == 4 * 48 for i in solo) and min(per_op.values()) == 48


def test_gate_up_runs_longer_in_the_timer_steps_of_8b_piecewise() -> None:
    """With CUPTI's clean durations taken off, gate_up's timers read 3 us long (the miss of two earlier matrices);
    with the timer steps' own, every class is within the bar."""
    cell = _cells()[("llama-3-8b", 8)]
    names = cell["names"]
    clean_durations, gaps = cupti_clean(cell)
    taken = dict(cell["timer_durations"])
    gate_up = [i for i in taken if names[i] == "gate_up"]
    shift = float(np.median([taken[i] - clean_durations[i] for i in gate_up]))
    assert shift > 2_000, shift  # the recapture's gate_up, as CUPTI saw it
    others = [i for i in taken if names[i] in ("qkv", "down")]
    assert abs(float(np.median([taken[i] - clean_durations[i] for i in others]))) < 300
    with_clean = _class_misses(cell, list(clean_durations))
    assert with_clean["gate_up"] > 2_000, with_clean
    with_timer_steps = _class_misses(cell, taken)
    members: dict[str, list[int]] = {}
    for i in taken:
        members.setdefault(names[i], []).append(i)
    cupti = {n: float(np.median([gaps[i] for i in ops])) for n, ops in members.items()}
    assert all(within_bar(m, cupti[n]) for n, m in with_timer_steps.items()), with_timer_steps
    recorded = {c["op"]: c for c in cell["timer_pairs"]["classes"]}
    for name, miss in with_timer_steps.items():
        assert recorded[name]["gap_diff_ns"] == pytest.approx(miss, abs=50.0)  # CUPTI's medians: ours and numpy's
        assert recorded[name]["gap_verdict"] == "agree"
    assert recorded["gate_up"]["duration_shift_ns"] == pytest.approx(shift, abs=50.0)


def test_lm_head_in_1b_piecewise_b1_is_judged_like_for_like() -> None:
    """CUPTI's clean gap before lm_head is not the clean step's there: the events' check measured CUPTI's effect on
    it. The timers' reading misses CUPTI's value, and is within the bar of it once that effect is added."""
    cell = _cells()[("llama-3.2-1b", 1)]
    _, gaps = cupti_clean(cell)
    misses = _class_misses(cell, dict(cell["timer_durations"]))
    lm_head_gap = float(gaps[cell["names"].index("lm_head")])
    events = {o["op"]: o for o in cell["event_ops"]}
    effect = events["lm_head"]["cupti_effect_ns"]
    assert events["lm_head"]["cupti_trusted_here"] is False and effect > BAR_NS
    assert not within_bar(misses["lm_head"], lm_head_gap), misses
    assert within_bar(misses["lm_head"] + effect, lm_head_gap)
    recorded = {c["op"]: c for c in cell["timer_pairs"]["classes"]}
    assert recorded["lm_head"]["gap_verdict"] == "agree like for like"
    assert recorded["lm_head"]["gap_under_cupti_diff_ns"] == pytest.approx(misses["lm_head"] + effect, abs=50.0)


@pytest.mark.parametrize("key", [("llama-3-8b", 8), ("llama-3.2-1b", 1)])
def test_every_class_takes_the_timers_verdict_where_they_read_it(key: tuple[str, int]) -> None:
    cell = _cells()[key]
    recorded = cell["timer_pairs"]
    timers = {c["op"]: c["gap_verdict"] for c in recorded["classes"]}
    events = {o["op"]: o["gap_verdict"] for o in cell["event_ops"]}
    assert sorted(recorded["classes_from_events"]) == sorted(set(events) - set(timers))
    # piecewise: embed's gap lies between steps; kv_write and attention are host-launched, o_proj follows one
    assert {"embed", "kv_write", "attention", "o_proj"} <= set(recorded["classes_from_events"])
    verdicts = [timers.get(name, events[name]) for name in events]
    assert recorded["with_events_ops_agree"] == all(v != "disagree" for v in verdicts)
