"""Gap arithmetic, per-op aggregation and the CUPTI comparison of the per-kernel pass, on constructed steps."""

from __future__ import annotations

import pytest

from launchprobe.analysis.kernel_gaps import (
    OpTiming,
    aggregate_ops,
    compare_with_cupti,
    gap_distribution,
    step_rows,
)


def ops(*names: str, host: bool = True) -> list[OpTiming]:
    return [OpTiming(name, 0, host_launched=host) for name in names]


def test_gaps_from_end_times_and_durations() -> None:
    # ends at 10, 30, 35 with durations 10, 5, 5: starts 0, 25, 30 -> gaps 15 then 0
    rows = step_rows(ops("a", "b", "c"), [10, 30, 35], [10, 5, 5], host_event_ns=2, node_event_ns=1)
    assert [r["start_ns"] for r in rows] == [0, 25, 30]
    assert [r["gap_before_ns"] for r in rows] == [0, 15, 0]
    assert [r["duration_ns"] for r in rows] == [10, 5, 5]
    # host-launched: 2 event records of 2 ns each removed from a positive gap only
    assert [r["gap_corrected_ns"] for r in rows] == [0, 11, 0]


def test_graph_replayed_ops_are_corrected_by_the_node_cost() -> None:
    rows = step_rows(ops("a", "b", host=False), [100, 300], [100, 150], host_event_ns=5000, node_event_ns=20)
    assert rows[1]["gap_before_ns"] == 50
    assert rows[1]["gap_corrected_ns"] == 10


def test_overlapping_estimate_is_clamped_to_a_serial_stream() -> None:
    # the second op's duration (measured elsewhere) is longer than the time since the first ended
    rows = step_rows(ops("a", "b"), [100, 150], [100, 80], host_event_ns=0, node_event_ns=0)
    assert rows[1]["start_ns"] == 100 and rows[1]["duration_ns"] == 50 and rows[1]["gap_before_ns"] == 0


def test_single_op_and_empty_step() -> None:
    rows = step_rows(ops("only"), [7], [7], host_event_ns=1, node_event_ns=1)
    assert rows[0]["gap_before_ns"] == 0 and rows[0]["start_ns"] == 0
    assert step_rows([], [], [], host_event_ns=1, node_event_ns=1) == []
    assert gap_distribution([])["total_ns"] == 0.0
    assert aggregate_ops([], 100.0) == []
    with pytest.raises(ValueError):
        step_rows(ops("a"), [1, 2], [1], host_event_ns=0, node_event_ns=0)


def test_distribution_and_per_op_aggregation() -> None:
    dist = gap_distribution([0, 10, 20, 30, 1000])
    assert dist["p50_ns"] == 20 and dist["max_ns"] == 1000 and dist["total_ns"] == 1060 and dist["count"] == 5
    rows = step_rows(
        [OpTiming("norm", 0, True), OpTiming("gemm", 0, True), OpTiming("norm", 1, True), OpTiming("gemm", 1, True)],
        [10, 40, 60, 100],
        [10, 20, 10, 30],
        host_event_ns=0,
        node_event_ns=0,
    )
    table = {row["op"]: row for row in aggregate_ops(rows, step_ns=100.0)}
    assert list(table) == ["norm", "gemm"]
    assert table["norm"]["count"] == 2 and table["norm"]["duration_ns_median"] == 10
    assert table["gemm"]["gap_ns_median"] == 10  # gaps 10 and 10 before the two gemms
    assert table["norm"]["gap_ns_median"] == 5  # gaps 0 (first op) and 10
    assert sum(r["share_of_step"] for r in table.values()) == pytest.approx(1.0)


def test_cupti_comparison_agrees_and_disagrees() -> None:
    rows = step_rows(ops("a", "b", "c"), [1000, 4000, 6000], [1000, 2000, 1000], host_event_ns=0, node_event_ns=0)
    same = compare_with_cupti(rows, [0, 2000, 5000], [1000, 4000, 6000])
    assert same["agrees"] and same["total_gap_rel_diff"] == 0 and same["busy_rel_diff"] == 0
    # CUPTI sees the middle op as two kernels with a 500 ns gap inside it: busy differs by 500 of 4000
    split = compare_with_cupti(rows, [0, 2000, 3500, 5000], [1000, 3000, 4000, 6000])
    assert split["cupti_kernels"] == 4 and split["events_ops"] == 3
    assert not split["agrees"]
    assert split["busy_rel_diff"] == pytest.approx(500 / 3500)
