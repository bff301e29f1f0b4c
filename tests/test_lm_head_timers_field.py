"""lm_head's timer pair at batch 1 and 8 on an H200, without CUPTI and under it: CUPTI lengthens the op itself (a
memset and a GEMM in one cuBLAS call), so its duration taken off a clean pair reads the gap short, and the pair read
under CUPTI measures by how much. Computed with numpy from the recorded timer readings and CUPTI's clean steps, then
set beside ``timer_pairs.span_effects`` on the same readings. docs/gaps.md (timer pairs) rests on it.

tests/fixtures/field/lm_head_timers_h200.json.gz (provenance inside), cut by benchmarks/field/lm_head_fixture.py from
the piecewise matrix of 2026-12-02 12:31 UTC (1B and 8B, batch 1 and 8): per pass, final_norm's and lm_head's timer
steps without CUPTI and under it, every pair's median both ways, the last three GPU activities of CUPTI's clean
steps, and what the pass recorded. The timer readings are the GPU's global clock (about 1.8e18 ns): differences are
taken in integers, a float64 holds them only to 256 ns.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launchprobe.analysis import timer_pairs

FIXTURE = Path(__file__).parent / "fixtures" / "field" / "lm_head_timers_h200.json.gz"
BAR_NS = 1_000.0  # the op bar at lm_head's gap (1 us; 15% of CUPTI's 1.3-1.4 us is less)


@cache
def _cells() -> list[dict[str, Any]]:
    return list(json.loads(gzip.decompress(FIXTURE.read_bytes()))["cells"])


def _spans(rows: list[list[int | None]]) -> np.ndarray:
    """lm_head's pair (its timer less final_norm's) in the steps of the variant timing it, ns, in integers."""
    return np.array([r[3] - r[2] for r in rows if r[2] is not None and r[3] is not None], dtype=np.int64)


def _numpy(cell: dict[str, Any]) -> dict[str, float]:
    clean, under = _spans(cell["timer_steps"]), _spans(cell["timer_cupti_steps"])
    medians = np.array(cell["pair_medians"], dtype=float)
    typical = float(np.median(medians[:, 2] - medians[:, 1]))  # what CUPTI does to the typical pair
    tail = np.array(cell["cupti_tail"], dtype=np.int64)  # per clean step: final_norm, memset, GEMM [start, end]
    effect = float(np.median(under)) - float(np.median(clean))
    error = float(np.hypot(*[1.2533 * s.std() / len(s) ** 0.5 for s in (clean, under)]))
    return {
        "n_clean": len(clean),
        "n_under": len(under),
        "effect": effect,
        "error": error,
        "typical": typical,
        "inner_gap": float(np.median(tail[:, 2, 0] - tail[:, 1, 1])),
        "memset": float(np.median(tail[:, 1, 1] - tail[:, 1, 0])),
    }


def _lm_head(cell: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in cell["recorded"]["classes"] if c["op"] == "lm_head")


def test_the_fixture_holds_lm_head_at_batch_1_and_8_of_both_models() -> None:
    assert {(c["shape"], c["batch"]) for c in _cells()} == {
        (shape, batch) for shape in ("llama-3.2-1b", "llama-3-8b") for batch in (1, 8)
    }
    for cell in _cells():
        assert cell["names"] == ["down", "final_norm", "lm_head"]
        numbers = _numpy(cell)
        assert numbers["n_clean"] == 192 and numbers["n_under"] == 64  # four rounds of 48, of 16


@pytest.mark.parametrize("index", range(4))
def test_lm_head_is_a_memset_and_a_gemm_whose_gap_cupti_sees(index: int) -> None:
    cell = _cells()[index]
    assert cell["cupti_tail_names"][1].startswith("Memset") and "nvjet" in cell["cupti_tail_names"][2]
    numbers = _numpy(cell)
    assert 600 <= numbers["memset"] <= 1_200  # a 0.9 us memset
    assert 1_500 <= numbers["inner_gap"] <= 2_500  # then 1.8-2.1 us to the GEMM, inside the op's duration


@pytest.mark.parametrize("index", range(4))
def test_cupti_lengthens_lm_heads_pair_far_beyond_the_typical_pair(index: int) -> None:
    cell = _cells()[index]
    numbers = _numpy(cell)
    # the pair (gap and op) 1.5-2.3 us longer under CUPTI, at 5 standard errors or more; the typical pair 0.2-0.3
    assert 1_400 <= numbers["effect"] <= 2_500 and numbers["effect"] >= 5 * numbers["error"]
    assert 100 <= numbers["typical"] <= 400
    # the plain reading (the pair less CUPTI's duration) is short in every cell: CUPTI's duration holds that effect
    assert _lm_head(cell)["gap_diff_ns"] < -250


def test_lm_head_agrees_plain_or_like_for_like_in_three_of_four_cells() -> None:
    plain = {(c["shape"], c["batch"]): _lm_head(c)["gap_diff_ns"] for c in _cells()}
    likes = {}
    for cell in _cells():
        numbers = _numpy(cell)
        likes[(cell["shape"], cell["batch"])] = _lm_head(cell)["gap_diff_ns"] + numbers["effect"] - numbers["typical"]
    assert {key for key, diff in plain.items() if abs(diff) <= BAR_NS} == {("llama-3.2-1b", 8), ("llama-3-8b", 1)}
    assert {key for key, like in likes.items() if abs(like) <= BAR_NS} == {("llama-3.2-1b", 1), ("llama-3.2-1b", 8)}
    # 8B b8 misses both ways, on either side of CUPTI's gap: -1.11 us plain, +1.0-1.1 like for like
    assert -1_200 < plain[("llama-3-8b", 8)] < -1_000 and 1_000 < likes[("llama-3-8b", 8)] < 1_100
    # like for like reads long by 0.4-1.2 us in every cell: the pair's own excess at a GEMM beyond the typical one
    assert all(300 < like < 1_200 for like in likes.values())


@pytest.mark.parametrize("index", range(4))
def test_span_effects_reproduce_numpy(index: int) -> None:
    cell = _cells()[index]
    numbers = _numpy(cell)
    lm_head = cell["ops"][2]
    clean = {lm_head: [float(v) for v in _spans(cell["timer_steps"])]}
    under = {lm_head: [float(v) for v in _spans(cell["timer_cupti_steps"])]}
    for op, plain, cupti in cell["pair_medians"]:  # the other pairs as one reading at their median
        if op != lm_head:
            clean[op], under[op] = [plain], [cupti]
    names = {op: f"op{op}" for op in clean} | {lm_head: "lm_head"}
    effects = timer_pairs.span_effects([names.get(i, "") for i in range(lm_head + 1)], clean, under)
    assert effects.typical_ns == pytest.approx(numbers["typical"], abs=0.5)
    assert effects.classes["lm_head"].effect_ns == pytest.approx(numbers["effect"] - numbers["typical"], abs=0.5)
    assert effects.classes["lm_head"].noise_ns == pytest.approx(numbers["error"], rel=0.01)
