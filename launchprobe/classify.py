"""The classify job: run the synthetic decode loop per (mode, batch), measure it and build the run dict."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from launchprobe import environment
from launchprobe.analysis.verdict import RULE, classify_step
from launchprobe.errors import MissingToolError, UsageError
from launchprobe.measure.ceilings import Ceilings
from launchprobe.measure.samples import Samples
from launchprobe.progress import Progress
from launchprobe.runfile import new_run
from launchprobe.workload import costmodel
from launchprobe.workload.modes import (
    GRAPH_MODES,
    MODES,
    bucket_for,
    capture_sizes_for,
    padding_fraction,
)
from launchprobe.workload.shape import Shape

DEFAULT_GPU_SHAPE = "llama-3-8b"
DEFAULT_CPU_SHAPE = "tiny"
DEFAULT_GPU_BATCHES = (1, 8, 64, 256)
DEFAULT_CPU_BATCHES = (1, 8)
GIB = 1 << 30
CUPTI_BUSY_NOTICE = (
    "torch.profiler saw no GPU activity: CUPTI is held by another profiler (nsys, ncu). Kernels per step, GPU busy "
    "and idle are not measured, so verdicts come from the floors alone; the trace of that profiler has them"
)


@dataclass
class ClassifyConfig:
    shape: Shape
    batches: list[int]
    context: int = 1024
    modes: list[str] = field(default_factory=lambda: list(MODES))
    dtype: str = "bf16"
    warmup: int = 10
    steps: int = 50
    device: str = "cuda"
    capture_sizes: list[int] | None = None  # None: vLLM's list
    ceilings: str = "measured"
    remeasure_ceilings: bool = False
    profile_steps: int = 5
    plan: bool = False
    kernels: bool = False  # the per-kernel CUDA-event pass
    kernel_repeats: int = 5
    nvtx: str = "steps"  # off | steps | ops (measure/markers.py)
    projections: str = "cublas"  # cublas | gemv (workload/model.py)
    pdl: bool = True  # programmatic dependent launch of the Triton kernels (kernels/triton_ops.py)
    notices: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def validate(self) -> None:
        if not self.batches or min(self.batches) < 1:
            raise UsageError("batch sizes must be positive integers")
        if self.context < 1:
            raise UsageError("--context must be at least 1")
        if self.steps < 3:
            raise UsageError("--steps must be at least 3 for a median and spread")
        if self.warmup < 0:
            raise UsageError("--warmup must be 0 or more")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise UsageError(f"unknown mode(s) {', '.join(unknown)}; modes: {', '.join(MODES)}")
        if self.dtype not in ("bf16", "fp16"):
            raise UsageError(f"--dtype {self.dtype}: expected bf16 or fp16")

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape.name,
            "batches": self.batches,
            "context": self.context,
            "modes": self.modes,
            "dtype": self.dtype,
            "warmup_steps": self.warmup,
            "steps": self.steps,
            "capture_sizes": self.graph_capture_sizes(),
            "device": self.device,
            "ceilings": self.ceilings,
            "profile_steps": self.profile_steps,
            "plan": self.plan,
            "kernels": self.kernels,
            "nvtx": self.nvtx,
            "projections": self.projections,
            "pdl": self.pdl,
        }

    def graph_capture_sizes(self) -> list[int] | None:
        if not any(mode in GRAPH_MODES for mode in self.modes):
            return None
        return capture_sizes_for(self.batches, self.capture_sizes)

    def bucket(self, mode: str, batch: int) -> int:
        if mode not in GRAPH_MODES:
            return batch
        sizes = self.graph_capture_sizes()
        assert sizes is not None
        return bucket_for(batch, sizes)


def resolve_device(requested: str) -> str:
    """``auto`` picks CUDA when torch sees a GPU; asking for CUDA without one is an error."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise MissingToolError(f"--device {requested}: torch {torch.__version__} sees no CUDA GPU on this machine")
    if requested not in ("cpu", "cuda") and not requested.startswith("cuda:"):
        raise UsageError(f"--device {requested}: expected auto, cuda, cuda:N or cpu")
    return requested


# ----------------------------------------------------------------------------------------------------------------
# Records


def cost_fields(
    config: ClassifyConfig, mode: str, batch: int, ceilings: Ceilings | None, kernels: int
) -> dict[str, Any]:
    """The fields a record has before anything runs: cost model, bucket, padding, floors."""
    cost = costmodel.step_cost(config.shape, batch, config.context, config.dtype)
    bucket = config.bucket(mode, batch)
    record: dict[str, Any] = {
        "mode": mode,
        "batch": batch,
        "bucket": bucket,
        "padding_fraction": padding_fraction(batch, bucket),
        "bytes_per_step": cost.bytes,
        "weight_bytes_per_step": cost.weight_bytes,
        "kv_bytes_per_step": cost.kv_bytes,
        "flops_per_step": cost.flops,
        "kernels_expected": kernels,
        "memory_floor_ms": None,
        "compute_floor_ms": None,
        "launch_floor_ms": None,
    }
    if ceilings is not None:
        record["memory_floor_ms"] = cost.bytes / ceilings.hbm_read_bytes_per_s * 1e3
        record["compute_floor_ms"] = cost.flops / ceilings.matmul_flops_per_s * 1e3
        record["launch_floor_ms"] = launch_floor_ms(config, mode, kernels, ceilings)
    return record


def launch_floor_ms(config: ClassifyConfig, mode: str, kernels: int, ceilings: Ceilings) -> float | None:
    """Host launch cost per step (eager), node cost per step (graphs), or the mix (piecewise)."""
    launch_ns, node_ns = ceilings.launch_host_ns, ceilings.graph_node_ns
    if launch_ns is None or (mode != "eager" and node_ns is None):
        return None
    layers = config.shape.layers
    attention_kernels = kernels - (costmodel.logical_ops_per_step(config.shape) - 2 * layers)  # kv_write+attention
    if mode == "eager":
        return kernels * launch_ns / 1e6
    assert node_ns is not None
    if mode == "full":
        return (launch_ns + kernels * node_ns) / 1e6
    graphs = layers + 1
    graphed_nodes = kernels - attention_kernels
    return ((graphs + attention_kernels) * launch_ns + graphed_nodes * node_ns) / 1e6


def measured_fields(
    record: dict[str, Any],
    samples: Samples,
    ceilings: Ceilings,
    *,
    busy_ms: float | None,
    kernels_per_step: float | None,
    capture: tuple[float | None, int | None],
    cuda: bool,
) -> dict[str, Any]:
    median = samples.median
    step_s = median / 1e3
    idle_fraction = None if busy_ms is None else max(0.0, 1.0 - busy_ms / median)
    bandwidth = record["bytes_per_step"] / step_s
    flops = record["flops_per_step"] / step_s
    if cuda:
        verdict = classify_step(
            step_ms=median,
            idle_fraction=idle_fraction,
            memory_floor_ms=record["memory_floor_ms"],
            compute_floor_ms=record["compute_floor_ms"],
        )
    else:
        # No separate device on the CPU path: estimate the framework's dispatch share instead of GPU idle.
        dispatch = min(1.0, record["kernels_expected"] * (ceilings.launch_host_ns or 0.0) / 1e6 / median)
        verdict = classify_step(
            step_ms=median,
            idle_fraction=dispatch,
            memory_floor_ms=record["memory_floor_ms"],
            compute_floor_ms=record["compute_floor_ms"],
            idle_note="CPU path, estimated op-dispatch overhead",
        )
    return {
        "step_ms_median": median,
        "step_ms_p90": samples.p90,
        "step_ms_iqr": samples.iqr,
        "step_ms_samples": list(samples.values),
        "tokens_per_s": record["batch"] / step_s,
        "kernels_per_step": kernels_per_step,
        "gpu_busy_ms": busy_ms,
        "idle_fraction": idle_fraction,
        "achieved_bandwidth_bytes_per_s": bandwidth,
        "achieved_bandwidth_fraction": bandwidth / ceilings.hbm_read_bytes_per_s,
        "achieved_flops_per_s": flops,
        "achieved_flops_fraction": flops / ceilings.matmul_flops_per_s,
        "busy_bandwidth_fraction": None
        if not busy_ms
        else record["bytes_per_step"] / (busy_ms / 1e3) / ceilings.hbm_read_bytes_per_s,
        "verdict": verdict.verdict,
        "verdict_reason": verdict.reason,
        "capture_s": capture[0],
        "capture_bytes": capture[1],
    }


def speedups(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key = {(r["mode"], r["batch"]): r.get("step_ms_median") for r in results}
    rows = []
    for batch in sorted({r["batch"] for r in results}):
        eager = by_key.get(("eager", batch))

        def ratio(mode: str, eager: float | None = eager, batch: int = batch) -> float | None:
            other = by_key.get((mode, batch))
            return eager / other if eager and other else None

        rows.append({"batch": batch, "piecewise_vs_eager": ratio("piecewise"), "full_vs_eager": ratio("full")})
    return rows


# ----------------------------------------------------------------------------------------------------------------
# The run


def plan_run(config: ClassifyConfig, env: dict[str, Any], ceilings: Ceilings | None) -> dict[str, Any]:
    """--plan: the cost model and floors, nothing run."""
    from launchprobe.workload.model import kernels_per_step

    shape = config.shape
    max_bucket = max(config.bucket(m, b) for m in config.modes for b in config.batches)
    run = _new_classify_run(config, env, ceilings)
    run["memory"] = {
        "weight_bytes": costmodel.weight_memory_bytes(shape, config.dtype),
        "distinct_layers": shape.layers,
        "kv_cache_bytes": costmodel.kv_cache_bytes(shape, max_bucket, config.context, config.dtype),
    }
    sm_count = env.get("sm_count") or 132
    for mode in config.modes:
        for batch in config.batches:
            kernels = kernels_per_step(shape, config.bucket(mode, batch), config.context, sm_count)
            run["results"].append(cost_fields(config, mode, batch, ceilings, kernels))
    if ceilings is None:
        run["notices"].append("no ceilings at hand (no cached measurement, no known GPU): floors are omitted")
    return run


def _new_classify_run(config: ClassifyConfig, env: dict[str, Any], ceilings: Ceilings | None) -> dict[str, Any]:
    return new_run(
        "classify",
        environment=env,
        config=config.to_dict(),
        shape=config.shape.to_dict(),
        ceilings=None if ceilings is None else ceilings.to_dict(),
        memory=None,
        results=[],
        unavailable=[],
        speedups=[],
        rule=RULE,
        notices=list(config.notices),
    )


def measure_run(config: ClassifyConfig, env: dict[str, Any], ceilings: Ceilings, progress: Progress) -> dict[str, Any]:
    """Build the model once, then measure every (mode, batch); graph modes capture their buckets first."""
    import torch

    from launchprobe.workload.modes import prepare

    if config.cuda:
        _configure_pdl(config)
    run = _new_classify_run(config, env, ceilings)
    modes = [m for m in config.modes if config.cuda or m not in GRAPH_MODES]
    for mode in config.modes:
        if mode not in modes:
            run["unavailable"].append(
                {"mode": mode, "reason": "CUDA graphs need a CUDA GPU; the CPU path runs eager only"}
            )
    buckets = {(m, b): config.bucket(m, b) for m in modes for b in config.batches}
    measurer = _Measurer(config, env, ceilings, run, progress, _build_model(config, env, run, progress, buckets))
    progress.start(len(modes) * len(config.batches))
    for mode in modes:
        runners: dict[int, Any] = {}
        pool = torch.cuda.graph_pool_handle() if mode in GRAPH_MODES else None
        for bucket in sorted({buckets[(mode, b)] for b in config.batches}, reverse=True):
            if mode in GRAPH_MODES:
                progress.status(f"{mode}: capturing bucket {bucket}")
            runners[bucket] = prepare(mode, bucket, measurer.model.step(bucket), pool, measurer.markers)
        for batch in config.batches:
            record = measurer.measure(mode, batch, runners[buckets[(mode, batch)]])
            run["results"].append(record)
        del runners
        gc.collect()
    run["speedups"] = speedups(run["results"])
    measurer.finish()
    return run


def _configure_pdl(config: ClassifyConfig) -> None:
    """Set the Triton ops' programmatic dependent launch for this run; on a GPU without it, say so and record off."""
    import torch

    from launchprobe.kernels import triton_ops_module

    triton_ops = triton_ops_module()
    triton_ops.PDL_ENABLED = config.pdl
    if config.pdl and not triton_ops.pdl_active(torch.device(config.device)):
        config.pdl = False
        config.notices.append(
            "programmatic dependent launch needs compute capability 9.0 (Hopper) or later: kernels launch one "
            "after another without it here"
        )


def _build_model(
    config: ClassifyConfig, env: dict[str, Any], run: dict[str, Any], progress: Progress, buckets: dict[Any, int]
) -> Any:
    """Plan memory (cycling layers if need be, with a notice) and allocate weights, KV cache and buffers."""
    import torch

    from launchprobe.workload.model import DecodeModel, plan_memory

    max_bucket = max(buckets.values())
    if config.cuda:
        free, _ = torch.cuda.mem_get_info()
        l2 = env.get("l2_bytes") or 50 << 20
        headroom = max(2 * GIB, free // 50)
    else:
        free, l2, headroom = DecodeModel.cpu_memory_budget(config.shape, max_bucket, config.context)
    memory = plan_memory(config.shape, max_bucket, config.context, config.dtype, free, l2, headroom)
    run["memory"] = {
        "weight_bytes": memory.weight_bytes,
        "distinct_layers": memory.distinct_layers,
        "kv_cache_bytes": memory.kv_cache_bytes,
        "activation_bytes": memory.activation_bytes,
    }
    if memory.cycled(config.shape):
        run["notices"].append(
            f"weights cycled: {memory.distinct_layers} distinct layers of "
            f"{costmodel.layer_weight_bytes(config.shape, config.dtype) / GIB:.2f} GiB serve all "
            f"{config.shape.layers} layers (full weights need "
            f"{costmodel.weight_memory_bytes(config.shape, config.dtype) / GIB:.0f} GiB); each layer is over 4x the L2 "
            f"cache, so HBM traffic per step is that of {config.shape.layers} distinct layers"
        )
    progress.status(
        f"allocating {memory.weight_bytes / GIB:.1f} GiB of weights, {memory.kv_cache_bytes / GIB:.1f} GiB KV cache"
    )
    return DecodeModel(
        config.shape,
        context=config.context,
        dtype=config.dtype,
        device=config.device,
        max_bucket=max_bucket,
        plan=memory,
        projections=config.projections,
    )


class _Measurer:
    """Measures one (mode, batch) at a time into a result record; holds what the passes share."""

    def __init__(
        self,
        config: ClassifyConfig,
        env: dict[str, Any],
        ceilings: Ceilings,
        run: dict[str, Any],
        progress: Progress,
        model: Any,
    ) -> None:
        from launchprobe.measure.markers import Markers

        self.config, self.env, self.ceilings, self.run, self.progress = config, env, ceilings, run, progress
        self.model = model
        self.markers = Markers(config.nvtx)
        self.kernel_pass_state: dict[str, Any] = {}

    def notice(self, text: str) -> None:
        if text not in self.run["notices"]:
            self.run["notices"].append(text)

    def measure(self, mode: str, batch: int, runner: Any) -> dict[str, Any]:
        from launchprobe.measure.timing import warm_up

        config, bucket = self.config, runner.bucket
        label = f"{mode} batch {batch}" + (f" (bucket {bucket})" if bucket != batch else "")
        kernels_expected = self.model.kernels_expected(bucket, self.env.get("sm_count") or 0)
        record = cost_fields(config, mode, batch, self.ceilings, kernels_expected)
        self.progress.status(f"{label}: warm-up {config.warmup} steps")
        warm_up(runner.run, config.warmup, config.cuda)
        self.progress.status(f"{label}: timing {config.steps} steps")
        samples, host_ms = self._time_clean(runner)
        busy, kernels = self._gpu_activity(runner, label)
        capture = (runner.capture_s, runner.capture_bytes)
        record.update(
            measured_fields(
                record,
                samples,
                self.ceilings,
                busy_ms=busy,
                kernels_per_step=kernels,
                capture=capture,
                cuda=config.cuda,
            )
        )
        record["host_ms_per_step"] = host_ms
        # Host time per kernel of an eager step, set beside a bare loop of tiny launches (the launch ceiling).
        eager_gpu = mode == "eager" and config.cuda  # on the CPU path the host does the work itself
        record["host_ns_per_kernel"] = host_ms * 1e6 / (kernels or kernels_expected) if eager_gpu else None
        if self.markers.level == "ops" and config.cuda:
            record["nvtx_overhead_fraction"] = self._nvtx_overhead(runner, samples.median)
        if config.kernels and config.cuda:
            self.progress.status(f"{label}: per-kernel event pass")
            record["kernel_pass"] = run_kernel_pass(
                self.model, mode, bucket, samples.median, config, self.kernel_pass_state
            )
        self.progress.advance(f"{label}: {samples.median:.3f} ms/step, {record['verdict']}")
        return record

    def _time_clean(self, runner: Any) -> tuple[Samples, float]:
        """Clean timing: events at step boundaries on a GPU, the wall clock on CPU; and host ms per step."""
        from launchprobe.measure.timing import time_steps_cpu, time_steps_cuda

        if not self.config.cuda:
            samples = Samples.of(time_steps_cpu(runner.run, self.config.steps))
            return samples, samples.median
        host: list[float] = []
        samples = Samples.of(time_steps_cuda(runner.run, self.config.steps, host))
        return samples, host[0]

    def _gpu_activity(self, runner: Any, label: str) -> tuple[float | None, float | None]:
        """Busy ms and kernels per step from a separate CUPTI pass; None, None where CUPTI cannot be had."""
        from launchprobe.measure.cupti import profile_gpu_activity

        if not self.config.cuda:
            return None, None
        self.progress.status(f"{label}: CUPTI pass, {self.config.profile_steps} steps")
        activity = profile_gpu_activity(runner.run, self.config.profile_steps)
        if activity is None:
            self.notice(CUPTI_BUSY_NOTICE)
            return None, None
        return activity.busy_ms_per_step, activity.kernels_per_step

    def _nvtx_overhead(self, runner: Any, step_ms: float) -> float:
        """The step with NVTX ranges against the same graphs without them."""
        from launchprobe.measure.timing import time_steps_cuda, warm_up
        from launchprobe.workload.modes import StepRunner

        bare = StepRunner(runner.mode, runner.bucket, runner.segments)
        warm_up(bare.run, 3, True)
        return step_ms / Samples.of(time_steps_cuda(bare.run, 20)).median - 1

    def finish(self) -> None:
        config = self.config
        if config.kernels and not config.cuda:
            self.notice("--kernels needs a CUDA GPU: no per-kernel pass on the CPU path")
        if config.kernels and config.cuda:
            costs = self.kernel_pass_state["costs"]
            self.notice(
                f"per-kernel pass: 2 CUDA events per op; an event record costs {costs.host_record_ns / 1e3:.2f} us "
                f"of host time, an event node {costs.node_ns / 1e3:.2f} us of GPU time; durations less the "
                f"{costs.pair_offset_ns / 1e3:.2f} us an event pair adds (see docs/gaps.md)"
            )
        if not config.cuda:
            self.notice("CPU path: step times are wall-clock; kernels and GPU idle are not observable")


def run_kernel_pass(
    model: Any, mode: str, bucket: int, clean_step_ms: float, config: ClassifyConfig, state: dict[str, Any]
) -> dict[str, Any]:
    """Per-kernel CUDA-event pass; event costs measured once per run, op durations once per bucket."""
    from launchprobe.measure import kernel_pass

    if "costs" not in state:
        state["costs"] = kernel_pass.measure_event_costs()
    durations = state.setdefault("durations", {})
    if bucket not in durations:
        durations[bucket] = kernel_pass.graph_durations(
            bucket, model.step(bucket), config.kernel_repeats, state["costs"].pair_offset_ns
        )
    result = kernel_pass.kernel_pass(
        mode,
        bucket,
        model.step(bucket),
        clean_step_ms=clean_step_ms,
        costs=state["costs"],
        durations_ns=durations[bucket],
        repeats=config.kernel_repeats,
    )
    # Per-op achieved bandwidth, so the weak kernels of a step are visible (bytes of the bucket's batch).
    costs = costmodel.step_cost(config.shape, bucket, config.context, config.dtype).by_name()
    for row in result["ops"]:
        cost = costs.get(row["op"])
        if cost is not None and row["time_ns_total"] > 0:
            row["bytes"] = cost.bytes
            row["achieved_bandwidth_bytes_per_s"] = cost.bytes / (row["time_ns_total"] / 1e9)
    return result


# ----------------------------------------------------------------------------------------------------------------
# From command-line options


def build_config(
    *,
    shape_spec: str | None,
    overrides: dict[str, Any],
    batches: list[int] | None,
    context: int,
    modes: list[str] | None,
    dtype: str,
    device: str,
    capture_sizes: list[int] | None,
    ceilings_source: str,
    warmup: int = 10,
    steps: int = 50,
    plan: bool = False,
    kernels: bool = False,
    nvtx: str = "steps",
    projections: str = "cublas",
    pdl: bool = True,
) -> ClassifyConfig:
    """Defaults depend on the device: the GPU path runs llama-3-8b in all modes, the CPU path a tiny shape eager."""
    from launchprobe.workload.shape import load_shape

    cuda = device.startswith("cuda") or plan  # a plan is of the GPU workload, wherever it is printed
    notices = []
    if not cuda:
        notices.append(
            "CPU path: no CUDA GPU, so this runs the decode step in plain torch on the CPU, eager only, with "
            "wall-clock timing" + ("" if shape_spec else f" (shape {DEFAULT_CPU_SHAPE})")
        )
    shape = load_shape(shape_spec or (DEFAULT_GPU_SHAPE if cuda else DEFAULT_CPU_SHAPE), overrides)
    config = ClassifyConfig(
        shape=shape,
        batches=list(dict.fromkeys(batches or (DEFAULT_GPU_BATCHES if cuda else DEFAULT_CPU_BATCHES))),
        context=context,
        modes=modes or list(MODES),  # the CPU path reports the graph modes as unavailable
        dtype=dtype,
        warmup=warmup,
        steps=steps,
        device=device,
        capture_sizes=capture_sizes,
        ceilings=ceilings_source,
        plan=plan,
        kernels=kernels,
        nvtx=nvtx,
        projections=projections,
        pdl=pdl and cuda,
        notices=notices,
    )
    config.validate()
    config.graph_capture_sizes()  # fails early on a batch above the largest capture size
    return config


def device_for_plan(requested: str) -> str:
    """--plan never needs a GPU; it uses one's name and cached ceilings when there is one."""
    try:
        return resolve_device(requested)
    except MissingToolError:
        return "cpu"


def plan_from_options(*, ceilings_source: str, **options: Any) -> dict[str, Any]:
    from launchprobe.measure.ceilings import DATASHEET, cache_key, datasheet_ceilings, load_cached

    device = device_for_plan(options.pop("device"))
    config = build_config(device="cuda", ceilings_source=ceilings_source, plan=True, **options)
    env = environment.describe(device)
    ceilings = None
    if env["gpu"]:
        if ceilings_source == "measured":
            ceilings = load_cached(cache_key(env["gpu"], env["torch"], config.dtype))
        if ceilings is None and env["gpu"] in DATASHEET:
            ceilings = datasheet_ceilings(env["gpu"], None)
    return plan_run(config, env, ceilings)


def classify_from_options(*, remeasure: bool, progress: bool, ceilings_source: str, **options: Any) -> dict[str, Any]:
    from launchprobe.measure.ceilings import get_ceilings

    device = resolve_device(options.pop("device"))
    config = build_config(device=device, ceilings_source=ceilings_source, **options)
    env = environment.describe(device)
    with Progress(enabled=progress) as bar:
        if config.cuda:
            import torch

            torch.cuda.set_device(torch.device(device).index or 0)
        bar.status("ceilings: " + ("measuring (cached afterwards)" if remeasure else "loading or measuring"))
        ceilings = get_ceilings(
            device=device,
            device_name=env["gpu"] or f"cpu {env['platform']}",
            torch_version=env["torch"],
            dtype=config.dtype,
            l2_bytes=env["l2_bytes"] or environment.cpu_cache_bytes(),
            source=ceilings_source,
            remeasure=remeasure,
        )
        return measure_run(config, env, ceilings, bar)
