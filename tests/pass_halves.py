"""A recorded sampled pass split into two halves of its cycles, for the field tests of the gap total's error."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


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
