"""A recorded sampled pass (as ``benchmarks/field/gap_total_fixture.py`` cuts it) stitched again, and split into two
halves of its cycles, for the field tests of the gap total."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from launchprobe.analysis import sampled
from launchprobe.analysis.kernel_gaps import OpTiming


def recorded_ops(cell: dict[str, Any]) -> list[OpTiming]:
    """The recorded pass's ops as the stitch takes them."""
    return [OpTiming(n, layer, h) for n, layer, h in zip(cell["names"], cell["layers"], cell["host_launched"])]


def stitch_recorded(cell: dict[str, Any], steps: Sequence[Any]) -> sampled.Stitched:
    """``steps`` of the recorded pass (all or some, [variant, length, ends, reference] in run order) stitched by
    launchprobe as the pass stitched them: its plan, reach, durations and end shifts, at the clean steps' median."""
    raw = cell["plan"]
    plan = sampled.Plan(len(cell["names"]), raw["spacing"], raw["variants"], raw["roles"], cell["reach"])
    sampled_steps = [
        sampled.SampledStep(v, length, {int(o): t for o, t in ends}, ref) for v, length, ends, ref in steps
    ]
    clean = float(np.median(cell["clean_in_cycles"]))
    return sampled.stitch(recorded_ops(cell), sampled_steps, plan, cell["durations"], clean, cell["end_shifts"])


def random_halves(steps: Sequence[Any], halvings: int, seed: int = 12) -> Iterator[tuple[list[Any], list[Any]]]:
    """``halvings`` random splits of a pass's steps (as recorded, [variant, ...] in run order) into two halves of
    its cycles, numpy's seed: the k-th step of each variant is its k-th cycle (extra rounds fold over the cycles),
    so each half keeps every variant, and a wrap pair's two steps, which run in one cycle, stay together."""
    cycle: list[int] = []
    seen: dict[int, int] = {}
    for variant, *_ in steps:
        cycle.append(seen.get(variant, 0))
        seen[variant] = seen.get(variant, 0) + 1
    cycles = int(np.median(list(seen.values())))
    rng = np.random.default_rng(seed)
    for _ in range(halvings):
        half = set(rng.permutation(cycles)[: cycles // 2].tolist())
        first = [s for s, k in zip(steps, cycle) if k % cycles in half]
        second = [s for s, k in zip(steps, cycle) if k % cycles not in half]
        yield first, second
