"""Numpy references the field tests of the timer pairs share: CUPTI's ops of recorded clean steps, and the timers'
differences of recorded timer steps. Written with numpy only, not launchprobe's code, so that the tests compare the
pass's record with an independent computation."""

from __future__ import annotations

from typing import Any

import numpy as np


def cupti_ops(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per clean step and op, CUPTI's op start and end (first kernel's start, last kernel's end): ``cell`` holds
    ``counts`` (kernels per op) and ``cupti_kernels`` (steps x kernels x [start, end])."""
    bounds = np.cumsum([0, *cell["counts"]])
    kernels = np.asarray(cell["cupti_kernels"], dtype=np.int64)
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)
    return starts, ends


def timer_differences(cell: dict[str, Any]) -> dict[int, float]:
    """Per op a timer pair read, the median over its steps of (timer_i - timer_(i-1)) x clean / reference:
    ``cell`` holds ``clean_step_ms`` and ``timer_steps`` ([variant, reference ns, [[op, reading ns], ...]])."""
    clean_ns = cell["clean_step_ms"] * 1e6
    diffs: dict[int, list[float]] = {}
    for _, reference, ends in cell["timer_steps"]:
        marks = dict(ends)
        for i, t in marks.items():
            if i - 1 in marks:
                diffs.setdefault(i, []).append((t - marks[i - 1]) * clean_ns / reference)
    return {i: float(np.median(v)) for i, v in diffs.items()}
