"""The permutation test on ranks that tells whether one group of measurements stands out (analysis/standout.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from launchprobe.analysis.standout import average_ranks, highest_group


def test_average_ranks_share_ties_as_scipy_does() -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 20, size=500).astype(float)  # many ties
    assert average_ranks(values) == pytest.approx(stats.rankdata(values, method="average"))
    assert list(average_ranks(np.array([2.0, 1.0, 2.0]))) == [2.5, 1.0, 2.5]


def _groups(rng: np.random.Generator, n_groups: int, size: int) -> tuple[list[int], np.ndarray]:
    labels = [g for g in range(n_groups) for _ in range(size)]
    return labels, stats.t.rvs(df=3, size=len(labels), random_state=rng)  # heavy tails, as a moving host's


def test_groups_drawn_alike_give_a_uniform_p() -> None:
    # 40 data sets of 120 groups x 5 drawn from one heavy-tailed distribution: p should be uniform, so about 5%
    # of them at 0.05 or under, and the mean near one half
    rng = np.random.default_rng(11)
    ps = [highest_group(*_groups(rng, 120, 5)).p for _ in range(40)]
    assert np.mean(np.asarray(ps) <= 0.05) <= 0.15
    assert 0.35 <= float(np.mean(ps)) <= 0.65


def test_one_shifted_group_stands_out() -> None:
    rng = np.random.default_rng(5)
    labels, values = _groups(rng, 120, 5)
    values[:5] += 4.0  # group 0: every step well up
    assert highest_group(labels, values).p == pytest.approx(1 / 501)


def test_a_large_group_a_little_up_stands_out_as_a_small_one_far_up_would() -> None:
    # the mean rank is standardized by the group's count: 65 steps 0.6 sigma up stand out, where their median
    # alone would not reach the highest of 120 noisy 5-step medians
    rng = np.random.default_rng(9)
    labels, values = _groups(rng, 120, 5)
    labels += [120] * 65
    big = stats.t.rvs(df=3, size=65, random_state=rng) + 0.6
    values = np.concatenate([values, big])
    medians = [np.median(values[np.asarray(labels) == g]) for g in range(121)]
    assert int(np.argmax(medians)) != 120  # the big group is not the highest median
    assert highest_group(labels, values).p < 0.05


def test_nothing_stands_out_of_one_group() -> None:
    assert highest_group([0, 0, 0], [1.0, 2.0, 3.0]).p == 1.0
    assert highest_group([], []).p == 1.0


def test_the_shuffled_highest_median_against_a_plain_loop() -> None:
    # the 95th percentile of the highest group median over (100) shuffles, against numpy group by group over 400,
    # another seed
    rng = np.random.default_rng(2)
    labels = [g for g in range(60) for _ in range(5)]
    values = rng.normal(0.0, 1.0, len(labels))
    got = highest_group(labels, values).highest_median_q95
    lab = np.asarray(labels)
    other = np.random.default_rng(1234)
    highest = []
    for _ in range(400):
        shuffled = other.permutation(lab)
        highest.append(max(np.median(values[shuffled == g]) for g in range(60)))
    assert got == pytest.approx(float(np.percentile(highest, 95)), rel=0.15)
    assert got > float(np.percentile(values, 75))  # the highest of 60 medians of 5 reads well up the distribution
