"""A Timeline plus options -> the ``kind: "analyze"`` run dict (docs/run-file.md, docs/analysis.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from launchprobe.analysis.idle import DEFAULT_SHORT_GAP_NS
from launchprobe.analysis.trace_verdict import MetricMeans, decide
from launchprobe.analysis.windows import (
    AnalysisOptions,
    prepare,
    range_windows,
    whole_trace_windows,
    window_record,
)
from launchprobe.timeline import Timeline

SUM_KEYS = (
    "span_ns", "busy_ns", "idle_ns", "idle_host_wait_ns", "idle_short_gap_ns", "idle_other_ns",
    "kernels", "gpu_ops", "launch_calls",
)  # fmt: skip


def analyze_timeline(timeline: Timeline, options: AnalysisOptions) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Window records and, for range names with several instances, one summary per name and device."""
    prep = prepare(timeline, options)
    windows = range_windows(timeline, prep, options) if options.ranges else whole_trace_windows(prep)
    records = [window_record(w, prep, timeline, options) for w in windows]
    return records, summarize(records, has_metrics=timeline.metrics is not None and len(timeline.metrics) > 0)


def summarize(records: list[dict[str, Any]], *, has_metrics: bool) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rec in records:
        if rec.get("instance") is not None:
            groups.setdefault((rec["name"], rec["device"]), []).append(rec)
    out = []
    for (name, device), recs in groups.items():
        totals = {k: int(sum(r[k] for r in recs)) for k in SUM_KEYS}
        spans = np.array([r["span_ns"] for r in recs], dtype=np.int64)
        launches: dict[str, int] = {}
        for r in recs:
            for api, n in r["launches"].items():
                launches[api] = launches.get(api, 0) + n
        means = _mean_metrics(recs)
        verdict = decide(
            span_ns=totals["span_ns"],
            busy_ns=totals["busy_ns"],
            host_wait_ns=totals["idle_host_wait_ns"],
            short_gap_ns=totals["idle_short_gap_ns"],
            other_ns=totals["idle_other_ns"],
            metrics=means,
            source_has_metrics=has_metrics,
        )
        span = totals["span_ns"]
        out.append(
            {
                "name": name,
                "device": device,
                "instances": len(recs),
                **totals,
                "span_p50_ns": int(np.percentile(spans, 50, method="inverted_cdf")),
                "span_p90_ns": int(np.percentile(spans, 90, method="inverted_cdf")),
                "idle_fraction": round(totals["idle_ns"] / span, 6) if span else None,
                "kernels_per_instance": round(totals["kernels"] / len(recs), 2),
                "launches": dict(sorted(launches.items(), key=lambda kv: -kv[1])),
                "verdicts": {v: sum(r["verdict"] == v for r in recs) for v in sorted({r["verdict"] for r in recs})},
                "verdict": verdict.verdict,
                "verdict_reason": f"over all {len(recs)} instances: {verdict.reason}",
            }
        )
    return out


def _mean_metrics(recs: list[dict[str, Any]]) -> MetricMeans | None:
    usable = [r for r in recs if r.get("metrics") and r["metrics"]["samples"]]
    if not usable:
        return None
    weights = np.array([r["span_ns"] for r in usable], dtype=float)

    def mean(key: str) -> float | None:
        vals = [r["metrics"][key] for r in usable]
        if any(v is None for v in vals):
            return None
        return float(np.average(np.array(vals, dtype=float), weights=weights))

    return MetricMeans(
        dram_pct=mean("dram_pct"),
        compute_pct=mean("compute_pct"),
        compute_metric=usable[0]["metrics"]["compute_metric"],
        samples=sum(r["metrics"]["samples"] for r in usable),
    )


def build_run(
    timeline: Timeline,
    options: AnalysisOptions,
    *,
    extra_notices: list[str] | None = None,
    extra_source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from launchprobe.runfile import new_run

    records, summaries = analyze_timeline(timeline, options)
    meta = timeline.meta
    source = {
        "path": meta.get("path"),
        "format": meta.get("format"),
        "tool": meta.get("tool"),
        "tool_version": meta.get("tool_version"),
        "schema_version": meta.get("schema_version"),
    }
    for key in ("sqlite", "cuda_graph_trace", "rank", "world_size"):
        if meta.get(key) is not None:
            source[key] = meta[key]
    source.update(extra_source or {})
    gpus = {int(k): v for k, v in (meta.get("gpus") or {}).items()}
    devices = sorted({r["device"] for r in records})
    names = sorted({gpus[d] for d in devices if d in gpus})
    environment = {
        "device": "cuda",
        "gpu": ", ".join(names) or None,
        "gpu_count": len(devices),
        "gpus": {str(d): gpus.get(d) for d in devices},
    }
    config = {
        "ranges": list(options.ranges),
        "devices": list(options.devices),
        "short_gap_ns": options.short_gap_ns,
        "same_thread": options.same_thread,
    }
    notices = [*meta.get("notices", []), *(extra_notices or [])]
    if options.short_gap_ns != DEFAULT_SHORT_GAP_NS:
        notices.append(f"short-gap threshold {options.short_gap_ns} ns (default {DEFAULT_SHORT_GAP_NS})")
    unlaunched = sum(r["ops_without_launch"] for r in records)
    if unlaunched:
        notices.append(
            f"{unlaunched} GPU op(s) have no launch call in the trace (launched before it started, or dropped); "
            "they count as busy time and are attributed to ranges by time overlap"
        )
    run = new_run(
        "analyze",
        source=source,
        config=config,
        environment=environment,
        windows=records,
        summaries=summaries,
    )
    run["notices"] = notices
    return run
