"""Gap distribution and per-op aggregation of the per-kernel pass, on constructed rows (the stitching and the
checks are in tests/test_sampled_gaps.py)."""

from __future__ import annotations

from typing import Any

import pytest

from launchprobe.analysis.kernel_gaps import aggregate_ops, gap_distribution


def rows(*ops: tuple[str, int, int, int]) -> list[dict[str, Any]]:
    """(name, start, end, gap before) per op."""
    return [
        {"index": i, "op": name, "layer": i // 2, "start_ns": start, "end_ns": end, "duration_ns": end - start,
         "gap_before_ns": gap}
        for i, (name, start, end, gap) in enumerate(ops)
    ]  # fmt: skip


def test_empty_step() -> None:
    assert gap_distribution([])["total_ns"] == 0.0
    assert gap_distribution([])["count"] == 0
    assert aggregate_ops([], 100.0) == []


def test_distribution_keeps_signed_gaps() -> None:
    dist = gap_distribution([0, 10, 20, 30, 1000])
    assert dist["p50_ns"] == 20 and dist["max_ns"] == 1000 and dist["total_ns"] == 1060 and dist["count"] == 5
    # an overlap (programmatic dependent launch, or noise in a stitched step) is a negative gap, not a zero
    assert gap_distribution([-200, 100])["total_ns"] == -100


def test_per_op_aggregation() -> None:
    step = rows(("norm", 0, 10, 0), ("gemm", 20, 40, 10), ("norm", 50, 60, 10), ("gemm", 70, 100, 10))
    table = {row["op"]: row for row in aggregate_ops(step, step_ns=100.0)}
    assert list(table) == ["norm", "gemm"]
    assert table["norm"]["count"] == 2 and table["norm"]["duration_ns_median"] == 10
    assert table["gemm"]["gap_ns_median"] == 10
    assert table["norm"]["gap_ns_median"] == 5  # gaps 0 (first op) and 10
    assert table["gemm"]["time_ns_total"] == 50 and table["gemm"]["gap_ns_total"] == 20
    assert sum(r["share_of_step"] for r in table.values()) == pytest.approx(1.0)
    assert aggregate_ops(step, 0.0)[0]["share_of_step"] == 0.0
