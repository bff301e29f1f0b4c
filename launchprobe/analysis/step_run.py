"""Detected steps into an analyze run: one window per step (the period it owns) and one summary per kind
(docs/analysis.md, "Steps"; docs/run-file.md)."""

from __future__ import annotations

import numpy as np

from launchprobe.analysis.step_picture import step_picture, typical_instance
from launchprobe.analysis.steps import Step, StepResult, detect_steps, has_markers, percentile
from launchprobe.analysis.trace_run import summarize
from launchprobe.analysis.window_batch import window_records
from launchprobe.analysis.windows import AnalysisOptions, Prepared, Window, prepare, top_kernels
from launchprobe.run.schema import AnalyzeRun, OutlierInstance, Summary
from launchprobe.run.schema import Window as WindowRecord
from launchprobe.timeline import Timeline

STEP_PREFIX = "step: "


def resolve_mode(requested: str | None, timeline: Timeline, ranges: tuple[str, ...]) -> str:
    """``--steps`` as given, or its default: off with ``--range``; annotations when the trace has engine step
    markers; auto otherwise."""
    if requested is not None:
        return requested
    if ranges:
        return "off"
    return "annotations" if has_markers(timeline) else "auto"


def step_records(
    timeline: Timeline, options: AnalysisOptions, mode: str, prep: Prepared | None = None
) -> tuple[StepResult, list[WindowRecord], list[Summary]]:
    """The steps (``mode``: annotations | auto), their windows and one summary per kind."""
    if mode == "off":
        return StepResult("none", [], [], "step detection off"), [], []
    prep = prep or prepare(timeline, options)
    result = detect_steps(timeline, "annotations" if mode == "annotations" else "auto", prep=prep)
    kinds = {(k.device, k.key): k for k in result.kinds}
    steps = sorted(result.steps, key=lambda s: (s.device, s.end_ns))
    windows: list[Window] = []
    counters: dict[tuple[int, str], int] = {}
    for step in steps:
        kind = kinds[(step.device, step.kind)]
        n = counters.get((step.device, step.kind), 0)
        counters[(step.device, step.kind)] = n + 1
        windows.append(
            Window(STEP_PREFIX + kind.label, step.device, step.start_ns, step.end_ns, step.rows, n, step.pid, step.tid)
        )
    records = window_records(windows, prep, timeline, options)  # all at once: thousands of steps
    members: dict[tuple[int, str], list[tuple[Step, WindowRecord]]] = {}
    for step, rec in zip(steps, records, strict=True):
        kind = kinds[(step.device, step.kind)]
        rec.step_kind = kind.label
        rec.detected_by = kind.detected_by
        rec.gpu_start_ns = step.gpu_start_ns
        rec.host_start_ns = step.host_start_ns
        rec.host_end_ns = step.host_end_ns
        rec.outlier = step.outlier
        members.setdefault((step.device, step.kind), []).append((step, rec))
    has_metrics = timeline.metrics is not None and len(timeline.metrics) > 0
    summaries: list[Summary] = []
    for key, pairs in members.items():
        kind = kinds[key]
        typical = [(s, r) for s, r in pairs if not s.outlier] or pairs
        (summary,) = summarize([r for _, r in typical], has_metrics=has_metrics)
        summary.name = STEP_PREFIX + kind.label
        summary.step_kind = kind.label
        summary.detected_by = kind.detected_by
        summary.verdict_reason = f"over its {len(typical)} typical steps: " + summary.verdict_reason.split(": ", 1)[-1]
        hosts = np.array([s.host_end_ns - s.host_start_ns for s, _ in typical], dtype=np.int64)
        summary.host_p50_ns = percentile(hosts, 50)
        summary.outliers = [
            OutlierInstance(window=f"{r.name} #{r.instance}", span_ns=r.span_ns, busy_ns=r.busy_ns, verdict=r.verdict)
            for s, r in pairs
            if s.outlier
        ]
        rows = np.concatenate([s.rows for s, _ in typical])  # steps share no op
        summary.top_kernels = top_kernels(prep, rows, options.top_kernels)
        summary.typical_step = step_picture(*typical_instance(typical, summary.span_p50_ns), prep)
        summaries.append(summary)
    summaries.sort(key=lambda s: (s.device, -s.instances))
    return result, records, summaries


def add_steps(
    run: AnalyzeRun, timeline: Timeline, options: AnalysisOptions, mode: str, prep: Prepared | None = None
) -> StepResult:
    """Append the step windows and kind summaries to ``run`` (after its own), with a notice saying how the steps
    were found or why there are none. ``prep``: the trace as the run's own analysis prepared it."""
    run.config.steps = mode
    if mode == "off":
        return StepResult("none", [], [], "step detection off")
    result, records, summaries = step_records(timeline, options, mode, prep)
    from launchprobe.analysis.predict import annotate_run

    annotate_run(records, summaries, run.environment.gpu)
    run.windows += records
    run.summaries += summaries
    if result.steps:
        kinds = len({(s.device, s.kind) for s in result.steps})
        outliers = sum(s.outlier for s in result.steps)
        run.notice(
            f"steps ({mode}): {len(result.steps)} step(s) in {kinds} kind(s), {result.reason}; "
            f"{outliers} warm-up / outlier step(s) kept out of the kind summaries"
        )
    else:
        run.notice(f"steps ({mode}): {result.reason}")
    return result
