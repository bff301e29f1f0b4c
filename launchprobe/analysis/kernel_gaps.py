"""Per-kernel gaps of one decode step from CUDA-event timestamps: pure arithmetic, integer nanoseconds.

Inputs per op, in launch order: the time its end event fired (from the step's first event), and its duration
measured where no host wait can intrude (events around the op inside a captured graph). The op's start is its end
minus its duration; the gap before it is that start minus the latest end of the ops before it. docs/gaps.md says
why the start event of a host-launched op cannot be trusted and how the event-cost correction works.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from launchprobe.measure.samples import quantile


@dataclass(frozen=True)
class OpTiming:
    op: str
    layer: int
    host_launched: bool  # launched from Python (eager), not replayed from a graph


def step_rows(
    ops: Sequence[OpTiming],
    end_ns: Sequence[int],
    duration_ns: Sequence[int],
    *,
    host_event_ns: float,
    node_event_ns: float,
    events_per_op: int = 2,
) -> list[dict[str, Any]]:
    """One row per op: start, end, duration, gap before it, and the gap corrected for the events' own cost.

    The correction removes, from a positive gap only, what the instrumentation added between two ops:
    ``events_per_op`` event records on the host (host-launched ops, when the GPU was waiting on the host), or as
    many event nodes (graph-replayed ops). A zero gap needs no correction: the GPU did not wait.
    """
    if not (len(ops) == len(end_ns) == len(duration_ns)):
        raise ValueError("ops, end times and durations differ in length")
    rows: list[dict[str, Any]] = []
    latest_end: int | None = None
    for index, (op, end, duration) in enumerate(zip(ops, end_ns, duration_ns, strict=True)):
        end, duration = int(end), max(0, int(duration))
        start = max(0, end - duration) if latest_end is None else end - duration
        if latest_end is not None and start < latest_end:
            start = latest_end if end >= latest_end else start  # serial stream: no overlap with the previous op
        gap = 0 if latest_end is None else max(0, start - latest_end)
        cost = events_per_op * (host_event_ns if op.host_launched else node_event_ns)
        rows.append(
            {
                "index": index,
                "op": op.op,
                "layer": op.layer,
                "host_launched": op.host_launched,
                "start_ns": start,
                "end_ns": end,
                "duration_ns": end - start,
                "gap_before_ns": gap,
                "gap_corrected_ns": int(max(0.0, gap - cost)) if gap > 0 else 0,
            }
        )
        latest_end = end if latest_end is None else max(latest_end, end)
    return rows


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


def compare_with_cupti(
    event_rows: Sequence[dict[str, Any]], cupti_starts: Sequence[int], cupti_ends: Sequence[int]
) -> dict[str, Any]:
    """Events against CUPTI for the same step: total gap, busy time, median gap (per op vs per kernel)."""
    from launchprobe.analysis.intervals import interval_stats

    stats = interval_stats(np.asarray(cupti_starts, dtype=np.int64), np.asarray(cupti_ends, dtype=np.int64))
    event_gaps = [r["gap_before_ns"] for r in event_rows]
    event_busy = sum(r["duration_ns"] for r in event_rows)
    cupti_gaps = stats.gaps_ns.tolist()

    def rel(a: float, b: float) -> float | None:
        return abs(a - b) / b if b else None

    result: dict[str, Any] = {
        "events_total_gap_ns": float(sum(event_gaps)),
        "cupti_total_gap_ns": float(stats.idle_ns),
        "events_busy_ns": float(event_busy),
        "cupti_busy_ns": float(stats.busy_ns),
        "events_median_gap_ns": float(statistics.median(event_gaps)) if event_gaps else 0.0,
        "cupti_median_gap_ns": float(statistics.median(cupti_gaps)) if cupti_gaps else 0.0,
        "events_ops": len(event_rows),
        "cupti_kernels": len(cupti_starts),
    }
    result["total_gap_rel_diff"] = rel(result["events_total_gap_ns"], result["cupti_total_gap_ns"])
    result["busy_rel_diff"] = rel(result["events_busy_ns"], result["cupti_busy_ns"])
    result["median_gap_abs_diff_ns"] = abs(result["events_median_gap_ns"] - result["cupti_median_gap_ns"])
    # The agreement bar: totals within 5%, median gap within 1 us.
    total_ok = result["total_gap_rel_diff"] is None or result["total_gap_rel_diff"] <= 0.05
    busy_ok = result["busy_rel_diff"] is None or result["busy_rel_diff"] <= 0.05
    result["agrees"] = bool(total_ok and busy_ok and result["median_gap_abs_diff_ns"] <= 1000)
    return result
