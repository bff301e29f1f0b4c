"""The verdict for a trace window: launch-bound, GPU-bound (memory or compute when metrics say), or undetermined.

Rule (docs/analysis.md), on the window's active time (its span less the idle during which the process issued no
GPU work, which never makes a window launch-bound): launch-bound when the GPU idles at least half the active time
and more than half of that idle time is host wait. Idle at least half but mostly not host wait is undetermined
(syncs or dependencies starve the GPU, not launches). Otherwise the GPU is the bottleneck: memory-bound or
compute-bound from sampled GPU metrics (DRAM throughput against SM issue / tensor activity), or plain
``gpu-bound`` when the trace has none. A window mostly idle with no work says so first; a host that queued the
window's first op far ahead of the GPU is named as evidence against launch-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from launchprobe.analysis.verdict import LAUNCH_IDLE_THRESHOLD

HOST_WAIT_SHARE = 0.5  # host wait must be more than this share of the idle time
MOSTLY_NO_WORK = 0.5  # a window idle with no work issued for at least this share of its span is "mostly no work"
HOST_AHEAD_FAR_NS = 1_000_000  # the host queued the window's first op at least this long before the GPU ran it
NO_WORK_RULES = {
    "thread-state": "its launching threads were switched out, outside any CUDA call (thread-state data)",
    "quiet-heuristic": "no CUDA API call from the process for >= {quiet} (heuristic: no thread-state data)",
}
NO_METRICS_HINT = (
    "memory vs compute is undetermined: the trace has no GPU metrics; re-run under "
    "`launchprobe nsys --gpu-metrics-devices all` (nsys --gpu-metrics-devices) to decide it"
)


@dataclass(frozen=True)
class TraceVerdict:
    verdict: str
    reason: str
    dram_pct: float | None = None
    compute_pct: float | None = None


@dataclass(frozen=True)
class MetricMeans:
    dram_pct: float | None  # DRAM read + write throughput, % of peak
    compute_pct: float | None  # max(tensor active, SM issue) %, or SMs active % when neither is sampled
    compute_metric: str | None
    samples: int


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def metric_means(metrics: pd.DataFrame | None, device: int, lo: int, hi: int) -> MetricMeans | None:
    """Mean of the verdict's metrics over samples of ``device`` inside [lo, hi]; None when the trace has none."""
    if metrics is None or not len(metrics):
        return None
    dev = metrics[metrics["device"].to_numpy() == device]
    if not len(dev):
        return None
    ts = dev["timestamp_ns"].to_numpy()
    inside = dev[(ts >= lo) & (ts <= hi)]
    means = inside.groupby("metric", observed=True)["value"].mean() if len(inside) else pd.Series(dtype=float)

    def pick(*keys: str) -> dict[str, float]:
        return {str(k): float(v) for k, v in means.items() if any(key in str(k) for key in keys)}

    dram = pick("DRAM Read Bandwidth", "DRAM Write Bandwidth") or pick("DRAM")
    primary = pick("Tensor Active", "SM Issue")
    fallback = pick("SMs Active")
    compute = primary or fallback
    best = max(compute, key=lambda k: compute[k]) if compute else None
    return MetricMeans(
        dram_pct=float(np.sum(list(dram.values()))) if dram else None,
        compute_pct=compute[best] if best else None,
        compute_metric=best,
        samples=len(inside),
    )


def decide(
    *,
    span_ns: int,
    busy_ns: int,
    host_wait_ns: int,
    short_gap_ns: int,
    other_ns: int,
    metrics: MetricMeans | None,
    source_has_metrics: bool,
    no_work_ns: int = 0,
    no_work_source: str | None = None,
    host_ahead_ns: int | None = None,
    quiet_ns: int | None = None,
) -> TraceVerdict:
    """The verdict of a window from its numbers; no-work idle is taken out first (the rule sees the active part),
    and a host far ahead of the GPU is named as evidence against launch-bound."""
    if span_ns <= 0 or busy_ns <= 0:
        return TraceVerdict("undetermined", "no GPU work inside the window, so nothing to classify")
    core = _decide_active(
        span_ns=span_ns - no_work_ns,
        busy_ns=busy_ns,
        host_wait_ns=host_wait_ns,
        short_gap_ns=short_gap_ns,
        other_ns=other_ns,
        metrics=metrics,
        source_has_metrics=source_has_metrics,
        what="the active " if no_work_ns > 0 else "",
    )
    reason = core.reason
    if no_work_ns > 0:
        rule = NO_WORK_RULES.get(no_work_source or "", "the process issued no GPU work")
        rule = rule.format(quiet=f"{(quiet_ns or 0) / 1e6:g} ms")
        share = no_work_ns / span_ns
        what = f"{no_work_ns / 1e6:.3f} ms ({_pct(share)}) of the {span_ns / 1e6:.3f} ms span idle with no work issued"
        if share >= MOSTLY_NO_WORK:
            reason = f"idle: no work issued: {what} ({rule}); its active part: {reason}"
        else:
            reason = f"{reason}; not counted: {what} ({rule})"
    if host_ahead_ns is not None and host_ahead_ns >= HOST_AHEAD_FAR_NS:
        ahead = f"the host queued the window's first op {host_ahead_ns / 1e6:.3f} ms before the GPU started it"
        if core.verdict == "launch-bound":
            reason += f"; but {ahead}: evidence against launch-bound (the GPU had work queued)"
        else:
            reason += f"; {ahead} (host ahead of the GPU: evidence against launch-bound)"
    return TraceVerdict(core.verdict, reason, core.dram_pct, core.compute_pct)


def _decide_active(
    *,
    span_ns: int,
    busy_ns: int,
    host_wait_ns: int,
    short_gap_ns: int,
    other_ns: int,
    metrics: MetricMeans | None,
    source_has_metrics: bool,
    what: str = "",
) -> TraceVerdict:
    if span_ns <= 0 or busy_ns <= 0:
        return TraceVerdict("undetermined", "no GPU work inside the window, so nothing to classify")
    idle = span_ns - busy_ns
    idle_fraction = idle / span_ns
    head = f"GPU idle {_pct(idle_fraction)} of {what}{span_ns / 1e6:.3f} ms"
    if idle_fraction >= LAUNCH_IDLE_THRESHOLD:
        share = host_wait_ns / idle if idle else 0.0
        split = (
            f"host wait {_pct(share)} of idle, short gaps {_pct(short_gap_ns / idle)}, other {_pct(other_ns / idle)}"
        )
        if share > HOST_WAIT_SHARE:
            return TraceVerdict(
                "launch-bound",
                f"{head}, {split}: rule idle >= {_pct(LAUNCH_IDLE_THRESHOLD)} of the window and host wait "
                f"> {_pct(HOST_WAIT_SHARE)} of idle -> the GPU waits for the CPU to launch work",
            )
        return TraceVerdict(
            "undetermined",
            f"{head}, but {split}: idle >= {_pct(LAUNCH_IDLE_THRESHOLD)} yet mostly not host wait, so neither "
            "launch- nor GPU-bound; the largest idle stretches show what the host was doing (syncs, dependencies)",
        )
    head = f"GPU busy {_pct(1 - idle_fraction)} of {what}{span_ns / 1e6:.3f} ms (idle < {_pct(LAUNCH_IDLE_THRESHOLD)})"
    if metrics is None or metrics.samples == 0 or metrics.dram_pct is None or metrics.compute_pct is None:
        if not source_has_metrics:
            return TraceVerdict("gpu-bound", f"{head} -> GPU-bound; {NO_METRICS_HINT}")
        why = (
            "no GPU metric samples fall inside the window"
            if metrics is None or metrics.samples == 0
            else "the sampled metrics lack DRAM throughput or SM/tensor activity"
        )
        return TraceVerdict("gpu-bound", f"{head} -> GPU-bound; memory vs compute is undetermined: {why}")
    dram, compute = metrics.dram_pct, metrics.compute_pct
    numbers = f"DRAM throughput {dram:.1f}% of peak vs {metrics.compute_metric} {compute:.1f}%"
    kind = "memory-bound" if dram >= compute else "compute-bound"
    return TraceVerdict(
        kind,
        f"{head}; {numbers} ({metrics.samples} samples): rule the larger of DRAM throughput and compute "
        f"activity decides -> {kind}",
        dram_pct=dram,
        compute_pct=compute,
    )
