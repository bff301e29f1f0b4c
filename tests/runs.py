"""Constructed runs (launchprobe/run/schema.py) for renderer, compare and plot tests. Deterministic: no clock, no
randomness beyond a seeded generator. Numbers are shaped after the H200 measurements in ENGINEERING.md."""

from __future__ import annotations

import copy
import random
import statistics
from collections.abc import Sequence
from typing import Any

from launchprobe.analysis.sampled import pair_plan, pairing_note
from launchprobe.analysis.verdict import RULE
from launchprobe.run.schema import (
    AnalyzeConfigRecord,
    AnalyzeRun,
    CeilingsRecord,
    ClassifyConfigRecord,
    ClassifyResult,
    ClassifyRun,
    CuptiCheck,
    Environment,
    GapStats,
    KernelPass,
    KernelRow,
    Memory,
    OpCheck,
    OpRow,
    ShapeRecord,
    Source,
    StepPicture,
    StrideProbe,
    Summary,
    Tool,
    Unavailable,
    Window,
    speedups_of,
)

HBM = 4.33e12
MATMUL = 790e12
LAUNCH_NS = 8400.0
NODE_NS = 1000.0
LLAMA_8B: dict[str, Any] = {
    "name": "llama-3-8b", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
    "head_dim": 128, "vocab": 128256, "tie_embeddings": False,
}  # fmt: skip
WEIGHT_BYTES = 16_060_522_496
KV_BYTES_PER_SEQ = 134_217_728  # 1024 tokens of context, bf16
# (op, duration us at batch 1): the per-layer kernels of the unfused decode step
LAYER_OPS = [
    ("attn_norm", 2.5), ("qkv", 12.0), ("rotary", 2.0), ("kv_write", 2.0), ("attention", 6.0),
    ("o_proj", 28.0), ("mlp_norm", 2.5), ("gate_up", 56.0), ("silu_mul", 2.5), ("down", 30.0),
]  # fmt: skip
# (step ms median, GPU busy ms) at batch 1 and 64, per mode
STEP = {
    ("eager", 1): (9.47, 4.45), ("piecewise", 1): (5.20, 4.55), ("full", 1): (4.82, 4.60),
    ("eager", 64): (12.2, 10.9), ("piecewise", 64): (11.9, 11.0), ("full", 64): (11.7, 11.2),
}  # fmt: skip
KERNELS = {"eager": 323, "piecewise": 323, "full": 323}


def samples(median: float, rel_spread: float, n: int = 50, seed: int = 0) -> list[float]:
    """n samples whose median is exactly ``median`` and whose IQR is about 1.35 * rel_spread * median."""
    rng = random.Random(seed)
    raw = [rng.gauss(0.0, rel_spread) for _ in range(n)]
    shift = statistics.median(raw)
    return [round(median * (1.0 + x - shift), 6) for x in raw]


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _bucket(mode: str, batch: int) -> int:
    if mode == "eager":
        return batch
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    return next((s for s in sizes if s >= batch), batch)


def cost_fields(mode: str, batch: int, kernels: int = 323) -> ClassifyResult:
    bytes_per_step = WEIGHT_BYTES + batch * KV_BYTES_PER_SEQ
    flops = 2 * 8_030_000_000 * batch + batch * 2 * 32 * 2 * 4096 * 1024
    if mode == "eager":
        launch = kernels * LAUNCH_NS / 1e6
    elif mode == "full":
        launch = (LAUNCH_NS + kernels * NODE_NS) / 1e6
    else:
        launch = ((33 + 64) * LAUNCH_NS + (kernels - 64) * NODE_NS) / 1e6
    bucket = _bucket(mode, batch)
    return ClassifyResult(
        mode=mode,
        batch=batch,
        bucket=bucket,
        padding_fraction=(bucket - batch) / bucket,
        bytes_per_step=bytes_per_step,
        flops_per_step=flops,
        kernels_expected=kernels,
        memory_floor_ms=bytes_per_step / HBM * 1e3,
        compute_floor_ms=flops / MATMUL * 1e3,
        launch_floor_ms=launch,
    )


def measure(record: ClassifyResult, step_samples: list[float], busy_ms: float | None) -> None:
    """Fill the measured fields of ``record`` as classify would from these samples."""
    for key, value in measured_fields(record, step_samples, busy_ms).items():
        setattr(record, key, value)


def measured_fields(record: ClassifyResult, step_samples: list[float], busy_ms: float | None) -> dict[str, Any]:
    median = statistics.median(step_samples)
    idle = None if busy_ms is None else max(0.0, 1 - busy_ms / median)
    bandwidth = record.bytes_per_step / (median / 1e3)
    flops = record.flops_per_step / (median / 1e3)
    assert record.memory_floor_ms is not None and record.compute_floor_ms is not None
    floors = f"memory floor {record.memory_floor_ms:.3f} ms vs compute floor {record.compute_floor_ms:.3f} ms"
    if idle is not None and idle >= 0.5:
        verdict, reason = "launch-bound", f"GPU idle {idle:.0%} of a {median:.3f} ms step (>= 50%)"
    else:
        verdict = "memory-bound" if record.memory_floor_ms >= record.compute_floor_ms else "compute-bound"
        prefix = "" if idle is None else f"GPU idle {idle:.0%} (< 50%); "
        reason = f"{prefix}{floors}: the larger floor decides"
    graph = record.mode != "eager"
    return {
        "step_ms_median": median,
        "step_ms_p90": _quantile(step_samples, 0.9),
        "step_ms_iqr": _quantile(step_samples, 0.75) - _quantile(step_samples, 0.25),
        "step_ms_samples": step_samples,
        "tokens_per_s": record.batch / (median / 1e3),
        "kernels_per_step": record.kernels_expected if busy_ms is not None else None,
        "gpu_busy_ms": busy_ms,
        "idle_fraction": idle,
        "achieved_bandwidth_bytes_per_s": bandwidth,
        "achieved_bandwidth_fraction": bandwidth / HBM,
        "achieved_flops_per_s": flops,
        "achieved_flops_fraction": flops / MATMUL,
        "verdict": verdict,
        "verdict_reason": reason,
        "capture_s": (0.012 if record.mode == "full" else 0.021) if graph else None,
        "capture_bytes": (48 << 20 if record.batch == 64 else 6 << 20) if graph else None,
    }


STRIDE = {"eager": 135, "piecewise": 68, "full": 26}  # spacing m: anchors per variant m ops apart


def kernel_pass(mode: str, layers: int = 32) -> KernelPass:
    """A stitched sampled pass at batch 1 (the clean step): the host issues launches, the GPU runs them in order.
    Eager is launch-bound and CUPTI slows its host (no op-for-op check); piecewise has one op class apart from
    CUPTI; full agrees throughout."""
    ops = [("embed", 2.0)] + [op for _ in range(layers) for op in LAYER_OPS] + [("final_norm", 2.0), ("lm_head", 250.0)]
    host_us, gpu_us = 0.0, 0.0
    kernels: list[KernelRow] = []
    for index, (op, duration) in enumerate(ops):
        eager_op = mode == "eager" or (mode == "piecewise" and op in ("kv_write", "attention"))
        host_us += 29.0 if eager_op else 1.0  # torch dispatch + launch per eager op, clean
        start = max(gpu_us, host_us + 3.0)
        gap = start - gpu_us if index else start + 5.0  # op 0: the head, from the boundary to its start
        layer = -1 if op in ("embed", "final_norm", "lm_head") else (index - 1) // len(LAYER_OPS)
        kernels.append(
            KernelRow(
                index=index, op=op, layer=layer, host_launched=eager_op, start_ns=round(start * 1e3),
                end_ns=round((start + duration) * 1e3), duration_ns=round(duration * 1e3),
                gap_before_ns=round(gap * 1e3),
            )
        )  # fmt: skip
        gpu_us = start + duration
    step_ns = kernels[-1].end_ns + 5_000
    summary = []
    for op in dict.fromkeys(k.op for k in kernels):
        mine = [k for k in kernels if k.op == op]
        durations = [k.end_ns - k.start_ns for k in mine]
        summary.append(
            OpRow(
                op=op, count=len(mine), duration_ns_median=statistics.median(durations),
                gap_ns_median=statistics.median(k.gap_before_ns for k in mine),
                share_of_step=sum(durations) / step_ns,
            )
        )  # fmt: skip
    gaps = sorted(k.gap_before_ns for k in kernels)
    busy = sum(k.end_ns - k.start_ns for k in kernels)
    clean = round(step_ns / 1e6 * 0.999, 3)  # the stitched step comes out 0.1% long
    stride = STRIDE[mode]
    trusted = mode != "eager"
    checks = []
    if trusted:
        for o in summary[:4] + [s for s in summary if s.op == "attention"]:
            off = 1_400.0 if (mode, o.op) == ("piecewise", "attention") else 150.0
            checks.append(
                OpCheck(
                    op=o.op, count=o.count, events_gap_ns_median=o.gap_ns_median,
                    cupti_gap_ns_median=o.gap_ns_median - off, gap_diff_ns=off, gap_agrees=off <= 1_000,
                    events_duration_ns_median=o.duration_ns_median,
                    cupti_duration_ns_median=o.duration_ns_median + 200.0, duration_diff_ns=-200.0,
                    duration_agrees=True,
                )
            )  # fmt: skip
    cupti_overhead = 0.38 if mode == "eager" else 0.012
    clean_idle = clean * 1e6 - busy * 0.998
    return KernelPass(
        density="sampled", picture="stitched", perturbing=False, stitched=True,
        clean_step_ms=clean, instrumented_step_ms=clean * 1.006, overhead_fraction=0.006,
        overhead_budget_fraction=0.02, overhead_within_budget=True, variant_overhead_max_fraction=0.011,
        variant_overhead_max_error_fraction=0.002,
        clean_references=5 * (2 + (7 + 2 * stride) // 8), clean_step_spread_fraction=0.12 if mode == "eager" else 0.008,
        host_steady=mode != "eager",
        predicted_overhead_fraction=0.009, stride=stride, variants=7 + 2 * stride, cycles=5,
        sampled_steps=5 * (7 + 2 * stride),
        stride_probes=[StrideProbe(stride=stride, overhead_fraction=0.011, error_fraction=0.001)],
        pairing=pairing_note(pair_plan(323, stride)), reach=pair_plan(323, stride).reach,
        event_cost_ns=4_200.0, event_node_ns=1_900.0, events_per_op=1,
        sequence_check=(
            f"same kernel sequence (323 kernels) in 8 clean steps and in 16 of {7 + 2 * stride} variants (CUPTI)"
        ),
        position_noise_ns=900.0 if mode == "eager" else 120.0,
        step_ns=step_ns, busy_ns=busy, idle_ns=step_ns - busy, gap_total_ns=step_ns - busy,
        span_ns=kernels[-1].end_ns - kernels[0].start_ns,
        kernels=kernels,
        ops=summary,
        gaps=GapStats(
            p50_ns=_quantile(gaps, 0.5), p90_ns=_quantile(gaps, 0.9), p99_ns=_quantile(gaps, 0.99),
            max_ns=gaps[-1], total_ns=sum(gaps), count=len(gaps),
        ),
        cupti_check=CuptiCheck(
            available=True, reference="clean steps under torch.profiler (CUPTI), no events", steps=8,
            clean_step_ns=clean * 1e6, cupti_step_ns=clean * 1e6 * (1 + cupti_overhead),
            cupti_overhead_fraction=cupti_overhead, cupti_trusted=trusted,
            trust_note=(
                f"CUPTI's step is {cupti_overhead:+.1%} off clean (within 5%): its timestamps describe the clean step, "
                "op for op" if trusted else
                f"CUPTI's step is {cupti_overhead:+.1%} off clean (beyond 5%): its gaps are not the clean step's, so "
                "only its busy time (kernel durations) is used and the op-for-op check is not made"
            ),
            grouping="by a counting pass (ops one by one, sync between); its kernel sequence matches the step's",
            events_ops=323, cupti_kernels=323, events_busy_ns=float(busy), cupti_busy_ns=busy * 1.0,
            cupti_op_busy_ns=busy * 0.998, busy_rel_diff=0.002, busy_agrees=True,
            events_total_gap_ns=float(step_ns - busy), clean_gap_total_ns=clean_idle, clean_idle_ns=clean_idle,
            events_idle_ns=float(step_ns - busy), idle_diff_ns=step_ns - busy - clean_idle,
            cupti_total_gap_ns=clean_idle * (1 + cupti_overhead), total_gap_diff_ns=step_ns - busy - clean_idle,
            total_gap_tolerance_ns=max(50_000.0, 0.1 * clean_idle),
            total_gap_noise_ns=41_000.0 if mode == "eager" else 3_200.0,
            total_gap_agrees=abs(step_ns - busy - clean_idle) <= max(50_000.0, 0.1 * clean_idle),
            ops=checks, ops_agree=all(c.gap_agrees for c in checks) if checks else None,
            agrees=abs(step_ns - busy - clean_idle) <= max(50_000.0, 0.1 * clean_idle)
            and all(c.gap_agrees for c in checks),
        ),
        source="cuda-events",
    )  # fmt: skip


HEADER: dict[str, Any] = {
    "created": "2026-11-30T12:00:00+00:00",
    "tool": Tool(name="launchprobe", version="0.1.0"),
    "notices": [],
}


def _environment() -> Environment:
    return Environment(
        device="cuda", gpu="NVIDIA H200", gpu_count=1, sm_count=132, l2_bytes=62_914_560,
        gpu_memory_bytes=150_754_820_096, driver="580.95", torch="2.11.0+cu130", cuda="13.0", python="3.11.9",
        platform="Linux-x86_64",
    )  # fmt: skip


def classify_run(
    batches: tuple[int, ...] = (1, 64),
    modes: tuple[str, ...] = ("eager", "piecewise", "full"),
    *,
    spread: float = 0.01,
    with_kernel_pass: bool = True,
) -> ClassifyRun:
    """A measured H200 run of the 8B shape; batch 1 carries the per-kernel pass."""
    run = ClassifyRun(
        **copy.deepcopy(HEADER),
        command=["launchprobe", "classify"],
        environment=_environment(),
        config=ClassifyConfigRecord(
            shape="llama-3-8b",
            batches=list(batches),
            context=1024,
            modes=list(modes),
            dtype="bf16",
            warmup_steps=20,
            steps=50,
            capture_sizes="vllm",
            device="cuda",
            plan=False,
        ),  # fmt: skip
        shape=ShapeRecord(**LLAMA_8B),
        ceilings=CeilingsRecord(
            source="measured",
            hbm_read_bytes_per_s=HBM,
            matmul_flops_per_s=MATMUL,
            launch_host_ns=LAUNCH_NS,
            graph_node_ns=NODE_NS,
            measured_at="2026-11-30T11:58:00+00:00",
            details={},
        ),  # fmt: skip
        memory=Memory(weight_bytes=WEIGHT_BYTES, distinct_layers=32, kv_cache_bytes=64 * KV_BYTES_PER_SEQ),
        rule=RULE,
    )
    for seed, (mode, batch) in enumerate((m, b) for m in modes for b in batches):
        record = cost_fields(mode, batch)
        step, busy = STEP.get((mode, batch), (STEP[(mode, 64)][0] * batch / 64 + 5, STEP[(mode, 64)][1]))
        measure(record, samples(step, spread, seed=seed), busy)
        if with_kernel_pass and batch == 1:
            record.kernel_pass = kernel_pass(mode)
        run.results.append(record)
    run.speedups = speedups_of(run.results)
    return run


def cpu_classify_run() -> ClassifyRun:
    """The CPU path: eager only, no GPU counters, graph modes unavailable."""
    run = classify_run(batches=(1, 4), modes=("eager",), with_kernel_pass=False)
    env = run.environment
    env.device, env.gpu, env.gpu_count, env.sm_count, env.gpu_memory_bytes = "cpu", None, 0, None, None
    env.driver = env.cuda = None
    run.config.device = "cpu"
    run.config.modes = ["eager", "piecewise", "full"]
    assert run.ceilings is not None
    run.ceilings.source = "datasheet"
    reason = "CUDA graphs need a CUDA GPU; the CPU path runs eager only"
    run.unavailable = [Unavailable(mode=m, reason=reason) for m in ("piecewise", "full")]
    run.notices = ["CPU path: step times are wall-clock; kernels and GPU idle are not observable"]
    for r in run.results:
        assert r.step_ms_median is not None
        measure(r, samples(r.step_ms_median * 20, 0.02, seed=r.batch), None)
    run.speedups = speedups_of(run.results)
    return run


def plan_run() -> ClassifyRun:
    run = classify_run()
    run.config.plan = True
    run.config.steps = None
    run.results = [cost_fields(m, b) for m in ("eager", "piecewise", "full") for b in (1, 64)]
    run.speedups = []
    return run


def window(name: str, device: int, span_ms: float, busy_ms: float, kernels: int, **extra: Any) -> Window:
    span, busy = round(span_ms * 1e6), round(busy_ms * 1e6)
    idle = span - busy
    fields: dict[str, Any] = {
        "name": name, "device": device, "start_ns": 1_000_000, "end_ns": 1_000_000 + span, "span_ns": span,
        "kernels": kernels, "gpu_ops": kernels + 2, "launches": {"cudaLaunchKernel": kernels},
        "kernels_per_launch": 1.0, "busy_ns": busy, "idle_ns": idle, "idle_fraction": idle / span,
        "idle_host_wait_ns": round(idle * 0.8), "idle_short_gap_ns": round(idle * 0.15),
        "idle_other_ns": idle - round(idle * 0.8) - round(idle * 0.15),
        "gap_p50_ns": 9_800, "gap_p90_ns": 14_200, "gap_p99_ns": 41_000, "gap_max_ns": 120_000,
        "verdict": "launch-bound" if idle / span >= 0.5 else "gpu-bound",
        "verdict_reason": f"GPU idle {idle / span:.0%} of the window, {0.8:.0%} of it waiting on the host",
    }  # fmt: skip
    fields.update(extra)
    return Window(**fields)


def analyze_run() -> AnalyzeRun:
    return AnalyzeRun(
        **copy.deepcopy(HEADER),
        command=["launchprobe", "analyze"],
        source=Source(
            path="traces/decode.nsys-rep", format="nsys-rep", tool="nsys", tool_version="2025.3.1", schema_version="3.1"
        ),  # fmt: skip
        config=AnalyzeConfigRecord(ranges=["decode_step"], devices=None),
        windows=[
            window("decode_step", 0, 9.5, 4.4, 480),
            window("decode_step", 0, 9.4, 4.4, 480),
            window(
                "prefill",
                0,
                30.0,
                27.0,
                480,
                verdict="undetermined",
                verdict_reason="GPU busy 90%: memory or compute cannot be told apart without GPU metrics; "
                "rerun nsys with --gpu-metrics-devices=all",
            ),  # fmt: skip
        ],
    )


def step_kind(label: str, span_ms: float, busy: list[tuple[float, float]], verdict: str, **extra: Any) -> Summary:
    """A step kind's summary whose typical step (instance 3) is ``span_ms`` long, busy over ``busy`` (us)."""
    span = round(span_ms * 1e6)
    intervals = [(round(a * 1e3), round(b * 1e3)) for a, b in busy]
    busy_ns = sum(b - a for a, b in intervals) - extra.get("merged_idle_ns", 0)
    picture = StepPicture(window=f"step: {label} #3", instance=3, start_ns=5_000_000, end_ns=5_000_000 + span,
                          busy_ns=busy_ns, busy_intervals=intervals, intervals=extra.pop("intervals", len(intervals)),
                          merged_idle_ns=extra.pop("merged_idle_ns", 0))  # fmt: skip
    idle = span - busy_ns
    return Summary(
        name=f"step: {label}", device=0, instances=40, names=1, span_ns=40 * span, busy_ns=40 * busy_ns,
        idle_ns=40 * idle, idle_host_wait_ns=40 * idle, idle_short_gap_ns=0, idle_other_ns=0, kernels=40 * 84,
        gpu_ops=40 * 84, launch_calls=40, verdict=verdict, verdict_reason=f"over its 40 typical steps: {verdict}",
        span_p50_ns=span, span_p90_ns=span + 20_000, busy_p50_ns=busy_ns, busy_p90_ns=busy_ns, step_kind=label,
        detected_by="graph launch (cudaGraphLaunch, 1 per step)", verdicts={verdict: 40}, typical_step=picture,
        **extra,
    )  # fmt: skip


def analyze_steps_run() -> AnalyzeRun:
    """Detected steps in two kinds, each with its typical step along time: decode graph replays idle first (the
    host between steps), and prefill steps whose picture had gaps merged by the interval cap."""
    decode = step_kind("decode, graph replay, 84 ops", 0.70, [(280.0, 650.0), (652.0, 700.0)], "launch-bound")
    prefill = step_kind("prefill, eager, 788 ops", 6.0, [(50.0, 2000.0), (2100.0, 5900.0)], "memory-bound",
                        intervals=788, merged_idle_ns=150_000)  # fmt: skip
    return AnalyzeRun(
        **copy.deepcopy(HEADER),
        command=["launchprobe", "analyze"],
        source=Source(path="traces/serve.sqlite", format="nsys-sqlite", tool="nsys", tool_version="2025.3.2"),
        config=AnalyzeConfigRecord(steps="auto"),
        windows=[
            window(
                "step: decode, graph replay, 84 ops",
                0,
                0.70,
                0.418,
                84,
                instance=3,
                step_kind=decode.step_kind,
                verdict="launch-bound",
            )
        ],
        summaries=[decode, prefill],
    )


def scaled(run: ClassifyRun, factor: float, *, mode: str | None = None, batch: int | None = None,
           spread: float | None = None, seed: int = 100) -> ClassifyRun:  # fmt: skip
    """A copy of a classify run whose step times (matching mode/batch) are multiplied by ``factor``."""
    out = copy.deepcopy(run)
    for i, r in enumerate(out.results):
        if (mode is None or r.mode == mode) and (batch is None or r.batch == batch) and r.step_ms_median is not None:
            old = r.step_ms_samples or []
            assert r.step_ms_iqr is not None
            rel = spread if spread is not None else (r.step_ms_iqr / r.step_ms_median) / 1.35
            new = samples(r.step_ms_median * factor, rel, n=len(old), seed=seed + i)
            measure(r, new, r.gpu_busy_ms)
    return out


def analyze_many_run() -> AnalyzeRun:
    """Many windows, analysed by the real pipeline on a constructed timeline: 30 eager steps named ``step N``
    (one slow first step, host overhead growing every tenth), launch-bound, and 12 full-graph ``decode_step``
    replays of longer kernels, GPU-bound."""

    import numpy as np
    import pandas as pd

    from launchprobe.analysis.trace_run import build_run
    from launchprobe.analysis.windows import AnalysisOptions
    from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category, conform
    from tests.fixtures import nsys_synth as synth

    kernel_names = ["gemv_bf16", "rms_norm", "rotary", "attention_decode", "silu_mul", "gemv_bf16"]
    api_names = {1: "cudaLaunchKernel_v7000", 2: "cudaGraphLaunch_v10000", 3: "cudaStreamSynchronize_v3020"}
    ops, apis, ranges = [], [], []
    t, corr = 1_000_000, 0
    steps = [("step", i, synth.Loop(steps=1, kernels_per_step=6, step_overhead_ns=(400_000 if i == 0 else
              20_000 + 5_000 * (i // 10)))) for i in range(30)]  # fmt: skip
    steps += [("decode_step mode=full bucket=1", i, synth.Loop(steps=1, kernels_per_step=6, graph=True,
              kernel_ns=15_000 + 1_000 * (i % 3), step_overhead_ns=2_000, launch_ns=2_000))
              for i in range(12)]  # fmt: skip
    for name, i, loop in steps:
        d = synth.decode_loop(loop, t0=t)
        for k, (s, e, c) in enumerate(zip(d["k_start"], d["k_end"], d["k_corr"], strict=True)):
            ops.append({"kind": "kernel", "name": kernel_names[k % 6], "start_ns": s, "end_ns": e, "device": 0,
                        "stream": 7, "pid": 1, "correlation_id": c + corr, "graph_node_id": k if loop.graph else -1,
                        "bytes": 0})  # fmt: skip
        for s, e, n, c in zip(d["r_start"], d["r_end"], d["r_name"], d["r_corr"], strict=True):
            apis.append({"name": api_names[int(n)], "category": api_category(api_names[int(n)]), "start_ns": s,
                         "end_ns": e, "pid": 1, "tid": 1, "correlation_id": c + corr})  # fmt: skip
        label = f"{name} {i}" if name == "step" else name
        ranges.append({"name": label, "domain": "", "start_ns": int(d["step_start"][0]),
                       "end_ns": int(d["step_end"][0]), "pid": 1, "tid": 1, "depth": 0})  # fmt: skip
        t = int(d["step_end"][0]) + 10_000
        corr += int(np.max(d["r_corr"])) + 1
    timeline = Timeline(
        gpu_ops=conform(pd.DataFrame(ops), GPU_OP_COLUMNS),
        api_calls=conform(pd.DataFrame(apis), API_CALL_COLUMNS),
        ranges=conform(pd.DataFrame(ranges), RANGE_COLUMNS),
        meta={
            "format": "nsys-sqlite",
            "path": "traces/serve.sqlite",
            "tool": "nsys",
            "tool_version": "2025.3.2",
            "notices": [],
            "gpus": {0: "NVIDIA H200"},
        },  # fmt: skip
    )
    run = build_run(timeline, AnalysisOptions(ranges=("step.*", "decode_step.*")))
    run.created, run.tool, run.command = HEADER["created"], HEADER["tool"], ["launchprobe", "analyze"]
    return run
