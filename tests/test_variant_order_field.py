"""Why an eager pass alternates the direction of its cycles, on passes recorded on an H200.

tests/fixtures/field/variant_order_h200.json.gz holds two llama-3.2-1b eager passes (batch 64 and batch 1) of
2026-12-03 00:14-00:16 UTC (docs/performance.md), run with the cycles alternating: in even cycles each far step ran
right before the near step of its anchor (``rotate``, the order before), in odd ones right after it (``reverse``).
Each cycle's steps are told apart here by plain Python from the run order alone (a far step whose next step is its
anchor's near one ran far first), each set stitched alone by launchprobe against numpy's clean step less CUPTI's op
durations. What it shows: the order moves the stitched total by more than its errors, far first long and near first
short, and the pass that alternates reads within the tolerance. Provenance is inside the file.
"""

from __future__ import annotations

import gzip
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pass_halves import recorded_ops, stitch_recorded

from launchprobe.analysis import sampled

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "variant_order_h200.json.gz"


@cache
def _cells() -> list[dict[str, Any]]:
    return list(json.loads(gzip.decompress(FIXTURE.read_bytes()))["cells"])


def _by_order(cell: dict[str, Any]) -> dict[str, list[Any]]:
    """The pass's steps as the far-first and the near-first cycles ran them; the steps that are neither far nor near
    (solo, wrap, plain) in both. A far or near step whose partner did not run next to it (a clean block between)
    is in neither."""
    roles, variants = cell["plan"]["roles"], cell["plan"]["variants"]
    steps = cell["steps"]

    def pair(k: int) -> tuple[str, int] | None:
        if not 0 <= k < len(steps):
            return None
        role, timed = roles[steps[k][0]], variants[steps[k][0]]
        return (role, timed[0]) if role in ("far", "near") else None

    out: dict[str, list[Any]] = {"far first": [], "near first": []}
    for k, step in enumerate(steps):
        here = pair(k)
        if here is None:
            out["far first"].append(step)
            out["near first"].append(step)
            continue
        role, anchor = here
        other = ("near" if role == "far" else "far", anchor)
        after, before = pair(k + 1) == other, pair(k - 1) == other
        if (role == "far" and after) or (role == "near" and before):
            out["far first"].append(step)
        elif (role == "far" and before) or (role == "near" and after):
            out["near first"].append(step)
    return out


@pytest.mark.parametrize("index", [0, 1])
def test_the_order_of_a_pairs_steps_moves_the_total_and_alternating_cancels_it(index: int) -> None:
    cell = _cells()[index]
    assert cell["shape"] == "llama-3.2-1b" and cell["mode"] == "eager"
    assert sampled.default_order(recorded_ops(cell)) == "alternate"  # what the pass does now in eager
    as_run = cell["as_run"]
    clean_gaps = float(np.median(cell["clean_in_cycles"])) - float(np.sum(cell["durations"]))
    assert clean_gaps / 1e3 == pytest.approx(as_run["clean_gap_total_us"], abs=0.02)
    whole = stitch_recorded(cell, cell["steps"])
    assert whole.gap_total_ns / 1e3 == pytest.approx(as_run["stitched_gap_total_us"], abs=0.01)  # the pass as run
    tolerance = as_run["gap_total_tolerance_us"] * 1e3
    parts = _by_order(cell)
    paired = sum(1 for v, *_ in cell["steps"] if cell["plan"]["roles"][v] in ("far", "near"))
    for steps in parts.values():  # the cycles alternated: each order holds about half the pairs' steps
        share = sum(1 for v, *_ in steps if cell["plan"]["roles"][v] in ("far", "near")) / paired
        assert 0.4 < share < 0.6, share
    far_first, near_first = (stitch_recorded(cell, steps) for steps in parts.values())
    long, short = far_first.gap_total_ns - clean_gaps, near_first.gap_total_ns - clean_gaps
    error = math.hypot(far_first.gap_total_noise_ns, near_first.gap_total_noise_ns)
    assert long - short > 2.5 * error, (long, short, error)  # the order moves the total beyond its noise
    assert long > 0 > short  # far first reads long, near first short
    diff = whole.gap_total_ns - clean_gaps
    assert abs(diff) < min(abs(long), abs(short))  # alternating sits between them
    assert abs(diff) <= tolerance < max(abs(long), abs(short))  # within the tolerance; one order alone is not
    assert as_run["gap_total_agrees"] is sampled.gap_total_verdict(diff, tolerance, whole.gap_total_noise_ns)
