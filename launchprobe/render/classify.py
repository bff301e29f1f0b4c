"""The report of a classify run: header, the per-(mode, batch) table, what graphs bought, verdicts and why.

Plan runs (``config.plan``) have no measured fields: they show the cost model and the floors instead.
"""

from __future__ import annotations

import math

from launchprobe.analysis.sampled import checks_verdict, class_check_made
from launchprobe.render import common
from launchprobe.render import values as v
from launchprobe.render.model import Block, Lines, Report, Strip, Strips, Table
from launchprobe.run.schema import (
    CHECKS_AGREE,
    CHECKS_DISAGREE,
    CUPTI_EFFECT_HEAD_VARIANT,
    CUPTI_EFFECT_PIECE_VARIANT,
    CUPTI_EFFECT_TIMERS,
    GAP_AGREE_ACROSS_CAPTURES,
    GAP_AGREE_LIKE_FOR_LIKE,
    GAP_DISAGREE,
    GAP_NOT_DECIDED,
    KERNEL_SECONDS_MAX,
    OVERHEAD_BASIS_POOLED,
    CaptureCheck,
    CaptureShift,
    CeilingsRecord,
    ClassifyConfigRecord,
    ClassifyResult,
    ClassifyRun,
    CuptiCheck,
    FreshCaptures,
    GapStats,
    KernelPass,
    Memory,
    OpCheck,
    ShapeRecord,
    StartShift,
    TimerPairClass,
    TimerPairs,
    WhatIf,
)

START_SHIFT_SHOWN_NS = 200.0  # the start-shift line lists the classes an event moves by this much or more


def build(run: ClassifyRun) -> Report:
    plan = run.is_plan
    title = "launchprobe classify" + (" --plan (cost model only, nothing measured)" if plan else "")
    if not plan and run.environment.device == "cpu":
        title += ": CPU path (no CUDA GPU; plain torch, eager only, wall-clock timing)"
    if run.incomplete:
        title += " (INCOMPLETE: interrupted, only the rows below were measured)"
    report = Report(title=title)
    report.fields = _header(run)
    report.notices = list(run.notices) + [f"{u.mode} unavailable: {u.reason}" for u in run.unavailable]
    rows = run.sorted_results()
    if plan:
        report.blocks.append(_plan_table(rows))
        return report
    report.blocks += [_step_table(rows), _cost_table(rows)]
    speedups = _speedups(run)
    if speedups is not None:
        report.blocks.append(speedups)
    report.blocks.append(Lines("Verdict rule", [run.rule or "not recorded in this run file"]))
    reasons = [f"{r.key}: {r.verdict_reason}" for r in rows if r.verdict_reason]
    if reasons:
        report.blocks.append(Lines("Why each verdict", reasons))
    helps = what_would_help_lines(rows)
    if helps:
        report.blocks.append(Lines("What would help (predicted, ranked by gain)", helps))
    host = _host_cost_lines(run, rows)
    if host:
        report.blocks.append(Lines("Host cost", host))
    report.blocks += kernel_pass_blocks(rows, run.config.kernel_seconds)
    return report


def what_if_text(w: WhatIf) -> str:
    if not w.predictable:
        return f"{w.title}: not predictable from this run ({w.reason})"
    gain = f"{w.speedup:.2f}x" if w.speedup else f"{w.throughput_gain:.2f}x tokens/s" if w.throughput_gain else ""
    step = v.fixed(w.predicted_step_ns, 3, 1e-6)
    return (
        f"{w.title}: {step} ms per step" + (f" ({gain})" if gain else "") + f"; {w.arithmetic}; assumes {w.assumptions}"
    )


def what_would_help_lines(rows: list[ClassifyResult]) -> list[str]:
    lines = []
    for r in rows:
        lines += [f"{r.key}: {what_if_text(w)}" for w in r.what_ifs]
        if r.compute_bound_from_batch is not None:
            lines.append(f"{r.key}: the step turns compute-bound from batch {r.compute_bound_from_batch} (cost model)")
    return lines


def _host_cost_lines(run: ClassifyRun, rows: list[ClassifyResult]) -> list[str]:
    """Host time per kernel of each eager step beside a bare loop of tiny launches; NVTX cost when measured."""
    bare = v.number(run.ceilings.launch_host_ns) if run.ceilings else None
    lines = []
    for r in rows:
        per_kernel = v.number(r.host_ns_per_kernel)
        if per_kernel is not None:
            against = f" vs {v.sig(bare, 1e-3)} us for a bare loop of tiny launches" if bare else ""
            lines.append(f"{r.key}: {v.sig(per_kernel, 1e-3)} us of host time per kernel{against}")
        nvtx = v.number(r.nvtx_overhead_fraction)
        if nvtx is not None:
            lines.append(f"{r.key}: NVTX ranges per op cost {nvtx:+.1%} of the step")
    return lines


def _header(run: ClassifyRun) -> list[tuple[str, str]]:
    config, shape = run.config, run.shape
    dims = ", ".join(
        f"{label} {v.integer(value)}"
        for value, label in ((shape.layers, "layers"), (shape.hidden, "hidden"), (shape.ffn, "ffn"),
                             (shape.vocab, "vocab"))
    )  # fmt: skip
    dims += f", heads {v.integer(shape.heads)}/{v.integer(shape.kv_heads)} kv"
    fields = [
        ("shape", f"{v.text(shape.name or config.shape)} ({dims})"),
        (
            "workload",
            f"batches {v.text(config.batches)}, context {v.integer(config.context)}, "
            f"{v.text(config.dtype)}, modes {v.text(config.modes)}",
        ),
    ]
    if not run.is_plan:
        fields.append(("steps", f"{v.integer(config.steps)} timed, {v.integer(config.warmup_steps)} warm-up"))
        kernels = _kernels_text(config)
        if kernels:
            fields.append(("kernels", kernels))
    fields += [
        ("device", common.device_text(run.environment)),
        ("software", common.software_text(run.environment)),
        ("ceilings", ceilings_text(run.ceilings)),
        ("memory", _memory_text(run.memory, shape)),
        ("made", common.made_text(run)),
    ]
    return fields


def ceilings_text(ceilings: CeilingsRecord | None) -> str:
    if ceilings is None:
        return v.MISSING
    parts = [
        (label, v.sig(value, scale), unit)
        for value, label, scale, unit in (
            (ceilings.hbm_read_bytes_per_s, "HBM", 1e-12, "TB/s"),
            (ceilings.matmul_flops_per_s, "matmul", 1e-12, "TFLOP/s"),
            (ceilings.launch_host_ns, "launch", 1e-3, "us"),
            (ceilings.graph_node_ns, "graph node", 1e-3, "us"),
        )
    ]
    text = ", ".join(f"{label} {value} {unit}" for label, value, unit in parts if value != v.MISSING) or v.MISSING
    source = v.text(ceilings.source)
    if ceilings.measured_at:
        source += f" {ceilings.measured_at[:10]}"  # the date is enough here
    return f"{text} ({source})"


def _kernels_text(config: ClassifyConfigRecord) -> str:
    """Which projection kernels ran and whether PDL was on (run files from before these options have neither)."""
    if config.device == "cpu":
        return "plain-torch reference ops (CPU path)"
    parts = []
    if config.projections == "gemv":
        parts.append("projections: launchprobe GEMV (batch <= 16), cuBLAS above")
    elif config.projections == "cublas":
        parts.append("projections: cuBLAS")
    if config.pdl is not None:
        parts.append(f"programmatic dependent launch {'on' if config.pdl else 'off'}")
    return ", ".join(parts)


def _memory_text(memory: Memory | None, shape: ShapeRecord) -> str:
    if memory is None:
        return v.MISSING
    text = f"weights {v.size(memory.weight_bytes)}"
    if memory.distinct_layers < shape.layers:
        text += f" ({v.integer(memory.distinct_layers)} distinct layers cycled over {v.integer(shape.layers)})"
    return text + f", KV cache {v.size(memory.kv_cache_bytes)}"


def _step_table(rows: list[ClassifyResult]) -> Table:
    body = [
        [
            v.text(r.mode),
            v.integer(r.batch),
            v.fixed(r.step_ms_median, 3),
            v.fixed(r.step_ms_p90, 3),
            v.integer(r.tokens_per_s),
            v.integer(r.kernels_per_step),
            v.percent(r.idle_fraction),
            v.sig(r.achieved_bandwidth_bytes_per_s, 1e-12),
            v.percent(r.achieved_bandwidth_fraction),
            v.sig(r.achieved_flops_per_s, 1e-12),
            v.percent(r.achieved_flops_fraction),
            v.text(r.verdict),
        ]
        for r in rows
    ]
    columns = [
        "mode", "batch", "ms\nmedian", "ms\np90", "tok/s", "kernels\n/step", "GPU\nidle",
        "TB/s", "% of\nHBM", "TFLOP/s", "% of\nmatmul", "verdict",
    ]  # fmt: skip
    return Table(title="Decode step", columns=columns, rows=body, align="lrrrrrrrrrrl")


def _cost_table(rows: list[ClassifyResult]) -> Table:
    body = []
    for r in rows:
        noise = r.noise_fraction
        body.append(
            [
                v.text(r.mode),
                v.integer(r.batch),
                v.integer(len(r.step_ms_samples)) if r.step_ms_samples is not None else v.MISSING,
                v.percent(noise, 1) if noise is not None else v.MISSING,
                v.fixed(r.memory_floor_ms, 3),
                v.fixed(r.compute_floor_ms, 3),
                v.fixed(r.launch_floor_ms, 3),
                v.integer(r.bucket),
                v.percent(r.padding_fraction, 1),
                v.fixed(r.capture_s, 3),
                v.fixed(r.capture_bytes, 1, 1 / 2**20),
            ]
        )
    columns = [
        "mode", "batch", "steps", "noise\nIQR/med", "memory\nfloor ms", "compute\nfloor ms",
        "launch\nfloor ms", "bucket", "padding", "capture\ns", "capture\nMiB",
    ]  # fmt: skip
    note = "floors: the step time if only bytes, FLOPs or launches counted; capture: this bucket's graphs"
    return Table(title="Noise, floors and graph cost", columns=columns, rows=body, note=note)


def _speedups(run: ClassifyRun) -> Table | None:
    records = run.speedups
    if not any(s.full_vs_eager is not None or s.piecewise_vs_eager is not None for s in records):
        return None
    body = [[v.integer(s.batch), v.ratio(s.full_vs_eager), v.ratio(s.piecewise_vs_eager)] for s in records]
    return Table(
        title="What graphs bought (eager step time / graph step time)",
        columns=["batch", "full vs eager", "piecewise vs eager"],
        rows=body,
        align="r",
    )


def _plan_table(rows: list[ClassifyResult]) -> Table:
    body = [
        [
            v.text(r.mode),
            v.integer(r.batch),
            v.integer(r.bucket),
            v.fixed(r.bytes_per_step, 1, 1e-6),
            v.fixed(r.flops_per_step, 1, 1e-9),
            v.integer(r.kernels_expected),
            v.fixed(r.memory_floor_ms, 3),
            v.fixed(r.compute_floor_ms, 3),
            v.fixed(r.launch_floor_ms, 3),
            r.largest_floor or v.MISSING,
        ]
        for r in rows
    ]
    columns = [
        "mode", "batch", "bucket", "MB/step", "GFLOP\n/step", "kernels\nexpected", "memory\nfloor ms",
        "compute\nfloor ms", "launch\nfloor ms", "largest\nfloor",
    ]  # fmt: skip
    note = "floors against the ceilings above: bytes / HBM, FLOPs / matmul, kernels x launch cost"
    return Table(
        title="Plan: cost model and floors per step",
        columns=columns,
        rows=body,
        align="lrrrrrrrrl",
        note=note,
    )


# --- the per-kernel pass ---


def kernel_passes(rows: list[ClassifyResult]) -> list[tuple[ClassifyResult, KernelPass]]:
    return [(r, r.kernel_pass) for r in rows if r.kernel_pass is not None]


def kernel_pass_blocks(rows: list[ClassifyResult], kernel_seconds: float | None) -> list[Block]:
    """The op table, the pass's lines and the timeline strips; ``kernel_seconds``: the run's ``--kernel-seconds``,
    for the value a not-decided check would need."""
    blocks: list[Block] = []
    passes = kernel_passes(rows)
    for r, kp in passes:
        table = _ops_table(r, kp)
        if table is not None:
            blocks.append(table)
        blocks.append(Lines("", _kernel_pass_lines(kp, kernel_seconds)))
    for batch in sorted({r.batch for r, _ in passes}):
        strips = timeline_strips([(r, kp) for r, kp in passes if r.batch == batch])
        if strips is not None:
            strips.title = f"One step along time, batch {v.integer(batch)}"
            blocks.append(strips)
    return blocks


def _ops_table(r: ClassifyResult, kp: KernelPass) -> Table | None:
    if not kp.ops:
        return None
    checks = {o.op: o for o in kp.cupti_check.ops} if kp.cupti_check is not None else {}
    biased = any(c.start_bias_ns is not None for c in checks.values())
    timers = {c.op: c for c in kp.timer_pairs.classes or []} if kp.timer_pairs is not None else {}
    body = []
    for o in kp.ops:
        row = [
            v.text(o.op),
            v.integer(o.count),
            v.sig(o.duration_ns_median, 1e-3),
            v.sig(o.gap_ns_median, 1e-3),
            v.percent(o.share_of_step, 1),
            v.sig(o.achieved_bandwidth_bytes_per_s, 1e-12),
        ]
        if checks:
            check = checks.get(o.op)
            row += [
                v.sig(check.cupti_duration_ns_median, 1e-3) if check else v.MISSING,
                v.sig(check.cupti_gap_ns_median, 1e-3) if check else v.MISSING,
            ]
            if biased:
                row.append(v.signed(check.start_bias_ns, 2, 1e-3) if check else v.MISSING)
            row.append(_class_mark(check) if check else v.MISSING)
        if timers:
            timer = timers.get(o.op)
            row.append(v.sig(timer.gap_ns_median, 1e-3) if timer else v.MISSING)
            row.append(_class_mark(timer) if timer and timer.gap_agrees is not None else v.MISSING)
        body.append(row)
    columns = ["op", "count", "median\nduration us", "median gap\nbefore us", "share of\nstep", "achieved\nTB/s"]
    if checks:
        columns += ["CUPTI\nduration us", "CUPTI\ngap us"] + (["start\nbias us"] if biased else []) + ["gap vs\nCUPTI"]
    if timers:
        columns += ["timer pair\ngap us", "timers vs\nCUPTI"]
    title = f"Per-kernel pass: {v.text(r.mode)}, batch {v.integer(r.batch)}"
    if kp.picture == "stitched":
        title += " (stitched from sampled steps)"
    elif kp.picture == "instrumented":
        title += " (dense: the instrumented step, perturbed)"
    note = "CUPTI: clean steps, no events; gap vs CUPTI: within 1 us or 15%" if checks else ""
    if biased:
        note += (
            "; start bias: how much the events' gap moves because an event after an op moves its start (CUPTI's "
            "start shift of the op less its predecessor's; not corrected)"
        )
    if timers:
        note += (
            "; timer pair gap: the same gap read between a timer kernel after the op before and one after the op, "
            "less the pairs' mean excess over the stitched gaps (docs/gaps.md)"
        )
    return Table(title=title, columns=columns, rows=body, note=note.removeprefix("; "))


def _kernel_pass_lines(kp: KernelPass, kernel_seconds: float | None) -> list[str]:
    if kp.density is None:
        return _legacy_kernel_pass_lines(kp)
    lines = [_picture_line(kp)]
    verdicts = _verdicts_line(kp)
    if verdicts is not None:
        lines.append(verdicts)
    if kp.refusal:
        lines.append(f"NOT STITCHED: {v.text(kp.refusal)}")
    if kp.kernels:
        lines.append(_gap_line("gaps before kernels", kp.gaps))
    if kp.gaps_corrected is not None:
        lines.append(_gap_line("gaps less one event node (graph-replayed ops, where that is sound)", kp.gaps_corrected))
    lines.append(_overhead_line(kp, kernel_seconds))
    host = _host_line(kp)
    if host is not None:
        lines.append(host)
    if kp.stride_probes:
        letter = "m" if _paired(kp) else "k"
        probes = ", ".join(
            f"{letter}={p.stride} {p.overhead_fraction:+.1%}"
            + (f" +/- {p.error_fraction:.1%}" if p.error_fraction is not None else "")
            for p in kp.stride_probes
        )
        ran = max((p.variants or 1) for p in kp.stride_probes)
        what = "the densest variant" if ran == 1 else f"up to {ran} paired variants, run as the cycles run them"
        lines.append(f"choosing {letter} (measured overhead of {what}): {probes}")
    if kp.pairing and kp.density == "sampled":
        lines.append(f"pairing: {v.text(kp.pairing)}")
        if _paired(kp) and kp.end_shift_source and kp.end_shift_source.startswith("CUPTI"):
            lines.append(
                "end shifts: where ops overlap under programmatic dependent launch, the event after an op moves that "
                f"op's end; each op's shift is measured and put back into the gaps beside it ({kp.end_shift_source})"
            )
        elif _paired(kp):
            lines.append(
                "caveat: where ops overlap under programmatic dependent launch, the event after an op moves that "
                "op's end (the next op can no longer start early), so the gaps on either side of it trade a few us; "
                "their sum, and the step, are measured right (docs/gaps.md)"
                + (f"; end shifts {kp.end_shift_source}" if kp.end_shift_source else "")
            )
    lines += _one_per_step_lines(kp)
    if kp.event_lags:
        lags = ", ".join(
            f"{lag.kinds} {lag.lag_ns_median / 1e3:+.2f} +/- {(lag.lag_noise_ns or 0.0) / 1e3:.2f} us "
            f"({v.integer(lag.pairs)})"
            for lag in kp.event_lags
        )
        lines.append(
            "event lags (two events of one step less CUPTI's ends of their ops, in the CUPTI cycle, by kind: node "
            f"after a graphed op, host after a host-launched one): {lags}; a pair of two kinds carries its lag into "
            "the gap it measures; reported, not corrected"
        )
    if kp.cupti_anchor_effects:
        effects = ", ".join(f"{e.op} {e.effect_ns / 1e3:+.2f}" for e in kp.cupti_anchor_effects)
        lines.append(
            "CUPTI anchor effect (us; in the CUPTI cycle, the idle after a far pair's anchor event less a near "
            f"pair's, by the class measured; CUPTI's event node costs more the more kernels follow it): {effects}; "
            "taken out of the like-for-like reading only"
        )
    if kp.cupti_start_shifts:
        lines.append(_start_shift_line(kp.cupti_start_shifts))
    if kp.cupti_capture_check is not None:
        lines.append(_capture_line(kp.cupti_capture_check))
    if kp.cupti_fresh_captures is not None:
        lines.append(_fresh_capture_line(kp.cupti_fresh_captures))
    if kp.timer_pairs is not None:
        event_ops = kp.cupti_check.ops if kp.cupti_check is not None else []
        lines.append(_timer_pairs_line(kp.timer_pairs, event_ops, [r.op for r in kp.kernels or []]))
    if kp.sequence_check:
        lines.append(f"kernel sequence: {v.text(kp.sequence_check)}")
    lines += _cupti_lines(kp, kernel_seconds)
    return lines


def _verdicts_line(kp: KernelPass) -> str | None:
    """The pass's checks in one line, before their details: the sampled step against the budget, the stitched gap
    total and busy against the clean step, every op class against CUPTI by the better reading (the timer pairs'
    where they read a class, the events' elsewhere), and the verdict over them (any no: no; else any undecided: not
    decided). A class check that is not made (CUPTI not trusted op for op) is left out of it, as the issue's bar
    asks a class only where CUPTI's own step is within 5% of clean."""
    check = kp.cupti_check
    if kp.density != "sampled" or kp.refusal or check is None or check.available is False:
        return None
    word = {True: "AGREE", False: "DISAGREE", None: "not decided"}
    budget = {True: "within", False: "OVER", None: "not decided"}[kp.overhead_within_budget]
    if kp.overhead_basis == OVERHEAD_BASIS_POOLED:
        step = f"{_fraction(kp.overhead_fraction)} (pooled: no variant stands out)"
    else:
        step = f"{_fraction(kp.variant_overhead_max_fraction)} (slowest variant)"
    limit = f"{kp.overhead_budget_fraction:.0%}" if kp.overhead_budget_fraction is not None else v.MISSING
    diff, noise = check.total_gap_diff_ns, check.total_gap_noise_ns
    total = (
        v.MISSING if diff is None else f"{diff / 1e3:+.1f}" + (f" +/- {noise / 1e3:.1f}" if noise is not None else "")
    )
    parts = [
        f"sampled step {step} against the {limit} budget: {budget}",
        f"gap total {total} us ({v.sig(check.total_gap_tolerance_ns, 1e-3)} allowed): {word[check.total_gap_agrees]}",
        f"busy {v.percent(check.busy_rel_diff, 1)} apart: {word[check.busy_agrees]}",
    ]
    timers = kp.timer_pairs
    if timers is not None and timers.classes_from_events is not None:
        every, by = timers.with_events_ops_agree, "the timer pairs where they read it, the events elsewhere"
        misses = _every_class_misses(timers, check.ops or [])
    else:
        every, by = check.ops_agree, "the events"
        misses = [f"{o.op} {o.gap_diff_ns / 1e3:+.2f} us" for o in check.ops or [] if _op_check_misses(o)]
    if kp.checks_verdict is not None:  # stored by the producer; older files: derived here as it derives them
        every, made = kp.every_class_agrees, bool(kp.every_class_checked)
    else:
        made = class_check_made(every, check.cupti_trusted, bool(check.ops))
    if made:
        parts.append(
            f"every op class vs CUPTI ({by}): {word[every]}" + (f" ({', '.join(misses[:4])})" if misses else "")
        )
    else:
        reason = check.grouping if check.cupti_trusted else "CUPTI not trusted op for op"
        parts.append(f"every op class vs CUPTI: not made ({v.text(reason)})")
    overall = kp.checks_verdict or checks_verdict(
        kp.overhead_within_budget, check.total_gap_agrees, check.busy_agrees, every, made
    )
    overall_word = {CHECKS_AGREE: "AGREE", CHECKS_DISAGREE: "DISAGREE"}.get(overall, "not decided")
    return "checks against the clean step: " + "; ".join(parts) + f"; overall {overall_word}"


def _every_class_misses(timers: TimerPairs, event_ops: list[OpCheck]) -> list[str]:
    """The classes that miss in the verdict over every class: the timers' misses where they read the class, the
    events' where it is taken from them (``classes_from_events``)."""
    taken = set(timers.classes_from_events or [])
    missed = [
        f"{c.op} {(c.gap_diff_ns or 0.0) / 1e3:+.2f} us (timers)"
        for c in timers.classes or []
        if c.gap_agrees is not None and not _timer_class_agrees(c) and c.op not in taken
    ]
    missed += [
        f"{o.op} {o.gap_diff_ns / 1e3:+.2f} us (events)"
        for o in event_ops
        if o.op in taken and o.gap_verdict == GAP_DISAGREE
    ]
    return missed


def _op_check_misses(o: OpCheck) -> bool:
    """An events' class that misses CUPTI by its verdict (files before the verdict: by its plain reading)."""
    return o.gap_verdict == GAP_DISAGREE if o.gap_verdict is not None else not o.gap_agrees


def _timer_class_agrees(c: TimerPairClass) -> bool:
    return c.gap_verdict != GAP_DISAGREE if c.gap_verdict is not None else bool(c.gap_agrees)


def _start_shift_line(shifts: list[StartShift]) -> str:
    """Where an event after an op moves its start (CUPTI), and what that puts into each class's gap."""
    moved = [s for s in shifts if abs(s.shift_ns) >= START_SHIFT_SHOWN_NS]
    listed = ", ".join(
        f"{s.op} {s.shift_ns / 1e3:+.2f}" + (f" (bias {s.bias_ns / 1e3:+.2f})" if s.bias_ns is not None else "")
        for s in moved
    )
    return (
        "start shifts (us; in the CUPTI cycle, an op's start in the steps that time its end less in the clean "
        f"steps; the events see ends, not starts, so a class's gap carries its shift less its predecessor's, the "
        f"bias): {listed or f'none of {len(shifts)} classes by {START_SHIFT_SHOWN_NS / 1e3:.1f} us or more'}; "
        "reported, not corrected"
    )


SHIFT_SHOWN_NS = 1_000  # a timer-step duration shift the line names: the op bar's 1 us
# a CUPTI effect a miss names: beyond two errors, as analysis.sampled.CUPTI_EFFECT_SIGMAS (not imported by renderers)
EFFECT_SHOWN_SIGMAS = 2.0


def _timer_pairs_line(timers: TimerPairs, event_ops: list[OpCheck], op_names: list[str]) -> str:
    """The timer pairs' per-class gaps against CUPTI: how many agree, the ones that do not, and the verdict over
    every class with the events' for the classes the timers do not read."""
    if not timers.measured:
        return f"timer pairs: not measured ({v.text(timers.note or 'no reason given')})"
    classes = timers.classes or []
    checked = [c for c in classes if c.gap_agrees is not None]
    head = (
        f"timer pairs (a timer kernel after op i - 1 and op i of one step; {v.integer(timers.ops_covered or 0)} ops, "
        f"{v.integer(timers.steps or 0)} steps, {_fraction(timers.overhead_fraction)} against clean; their mean "
        f"excess {(timers.mean_excess_ns or 0.0) / 1e3:+.2f} us over the stitched gaps taken out, so the ops sum to "
        "the stitch)"
    )
    if timers.after_piece_behind:
        unread = ", ".join(
            f"{op_names[i]} (op {i})" if i < len(op_names) else f"op {i}" for i in timers.after_piece_behind
        )
        head += "; not read, their variant's steps over the 2% budget (the host fell behind its timers): " + v.text(
            unread
        )
    if timers.durations_source and "timer steps" not in timers.durations_source:
        head += f"; op durations {v.text(timers.durations_source)}"
    moved = [c for c in classes if c.duration_shift_ns is not None and abs(c.duration_shift_ns) > SHIFT_SHOWN_NS]
    if moved:
        shifts = ", ".join(f"{c.op} {(c.duration_shift_ns or 0.0) / 1e3:+.2f} us" for c in moved)
        head += f"; the timer steps' own durations taken off, where CUPTI saw them differ from clean: {shifts}"
    if not checked:
        return f"{head}: no CUPTI gaps to set them against"
    own = [c for c in classes if c.cupti_effect_source == CUPTI_EFFECT_TIMERS and c.gap_under_cupti_diff_ns is not None]
    if own:
        effects = ", ".join(
            f"{c.op} {(c.cupti_effect_ns or 0.0) / 1e3:+.2f} +/- {(c.cupti_effect_noise_ns or 0.0) / 1e3:.2f} us"
            for c in own
        )
        head += f"; CUPTI moves the pairs of {effects} (the same pairs read under CUPTI)"

    apart = [c for c in classes if c.timer_steps_moved]
    if apart:
        shifted = ", ".join(
            f"{c.op} {(c.timer_steps_shift_ns or 0.0) / 1e3:+.2f} +/- "
            f"{(c.timer_steps_shift_noise_ns or 0.0) / 1e3:.2f} us"
            for c in apart
        )
        head += (
            f"; CUPTI saw the timer steps run the gap of {shifted} apart from its clean reference (beyond the "
            "typical op's): the pairs read their own steps there"
        ) + (", and every class takes the events' reading of it" if timers.with_events_ops_agree is not None else "")

    misses = [c for c in checked if not _timer_class_agrees(c)]
    like = [c for c in checked if c.gap_verdict == GAP_AGREE_LIKE_FOR_LIKE]
    verdicts = {True: "AGREE", False: "DISAGREE", None: "not judged: CUPTI not trusted op for op"}
    worst = ", ".join(f"{c.op} {(c.gap_diff_ns or 0.0) / 1e3:+.2f} us" + _timer_steps_clause(c) for c in misses)
    line = (
        f"{head}: {len(checked) - len(misses) - len(like)} of {len(checked)} op classes within 1 us or 15% of CUPTI's "
        "clean gap" + (f", {len(like)} more like for like (CUPTI moves them)" if like else "")
        + f", {verdicts[timers.ops_agree]}" + (f" ({worst})" if worst else "")
    )  # fmt: skip
    if timers.classes_from_events is not None:
        missed = _every_class_misses(timers, event_ops)
        names = ", ".join(timers.classes_from_events) or "none"
        line += (
            "; every op class, the events' verdict for those the timers do not read"
            + (" or whose timer steps ran apart" if apart else "")
            + f" ({names}): "
            f"{verdicts[timers.with_events_ops_agree]}" + (f" ({', '.join(missed)})" if missed else "")
        )
    return line


def _timer_steps_clause(c: TimerPairClass) -> str:
    """Beside a timer class that misses: where CUPTI saw the timer steps shift it (``gap_timer_steps_diff_ns``), the
    shift and the reading against CUPTI's reference plus it. It explains the miss and changes no verdict: the shift
    is the timer steps' own (their timer's cost at the class, their recaptured pieces), which the reading carries."""
    if c.gap_timer_steps_diff_ns is None:
        return ""
    return (
        f" (CUPTI saw its timer steps shifted {(c.timer_steps_shift_ns or 0.0) / 1e3:+.2f} +/- "
        f"{(c.timer_steps_shift_noise_ns or 0.0) / 1e3:.2f} us; {c.gap_timer_steps_diff_ns / 1e3:+.2f} us against that)"
    )


def _fraction(value: float | None) -> str:
    return f"{value:+.1%}" if value is not None else "n/a"


def _boundary_clause(check: OpCheck) -> str:
    """Beside a missed gap between steps: how much later than the events' end event CUPTI saw the boundary event
    complete (``OpCheck.boundary_lag_ns``), which the events cannot see, and CUPTI's gap less that lag
    (``cupti_gap_less_boundary_lag_ns``; files before it: not given)."""
    if check.boundary_lag_ns is None:
        return ""
    less = check.cupti_gap_less_boundary_lag_ns
    return (
        f" (CUPTI: the boundary event lags the last kernel {check.boundary_lag_ns / 1e3:+.2f} +/- "
        f"{(check.boundary_lag_noise_ns or 0.0) / 1e3:.2f} us more than the events' end, unseen by them"
        + (f"; CUPTI's gap less that lag {less / 1e3:.2f} us" if less is not None else "")
        + ")"
    )


def _effect_clause(check: OpCheck) -> str:
    """Beside a class that misses plainly where CUPTI measurably moves it, by less than the bar it needs to move the
    class (``cupti_trusted_here`` true, the effect beyond two errors): that effect and the like-for-like reading.
    It explains a miss and changes no verdict: on the H200 kv_write in 1B piecewise b1 missed by +1.35 us where
    CUPTI shortened it by 0.82 +/- 0.06 us and the events under CUPTI read +0.53 (docs/performance.md, 2026-12-03
    from 17:00 UTC)."""
    if check.gap_verdict != GAP_DISAGREE or check.cupti_trusted_here is not True:
        return ""
    effect, noise, like = check.cupti_effect_ns, check.cupti_effect_noise_ns, check.gap_under_cupti_diff_ns
    if effect is None or noise is None or like is None or abs(effect) <= EFFECT_SHOWN_SIGMAS * noise:
        return ""
    return (
        f" (CUPTI moves it {effect / 1e3:+.2f} +/- {noise / 1e3:.2f} us, under the bar; "
        f"like for like {like / 1e3:+.2f} us)"
    )


def _capture_moved(shift: CaptureShift) -> bool:
    """Whether a second capture moved CUPTI's gap for the class (files before ``moved``: beyond the bar)."""
    return shift.moved if shift.moved is not None else shift.beyond_bar


def _fresh_capture_line(fresh: FreshCaptures) -> str:
    """CUPTI's gaps in the variants' own captures, away from their events, against the clean capture: the classes
    moved by ``START_SHIFT_SHOWN_NS`` or more, and the sum over every position read."""
    moved = [c for c in fresh.classes if abs(c.shift_ns) >= START_SHIFT_SHOWN_NS]
    listed = ", ".join(f"{c.op} {c.shift_ns / 1e3:+.2f} ({c.count})" for c in moved) or "no class moved 0.2 us or more"
    return (
        "CUPTI in the variants' own captures (us; the gap at a position with no event near it in a freshly "
        f"captured piece, less in the clean capture): {listed}; summed over {fresh.positions} positions "
        f"{fresh.gap_sum_ns / 1e3:+.1f} us. The picture is stitched from such captures; reported, not corrected"
    )


def _capture_line(check: CaptureCheck) -> str:
    """CUPTI's gaps in a second capture of the clean graphs: the classes it moves (``CaptureShift.moved``), and the
    step."""
    if not check.classes:
        return f"CUPTI in a second capture of the clean graphs: {check.note or 'not measured'}"
    moved = [c for c in check.classes if _capture_moved(c)]
    step = "the step n/a"
    if check.step_shift_ns is not None:
        step = f"the step {check.step_shift_ns / 1e3:+.2f} +/- {(check.step_shift_error_ns or 0.0) / 1e3:.2f} us"
    head = "CUPTI in a second capture of the clean graphs (no events; its gap less the first's)"
    if not moved:
        return f"{head}: no class moved; {step} (without CUPTI)"
    classes = ", ".join(f"{c.op} {c.shift_ns / 1e3:+.2f} us ({c.count})" for c in moved)
    return (
        f"{head}: {classes}; {step} (without CUPTI): CUPTI's gap for these classes depends on the capture, "
        "and the variants' graphs are other captures"
    )


def _one_per_step_lines(kp: KernelPass) -> list[str]:
    """How the ops that occur once per step were sampled, and what the gap between steps is made of."""
    lines = []
    if kp.one_per_step_variants:
        lines.append(
            f"one-per-step ops (no layers to average over): their {v.integer(kp.one_per_step_variants)} variants "
            f"ran {v.integer(kp.one_per_step_runs)} steps each, in extra rounds after every cycle"
        )
    if kp.tail_measured_ns is not None and kp.tail_noise_ns is not None:
        measured = f"{v.sig(kp.tail_measured_ns, 1e-3)} +/- {v.sig(kp.tail_noise_ns, 1e-3)} us"
        lines.append(
            f"gap between steps: the head; the tail (last op's end to the boundary), measured at {measured}: "
            + (
                "kept: it stands out of its noise; it closes the stitched step and the check's gap total, and "
                "from 2026-12-02 is no part of op 0's gap nor of the gaps' total (docs/gaps.md)"
                if kp.tail_ns
                else "within its noise of zero, taken as 0 (the boundary event completes as the last op does)"
            )
        )
    return lines


def _picture_line(kp: KernelPass) -> str:
    if kp.density == "dense":
        return (
            "picture: the instrumented step, an end event after every op (dense; PERTURBING: the gaps include what "
            "the events cost)"
        )
    events = (
        f"end events in pairs, one pair every {v.integer(kp.stride)} ops per step"
        if _paired(kp)
        else f"an end event after every {v.integer(kp.stride)}th op per step"  # files from before the pairs
    )
    return (
        f"picture: stitched from {v.integer(kp.sampled_steps)} sampled steps: {events}, {v.integer(kp.variants)} "
        f"variants rotated over {v.integer(kp.cycles)} cycles; the clean step, not the instrumented one"
        + (f" (measured ends vary by {v.sig(kp.position_noise_ns, 1e-3)} us IQR)" if kp.position_noise_ns else "")
    )


def _paired(kp: KernelPass) -> bool:
    return (kp.pairing or "").startswith("paired events")


def _overhead_line(kp: KernelPass, kernel_seconds: float | None) -> str:
    text = (
        f"instrumentation: {v.fixed(kp.instrumented_step_ms, 3)} ms per {'sampled' if kp.density == 'sampled' else ''}"
        f" step vs {v.fixed(kp.clean_step_ms, 3)} ms clean"
    ).replace("per  step", "per step")
    pooled = kp.overhead_basis == OVERHEAD_BASIS_POOLED
    if kp.overhead_fraction is not None:
        text += f" ({kp.overhead_fraction:+.1%}"
        if pooled and kp.overhead_error_fraction is not None:
            text += f" +/- {kp.overhead_error_fraction:.1%}"
        if kp.variant_overhead_max_fraction is not None and kp.density == "sampled":
            text += f"; slowest variant {kp.variant_overhead_max_fraction:+.1%}"
            if kp.variant_overhead_max_error_fraction:
                text += f" +/- {kp.variant_overhead_max_error_fraction:.1%}"
        if pooled and kp.variant_overhead_shuffled_q95_fraction is not None and kp.variant_standout_p is not None:
            text += (
                f"; no variant stands out: with the labels shuffled the slowest reads up to "
                f"{kp.variant_overhead_shuffled_q95_fraction:+.1%}, p {kp.variant_standout_p:.2f}"
            )
        text += ")"
    basis = "the pooled overhead" if pooled else "the slowest variant"
    if kp.overhead_budget_fraction is not None and kp.overhead_within_budget is not None:
        verdict = "within" if kp.overhead_within_budget else "OVER"
        text += f": {verdict} the {kp.overhead_budget_fraction:.0%} budget"
        if kp.variant_overhead_max_error_fraction is not None:
            text += f" ({basis} at two standard errors)"
    elif kp.overhead_budget_fraction is not None and pooled:
        text += (
            f": the {kp.overhead_budget_fraction:.0%} budget NOT DECIDED (the pooled overhead's error takes it past "
            f"the budget: the host moved; {_steps_to_decide(kp.overhead_steps_to_decide, kernel_seconds)})"
        )
    elif kp.overhead_budget_fraction is not None and kp.variant_overhead_max_error_fraction is not None:
        text += (
            f": the {kp.overhead_budget_fraction:.0%} budget NOT DECIDED (the slowest variant's error is over half of "
            f"it: the host moved; {_steps_to_decide(kp.overhead_steps_to_decide, kernel_seconds)})"
        )
    return text


def _host_line(kp: KernelPass) -> str | None:
    """How far the clean step moved over the pass, and what that means for the picture, when it moved."""
    if kp.clean_step_spread_fraction is None or kp.host_steady is not False:
        return None
    return (
        f"host UNSTEADY: the {v.integer(kp.clean_references)} clean steps timed among the sampled ones spread "
        f"{kp.clean_step_spread_fraction:.0%} (p10-p90) about {v.fixed(kp.clean_step_ms, 3)} ms; the picture and its "
        "checks mix the host's speeds, so compare runs on a host that holds still"
    )


def _class_mark(check: OpCheck | TimerPairClass) -> str:
    """The op table's verdict for one class against CUPTI, by the events or the timer pairs."""
    if check.gap_verdict == GAP_AGREE_LIKE_FOR_LIKE:
        return "ok like for like"
    if check.gap_verdict == GAP_AGREE_ACROSS_CAPTURES:
        return "ok across captures"
    return "ok" if check.gap_agrees else "DIFF"


def _steps_to_decide(factor: float | None, kernel_seconds: float | None) -> str:
    """How many times the steps per variant would decide a check (``factor``), and, where the run's --kernel-seconds
    is known, the value that gives them (the cycles fill that much device time, so their steps scale with it)."""
    if factor is None:
        return "more steps per variant with --kernel-seconds"
    text = f"about {factor:.0f}x the steps" if factor >= 10 else f"about {factor:.1f}x the steps"
    if kernel_seconds is None:
        return text + " per variant with --kernel-seconds"
    wanted = math.ceil(kernel_seconds * factor)
    if wanted > KERNEL_SECONDS_MAX:
        return (
            text
            + f" per variant, more than --kernel-seconds allows ({KERNEL_SECONDS_MAX:g}; this run: {kernel_seconds:g})"
        )
    return text + f" per variant: --kernel-seconds {wanted:g} or more (this run: {kernel_seconds:g})"


def _scatter_clause(check: CuptiCheck) -> str:
    """The part of the gap total's error its positions' scatter makes, where it is worth saying (1 us or more)."""
    scatter = check.total_gap_scatter_ns
    if scatter is None or scatter < 1_000:
        return ""
    return f" (of which {v.sig(scatter, 1e-3)} from its positions scattering beyond their own errors)"


def _undecided_total_clause(check: CuptiCheck, kernel_seconds: float | None) -> str:
    """Why a gap total is not decided, and what would decide it."""
    noise, scatter = check.total_gap_noise_ns or 0.0, check.total_gap_scatter_ns or 0.0
    if check.total_gap_scatter_bound:
        return (
            " (at two standard errors the stitched total cannot be told within or beyond it, and more steps would "
            "not tell it: its positions scatter within their op classes beyond their own errors, "
            f"{v.sig(scatter, 1e-3)} us on the total; docs/gaps.md)"
        )
    cause = (
        "its positions scatter within their op classes beyond their own errors"
        if scatter > noise / math.sqrt(2)
        else "its steps vary too much, as where the host moves"
    )
    return (
        f" (at two standard errors the stitched total cannot be told within or beyond it: {cause}; "
        f"{_steps_to_decide(check.total_gap_steps_to_decide, kernel_seconds)})"
    )


def _noise_overlap_clause(check: CuptiCheck) -> str:
    """What the gaps' noise alone does to the stitched busy, where it is worth saying (1 us or more)."""
    overlap = check.busy_noise_overlap_ns
    if overlap is None or overlap < 1_000:
        return ""
    clause = f"; the gaps' noise alone overlaps ops by about {v.sig(overlap, 1e-3)} us"
    if check.busy_agrees is None:
        clause += ": too much to tell it within 5% or beyond (more steps per variant with --kernel-seconds)"
    return clause


GAP_PARTS_SHOWN = 4  # the classes named in the gap total's parts, by size; the rest summed


def _gap_total_parts_line(check: CuptiCheck) -> str:
    """Where the stitched gap total parts from clean, exactly: each class's stitched gaps less CUPTI's clean ones at
    the same positions (the largest named, the rest summed), a kept tail, and CUPTI's gaps less the clean step's
    (what CUPTI's own steps add)."""
    parts = [(c.op, c.diff_ns) for c in check.gap_total_by_class if c.diff_ns is not None]
    complete = parts and len(parts) == len(check.gap_total_by_class)
    if not complete or check.cupti_gap_sum_ns is None or check.cupti_gap_part_ns is None:
        return ""  # files before the parts were stored: no line
    diffs = sorted(parts, key=lambda d: -abs(d[1]))
    named = ", ".join(f"{op} {diff / 1e3:+.1f}" for op, diff in diffs[:GAP_PARTS_SHOWN])
    rest = sum(diff for _, diff in diffs[GAP_PARTS_SHOWN:])
    tail = f"; a kept tail {check.gap_total_tail_ns / 1e3:+.1f}" if check.gap_total_tail_ns else ""
    return (
        f"gap total, its parts (us): stitched less CUPTI's clean gaps by class {named}"
        + (f", the other classes {rest / 1e3:+.1f}" if len(diffs) > GAP_PARTS_SHOWN else "")
        + f"{tail}; CUPTI's gaps less the clean step's {check.cupti_gap_part_ns / 1e3:+.1f} (CUPTI's gaps sum to "
        f"{check.cupti_gap_sum_ns / 1e3:.1f})"
    )


def _capture_step_clause(capture: CaptureCheck | None) -> str:
    """Beside the gap total in graph modes: how far the capture check's second capture of the clean graphs (made
    after the variants) moved the clean step, where beyond two of its errors. In 31 of 34 piecewise passes on the
    H200 the stitched total's difference from clean had this shift's sign, several times its size, while captures
    made before the pass ran within 5 us of the first (docs/gaps.md, "What to expect"): a lead beside the total,
    not an explanation of it; it changes no verdict."""
    if capture is None or capture.step_shift_ns is None or capture.step_shift_error_ns is None:
        return ""
    shift, error = capture.step_shift_ns, capture.step_shift_error_ns
    if abs(shift) <= 2 * error:
        return ""
    return (
        f" (a second capture of the clean graphs, made after the variants', ran the clean step "
        f"{shift / 1e3:+.1f} +/- {error / 1e3:.1f} us)"
    )


def _cupti_lines(kp: KernelPass, kernel_seconds: float | None) -> list[str]:
    check = kp.cupti_check
    if check is None:
        return []
    if check.available is False:
        return [f"CUPTI cross-check: not available ({v.text(check.note)})"]
    lines = [f"CUPTI reference: {v.text(check.trust_note)}"]
    word = {True: "AGREE", False: "DISAGREE", None: "not decided"}
    if check.clean_gap_total_ns is None:  # files from before the signed gap total
        reference = f"{v.fixed(check.clean_idle_ns, 3, 1e-6)} ms clean idle (clean step minus CUPTI busy)"
    else:
        under = (
            f"; CUPTI's own steps, which it slows, idle {v.fixed(check.cupti_total_gap_ns, 3, 1e-6)} ms"
            if check.cupti_total_gap_ns is not None
            else ""
        )
        reference = (
            f"{v.fixed(check.clean_gap_total_ns, 3, 1e-6)} ms clean (clean step less CUPTI's op durations; gaps "
            f"signed{under})"
        )
    noise = check.total_gap_noise_ns
    lines.append(
        f"check, gap total: {v.fixed(check.events_total_gap_ns, 3, 1e-6)} ms stitched vs {reference}, difference "
        f"{v.sig(check.total_gap_diff_ns, 1e-3)}"
        + (f" +/- {v.sig(noise, 1e-3)}" if noise is not None else "")
        + _scatter_clause(check)
        + f" us against {v.sig(check.total_gap_tolerance_ns, 1e-3)} us allowed: {word[check.total_gap_agrees]}"
        + (
            _undecided_total_clause(check, kernel_seconds)
            if check.total_gap_agrees is None and noise is not None
            else ""
        )
        + _capture_step_clause(kp.cupti_capture_check)
    )
    parts = _gap_total_parts_line(check)
    if parts:
        lines.append(parts)
    if check.events_idle_ns is not None:
        lines.append(
            f"idle (step less the union of its ops): {v.fixed(check.events_idle_ns, 3, 1e-6)} ms stitched vs "
            f"{v.fixed(check.clean_idle_ns, 3, 1e-6)} ms clean, difference {v.sig(check.idle_diff_ns, 1e-3)} us; "
            "not in the verdict: where ops overlap, the event after an op moves its end (docs/gaps.md)"
        )
    lines.append(
        f"check, busy: {v.fixed(check.events_busy_ns, 3, 1e-6)} ms stitched vs "
        f"{v.fixed(check.cupti_op_busy_ns if check.cupti_op_busy_ns is not None else check.cupti_busy_ns, 3, 1e-6)}"
        f" ms CUPTI ({v.percent(check.busy_rel_diff, 1)} apart, 5% allowed"
        + _noise_overlap_clause(check)
        + f"): {word[check.busy_agrees]}"
    )
    if check.ops:
        bad = [o for o in check.ops if not o.gap_agrees]
        captured = kp.cupti_capture_check
        moves = {c.op: c.shift_ns for c in captured.classes if _capture_moved(c)} if captured is not None else {}
        fresh = kp.cupti_fresh_captures.classes if kp.cupti_fresh_captures is not None else []
        fresh_moves = {c.op: c.shift_ns for c in fresh if abs(c.shift_ns) >= START_SHIFT_SHOWN_NS}
        detail = ", ".join(
            f"{o.op} {o.gap_diff_ns / 1e3:+.2f} us"
            + (" (like for like ok)" if o.gap_verdict == GAP_AGREE_LIKE_FOR_LIKE else "")
            + (f" (CUPTI's gap {moves[o.op] / 1e3:+.2f} us in a second capture)" if o.op in moves else "")
            + (" (ok against it)" if o.gap_verdict == GAP_AGREE_ACROSS_CAPTURES else "")
            + (
                f" (the variants' own captures move CUPTI's gap {fresh_moves[o.op] / 1e3:+.2f} us; "
                f"{o.gap_fresh_capture_diff_ns / 1e3:+.2f} against that)"
                if o.op in fresh_moves and o.gap_fresh_capture_diff_ns is not None
                else ""
            )
            + (f" (start bias {o.start_bias_ns / 1e3:+.2f})" if o.start_bias_ns is not None else "")
            + _boundary_clause(o)
            + _effect_clause(o)
            + _cycle_clause(o)
            for o in bad[:6]
        )
        like_ok = sum(o.gap_verdict == GAP_AGREE_LIKE_FOR_LIKE for o in bad)
        across_ok = sum(o.gap_verdict == GAP_AGREE_ACROSS_CAPTURES for o in bad)
        undecided = sum(o.gap_verdict == GAP_NOT_DECIDED for o in bad)
        lines.append(
            f"check, median gap per op class vs CUPTI: {len(check.ops) - len(bad)} of {len(check.ops)} within 1 us "
            f"or 15%" + (f", {like_ok} more like for like where CUPTI moves the class" if like_ok else "")
            + (f", {across_ok} more against a second capture that moves CUPTI's value" if across_ok else "")
            + (
                f", {undecided} not decided: CUPTI's own clean steps later in the pass put the class beyond the bar "
                "of its reference" if undecided else ""
            )
            + f": {word[check.ops_agree]}" + (f" ({detail})" if detail else "")
        )  # fmt: skip
        likes = [o for o in check.ops if o.gap_under_cupti_agrees is not None]
        if likes:
            off = [o for o in likes if not o.gap_under_cupti_agrees]
            gaps = ", ".join(f"{o.op} {(o.gap_under_cupti_diff_ns or 0.0) / 1e3:+.2f} us" for o in off[:6])
            moved = [o for o in likes if o.cupti_trusted_here is False]
            effects = ", ".join(
                f"{o.op} {(o.cupti_effect_ns or 0.0) / 1e3:+.2f} +/- {(o.cupti_effect_noise_ns or 0.0) / 1e3:.2f} us"
                + (
                    f" by the {o.cupti_effect_source}"
                    if o.cupti_effect_source in (CUPTI_EFFECT_HEAD_VARIANT, CUPTI_EFFECT_PIECE_VARIANT)
                    else ""
                )
                for o in moved[:6]
            )
            lines.append(
                f"  like for like (the pass's cycle read again while CUPTI ran, {v.integer(check.under_cupti_steps)} "
                f"steps): {len(likes) - len(off)} of {len(likes)} within 1 us or 15%"
                + (f" ({gaps})" if gaps else "")
                + (
                    f"; CUPTI moves {len(moved)} class(es), so its value is not their clean gap ({effects}); where "
                    "the events' own reading misses CUPTI's there, this reading decides"
                    if moved
                    else "; CUPTI moves no class"
                )
            )
    else:
        lines.append(
            f"check, op for op: not made ({v.text(check.grouping if check.cupti_trusted else 'CUPTI not trusted')})"
        )
    timers = kp.timer_pairs
    whose = " (the events' reading)" if timers is not None and timers.classes_from_events is not None else ""
    lines.append(f"CUPTI cross-check{whose}: {word[check.agrees].upper()}")
    return lines


def _cycle_clause(o: OpCheck) -> str:
    """Where CUPTI's own clean steps later in the pass put a class elsewhere: beyond the bar in a tenth of them."""
    share, value = o.cupti_cycle_off_bar_fraction, o.cupti_cycle_gap_ns_median
    if share is None or value is None or share < 0.1:
        return ""
    return f" (CUPTI's gap {value / 1e3:.2f} us in its clean steps later in the pass, {share:.0%} beyond the bar)"


def _legacy_kernel_pass_lines(kp: KernelPass) -> list[str]:
    """Runs from before the sampled pass: events around every op, checked against the instrumented step."""
    gap_line = _gap_line("gaps before kernels", kp.gaps)
    cost = (
        f"instrumentation: {v.fixed(kp.instrumented_step_ms, 3)} ms per step with events around "
        f"every kernel vs {v.fixed(kp.clean_step_ms, 3)} ms clean"
    )
    if kp.overhead_fraction is not None:
        cost += f" ({kp.overhead_fraction:+.0%})"
    lines = [gap_line, cost]
    if kp.gaps_corrected is not None:
        lines.append(_gap_line("gaps less the event cost", kp.gaps_corrected))
    check = kp.cupti_check
    if check is not None and check.available is False:
        lines.append(f"CUPTI cross-check: not available ({v.text(check.note)})")
    elif check is not None:
        agrees = check.agrees
        lines.append(
            f"CUPTI cross-check: total gap {v.fixed(check.events_total_gap_ns, 3, 1e-6)} ms (events) vs "
            f"{v.fixed(check.cupti_total_gap_ns, 3, 1e-6)} ms (CUPTI), busy "
            f"{v.fixed(check.events_busy_ns, 3, 1e-6)} vs {v.fixed(check.cupti_busy_ns, 3, 1e-6)} ms"
            + ("" if agrees is None else ": agree" if agrees else ": DISAGREE")
        )
    if kp.event_cost_ns is not None:
        lines.append(
            f"event cost {v.sig(kp.event_cost_ns, 1e-3)} us per kernel"
            + ("; corrected gaps subtract it" if kp.has_corrected_gaps else "")
        )
    return lines


def _gap_line(label: str, gaps: GapStats | None) -> str:
    values = [None] * 5 if gaps is None else [gaps.p50_ns, gaps.p90_ns, gaps.p99_ns, gaps.max_ns, gaps.total_ns]
    quantiles = ", ".join(
        f"{name} {v.sig(value, 1e-3)} us" for value, name in zip(values[:4], ("p50", "p90", "p99", "max"))
    )
    return f"{label}: {quantiles}, total {v.fixed(values[4], 3, 1e-6)} ms per step"


def timeline_strips(passes: list[tuple[ClassifyResult, KernelPass]]) -> Strips | None:
    """Strips of one step per mode (the stitched clean step of a sampled pass), on one time scale so a shorter
    step draws shorter."""
    spans = [(r, kp, kp.busy_intervals, kp.step_span_ns) for r, kp in passes]
    spans = [s for s in spans if s[2] and s[3] > 0]
    if not spans:
        return None
    scale = max(span for _, _, _, span in spans)
    strips = []
    for r, kp, busy, span in spans:
        busy_ns = kp.busy_total_ns
        strips.append(
            Strip(
                label=v.text(r.mode),
                busy=[(start / scale, end / scale) for start, end in busy],
                length=span / scale,
                caption=f"{span / 1e6:.2f} ms, {busy_ns / span:.0%} busy"
                + (" (stitched)" if kp.picture == "stitched" else " (instrumented)" if kp.picture else ""),
            )
        )
    pictures = {kp.picture for _, kp in passes}
    if pictures == {"stitched"}:
        note = "busy: union of kernels of the stitched step (sampled end events across many steps: the clean step)"
    elif "instrumented" in pictures or None in pictures:
        note = "busy: union of kernels in the instrumented pass (events around every kernel slow the host)"
        if "stitched" in pictures:
            note = "busy: stitched (sampled) steps, and instrumented steps where dense, as each caption says"
    else:
        note = "busy: union of kernels"
    return Strips(title="One step along time", strips=strips, note=note)
