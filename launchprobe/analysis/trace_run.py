"""A Timeline plus options -> the ``kind: "analyze"`` run (docs/run-file.md, docs/analysis.md)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from launchprobe.analysis.idle import DEFAULT_SHORT_GAP_NS
from launchprobe.analysis.trace_verdict import MetricMeans, decide
from launchprobe.analysis.window_batch import window_records
from launchprobe.analysis.windows import (
    AnalysisOptions,
    Prepared,
    Window,
    percentiles,
    prepare,
    range_windows,
    top_kernels,
    whole_trace_windows,
    window_gaps,
)
from launchprobe.run.schema import (
    AnalyzeConfigRecord,
    AnalyzeRun,
    Environment,
    IdleStretch,
    OutlierInstance,
    PooledIdleStretch,
    Source,
    Summary,
    TopKernel,
    header_fields,
)
from launchprobe.run.schema import Window as WindowRecord
from launchprobe.timeline import Timeline

COUNTER = re.compile(r"(?<=[\s#_:/-])\d+$")  # a trailing instance number after a separator
SUM_KEYS = (
    "span_ns", "busy_ns", "idle_ns", "idle_host_wait_ns", "idle_short_gap_ns", "idle_other_ns", "idle_no_work_ns",
    "kernels", "gpu_ops", "launch_calls", "comm_kernels", "comm_busy_ns",
)  # fmt: skip
OUTLIER_SPAN_RATIO = 3  # an instance whose span is more than 3x the median span is an outlier...
OUTLIER_MIN_INSTANCES = 3  # ...in a group of at least 3 instances


def analyze_timeline(
    timeline: Timeline, options: AnalysisOptions, prep: Prepared | None = None
) -> tuple[list[WindowRecord], list[Summary]]:
    """Window records and, for range windows, one summary per range name (instance counters merged, see
    ``group_name``) and device. ``prep``: the timeline already prepared with ``options``."""
    prep = prep or prepare(timeline, options)
    windows = range_windows(timeline, prep, options) if options.ranges else whole_trace_windows(prep)
    records = window_records(windows, prep, timeline, options)
    has_metrics = timeline.metrics is not None and len(timeline.metrics) > 0
    return records, summarize(records, has_metrics=has_metrics, pooled=_pooled(windows, records, prep, options))


def group_name(name: str) -> str:
    """A range name with its trailing instance counter replaced by ``<n>``: ``step 17`` -> ``step <n>``,
    ``ProfilerStep#3`` -> ``ProfilerStep#<n>``; ``... bucket=4`` and other names stay as they are."""
    return COUNTER.sub("<n>", name)


def _groups(records: list[WindowRecord]) -> dict[tuple[str, int], list[int]]:
    groups: dict[tuple[str, int], list[int]] = {}
    for i, rec in enumerate(records):
        if rec.instance is not None:
            groups.setdefault((group_name(rec.name), rec.device), []).append(i)
    return groups


def _pooled(
    windows: list[Window], records: list[WindowRecord], prep: Prepared, options: AnalysisOptions
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per group: gap percentiles over all its idle stretches, and its top kernels over all its ops."""
    out = {}
    for key, members in _groups(records).items():
        gaps = [window_gaps(windows[i], prep) for i in members]
        rows = np.concatenate([windows[i].rows for i in members])
        if len(rows) > 1 and np.any(rows[1:] <= rows[:-1]):  # windows that overlap share rows
            rows = np.unique(rows)
        p50, p90 = percentiles(np.concatenate(gaps), (50, 90))
        kernels: list[TopKernel] = top_kernels(prep, rows, options.top_kernels)
        out[key] = {"gap_p50_ns": p50, "gap_p90_ns": p90, "top_kernels": kernels}
    return out


def outlier_mask(spans: np.ndarray) -> np.ndarray:
    """Instances whose span is more than OUTLIER_SPAN_RATIO x the median span (inverted-CDF p50), in groups of at
    least OUTLIER_MIN_INSTANCES: warm-up, compilation, a first call."""
    if len(spans) < OUTLIER_MIN_INSTANCES:
        return np.zeros(len(spans), dtype=bool)
    median = percentiles(spans, (50,))[0] or 0
    return np.asarray(spans > OUTLIER_SPAN_RATIO * median, dtype=bool)


def _median_fraction(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(float(np.median(known)), 6) if known else None


def summarize(
    records: list[WindowRecord],
    *,
    has_metrics: bool,
    pooled: dict[tuple[str, int], dict[str, Any]] | None = None,
    largest: int = 5,
) -> list[Summary]:
    out = []
    for (name, device), members in _groups(records).items():
        recs = [records[i] for i in members]
        totals: dict[str, Any] = {k: int(sum(getattr(r, k) or 0 for r in recs)) for k in SUM_KEYS}
        spans = np.array([r.span_ns for r in recs], dtype=np.int64)
        busy = np.array([r.busy_ns for r in recs], dtype=np.int64)
        launches: dict[str, int] = {}
        for r in recs:
            for api, n in r.launches.items():
                launches[api] = launches.get(api, 0) + n
        means = _mean_metrics(recs)
        total_verdict = decide(
            span_ns=totals["span_ns"],
            busy_ns=totals["busy_ns"],
            host_wait_ns=totals["idle_host_wait_ns"],
            short_gap_ns=totals["idle_short_gap_ns"],
            other_ns=totals["idle_other_ns"],
            no_work_ns=totals["idle_no_work_ns"],
            no_work_source=next((r.no_work_source for r in recs if r.no_work_source), None),
            metrics=means,
            source_has_metrics=has_metrics,
        )
        span = totals["span_ns"]
        span_p50, span_p90 = percentiles(spans, (50, 90))
        busy_p50, busy_p90 = percentiles(busy, (50, 90))
        slowest = max(range(len(recs)), key=lambda i: recs[i].span_ns)
        labels = _labels(recs)
        extra = (pooled or {}).get((name, device), {})
        outlying = outlier_mask(spans)
        typical = [r for r, o in zip(recs, outlying, strict=True) if not o]
        verdict, reason = _typical_verdict(typical, len(recs), total_verdict.verdict, total_verdict.reason)
        aheads = [r.host_ahead_ns for r in typical if r.host_ahead_ns is not None]
        ranges = [r.range_ns for r in typical if r.range_ns is not None]
        outliers = [
            OutlierInstance(window=labels[i], span_ns=recs[i].span_ns, busy_ns=recs[i].busy_ns, verdict=recs[i].verdict)
            for i in np.flatnonzero(outlying)
        ]
        if outliers:
            median = percentiles(spans, (50,))[0] or 0
            reason += (
                f"; outliers (span > {OUTLIER_SPAN_RATIO}x the median {median / 1e6:.3f} ms), not in the typical "
                "instance: "
                + ", ".join(f"{o.window} {o.span_ns / 1e6:.3f} ms" for o in outliers[:5])
                + (f" and {len(outliers) - 5} more" if len(outliers) > 5 else "")
            )
        out.append(
            Summary(
                name=name,
                device=device,
                instances=len(recs),
                names=len({r.name for r in recs}),
                **totals,
                span_p50_ns=span_p50,
                span_p90_ns=span_p90,
                busy_p50_ns=busy_p50,
                busy_p90_ns=busy_p90,
                idle_fraction=round(totals["idle_ns"] / span, 6) if span else None,
                gap_p50_ns=extra.get("gap_p50_ns"),
                gap_p90_ns=extra.get("gap_p90_ns"),
                kernels_per_instance=round(totals["kernels"] / len(recs), 2),
                launches=dict(sorted(launches.items(), key=lambda kv: -kv[1])),
                verdicts=dict(Counter(r.verdict for r in recs).most_common()),
                verdict=verdict,
                verdict_reason=reason,
                slowest=labels[slowest],
                top_kernels=extra.get("top_kernels", []),
                largest_idle=_largest_idle(recs, labels, largest),
                typical_instances=len(typical),
                idle_not_launch_p50_ns=percentiles([r.idle_queued_ns + r.idle_no_work_ns for r in typical], (50,))[0],
                idle_fraction_p50=_median_fraction([r.idle_fraction for r in typical]),
                no_work_fraction_p50=_median_fraction([r.no_work_fraction for r in typical]),
                host_ahead_p50_ns=percentiles(aheads, (50,))[0],
                range_p50_ns=percentiles(ranges, (50,))[0],
                outliers=outliers,
                totals_verdict=total_verdict.verdict,
            )
        )
    return out


def _typical_verdict(
    typical: list[WindowRecord], instances: int, total_verdict: str, total_reason: str
) -> tuple[str, str]:
    """The verdict most typical instances got (ties: the one whose instances have the larger median span), with
    the typical instance's numbers, and the rule on the totals beside it."""
    counts = Counter(r.verdict for r in typical)
    if not counts:
        return total_verdict, f"over all {instances} instances: {total_reason}"
    top = max(counts.values())
    tied = [v for v, n in counts.items() if n == top]

    def median_span(verdict: str) -> float:
        return float(np.median([r.span_ns for r in typical if r.verdict == verdict]))

    verdict = max(tied, key=median_span) if len(tied) > 1 else tied[0]
    span_p50 = percentiles([r.span_ns for r in typical], (50,))[0] or 0
    busy_p50 = percentiles([r.busy_ns for r in typical], (50,))[0] or 0
    idle_p50 = _median_fraction([r.idle_fraction for r in typical])
    idle_text = f", idle {100 * idle_p50:.1f}%" if idle_p50 is not None else ""
    reason = (
        f"typical instance ({len(typical)} of {instances}): {counts[verdict]} are {verdict}; median span "
        f"{span_p50 / 1e6:.3f} ms, busy {busy_p50 / 1e6:.3f} ms{idle_text}"
    )
    nw = _median_fraction([r.no_work_fraction for r in typical])
    if nw:
        reason += f", idle with no work issued {100 * nw:.1f}%"
    if total_verdict != verdict:
        reason += f"; the totals over all instances would say {total_verdict} ({total_reason})"
    return verdict, reason


def _labels(recs: list[WindowRecord]) -> list[str]:
    """Each window's name, with its instance number when the name repeats in the group."""
    counts = Counter(r.name for r in recs)
    return [f"{r.name} #{r.instance}" if counts[r.name] > 1 else str(r.name) for r in recs]


def _largest_idle(recs: list[WindowRecord], labels: list[str], top: int) -> list[PooledIdleStretch]:
    """The longest idle stretches over the group (each window keeps its own longest: the union holds the top)."""
    seen: dict[tuple[int, int], tuple[IdleStretch, str]] = {}
    for r, label in zip(recs, labels, strict=True):
        for stretch in r.largest_idle:
            seen.setdefault((stretch.start_ns, stretch.end_ns), (stretch, label))
    best = sorted(seen.values(), key=lambda x: (-x[0].duration_ns, x[0].start_ns))[:top]
    return [PooledIdleStretch(window=label, **stretch.to_dict()) for stretch, label in best]


def _mean_metrics(recs: list[WindowRecord]) -> MetricMeans | None:
    usable = [r for r in recs if r.metrics is not None and r.metrics.samples]
    if not usable:
        return None
    weights = np.array([r.span_ns for r in usable], dtype=float)

    def mean(key: str) -> float | None:
        vals = [getattr(r.metrics, key) for r in usable]
        if any(v is None for v in vals):
            return None
        return float(np.average(np.array(vals, dtype=float), weights=weights))

    first = usable[0].metrics
    assert first is not None
    return MetricMeans(
        dram_pct=mean("dram_pct"),
        compute_pct=mean("compute_pct"),
        compute_metric=first.compute_metric or "",
        samples=sum(r.metrics.samples for r in usable if r.metrics is not None),
    )


def build_run(
    timeline: Timeline,
    options: AnalysisOptions,
    *,
    extra_notices: list[str] | None = None,
    extra_source: dict[str, Any] | None = None,
    prep: Prepared | None = None,
) -> AnalyzeRun:
    records, summaries = analyze_timeline(timeline, options, prep)
    meta = timeline.meta
    source = Source(
        path=meta.get("path"),
        format=meta.get("format"),
        tool=meta.get("tool"),
        tool_version=meta.get("tool_version"),
        schema_version=meta.get("schema_version"),
        sqlite=meta.get("sqlite"),
        cuda_graph_trace=meta.get("cuda_graph_trace"),
        rank=meta.get("rank"),
        world_size=meta.get("world_size"),
        time_origin_ns=int(timeline.gpu_ops["start_ns"].min()) if len(timeline.gpu_ops) else None,
    )
    for key, value in (extra_source or {}).items():
        setattr(source, key, value)
    gpus = {int(k): v for k, v in (meta.get("gpus") or {}).items()}
    devices = sorted({r.device for r in records})
    names = sorted({gpus[d] for d in devices if d in gpus})
    environment = Environment(
        device="cuda",
        gpu=", ".join(names) or None,
        gpu_count=len(devices),
        gpus={str(d): gpus.get(d) for d in devices},
    )
    config = AnalyzeConfigRecord(
        ranges=list(options.ranges),
        devices=list(options.devices),
        short_gap_ns=options.short_gap_ns,
        same_thread=options.same_thread,
        quiet_ns=options.quiet_ns,
    )
    notices = [*meta.get("notices", []), *(extra_notices or [])]
    if options.short_gap_ns != DEFAULT_SHORT_GAP_NS:
        notices.append(f"short-gap threshold {options.short_gap_ns} ns (default {DEFAULT_SHORT_GAP_NS})")
    unlaunched = sum(r.ops_without_launch for r in records)
    if unlaunched:
        notices.append(
            f"{unlaunched} GPU op(s) have no launch call in the trace (launched before it started, or dropped); "
            "they count as busy time and are attributed to ranges by time overlap"
        )
    from launchprobe.analysis.predict import annotate_run

    annotate_run(records, summaries, environment.gpu)
    return AnalyzeRun(
        **header_fields(),
        notices=notices,
        environment=environment,
        source=source,
        config=config,
        windows=records,
        summaries=summaries,
    )
