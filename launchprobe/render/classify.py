"""The report of a classify run: header, the per-(mode, batch) table, what graphs bought, verdicts and why.

Plan runs (``config.plan``) have no measured fields: they show the cost model and the floors instead.
"""

from __future__ import annotations

from typing import Any

from launchprobe.render import common
from launchprobe.render import values as v
from launchprobe.render.model import Block, Lines, Report, Strip, Strips, Table

MODE_ORDER = ("eager", "piecewise", "full")
VERDICT_RULE = [
    "launch-bound when the GPU is idle for >= 50% of the step;",
    "else memory- or compute-bound by the larger of bytes / HBM ceiling and FLOPs / matmul ceiling.",
]


def results(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Result records sorted by batch, then eager, piecewise, full."""
    raw = run.get("results")
    records = [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []

    def key(r: dict[str, Any]) -> tuple[float, int, str]:
        mode = str(r.get("mode"))
        order = MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)
        return (v.number(r.get("batch")) or 0.0, order, mode)

    return sorted(records, key=key)


def is_plan(run: dict[str, Any]) -> bool:
    return bool(v.get(run, "config", "plan"))


def build(run: dict[str, Any]) -> Report:
    plan = is_plan(run)
    title = "launchprobe classify" + (" --plan (cost model only, nothing measured)" if plan else "")
    if not plan and v.mapping(run.get("environment")).get("device") == "cpu":
        title += ": CPU path (no CUDA GPU; plain torch, eager only, wall-clock timing)"
    report = Report(title=title)
    report.fields = _header(run)
    report.notices = common.notices(run) + [
        f"{u.get('mode', '?')} unavailable: {u.get('reason', 'no reason given')}"
        for u in run.get("unavailable") or []
        if isinstance(u, dict)
    ]
    rows = results(run)
    if plan:
        report.blocks.append(_plan_table(rows))
        return report
    report.blocks += [_step_table(rows), _cost_table(rows)]
    speedups = _speedups(run, rows)
    if speedups is not None:
        report.blocks.append(speedups)
    rule = run.get("rule")
    report.blocks.append(Lines("Verdict rule", [rule] if isinstance(rule, str) and rule else VERDICT_RULE))
    reasons = [f"{_key(r)}: {r['verdict_reason']}" for r in rows if r.get("verdict_reason")]
    if reasons:
        report.blocks.append(Lines("Why each verdict", reasons))
    host = _host_cost_lines(run, rows)
    if host:
        report.blocks.append(Lines("Host cost", host))
    report.blocks += kernel_pass_blocks(rows)
    return report


def _host_cost_lines(run: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Host time per kernel of each eager step beside a bare loop of tiny launches; NVTX cost when measured."""
    bare = v.number(v.mapping(run.get("ceilings")).get("launch_host_ns"))
    lines = []
    for r in rows:
        per_kernel = v.number(r.get("host_ns_per_kernel"))
        if per_kernel is not None:
            against = f" vs {v.sig(bare, 1e-3)} us for a bare loop of tiny launches" if bare else ""
            lines.append(f"{_key(r)}: {v.sig(per_kernel, 1e-3)} us of host time per kernel{against}")
        nvtx = v.number(r.get("nvtx_overhead_fraction"))
        if nvtx is not None:
            lines.append(f"{_key(r)}: NVTX ranges per op cost {nvtx:+.1%} of the step")
    return lines


def _key(r: dict[str, Any]) -> str:
    return f"{r.get('mode', '?')} b={v.integer(r.get('batch'))}"


def _header(run: dict[str, Any]) -> list[tuple[str, str]]:
    config = v.mapping(run.get("config"))
    shape = v.mapping(run.get("shape"))
    env = run.get("environment")
    name = shape.get("name") or config.get("shape")
    dims = ", ".join(
        f"{label} {v.integer(shape[key])}"
        for key, label in (("layers", "layers"), ("hidden", "hidden"), ("ffn", "ffn"), ("vocab", "vocab"))
        if v.number(shape.get(key)) is not None
    )
    if v.number(shape.get("heads")) is not None:
        dims += f", heads {v.integer(shape.get('heads'))}/{v.integer(shape.get('kv_heads'))} kv"
    fields = [
        ("shape", f"{v.text(name)} ({dims})" if dims else v.text(name)),
        (
            "workload",
            f"batches {v.text(config.get('batches'))}, context {v.integer(config.get('context'))}, "
            f"{v.text(config.get('dtype'))}, modes {v.text(config.get('modes'))}",
        ),
    ]
    if not is_plan(run):
        fields.append(
            (
                "steps",
                f"{v.integer(config.get('steps'))} timed, {v.integer(config.get('warmup_steps'))} warm-up",
            )
        )
        kernels = _kernels_text(config)
        if kernels:
            fields.append(("kernels", kernels))
    fields += [
        ("device", common.device_text(env)),
        ("software", common.software_text(env)),
        ("ceilings", ceilings_text(run.get("ceilings"))),
        ("memory", _memory_text(run.get("memory"), shape)),
        ("made", common.made_text(run)),
    ]
    return fields


def ceilings_text(ceilings: Any) -> str:
    if not isinstance(ceilings, dict) or not ceilings:
        return v.MISSING
    parts = [
        (label, v.sig(ceilings.get(key), scale), unit)
        for key, label, scale, unit in (
            ("hbm_read_bytes_per_s", "HBM", 1e-12, "TB/s"),
            ("matmul_flops_per_s", "matmul", 1e-12, "TFLOP/s"),
            ("launch_host_ns", "launch", 1e-3, "us"),
            ("graph_node_ns", "graph node", 1e-3, "us"),
        )
    ]
    text = ", ".join(f"{label} {value} {unit}" for label, value, unit in parts if value != v.MISSING) or v.MISSING
    source = v.text(ceilings.get("source"))
    if ceilings.get("measured_at"):
        source += f" {str(ceilings['measured_at'])[:10]}"  # the date is enough here
    return f"{text} ({source})"


def _kernels_text(config: dict[str, Any]) -> str:
    """Which projection kernels ran and whether PDL was on (run files from before these options have neither)."""
    if config.get("device") == "cpu":
        return "plain-torch reference ops (CPU path)"
    parts = []
    projections = config.get("projections")
    if projections == "gemv":
        parts.append("projections: launchprobe GEMV (batch <= 16), cuBLAS above")
    elif projections == "cublas":
        parts.append("projections: cuBLAS")
    pdl = config.get("pdl")
    if isinstance(pdl, bool):
        parts.append(f"programmatic dependent launch {'on' if pdl else 'off'}")
    return ", ".join(parts)


def _memory_text(memory: Any, shape: dict[str, Any]) -> str:
    if not isinstance(memory, dict) or not memory:
        return v.MISSING
    text = f"weights {v.size(memory.get('weight_bytes'))}"
    distinct, layers = memory.get("distinct_layers"), shape.get("layers")
    n_distinct, n_layers = v.number(distinct), v.number(layers)
    if n_distinct is not None and n_layers is not None and n_distinct < n_layers:
        text += f" ({v.integer(distinct)} distinct layers cycled over {v.integer(layers)})"
    return text + f", KV cache {v.size(memory.get('kv_cache_bytes'))}"


def _step_table(rows: list[dict[str, Any]]) -> Table:
    body = [
        [
            v.text(r.get("mode")),
            v.integer(r.get("batch")),
            v.fixed(r.get("step_ms_median"), 3),
            v.fixed(r.get("step_ms_p90"), 3),
            v.integer(r.get("tokens_per_s")),
            v.integer(r.get("kernels_per_step")),
            v.percent(r.get("idle_fraction")),
            v.sig(r.get("achieved_bandwidth_bytes_per_s"), 1e-12),
            v.percent(r.get("achieved_bandwidth_fraction")),
            v.sig(r.get("achieved_flops_per_s"), 1e-12),
            v.percent(r.get("achieved_flops_fraction")),
            v.text(r.get("verdict")),
        ]
        for r in rows
    ]
    columns = [
        "mode", "batch", "ms\nmedian", "ms\np90", "tok/s", "kernels\n/step", "GPU\nidle",
        "TB/s", "% of\nHBM", "TFLOP/s", "% of\nmatmul", "verdict",
    ]  # fmt: skip
    return Table(title="Decode step", columns=columns, rows=body, align="lrrrrrrrrrrl")


def _cost_table(rows: list[dict[str, Any]]) -> Table:
    body = []
    for r in rows:
        samples = r.get("step_ms_samples")
        median = v.number(r.get("step_ms_median"))
        iqr = v.number(r.get("step_ms_iqr"))
        noise = v.percent(iqr / median, 1) if iqr is not None and median else v.MISSING
        body.append(
            [
                v.text(r.get("mode")),
                v.integer(r.get("batch")),
                v.integer(len(samples)) if isinstance(samples, list) else v.MISSING,
                noise,
                v.fixed(r.get("memory_floor_ms"), 3),
                v.fixed(r.get("compute_floor_ms"), 3),
                v.fixed(r.get("launch_floor_ms"), 3),
                v.integer(r.get("bucket")),
                v.percent(r.get("padding_fraction"), 1),
                v.fixed(r.get("capture_s"), 3),
                v.fixed(r.get("capture_bytes"), 1, 1 / 2**20),
            ]
        )
    columns = [
        "mode", "batch", "steps", "noise\nIQR/med", "memory\nfloor ms", "compute\nfloor ms",
        "launch\nfloor ms", "bucket", "padding", "capture\ns", "capture\nMiB",
    ]  # fmt: skip
    note = "floors: the step time if only bytes, FLOPs or launches counted; capture: this bucket's graphs"
    return Table(title="Noise, floors and graph cost", columns=columns, rows=body, note=note)


def _speedups(run: dict[str, Any], rows: list[dict[str, Any]]) -> Table | None:
    raw = run.get("speedups")
    records = [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []
    if not records:  # derive them when a run file lacks the list
        by_key = {(r.get("mode"), r.get("batch")): v.number(r.get("step_ms_median")) for r in rows}
        for batch in sorted({r.get("batch") for r in rows}, key=lambda b: v.number(b) or 0):
            eager = by_key.get(("eager", batch))
            entry: dict[str, Any] = {"batch": batch}
            for mode in ("piecewise", "full"):
                other = by_key.get((mode, batch))
                entry[f"{mode}_vs_eager"] = eager / other if eager and other else None
            records.append(entry)
    if not any(v.number(s.get(k)) is not None for s in records for k in ("full_vs_eager", "piecewise_vs_eager")):
        return None
    body = [
        [v.integer(s.get("batch")), v.ratio(s.get("full_vs_eager")), v.ratio(s.get("piecewise_vs_eager"))]
        for s in records
    ]
    return Table(
        title="What graphs bought (eager step time / graph step time)",
        columns=["batch", "full vs eager", "piecewise vs eager"],
        rows=body,
        align="r",
    )


def _plan_table(rows: list[dict[str, Any]]) -> Table:
    body = []
    for r in rows:
        floors = {k: v.number(r.get(f"{k}_floor_ms")) for k in ("memory", "compute", "launch")}
        known = {k: x for k, x in floors.items() if x is not None}
        largest = max(known, key=lambda k: known[k]) if known else None
        body.append(
            [
                v.text(r.get("mode")),
                v.integer(r.get("batch")),
                v.integer(r.get("bucket")),
                v.fixed(r.get("bytes_per_step"), 1, 1e-6),
                v.fixed(r.get("flops_per_step"), 1, 1e-9),
                v.integer(r.get("kernels_expected")),
                v.fixed(floors["memory"], 3),
                v.fixed(floors["compute"], 3),
                v.fixed(floors["launch"], 3),
                f"{largest}" if largest else v.MISSING,
            ]
        )
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


def kernel_pass_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    blocks: list[Block] = []
    passes = [(r, r["kernel_pass"]) for r in rows if isinstance(r.get("kernel_pass"), dict)]
    for r, kp in passes:
        table = _ops_table(r, kp)
        if table is not None:
            blocks.append(table)
        blocks.append(Lines("", _kernel_pass_lines(kp)))
    for batch in sorted({r.get("batch") for r, _ in passes}, key=lambda b: v.number(b) or 0):
        strips = timeline_strips([(r, kp) for r, kp in passes if r.get("batch") == batch])
        if strips is not None:
            strips.title = f"One step along time, batch {v.integer(batch)}"
            blocks.append(strips)
    return blocks


def _ops_table(r: dict[str, Any], kp: dict[str, Any]) -> Table | None:
    ops = [o for o in kp.get("ops") or [] if isinstance(o, dict)]
    if not ops:
        return None
    body = [
        [
            v.text(o.get("op")),
            v.integer(o.get("count")),
            v.sig(o.get("duration_ns_median"), 1e-3),
            v.sig(o.get("gap_ns_median"), 1e-3),
            v.percent(o.get("share_of_step"), 1),
            v.sig(o.get("achieved_bandwidth_bytes_per_s"), 1e-12),
        ]
        for o in ops
    ]
    return Table(
        title=f"Per-kernel pass: {v.text(r.get('mode'))}, batch {v.integer(r.get('batch'))}",
        columns=["op", "count", "median\nduration us", "median gap\nbefore us", "share of\nstep", "achieved\nTB/s"],
        rows=body,
    )


def _kernel_pass_lines(kp: dict[str, Any]) -> list[str]:
    gap_line = _gap_line("gaps before kernels", v.mapping(kp.get("gaps")))
    cost = (
        f"instrumentation: {v.fixed(kp.get('instrumented_step_ms'), 3)} ms per step with events around "
        f"every kernel vs {v.fixed(kp.get('clean_step_ms'), 3)} ms clean"
    )
    overhead = v.number(kp.get("overhead_fraction"))
    if overhead is not None:
        cost += f" ({overhead:+.0%})"
    lines = [gap_line, cost]
    if isinstance(kp.get("gaps_corrected"), dict):
        lines.append(_gap_line("gaps less the event cost", kp["gaps_corrected"]))
    check = kp.get("cupti_check")
    if isinstance(check, dict) and check.get("available") is False:
        lines.append(f"CUPTI cross-check: not available ({v.text(check.get('note'))})")
    elif isinstance(check, dict):
        agrees = check.get("agrees")
        lines.append(
            f"CUPTI cross-check: total gap {v.fixed(check.get('events_total_gap_ns'), 3, 1e-6)} ms (events) vs "
            f"{v.fixed(check.get('cupti_total_gap_ns'), 3, 1e-6)} ms (CUPTI), busy "
            f"{v.fixed(check.get('events_busy_ns'), 3, 1e-6)} vs {v.fixed(check.get('cupti_busy_ns'), 3, 1e-6)} ms"
            + ("" if agrees is None else ": agree" if agrees else ": DISAGREE")
        )
    if v.number(kp.get("event_cost_ns")) is not None:
        corrected = any(isinstance(k, dict) and k.get("gap_corrected_ns") is not None for k in kp.get("kernels") or [])
        lines.append(
            f"event cost {v.sig(kp['event_cost_ns'], 1e-3)} us per kernel"
            + ("; corrected gaps subtract it" if corrected else "")
        )
    return lines


def _gap_line(label: str, gaps: dict[str, Any]) -> str:
    quantiles = ", ".join(
        f"{name} {v.sig(gaps.get(key), 1e-3)} us"
        for key, name in (("p50_ns", "p50"), ("p90_ns", "p90"), ("p99_ns", "p99"), ("max_ns", "max"))
    )
    return f"{label}: {quantiles}, total {v.fixed(gaps.get('total_ns'), 3, 1e-6)} ms per step"


def _busy_intervals(kernels: Any) -> list[tuple[int, int]]:
    spans = sorted(
        (int(k["start_ns"]), int(k["end_ns"]))
        for k in kernels or []
        if isinstance(k, dict) and v.number(k.get("start_ns")) is not None and v.number(k.get("end_ns")) is not None
    )
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def step_span_ns(kp: dict[str, Any]) -> int:
    """The instrumented step's length: its measured time, or the last kernel's end if that is later."""
    busy = _busy_intervals(kp.get("kernels"))
    step = v.number(kp.get("instrumented_step_ms"))
    end = busy[-1][1] if busy else 0
    return max(end, round(step * 1e6) if step else 0)


def timeline_strips(passes: list[tuple[dict[str, Any], dict[str, Any]]]) -> Strips | None:
    """Strips of one instrumented step per mode, on one time scale so a shorter step draws shorter."""
    spans = [(r, _busy_intervals(kp.get("kernels")), step_span_ns(kp)) for r, kp in passes]
    spans = [s for s in spans if s[1] and s[2] > 0]
    if not spans:
        return None
    scale = max(span for _, _, span in spans)
    strips = []
    for r, busy, span in spans:
        busy_ns = sum(end - start for start, end in busy)
        strips.append(
            Strip(
                label=v.text(r.get("mode")),
                busy=[(start / scale, end / scale) for start, end in busy],
                length=span / scale,
                caption=f"{span / 1e6:.2f} ms, {busy_ns / span:.0%} busy",
            )
        )
    return Strips(
        title="One step along time",
        strips=strips,
        note="busy: union of kernels in the instrumented pass (events around every kernel slow the host)",
    )
