"""Whether one group of measurements stands out above the others, or reads only as high as the highest of many
groups drawn alike would on this noise: a permutation test on ranks.

The sampled kernel pass times a few hundred variants a few steps each. On a host that moves between speeds the
slowest variant's median then reads high by the noise of many medians alone (the H200's eager host: +24% for one
of 325 variants that carry two events each, against +0.4% for all the steps together). The test asks how often
the variant labels, shuffled over the same steps (each variant keeping its count), give a group as far up the
ranks as the highest measured one. Ranks (ties averaged) keep a few host stalls from deciding it; each group's mean
rank is standardized by its count, so that a variant of 65 steps and one of 5 are judged on the same scale. It asks
about the highest group only: many groups each a little off (which an omnibus test such as Kruskal-Wallis finds
on such a host) do not make one stand out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PERMUTATIONS = 500  # p to about 0.01 near 0.05
MEDIAN_SHUFFLES = 100  # of them, for the highest median's 95th percentile (a sort each)
SEED = 0  # a fixed seed: the same steps give the same answer in every report


@dataclass(frozen=True)
class Standout:
    p: float  # how often shuffled labels reach the highest standardized mean rank measured (1 + hits) / (1 + N)
    highest_median_q95: float  # the 95th percentile, over the shuffles, of the highest group median


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1 .. N, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1, dtype=np.float64)
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    for start, end in zip(starts, ends):
        if end - start > 1:
            ranks[order[start:end]] = (start + 1 + end) / 2
    return ranks


def highest_group(
    labels: npt.ArrayLike, values: npt.ArrayLike, permutations: int = PERMUTATIONS, seed: int = SEED
) -> Standout:
    """The permutation test of the module docstring on ``values`` grouped by ``labels``. With one group, or one
    value, nothing can stand out: p is 1."""
    x = np.asarray(values, dtype=np.float64)
    _, groups, counts = np.unique(np.asarray(labels), return_inverse=True, return_counts=True)
    n = len(x)
    if n < 2 or len(counts) < 2:
        median = float(np.median(x)) if n else 0.0
        return Standout(p=1.0, highest_median_q95=median)
    ranks = average_ranks(x)
    # a group's mean rank under shuffling: mean (N + 1) / 2, variance (N^2 - 1) / 12 * (N - n) / (n (N - 1))
    # (positive: with two groups or more, none holds every value)
    spread = np.sqrt((n * n - 1) / 12 * (n - counts) / (counts * (n - 1)))

    def standardized_highest(g: np.ndarray) -> float:
        mean_rank = np.bincount(g, weights=ranks, minlength=len(counts)) / counts
        return float(((mean_rank - (n + 1) / 2) / spread).max())

    starts = np.cumsum(counts) - counts
    low, high = starts + (counts - 1) // 2, starts + counts // 2

    def highest_median(g: np.ndarray) -> float:
        ordered = x[np.lexsort((x, g))]  # by group, then by value: each group's median from its middle
        return float(((ordered[low] + ordered[high]) / 2).max())

    measured = standardized_highest(groups)
    rng = np.random.default_rng(seed)
    hits, medians = 0, []
    for k in range(permutations):
        shuffled = rng.permutation(groups)
        hits += standardized_highest(shuffled) >= measured - 1e-9
        if k < MEDIAN_SHUFFLES:
            medians.append(highest_median(shuffled))
    return Standout(p=(1 + hits) / (1 + permutations), highest_median_q95=float(np.percentile(medians, 95)))
