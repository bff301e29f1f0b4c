"""The picture of a step kind: one typical step along time, GPU busy vs idle (docs/analysis.md, "Steps"), stored
in the kind's summary (``typical_step``) for the report's strip and ``--plot``'s step-kinds.png."""

from __future__ import annotations

import numpy as np

from launchprobe.analysis.intervals import IntArray, union_arrays
from launchprobe.analysis.steps import Step
from launchprobe.analysis.windows import Prepared
from launchprobe.run.schema import StepPicture
from launchprobe.run.schema import Window as WindowRecord

MAX_INTERVALS = 500  # busy intervals kept per picture: beyond it the shortest gaps merge (a PNG is ~1000 px wide)


def typical_instance(pairs: list[tuple[Step, WindowRecord]], span_p50_ns: int | None) -> tuple[Step, WindowRecord]:
    """The step whose owned period is nearest ``span_p50_ns`` (the first such in time)."""
    target = pairs[0][1].span_ns if span_p50_ns is None else span_p50_ns
    return min(pairs, key=lambda p: (abs(p[1].span_ns - target), p[1].start_ns))


def cap_intervals(starts: IntArray, ends: IntArray, cap: int) -> tuple[IntArray, IntArray, int]:
    """Disjoint sorted intervals reduced to at most ``cap`` by filling all but the ``cap - 1`` longest gaps
    (ties: the earlier gap kept); also the idle filled."""
    if len(starts) <= cap:
        return starts, ends, 0
    gaps = starts[1:] - ends[:-1]
    keep = np.sort(np.argsort(-gaps, kind="stable")[: max(cap - 1, 0)])
    merged = int(gaps.sum() - gaps[keep].sum())
    return np.r_[starts[0], starts[keep + 1]], np.r_[ends[keep], ends[-1]], merged


def step_picture(step: Step, record: WindowRecord, prep: Prepared, cap: int = MAX_INTERVALS) -> StepPicture:
    """The step's ops' union, clipped to the period it owns, from its start."""
    lo, hi = record.start_ns, record.end_ns
    s = np.clip(prep.op_start[step.rows], lo, hi)
    e = np.clip(prep.op_end[step.rows], lo, hi)
    keep = e > s
    starts, ends = union_arrays(s[keep], e[keep])
    busy = int((ends - starts).sum())
    shown_s, shown_e, merged = cap_intervals(starts - lo, ends - lo, cap)
    return StepPicture(
        window=f"{record.name} #{record.instance}",
        instance=record.instance if record.instance is not None else 0,
        start_ns=lo,
        end_ns=hi,
        busy_ns=busy,
        busy_intervals=[(int(a), int(b)) for a, b in zip(shown_s, shown_e, strict=True)],
        intervals=len(starts),
        merged_idle_ns=merged,
    )
