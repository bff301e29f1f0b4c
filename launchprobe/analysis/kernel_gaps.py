"""Per-kernel gaps of one decode step: the op record, the gap distribution and the per-op table (integer ns).

The rows themselves (start, end, duration and gap before every op) come from analysis/sampled.py, which stitches
them from sampled CUDA-event streams. Runs before that subtracted a linear "event cost" from every gap; that
correction is gone wherever it is unsound (docs/gaps.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launchprobe.measure.samples import quantile


@dataclass(frozen=True)
class OpTiming:
    op: str
    layer: int
    host_launched: bool  # launched from Python (eager), not replayed from a graph


def gap_distribution(gaps: Sequence[int]) -> dict[str, float]:
    """p50/p90/p99/max/total of gaps (ns); zeros for an empty step."""
    if not gaps:
        return {"p50_ns": 0.0, "p90_ns": 0.0, "p99_ns": 0.0, "max_ns": 0.0, "total_ns": 0.0, "count": 0}
    values = [float(g) for g in gaps]
    return {
        "p50_ns": quantile(values, 0.5),
        "p90_ns": quantile(values, 0.9),
        "p99_ns": quantile(values, 0.99),
        "max_ns": max(values),
        "total_ns": sum(values),
        "count": len(values),
    }


def aggregate_ops(rows: Sequence[dict[str, Any]], step_ns: float) -> list[dict[str, Any]]:
    """Per op name, in first-launch order: count, median duration, median gap before, share of the step."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["op"], []).append(row)
    out = []
    for name, members in groups.items():
        durations = [r["duration_ns"] for r in members]
        gaps = [r["gap_before_ns"] for r in members]
        out.append(
            {
                "op": name,
                "count": len(members),
                "duration_ns_median": float(statistics.median(durations)),
                "gap_ns_median": float(statistics.median(gaps)),
                "gap_ns_total": float(sum(gaps)),
                "time_ns_total": float(sum(durations)),
                "share_of_step": (sum(durations) + sum(gaps)) / step_ns if step_ns > 0 else 0.0,
            }
        )
    return out
