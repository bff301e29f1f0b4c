"""Numpy references the field tests share: CUPTI's ops of recorded clean steps, the timers' differences of recorded
timer steps, the union of intervals. Written with numpy only, not launchprobe's code, so that the tests compare the
pass's record with an independent computation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

FIELD = Path(__file__).parent / "fixtures" / "field"
BAR_NS, BAR_REL = 1_000.0, 0.15  # the op bar, written out here rather than imported


def cells_by_shape_and_batch(fixture: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The cells of a timer field fixture (tests/fixtures/field/FIXTURE), by (shape, batch)."""
    doc = json.loads(gzip.decompress((FIELD / fixture).read_bytes()))
    return {(c["shape"], c["batch"]): c for c in doc["cells"]}


def within_bar(miss: float, cupti: float) -> bool:
    """A reading ``miss`` off CUPTI's value ``cupti`` is within 1 us or 15% of it."""
    return abs(miss) <= max(BAR_NS, BAR_REL * abs(cupti))


def cupti_ops(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per clean step and op, CUPTI's op start and end (first kernel's start, last kernel's end): ``cell`` holds
    ``counts`` (kernels per op) and ``cupti_kernels`` (steps x kernels x [start, end])."""
    bounds = np.cumsum([0, *cell["counts"]])
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64)
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)
    return starts, ends


def cupti_clean(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per op, CUPTI's clean median duration and gap before it (the op's start less the latest end before it; 0 for
    op 0)."""
    starts, ends = cupti_ops(cell)
    running_end = np.maximum.accumulate(ends, axis=1)
    gaps = np.concatenate([[0.0], np.median(starts[:, 1:] - running_end[:, :-1], axis=0)])
    return np.median(ends - starts, axis=0), gaps


def timer_differences(cell: dict[str, Any], *, scaled: bool = False) -> dict[int, float]:
    """Per op a timer pair read, the median over its steps of timer_i - timer_(i-1): ``cell`` holds ``timer_steps``
    ([variant, reference ns, [[op, reading ns], ...]]). ``scaled``: each difference x clean / reference (``cell``'s
    ``clean_step_ms``), as the pass read the pairs until 2026-12-02 07:00 UTC, which the fixtures' recorded values
    are."""
    clean_ns = cell["clean_step_ms"] * 1e6 if scaled else 0.0
    diffs: dict[int, list[float]] = {}
    for _, reference, ends in cell["timer_steps"]:
        marks = dict(ends)
        for i, t in marks.items():
            if i - 1 in marks:
                diffs.setdefault(i, []).append((t - marks[i - 1]) * (clean_ns / reference if scaled else 1.0))
    return {i: float(np.median(v)) for i, v in diffs.items()}


def interval_union(starts: np.ndarray, ends: np.ndarray) -> float:
    """The union of intervals: sorted by start, each adds what it reaches past the furthest end before it."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(float), ends[order].astype(float)
    reach = np.maximum.accumulate(np.concatenate(([-np.inf], e[:-1])))
    return float(np.sum(np.maximum(0.0, e - np.maximum(s, reach))))


def anchor_reads(cell: dict[str, Any]) -> dict[tuple[str, int], list[int]]:
    """A recorded pass's far and near pairs as read: per (role, anchor op), each step's end(target) - end(anchor),
    ns (the variant's events taken in pairs, in op order)."""
    roles = cell["plan"]["roles"]
    reads: dict[tuple[str, int], list[int]] = {}
    for variant, _, ends, *_ in cell["steps"]:
        if roles[variant] in ("far", "near"):
            at = {int(op): t for op, t in ends}
            timed = sorted(at)
            for j, target in zip(timed[0::2], timed[1::2]):
                reads.setdefault((roles[variant], j), []).append(at[target] - at[j])
    return reads
