"""Where the long mlp_norm anchors of 8B piecewise batch 1 come from, at kernel level (docs/performance.md, session
of 2026-12-03 from 13:57 UTC). tests/fixtures/field/gate_up_after_event_h200.json.gz holds CUPTI's durations of
gate_up and down at every layer in every step of one pass's CUPTI cycle (llama-3-8b piecewise b1, H200, 14:12 UTC),
with the plan's marks; the events' side is the five passes of scatter_ladder_h200.json.gz. Numpy alone: these
tests check what the GPU did, not launchprobe's code."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from field_numpy import anchor_reads

FIELD = Path(__file__).parent / "fixtures" / "field"
LONG_NS = 2_500


@cache
def _cell() -> dict[str, Any]:
    doc = json.loads(gzip.decompress((FIELD / "gate_up_after_event_h200.json.gz").read_bytes()))
    cell: dict[str, Any] = doc["cells"][0]
    return cell


def _over_clean_by_context(op: str) -> dict[str, np.ndarray]:
    """Each of ``op``'s durations less its layer's median in the cycle's clean steps, by what the step's variant
    marks around it: an event right before the op (after the op before it), right after it, 2-4 ops before, none."""
    cell = _cell()
    ops, variants = cell["ops"][op], cell["variants"]
    durations = np.asarray([d[op] for _, d in cell["steps"]], dtype=np.int64)  # steps x layers
    kinds = np.asarray([v for v, _ in cell["steps"]])
    clean = np.median(durations[kinds < 0], axis=0)
    out: dict[str, list[float]] = {}
    for step, v in enumerate(kinds):
        marks = set() if v < 0 else set(variants[v])
        for layer, i in enumerate(ops):
            if v < 0:
                kind = "clean step"
            elif i - 1 in marks and i not in marks:
                kind = "event right before"
            elif i in marks:
                kind = "event right after"
            elif any(0 < i - m <= 4 for m in marks):
                kind = "event 2-4 ops before"
            else:
                kind = "no event near"
            out.setdefault(kind, []).append(float(durations[step, layer] - clean[layer]))
    return {k: np.asarray(v) for k, v in out.items()}


def test_gate_up_runs_long_after_an_event_node_and_never_without_one() -> None:
    """Under CUPTI, gate_up (the step's longest GEMV, 56 us) runs 2.5 us or more over its clean length in some of
    its launches right after an event node (the mlp_norm anchor's), and in about none of 83,000 elsewhere."""
    seen = _over_clean_by_context("gate_up")
    after = seen["event right before"]
    assert len(seen["clean step"]) > 10_000 and len(seen["no event near"]) > 10_000
    # one launch in 61,424 without an event near it; none in 21,888 clean steps' or right before an event
    assert np.mean(seen["clean step"] > LONG_NS) == 0 and np.sum(seen["no event near"] > LONG_NS) <= 1
    assert np.mean(seen["event right after"] > LONG_NS) == 0
    assert 0.05 <= np.mean(after > LONG_NS) <= 0.2, np.mean(after > LONG_NS)
    # the long launches are 3-6 us long, the size the events' long anchors read (3.5-5 us)
    long = after[after > LONG_NS]
    assert 3_000 <= np.median(long) <= 6_000 and long.max() < 7_000, long
    # the rest run about as clean ones do: no more than 2 of them (of over 500) in the 1-2.5 us between, where the
    # clean launches' p99 is 1.0 us over
    assert np.percentile(seen["clean step"], 99) <= 1_100
    assert np.sum((after > 1_100) & (after <= LONG_NS)) <= 2


def test_down_does_not_run_long_after_an_event_node() -> None:
    """The control: down, the other GEMV of the MLP, shows nothing of the kind in any context."""
    for kind, values in _over_clean_by_context("down").items():
        assert np.mean(values > LONG_NS) <= 0.005, (kind, np.mean(values > LONG_NS))


def test_the_long_anchor_reads_come_step_by_step() -> None:
    """In the events (the reach ladder, five passes), each mlp_norm anchor that the extra rounds read in 65 steps
    reads long in some of its steps and not in others: per step, at a share that differs between anchors, not once
    for a variant's every step. A median over a variant's 5 steps lands on either side."""
    doc = json.loads(gzip.decompress((FIELD / "scatter_ladder_h200.json.gz").read_bytes()))
    shares = []
    for cell in doc["cells"]:
        reads = {key: v for key, v in anchor_reads(cell).items() if cell["names"][key[1]] == "mlp_norm"}
        for role in ("far", "near"):
            mine = {j: np.asarray(v) for (r, j), v in reads.items() if r == role}
            middle = np.median([np.median(v) for v in mine.values()])
            shares += [float(np.mean(v - middle > LONG_NS)) for v in mine.values() if len(v) >= 30]
    assert len(shares) >= 12, shares
    mixed = [s for s in shares if 0 < s < 1]
    assert len(mixed) >= len(shares) - 1 and max(shares) < 0.8, shares
    assert max(shares) - min(shares) > 0.4, shares  # how often differs from anchor to anchor
