"""Timer pairs across a piece boundary (piecewise kv_write: a timer after the graph piece's last op, one the host
launches after kv_write), on streams recorded on an H200, against CUPTI's clean kernels, computed with numpy.

tests/fixtures/field/sampled_timer_host_h200.json.gz holds two piecewise cells of the pass of 2026-12-02 06:13 UTC
(provenance inside): llama-3-8b at batch 1, where the events read kv_write's gap 1.05 us longer than CUPTI's and
the timers 0.74 us, and llama-3.2-1b at batch 64, where the timers read lm_head's 1.7 us long: the pass scaled its
pair by a clean step of another phase, which it no longer does (docs/performance.md, sessions of 2026-12-02 from
06:05 and 07:00 UTC). The references here are numpy's, from the raw streams.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest

from launchprobe.analysis import timer_pairs
from launchprobe.analysis.sampled import SampledStep
from tests.field_numpy import BAR_NS, cells_by_shape_and_batch, cupti_clean, timer_differences, within_bar


@cache
def _cells() -> dict[tuple[str, int], dict[str, Any]]:
    return cells_by_shape_and_batch("sampled_timer_host_h200.json.gz")


def _class_misses(cell: dict[str, Any], *, scaled: bool = True) -> tuple[dict[str, float], dict[str, float]]:
    """Per class the timers read: numpy's pair (reading less the timer-step duration, less the pairs' mean excess
    over the stitched gaps) less CUPTI's clean median gap; and CUPTI's gap. ``scaled``: the pairs as the pass at
    045a928 read them (x clean / reference), with its recorded excess; else as read, the excess moved by the pairs'
    mean difference (the stitch's gaps are not in the fixture, and do not change)."""
    _, gaps = cupti_clean(cell)
    recorded = timer_differences(cell, scaled=True)
    readings = timer_differences(cell, scaled=scaled)
    taken = dict(cell["timer_durations"])
    excess = cell["timer_pairs"]["mean_excess_ns"] + float(np.mean([readings[i] - recorded[i] for i in readings]))
    classes: dict[str, list[int]] = {}
    for i in readings:
        classes.setdefault(cell["names"][i], []).append(i)
    misses = {
        name: float(np.median([readings[i] - taken[i] - excess for i in ops]) - np.median([gaps[i] for i in ops]))
        for name, ops in classes.items()
    }
    return misses, {name: float(np.median([gaps[i] for i in ops])) for name, ops in classes.items()}


@pytest.mark.parametrize("key", [("llama-3-8b", 1), ("llama-3.2-1b", 64)])
def test_kv_write_is_read_by_a_pair_whose_second_timer_the_host_launched(key: tuple[str, int]) -> None:
    cell = _cells()[key]
    names, hosted = cell["names"], cell["host_launched"]
    kv_writes = [i for i, n in enumerate(names) if n == "kv_write"]
    assert all(hosted[i] and not hosted[i - 1] for i in kv_writes)  # host-launched, right after a graph piece
    readings = timer_differences(cell)
    assert set(kv_writes) <= set(readings)  # every layer's kv_write read
    assert not any(hosted[i - 1] for i in readings)  # never an op after a host-launched one (attention, o_proj)
    readings = timer_differences(cell, scaled=True)  # the pass at 045a928 scaled each pair by clean / reference
    # at most two host-launched timers a step, in variants of their own: no graphed target shares their steps
    for _, _, ends in cell["timer_steps"]:
        marks = dict(ends)
        mine = [i for i in marks if hosted[i]]
        assert len(mine) <= 2
        assert not mine or all(hosted[i] or hosted[i + 1] for i in marks)
    recorded = cell["timer_pairs"]
    assert recorded["after_piece_variants"] == -(-len(kv_writes) // 2) and recorded["after_piece_behind"] == []
    gaps = recorded["gaps_ns"]
    taken = dict(cell["timer_durations"])
    excess = recorded["mean_excess_ns"]
    assert max(abs(gaps[i] - (readings[i] - taken[i] - excess)) for i in readings) < 1.0


def test_in_8b_b1_the_timers_read_kv_write_within_the_bar_where_the_events_miss_it() -> None:
    cell = _cells()[("llama-3-8b", 1)]
    misses, cupti = _class_misses(cell)
    assert within_bar(misses["kv_write"], cupti["kv_write"]), misses["kv_write"]
    events = {o["op"]: o for o in cell["event_ops"]}
    assert events["kv_write"]["gap_diff_ns"] > BAR_NS and events["kv_write"]["gap_verdict"] == "disagree"
    assert events["kv_write"]["cupti_gap_ns_median"] == pytest.approx(cupti["kv_write"], abs=50.0)
    recorded = {c["op"]: c for c in cell["timer_pairs"]["classes"]}
    assert recorded["kv_write"]["gap_diff_ns"] == pytest.approx(misses["kv_write"], abs=50.0)
    assert recorded["kv_write"]["gap_verdict"] == "agree"
    # the every-class verdict takes kv_write from the timers now, and the events' miss there no longer counts
    assert "kv_write" not in (cell["timer_pairs"]["classes_from_events"] or [])


def test_in_1b_b64_lm_head_read_long_only_because_the_pass_scaled_its_pair() -> None:
    """The pass at 045a928 scaled each pair by the events' clean step over the timer step's reference, 0.6% more
    here: lm_head's pair, 143 us of GPU work, read 1.2 us longer for it and missed the bar. As read, it is within
    it, and launchprobe's readings of the raw steps now are numpy's as read."""
    cell = _cells()[("llama-3.2-1b", 64)]
    misses, cupti = _class_misses(cell)
    assert not within_bar(misses["lm_head"], cupti["lm_head"]) and misses["lm_head"] > 0, misses["lm_head"]
    recorded = {c["op"]: c for c in cell["timer_pairs"]["classes"]}
    assert recorded["lm_head"]["gap_diff_ns"] == pytest.approx(misses["lm_head"], abs=50.0)
    assert recorded["lm_head"]["gap_verdict"] == "disagree"
    assert all(within_bar(m, cupti[n]) for n, m in misses.items() if n != "lm_head"), misses
    as_read, _ = _class_misses(cell, scaled=False)
    assert all(within_bar(m, cupti[n]) for n, m in as_read.items()), as_read
    assert misses["lm_head"] - as_read["lm_head"] > 800  # what the scale put into it
    # the cause: the events' clean step against the timer steps' references, and a pair that does not stretch
    names = cell["names"]
    lm_head = names.index("lm_head")
    references = np.array([r for _, r, ends in cell["timer_steps"] if lm_head in dict(ends)])
    pairs = np.array([dict(e)[lm_head] - dict(e)[lm_head - 1] for _, _, e in cell["timer_steps"] if lm_head in dict(e)])
    assert cell["clean_step_ms"] * 1e6 / np.median(references) > 1.005
    slope = np.polyfit(references, pairs, 1)[0]
    assert abs(slope) < 0.25 * np.median(pairs) / np.median(references), slope  # proportional would be 0.084
    steps = [SampledStep(v, 0, dict(ends), reference) for v, reference, ends in cell["timer_steps"]]
    targets = timer_pairs.pair_targets([not h for h in cell["host_launched"]])
    ours = timer_pairs.pair_readings(steps, targets)
    numpy_as_read = timer_differences(cell)
    assert max(abs(float(np.median(ours[i])) - numpy_as_read[i]) for i in numpy_as_read) < 1.0
