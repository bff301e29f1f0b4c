"""The gap total's difference from clean in its parts (``sampled.gap_total_by_class``), on two H200 passes.

tests/fixtures/field/gap_parts_h200.json.gz holds llama-3-8b piecewise and full graph at batch 1 (2026-12-04 02:53
UTC, docs/performance.md; provenance inside): what the pass stitched, and CUPTI's 64 clean reference steps kernel by
kernel. launchprobe stitches the pass again and checks it against CUPTI's steps; numpy groups CUPTI's kernels into
ops and takes the per-position median gaps and durations itself. The parts must be numpy's, add up to the
difference the pass reported, and show what the fixture's passes showed: CUPTI's own clean steps carry 20-31 us
more gap than the clean step has, before any reading of the events.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pass_halves import stitch_recorded

from launchprobe.analysis import sampled

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "gap_parts_h200.json.gz"


@cache
def _cells() -> list[dict[str, Any]]:
    return list(json.loads(gzip.decompress(FIXTURE.read_bytes()))["cells"])


def _cell(mode: str) -> dict[str, Any]:
    return next(c for c in _cells() if c["mode"] == mode)


def _cupti_steps(cell: dict[str, Any]) -> list[np.ndarray]:
    """CUPTI's kernels per step as an (n, 2) array of [start, end], from the fixture's running [gap, duration]."""
    steps, t = [], 0
    for coded in cell["cupti_kernels"]:
        pairs = np.asarray(coded, dtype=np.int64).reshape(-1, 2)
        starts = t + np.cumsum(pairs[:, 0] + np.concatenate(([0], pairs[:-1, 1])))
        ends = starts + pairs[:, 1]
        t = int(ends[-1])
        steps.append(np.stack([starts, ends], axis=1))
    return steps


def _numpy_reference(cell: dict[str, Any]) -> dict[str, Any]:
    """numpy's CUPTI op gaps and durations: kernels grouped into ops by the counting pass (first start, last end),
    each op's gap its start less the latest end before it, op 0's from the step before's latest end."""
    bounds = np.cumsum([0, *cell["kernel_counts"]])
    ops = [
        np.array([[k[a:b, 0].min(), k[a:b, 1].max()] for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
        for k in _cupti_steps(cell)
    ]
    gaps = []
    for number, step in enumerate(ops):
        latest = np.maximum.accumulate(step[:, 1])
        gap = np.empty(len(step))
        gap[1:] = step[1:, 0] - latest[:-1]
        gap[0] = step[0, 0] - ops[number - 1][:, 1].max() if number else np.nan
        gaps.append(gap)
    table = np.array(gaps)
    per_position = np.concatenate(([np.median(table[1:, 0])], np.median(table[:, 1:], axis=0)))
    durations = np.median(np.array([step[:, 1] - step[:, 0] for step in ops]), axis=0)
    by_class: dict[str, float] = {}
    for name, gap in zip(cell["names"], per_position, strict=True):
        by_class[name] = by_class.get(name, 0.0) + float(gap)
    clean = float(np.median(cell["clean_in_cycles"]))
    return {
        "by_class": by_class,
        "gap_sum": float(per_position.sum()),
        "clean_gap_total": clean - float(durations.sum()),
        "clean": clean,
    }


def _check(cell: dict[str, Any]) -> tuple[sampled.Stitched, dict[str, Any]]:
    stitched = stitch_recorded(cell, cell["steps"])
    steps = _cupti_steps(cell)
    ref = sampled.cupti_reference(
        [[(int(s), int(e)) for s, e in k] for k in steps], cell["cupti_step_ns"], cell["kernel_counts"]
    )
    return stitched, sampled.clean_check(stitched, float(np.median(cell["clean_in_cycles"])), ref,
                                         durations_from_reference=True)  # fmt: skip


@pytest.mark.parametrize("mode", ["piecewise", "full"])
def test_the_parts_are_numpys_and_add_up_to_the_difference_the_pass_reported(mode: str) -> None:
    cell = _cell(mode)
    stitched, check = _check(cell)
    assert stitched.gap_total_ns == cell["reported_gap_total_ns"]  # the pass stitched again, exactly
    numpy = _numpy_reference(cell)
    parts = {c["op"]: c for c in check["gap_total_by_class"]}
    assert list(parts) == list(dict.fromkeys(cell["names"]))
    for name, total in numpy["by_class"].items():
        assert parts[name]["cupti_ns"] == pytest.approx(total, abs=1.0), name
        assert parts[name]["count"] == cell["names"].count(name)
    assert check["cupti_gap_sum_ns"] == pytest.approx(numpy["gap_sum"], abs=1.0)
    assert check["clean_gap_total_ns"] == pytest.approx(numpy["clean_gap_total"], abs=1.0)
    # exactly: the classes' stitched less CUPTI's, a kept tail, and CUPTI's gaps less the clean step's
    classes = sum(c["stitched_ns"] - c["cupti_ns"] for c in check["gap_total_by_class"])
    assert check["gap_total_tail_ns"] == stitched.tail_ns
    assert all(c["diff_ns"] == pytest.approx(c["stitched_ns"] - c["cupti_ns"]) for c in check["gap_total_by_class"])
    assert classes + check["gap_total_tail_ns"] + check["cupti_gap_sum_ns"] - check[
        "clean_gap_total_ns"
    ] == pytest.approx(check["total_gap_diff_ns"], abs=1.0)
    assert check["total_gap_diff_ns"] / 1e3 == pytest.approx(cell["reported_gap_total_diff_us"], abs=0.05)
    assert check["cupti_gap_part_ns"] == pytest.approx(numpy["gap_sum"] - numpy["clean_gap_total"], abs=2.0)


def test_cuptis_clean_steps_carry_more_gap_than_the_clean_step_has() -> None:
    # numpy alone: CUPTI's per-position gaps summed less the clean step's gap total (its step less CUPTI's
    # durations), with CUPTI's own steps slower than clean; the stitched picture sits between (piecewise) or under
    # both (full graph), so the reference's part is no reading of the events
    for mode, low, high in (("piecewise", 25_000, 38_000), ("full", 14_000, 26_000)):
        cell = _cell(mode)
        numpy = _numpy_reference(cell)
        cupti_part = numpy["gap_sum"] - numpy["clean_gap_total"]
        assert low < cupti_part < high, (mode, cupti_part)
        assert float(np.median(cell["cupti_step_ns"])) > 1.005 * numpy["clean"]  # CUPTI's step 1.0-1.3% slower
    stitched = {mode: _cell(mode)["reported_gap_total_ns"] for mode in ("piecewise", "full")}
    assert _numpy_reference(_cell("piecewise"))["clean_gap_total"] < stitched["piecewise"]
    assert stitched["piecewise"] < _numpy_reference(_cell("piecewise"))["gap_sum"]
    assert stitched["full"] < _numpy_reference(_cell("full"))["clean_gap_total"]
