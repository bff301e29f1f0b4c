"""What decides which of its two values the gap into a graph piece after attention (piecewise o_proj) takes, as CUPTI
saw it in clean steps on an H200: not how far the host runs ahead, nor the pass's stage, but the process. Computed
with numpy from the recorded gaps; docs/performance.md (session of 2026-12-02 from 09:06 UTC) rests on it.

tests/fixtures/field/piece_mode_process_h200.json.gz (provenance inside), written by benchmarks/field/host_lead.py
--fixture from two processes on one machine four minutes apart:

- ``host_lead``: the clean piecewise runner of llama-3.2-1b b8 and b64 and llama-3-8b b8, and a second capture of
  it, 64 steps under CUPTI with the host's lead bounded to 1, 2, 3, 4 or 6 steps (before launching step k the host
  waits for step k - L's end) or free;
- ``stages``: llama-3.2-1b b8 through the kernel pass's stages (fresh, host pinned, variants captured, cycles run,
  the whole pass, variants deleted), 64 steps each with the lead free and bounded to 2.

Per run, per step: the idle before it and the gap before each o_proj (ns).
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "piece_mode_process_h200.json.gz"
SPLIT_NS = 2_200  # between the two values (tests/test_piece_modes_field.py)


@cache
def _runs() -> list[dict[str, Any]]:
    return list(json.loads(gzip.decompress(FIXTURE.read_bytes()))["runs"])


def _medians(run: dict[str, Any]) -> np.ndarray:
    """Each step's median gap before o_proj over its layers."""
    return np.median(np.array([step[1:] for step in run["steps"]], dtype=np.float64), axis=1)


def _low_share(run: dict[str, Any]) -> float:
    return float(np.mean(_medians(run) < SPLIT_NS))


def _select(process: str, shape: str, batch: int) -> list[dict[str, Any]]:
    return [r for r in _runs() if r["process"] == process and r["shape"] == shape and r["batch"] == batch]


def test_the_fixture_holds_both_processes_whole() -> None:
    lead = [r for r in _runs() if r["process"] == "host_lead"]
    stages = [r for r in _runs() if r["process"] == "stages"]
    assert len(lead) == 3 * 2 * 6 and len(stages) == 6 * 2
    for run in _runs():
        assert len(run["steps"]) == 64
        layers = 16 if run["shape"] == "llama-3.2-1b" else 32
        assert all(len(step) == 1 + layers for step in run["steps"])


@pytest.mark.parametrize(
    ("shape", "batch"), [("llama-3.2-1b", 8), ("llama-3.2-1b", 64), ("llama-3-8b", 8)]
)  # fmt: skip
def test_in_one_process_the_low_value_at_every_lead_and_capture(shape: str, batch: int) -> None:
    runs = _select("host_lead", shape, batch)
    assert {(r["label"], r["lead"]) for r in runs} == {
        (c, ld) for c in ("clean", "recaptured") for ld in (1, 2, 3, 4, 6, 0)
    }
    for run in runs:
        assert _low_share(run) >= 0.9, (run["label"], run["lead"], _low_share(run))
    free = next(r for r in runs if r["label"] == "clean" and r["lead"] == 0)
    bound = next(r for r in runs if r["label"] == "clean" and r["lead"] == 1)
    # free, the host launched a step in well under the GPU's time: it ran ahead, and the gap stayed low
    assert free["host_ms"] < 0.9 * free["gpu_ms"]
    # bounded to one step, the host waited for the GPU every step: no lead, and the same low value
    assert bound["host_ms"] > 0.97 * bound["gpu_ms"]
    assert abs(float(np.median(_medians(free))) - float(np.median(_medians(bound)))) < 150


def test_in_another_process_the_high_value_at_every_stage_of_the_pass() -> None:
    runs = _select("stages", "llama-3.2-1b", 8)
    assert [r["label"] for r in runs if r["lead"] == 0] == ["fresh", "pinned", "variants", "cycles", "pass", "deleted"]
    for run in runs:
        assert _low_share(run) <= 0.35, (run["label"], run["lead"], _low_share(run))
    # the same cell, code and leads, four minutes earlier in another process: the low value nearly throughout
    fresh = next(r for r in runs if r["label"] == "fresh" and r["lead"] == 0)
    other = next(r for r in _select("host_lead", "llama-3.2-1b", 8) if r["label"] == "clean" and r["lead"] == 0)
    assert _low_share(fresh) <= 0.05 and _low_share(other) >= 0.95


def test_the_two_values_are_the_same_in_both_processes() -> None:
    low = np.concatenate([m[m < SPLIT_NS] for m in map(_medians, _runs())])
    high = np.concatenate([m[m >= SPLIT_NS] for m in map(_medians, _runs())])
    assert len(low) > 1000 and len(high) > 500
    for values in (low, high):
        assert np.percentile(values, 90) - np.percentile(values, 10) < 400
    apart = float(np.median(high) - np.median(low))
    assert 900 <= apart <= 1_400, apart  # as in the 07:11 pass (tests/test_piece_modes_field.py)


def test_the_steps_first_after_an_idle_gpu_are_low_where_the_rest_are_high() -> None:
    """In the high process, the first steps of a free run (after the sync that ends the warm-up) take the low value
    before the rest settle high: the pattern of the 07:11 pass's cycles."""
    fresh = next(r for r in _select("stages", "llama-3.2-1b", 8) if r["label"] == "fresh" and r["lead"] == 0)
    medians = _medians(fresh)
    assert (medians[:2] < SPLIT_NS).all()
    assert (medians[4:] >= SPLIT_NS).mean() >= 0.95
