"""Compare two runs with a noise-aware gate (pure functions; the CLI renders and exits).

Rows are matched by (mode, batch) for classify runs and by (window name, device) for analyze runs; windows
that share a name (instances of one NVTX range) are pooled, so their spread across instances is the noise.

The rule, for each matched row and metric (docs/reports.md):

- change: (new - base) / base; for a 0..1 fraction (GPU idle) the difference in points instead
- unchanged: |change| <= threshold
- inconclusive: |change| > threshold, but within the noise: inside the noise band (IQR_base + IQR_new) / 2
  (relative to the base median; the two IQR boxes still overlap), or, where both sides keep >= 5 raw samples,
  a Mann-Whitney U test cannot tell them apart (two-sided p >= 0.01)
- regressed / improved: beyond the threshold and the noise, in the worse / better direction

Only regressions fail a gate; a difference inside the noise never does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from launchprobe.errors import EXIT_INCOMPARABLE, EXIT_OK, EXIT_REGRESSION
from launchprobe.measure.samples import quantile
from launchprobe.run.files import finite_number
from launchprobe.run.schema import AnalyzeRun, ClassifyResult, ClassifyRun, Run, Window

Row = ClassifyResult | Window  # one matched row of a comparison

P_VALUE = 0.01  # significance level of the rank test
MIN_SAMPLES = 5  # fewer samples a side: no rank test, the IQR band alone decides

IMPROVED, REGRESSED, UNCHANGED, INCONCLUSIVE, MISSING = (
    "improved",
    "regressed",
    "unchanged",
    "inconclusive",
    "n/a",
)


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher_is_better: bool = False
    points: bool = False  # a 0..1 fraction: changes are differences in points, not ratios
    # record(s) -> samples of this metric; one value when nothing more is known
    values: Callable[[Sequence[Row]], list[float]] = lambda _: []
    # record(s) -> IQR when the run stored it without samples
    stored_iqr: Callable[[Sequence[Row]], float | None] = lambda _: None


def _step_samples(records: Sequence[Row]) -> list[float]:
    r = records[0]
    assert isinstance(r, ClassifyResult)
    if r.step_ms_samples:
        return list(r.step_ms_samples)
    return [r.step_ms_median] if r.step_ms_median is not None else []


def _tokens(records: Sequence[Row]) -> list[float]:
    batch = getattr(records[0], "batch", None)
    if batch is None:
        return []
    return [batch * 1e3 / s for s in _step_samples(records) if s > 0]


def _field(name: str, scale: float = 1.0) -> Callable[[Sequence[Row]], list[float]]:
    def values(records: Sequence[Row]) -> list[float]:
        return [x * scale for x in (finite_number(getattr(r, name, None)) for r in records) if x is not None]

    return values


def _step_iqr(records: Sequence[Row]) -> float | None:
    return finite_number(getattr(records[0], "step_ms_iqr", None))


CLASSIFY_METRICS = {
    m.name: m
    for m in (
        Metric("step_ms", "ms/step", "ms", values=_step_samples, stored_iqr=_step_iqr),
        Metric("tokens_per_s", "tokens/s", "tok/s", higher_is_better=True, values=_tokens),
        Metric("kernels_per_step", "kernels/step", "", values=_field("kernels_per_step")),
        Metric("idle", "GPU idle", "", points=True, values=_field("idle_fraction")),
        Metric("capture_s", "capture s", "s", values=_field("capture_s")),
        Metric("capture_mib", "capture MiB", "MiB", values=_field("capture_bytes", 1 / 2**20)),
    )
}
ANALYZE_METRICS = {
    m.name: m
    for m in (
        Metric("span_ms", "span ms", "ms", values=_field("span_ns", 1e-6)),
        Metric("busy_ms", "busy ms", "ms", values=_field("busy_ns", 1e-6)),
        Metric("idle", "GPU idle", "", points=True, values=_field("idle_fraction")),
        Metric("kernels", "kernels", "", values=_field("kernels")),
        Metric("gap_p50_us", "gap p50 us", "us", values=_field("gap_p50_ns", 1e-3)),
    )
}
DEFAULT_METRICS = {"classify": ("step_ms", "tokens_per_s"), "analyze": ("span_ms",)}


def metrics_for(kind: str) -> dict[str, Metric]:
    return ANALYZE_METRICS if kind == "analyze" else CLASSIFY_METRICS


@dataclass(frozen=True)
class Side:
    median: float | None
    iqr: float | None  # same unit as the median; None when the noise is unknown
    n: int  # raw samples behind the median


@dataclass(frozen=True)
class Change:
    key: str
    metric: str
    base: Side
    new: Side
    change: float | None  # relative change, or points for fractions
    band: float | None  # the noise band |change| must exceed (same unit as change)
    p_value: float | None
    call: str
    points: bool = False


@dataclass(frozen=True)
class Flip:
    key: str
    base: str
    new: str


@dataclass
class Comparison:
    kind: str
    threshold: float
    metrics: list[str]
    changes: list[Change] = field(default_factory=list)
    flips: list[Flip] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the runs cannot be compared (exit 4)
    notes: list[str] = field(default_factory=list)  # differences worth knowing that do not block

    def count(self, call: str) -> int:
        return sum(c.call == call for c in self.changes)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_INCOMPARABLE
        return EXIT_REGRESSION if self.count(REGRESSED) else EXIT_OK


# --- statistics ---


def iqr(values: Sequence[float]) -> float:
    return quantile(values, 0.75) - quantile(values, 0.25)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie and continuity corrected)."""
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return 1.0
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    rank_sum_a = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u = rank_sum_a - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def _side(values: list[float], stored_iqr: float | None) -> Side:
    """Median and IQR of one side; a statistic that overflows (values near the float limit) is unknown."""
    if not values:
        return Side(None, None, 0)
    if len(values) >= 2:
        return Side(_finite(statistics.median(values)), _finite(iqr(values)), len(values))
    return Side(_finite(values[0]), _finite(stored_iqr), 1)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def judge(
    metric: Metric, key: str, base_values: list[float], new_values: list[float], threshold: float,
    base_iqr: float | None = None, new_iqr: float | None = None,
) -> Change:  # fmt: skip
    """Call one change: improved, regressed, unchanged or inconclusive (module docstring)."""
    base, new = _side(base_values, base_iqr), _side(new_values, new_iqr)
    if base.median is None or new.median is None:
        return Change(key, metric.name, base, new, None, None, None, MISSING, metric.points)
    if metric.points:
        change: float | None = new.median - base.median
        scale = 1.0
    elif base.median == 0:
        change = 0.0 if new.median == 0 else None
        scale = 0.0
    else:
        change = (new.median - base.median) / base.median
        scale = abs(base.median)
    band = None
    if base.iqr is not None or new.iqr is not None:
        noise = ((base.iqr or 0.0) + (new.iqr or 0.0)) / 2
        band = noise / scale if scale else None
    p_value = None
    if len(base_values) >= MIN_SAMPLES and len(new_values) >= MIN_SAMPLES:
        p_value = mann_whitney_p(base_values, new_values)
    change, band = _finite(change), _finite(band)
    if change is None:
        call = INCONCLUSIVE
    elif abs(change) <= threshold:
        call = UNCHANGED
    elif (band is not None and abs(change) <= band) or (p_value is not None and p_value >= P_VALUE):
        call = INCONCLUSIVE
    else:
        worse = change < 0 if metric.higher_is_better else change > 0
        call = REGRESSED if worse else IMPROVED
    return Change(key, metric.name, base, new, change, band, p_value, call, metric.points)


# --- matching runs ---


def _classify_rows(run: ClassifyRun) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    for r in run.results:
        rows.setdefault(r.key, []).append(r)
    return rows


def _analyze_rows(run: AnalyzeRun) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    for w in run.windows:
        rows.setdefault(w.label, []).append(w)
    return rows


def _check(base: Run, new: Run, out: Comparison) -> None:
    """Fill problems (cannot compare) and notes (can, but know this)."""

    def differ(label: str, a: Any, b: Any, blocking: bool = True) -> None:
        if a is not None and b is not None and a != b:
            (out.problems if blocking else out.notes).append(f"{label} differs: {a} (base) vs {b} (new)")

    differ("schema_version", base.schema_version, new.schema_version)
    differ("run kind", base.kind, new.kind)
    if out.problems:
        return
    for label, key in (("GPU", "gpu"), ("device", "device"), ("GPU count", "gpu_count")):
        differ(label, getattr(base.environment, key), getattr(new.environment, key))
    if isinstance(base, ClassifyRun) and isinstance(new, ClassifyRun):
        differ("shape", base.config.shape, new.config.shape)
        for dim in ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab"):
            differ(f"shape {dim}", getattr(base.shape, dim), getattr(new.shape, dim))
        differ("context", base.config.context, new.config.context)
        differ("dtype", base.config.dtype, new.config.dtype)
        for label, run in (("base", base), ("new", new)):
            if run.config.plan:
                out.problems.append(f"the {label} run is a --plan run: nothing was measured")
            if run.incomplete:
                out.notes.append(f"the {label} run is incomplete (interrupted): rows it lacks are not compared")
        differ(
            "ceilings source",
            base.ceilings.source if base.ceilings else None,
            new.ceilings.source if new.ceilings else None,
            blocking=False,
        )
    for label, key in (("torch", "torch"), ("CUDA", "cuda"), ("driver", "driver")):
        differ(label, getattr(base.environment, key), getattr(new.environment, key), blocking=False)


def compare_runs(
    base: Run,
    new: Run,
    *,
    threshold: float = 0.05,
    metrics: Sequence[str] | None = None,
) -> Comparison:
    kind = base.kind
    table = metrics_for(kind)
    chosen = list(metrics) if metrics else list(DEFAULT_METRICS.get(kind, ("step_ms",)))
    out = Comparison(kind=kind, threshold=threshold, metrics=chosen)
    unknown = [m for m in chosen if m not in table]
    if unknown:
        out.problems.append(f"unknown metric {', '.join(unknown)} for {kind} runs; choose from {', '.join(table)}")
    _check(base, new, out)
    if out.problems:
        return out
    base_rows, new_rows = _rows(base), _rows(new)
    out.only_base = [k for k in base_rows if k not in new_rows]
    out.only_new = [k for k in new_rows if k not in base_rows]
    matched = [k for k in base_rows if k in new_rows]
    if not matched:
        out.problems.append("no results in common: nothing matches by " + (
            "window name and device" if kind == "analyze" else "mode and batch"))  # fmt: skip
        return out
    for key in matched:
        b, n = base_rows[key], new_rows[key]
        for name in chosen:
            m = table[name]
            out.changes.append(judge(m, key, m.values(b), m.values(n), threshold, m.stored_iqr(b), m.stored_iqr(n)))
        verdicts_b = sorted({r.verdict for r in b if r.verdict})
        verdicts_n = sorted({r.verdict for r in n if r.verdict})
        if verdicts_b and verdicts_n and verdicts_b != verdicts_n:
            out.flips.append(Flip(key, "/".join(verdicts_b), "/".join(verdicts_n)))
    return out


def _rows(run: Run) -> dict[str, list[Row]]:
    return _analyze_rows(run) if isinstance(run, AnalyzeRun) else _classify_rows(run)


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05. Raises ValueError outside (0, 100)%."""
    raw = text.strip().removesuffix("%").strip()
    value = float(raw)
    if not math.isfinite(value) or not 0 <= value < 100:
        raise ValueError(text)
    return value / 100
