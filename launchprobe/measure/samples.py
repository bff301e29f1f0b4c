"""A measurement keeps its raw samples and knows its own noise (after torch.utils.benchmark's Measurement)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty sequence: ``np.quantile``'s default method."""
    if not len(values):
        raise ValueError("quantile of no values")
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


@dataclass(frozen=True)
class Samples:
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Samples:
        if not values:
            raise ValueError("a measurement needs at least one sample")
        return cls(tuple(float(v) for v in values))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def p90(self) -> float:
        return quantile(self.values, 0.9)

    @property
    def iqr(self) -> float:
        return quantile(self.values, 0.75) - quantile(self.values, 0.25)

    @property
    def relative_noise(self) -> float:
        """IQR over median: the spread inside which two medians cannot be told apart."""
        median = self.median
        return self.iqr / median if median else math.inf
