"""The classify job: run the synthetic decode loop per (mode, batch), measure it, and return the typed run.

``ClassifyConfig`` is what the CLI (or a script) builds; ``plan_run`` and ``measure_run`` turn it into a
``ClassifyRun`` (launchprobe/run/schema.py) without mutating anything the caller holds."""

from __future__ import annotations

import dataclasses
import gc
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from launchprobe import environment
from launchprobe.analysis.verdict import RULE, classify_step
from launchprobe.errors import EXIT_INTERRUPTED, LaunchprobeError, MissingToolError, UsageError
from launchprobe.measure.ceilings import Ceilings
from launchprobe.measure.samples import Samples
from launchprobe.progress import Progress
from launchprobe.run.schema import (
    KERNEL_SECONDS_MAX,
    ClassifyConfigRecord,
    ClassifyResult,
    ClassifyRun,
    Environment,
    KernelPass,
    Memory,
    Unavailable,
    header_fields,
    speedups_of,
)
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
    kernel_density: str = "sampled"  # sampled (the clean step, stitched) | dense (every op, perturbing)
    kernel_repeats: int = 5
    kernel_seconds: float = 5.0  # device time for the sampled cycles of one (mode, batch)
    nvtx: str = "steps"  # off | steps | ops (measure/markers.py)
    projections: str = "cublas"  # cublas | gemv (workload/model.py)
    pdl: bool = True  # programmatic dependent launch of the Triton kernels (kernels/triton/launch.py)
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
        if self.kernel_density not in ("sampled", "dense"):
            raise UsageError(f"--kernels {self.kernel_density}: expected sampled or dense")
        if not 0.1 <= self.kernel_seconds <= KERNEL_SECONDS_MAX:
            raise UsageError(
                f"--kernel-seconds {self.kernel_seconds:g}: expected 0.1 to {KERNEL_SECONDS_MAX:g} seconds"
            )

    def to_record(self) -> ClassifyConfigRecord:
        return ClassifyConfigRecord(
            shape=self.shape.name,
            batches=list(self.batches),
            context=self.context,
            modes=list(self.modes),
            dtype=self.dtype,
            warmup_steps=self.warmup,
            steps=self.steps,
            capture_sizes=self.graph_capture_sizes(),
            device=self.device,
            ceilings=self.ceilings,
            profile_steps=self.profile_steps,
            plan=self.plan,
            kernels=self.kernels,
            kernel_density=self.kernel_density if self.kernels else None,
            kernel_seconds=self.kernel_seconds if self.kernels and self.kernel_density == "sampled" else None,
            nvtx=self.nvtx,
            projections=self.projections,
            pdl=self.pdl,
        )

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
# Results


def cost_result(
    config: ClassifyConfig, mode: str, batch: int, ceilings: Ceilings | None, kernels: int
) -> ClassifyResult:
    """What a result has before anything runs: cost model, bucket, padding, floors."""
    cost = costmodel.step_cost(config.shape, batch, config.context, config.dtype)
    bucket = config.bucket(mode, batch)
    result = ClassifyResult(
        mode=mode,
        batch=batch,
        bucket=bucket,
        padding_fraction=padding_fraction(batch, bucket),
        bytes_per_step=cost.bytes,
        weight_bytes_per_step=cost.weight_bytes,
        kv_bytes_per_step=cost.kv_bytes,
        flops_per_step=cost.flops,
        kernels_expected=kernels,
    )
    if ceilings is not None:
        result.memory_floor_ms = cost.bytes / ceilings.hbm_read_bytes_per_s * 1e3
        result.compute_floor_ms = cost.flops / ceilings.matmul_flops_per_s * 1e3
        result.launch_floor_ms = launch_floor_ms(config, mode, kernels, ceilings)
    return result


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


def add_measurement(
    result: ClassifyResult,
    samples: Samples,
    ceilings: Ceilings,
    *,
    busy_ms: float | None,
    kernels_per_step: float | None,
    capture: tuple[float | None, int | None],
    cuda: bool,
) -> None:
    """Fill the measured fields of ``result`` from the clean step samples and the CUPTI pass."""
    median = samples.median
    step_s = median / 1e3
    idle_fraction = None if busy_ms is None else max(0.0, 1.0 - busy_ms / median)
    assert result.memory_floor_ms is not None and result.compute_floor_ms is not None
    if cuda:
        verdict = classify_step(
            step_ms=median,
            idle_fraction=idle_fraction,
            memory_floor_ms=result.memory_floor_ms,
            compute_floor_ms=result.compute_floor_ms,
        )
    else:
        # No separate device on the CPU path: estimate the framework's dispatch share instead of GPU idle.
        dispatch = min(1.0, result.kernels_expected * (ceilings.launch_host_ns or 0.0) / 1e6 / median)
        verdict = classify_step(
            step_ms=median,
            idle_fraction=dispatch,
            memory_floor_ms=result.memory_floor_ms,
            compute_floor_ms=result.compute_floor_ms,
            idle_note="CPU path, estimated op-dispatch overhead",
        )
    bandwidth = result.bytes_per_step / step_s
    flops = result.flops_per_step / step_s
    result.step_ms_median = median
    result.step_ms_p90 = samples.p90
    result.step_ms_iqr = samples.iqr
    result.step_ms_samples = list(samples.values)
    result.tokens_per_s = result.batch / step_s
    result.kernels_per_step = kernels_per_step
    result.gpu_busy_ms = busy_ms
    result.idle_fraction = idle_fraction
    result.achieved_bandwidth_bytes_per_s = bandwidth
    result.achieved_bandwidth_fraction = bandwidth / ceilings.hbm_read_bytes_per_s
    result.achieved_flops_per_s = flops
    result.achieved_flops_fraction = flops / ceilings.matmul_flops_per_s
    result.busy_bandwidth_fraction = (
        None if not busy_ms else result.bytes_per_step / (busy_ms / 1e3) / ceilings.hbm_read_bytes_per_s
    )
    result.verdict = verdict.verdict
    result.verdict_reason = verdict.reason
    result.capture_s, result.capture_bytes = capture


BATCH_WHAT_IFS = 3  # doublings of the batch shown for a memory-bound step
SMALL_OP_SHARE = 0.01  # layer ops moving under 1% of the layer's bytes count as the small ones (fusion)


def add_what_ifs(result: ClassifyResult, config: ClassifyConfig, ceilings: Ceilings) -> None:
    """What would help this measured step, ranked by predicted gain (launchprobe/analysis/predict.py)."""
    from launchprobe.analysis import predict

    if not config.cuda:  # the CPU path's step says nothing about a GPU's: predict nothing rather than guess
        return
    assert result.step_ms_median is not None
    step_ns = result.step_ms_median * 1e6
    busy_ns = None if result.gpu_busy_ms is None else result.gpu_busy_ms * 1e6
    kernels = round(result.kernels_per_step) if result.kernels_per_step else result.kernels_expected
    host_ns = None if result.host_ms_per_step is None else result.host_ms_per_step * 1e6
    what_ifs = []
    if result.mode in ("eager", "piecewise"):
        graph = predict.graphs(
            step_ns=step_ns,
            busy_ns=busy_ns,
            ops=kernels,
            node_ns=ceilings.graph_node_gap_ns if ceilings.graph_node_gap_ns is not None else ceilings.graph_node_ns,
            launch_ns=ceilings.launch_host_ns,
            node_source=(
                f"the gap between nodes of a graph of tiny kernels, by CUPTI ({ceilings.source})"
                if ceilings.graph_node_gap_ns is not None
                else f"a tiny kernel's whole node time, an upper bound: no CUPTI gap measured ({ceilings.source})"
            ),
        )
        what_ifs.append(graph)
        if graph.predicted_step_ns is not None:
            result.predicted_graph_step_ms = graph.predicted_step_ns / 1e6
    if result.mode == "eager":
        costs = costmodel.step_cost(config.shape, result.bucket, config.context, config.dtype)
        layer = [c for c in costs.layer]
        layer_bytes = sum(c.bytes for c in layer)
        small = [c.name for c in layer if c.bytes < SMALL_OP_SHARE * layer_bytes]
        if len(small) > 1:
            what_ifs.append(
                predict.fusion(
                    step_ns=step_ns,
                    busy_ns=busy_ns,
                    host_ns=host_ns,
                    launches=kernels,
                    fused_away=(len(small) - 1) * config.shape.layers,
                    label=f"the {len(small)} small kernels of each layer into one ({', '.join(small)})",
                )
            )
        extra = kernels - costmodel.logical_ops_per_step(config.shape)
        if extra > 0:
            what_ifs.append(
                predict.fusion(
                    step_ns=step_ns,
                    busy_ns=busy_ns,
                    host_ns=host_ns,
                    launches=kernels,
                    fused_away=extra,
                    label=f"the {extra} extra kernels per step into their ops (one kernel per op, e.g. no split-K "
                    "reduce kernels)",
                )
            )
    if result.verdict == "memory-bound" and result.memory_floor_ms is not None:
        floors = []
        for size in [result.batch * 2**i for i in range(1, BATCH_WHAT_IFS + 1)] + [1 << k for k in range(16)]:
            cost = costmodel.step_cost(config.shape, size, config.context, config.dtype)
            floors.append((size, cost.bytes / ceilings.hbm_read_bytes_per_s * 1e9,
                           cost.flops / ceilings.matmul_flops_per_s * 1e9))  # fmt: skip
        result.compute_bound_from_batch = predict.compute_bound_from(floors)
        shown = [f for f in floors[:BATCH_WHAT_IFS]]
        assert result.compute_floor_ms is not None
        what_ifs += predict.batch(
            batch_size=result.batch,
            step_ns=step_ns,
            memory_floor_ns=result.memory_floor_ms * 1e6,
            compute_floor_ns=result.compute_floor_ms * 1e6,
            floors_at=shown,
        )
    if result.mode in GRAPH_MODES and result.bucket > result.batch:
        what_ifs.append(
            predict.padding(
                batch_size=result.batch,
                bucket=result.bucket,
                step_ns=step_ns,
                bytes_batch=result.bytes_per_step,
                bytes_bucket=costmodel.step_cost(config.shape, result.bucket, config.context, config.dtype).bytes,
            )
        )
    result.what_ifs = predict.ranked(what_ifs)


# ----------------------------------------------------------------------------------------------------------------
# The run


def _classify_run(
    config: ClassifyConfig,
    env: Environment,
    ceilings: Ceilings | None,
    *,
    memory: Memory | None,
    results: list[ClassifyResult],
    unavailable: list[Unavailable],
    notices: list[str],
) -> ClassifyRun:
    from launchprobe.run.schema import CeilingsRecord, ShapeRecord

    measured = [r for r in results if r.step_ms_median is not None]
    return ClassifyRun(
        **header_fields(),
        notices=list(dict.fromkeys(notices)),
        environment=env,
        config=config.to_record(),
        shape=ShapeRecord(**dataclasses.asdict(config.shape)),
        ceilings=None if ceilings is None else CeilingsRecord(**dataclasses.asdict(ceilings)),
        memory=memory,
        rule=RULE,
        results=results,
        unavailable=unavailable,
        speedups=speedups_of(measured) if measured else [],
    )


def plan_run(config: ClassifyConfig, env: Environment, ceilings: Ceilings | None) -> ClassifyRun:
    """--plan: the cost model and floors, nothing run."""
    from launchprobe.workload.model import kernels_per_step

    shape = config.shape
    max_bucket = max(config.bucket(m, b) for m in config.modes for b in config.batches)
    memory = Memory(
        weight_bytes=costmodel.weight_memory_bytes(shape, config.dtype),
        distinct_layers=shape.layers,
        kv_cache_bytes=costmodel.kv_cache_bytes(shape, max_bucket, config.context, config.dtype),
    )
    sm_count = env.sm_count or 132
    results = [
        cost_result(config, mode, batch, ceilings, kernels_per_step(shape, config.bucket(mode, batch), config.context,
                                                                     sm_count))
        for mode in config.modes
        for batch in config.batches
    ]  # fmt: skip
    notices = list(config.notices)
    if ceilings is None:
        notices.append("no ceilings at hand (no cached measurement, no known GPU): floors are omitted")
    return _classify_run(config, env, ceilings, memory=memory, results=results, unavailable=[], notices=notices)


def measure_run(config: ClassifyConfig, env: Environment, ceilings: Ceilings, progress: Progress) -> ClassifyRun:
    """Build the model once, then measure every (mode, batch); graph modes capture their buckets first."""
    import torch

    from launchprobe.workload.modes import prepare

    notices = list(config.notices)
    pdl = _configure_pdl(config, notices) if config.cuda else config.pdl
    config = dataclasses.replace(config, pdl=pdl)
    modes = [m for m in config.modes if config.cuda or m not in GRAPH_MODES]
    unavailable = [
        Unavailable(mode=mode, reason="CUDA graphs need a CUDA GPU; the CPU path runs eager only")
        for mode in config.modes
        if mode not in modes
    ]
    buckets = {(m, b): config.bucket(m, b) for m in modes for b in config.batches}
    model, memory = _build_model(config, env, notices, progress, buckets)
    measurer = _Measurer(config, env, ceilings, notices, progress, model)
    total = len(modes) * len(config.batches)
    progress.start(total)
    results: list[ClassifyResult] = []
    try:
        for mode in modes:
            runners: dict[int, Any] = {}
            pool = torch.cuda.graph_pool_handle() if mode in GRAPH_MODES else None
            for bucket in sorted({buckets[(mode, b)] for b in config.batches}, reverse=True):
                if mode in GRAPH_MODES:
                    progress.status(f"{mode}: capturing bucket {bucket}")
                runners[bucket] = prepare(mode, bucket, measurer.model.step(bucket), pool, measurer.markers)
            for batch in config.batches:
                results.append(measurer.measure(mode, batch, runners[buckets[(mode, batch)]]))
            del runners
            gc.collect()
    except KeyboardInterrupt:
        if not results:
            raise
        notices.append(
            f"incomplete: interrupted (Ctrl-C) after {len(results)} of {total} (mode, batch) rows; the others "
            f"were not measured"
        )
        partial = _classify_run(
            config, env, ceilings, memory=memory, results=results, unavailable=unavailable, notices=notices
        )
        partial.incomplete = True
        raise ClassifyInterrupted(partial, total) from None
    measurer.finish()
    return _classify_run(
        config, env, ceilings, memory=memory, results=results, unavailable=unavailable, notices=notices
    )


class ClassifyInterrupted(LaunchprobeError):
    """Ctrl-C after some (mode, batch) rows were measured: ``run`` holds them, marked incomplete, for the caller
    to save and show before exiting 130."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, run: ClassifyRun, total: int) -> None:
        super().__init__(f"interrupted after {len(run.results)} of {total} (mode, batch) rows")
        self.run = run


def _configure_pdl(config: ClassifyConfig, notices: list[str]) -> bool:
    """Whether the Triton ops' programmatic dependent launch can be on for this run; on a GPU without it, say so:
    off. (The model's ops get it as ``KernelSettings(pdl=...)``.)"""
    import torch

    from launchprobe.kernels import KernelSettings, get_ops

    ops = get_ops("cuda", impl="triton", settings=KernelSettings(pdl=config.pdl))
    if config.pdl and not ops.pdl_active(torch.device(config.device)):
        notices.append(
            "programmatic dependent launch needs compute capability 9.0 (Hopper) or later: kernels launch one "
            "after another without it here"
        )
        return False
    return config.pdl


def _build_model(
    config: ClassifyConfig, env: Environment, notices: list[str], progress: Progress, buckets: dict[Any, int]
) -> tuple[Any, Memory]:
    """Plan memory (cycling layers if need be, with a notice) and allocate weights, KV cache and buffers."""
    import torch

    from launchprobe.kernels import KernelSettings
    from launchprobe.workload.model import DecodeModel, cpu_memory_budget, plan_memory

    max_bucket = max(buckets.values())
    if config.cuda:
        free, _ = torch.cuda.mem_get_info()
        l2 = env.l2_bytes or 50 << 20
        headroom = max(2 * GIB, free // 50)
    else:
        free, l2, headroom = cpu_memory_budget(config.shape, max_bucket, config.context)
    memory = plan_memory(config.shape, max_bucket, config.context, config.dtype, free, l2, headroom)
    if memory.cycled(config.shape):
        notices.append(
            f"weights cycled: {memory.distinct_layers} distinct layers of "
            f"{costmodel.layer_weight_bytes(config.shape, config.dtype) / GIB:.2f} GiB serve all "
            f"{config.shape.layers} layers (full weights need "
            f"{costmodel.weight_memory_bytes(config.shape, config.dtype) / GIB:.0f} GiB); each layer is over 4x the L2 "
            f"cache, so HBM traffic per step is that of {config.shape.layers} distinct layers"
        )
    progress.status(
        f"allocating {memory.weight_bytes / GIB:.1f} GiB of weights, {memory.kv_cache_bytes / GIB:.1f} GiB KV cache"
    )
    model = DecodeModel(
        config.shape,
        context=config.context,
        dtype=config.dtype,
        device=config.device,
        max_bucket=max_bucket,
        plan=memory,
        projections=config.projections,
        kernel_settings=KernelSettings(pdl=config.pdl),
    )
    record = Memory(
        weight_bytes=memory.weight_bytes,
        distinct_layers=memory.distinct_layers,
        kv_cache_bytes=memory.kv_cache_bytes,
        activation_bytes=memory.activation_bytes,
    )
    return model, record


class _Measurer:
    """Measures one (mode, batch) at a time into a result; holds what the passes share."""

    def __init__(
        self,
        config: ClassifyConfig,
        env: Environment,
        ceilings: Ceilings,
        notices: list[str],
        progress: Progress,
        model: Any,
    ) -> None:
        from launchprobe.measure.markers import Markers

        self.config, self.env, self.ceilings, self.notices, self.progress = config, env, ceilings, notices, progress
        self.model = model
        self.markers = Markers(config.nvtx)
        self.kernel_pass_state: dict[str, Any] = {}

    def notice(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def measure(self, mode: str, batch: int, runner: Any) -> ClassifyResult:
        from launchprobe.measure.timing import warm_up

        config, bucket = self.config, runner.bucket
        label = f"{mode} batch {batch}" + (f" (bucket {bucket})" if bucket != batch else "")
        kernels_expected = self.model.kernels_expected(bucket, self.env.sm_count or 0)
        result = cost_result(config, mode, batch, self.ceilings, kernels_expected)
        self.progress.status(f"{label}: warm-up {config.warmup} steps")
        warm_up(runner.run, config.warmup, config.cuda)
        self.progress.status(f"{label}: timing {config.steps} steps")
        samples, host_ms = self._time_clean(runner)
        busy, kernels = self._gpu_activity(runner, label)
        add_measurement(
            result,
            samples,
            self.ceilings,
            busy_ms=busy,
            kernels_per_step=kernels,
            capture=(runner.capture_s, runner.capture_bytes),
            cuda=config.cuda,
        )
        result.host_ms_per_step = host_ms
        # Host time per kernel of an eager step, set beside a bare loop of tiny launches (the launch ceiling).
        eager_gpu = mode == "eager" and config.cuda  # on the CPU path the host does the work itself
        result.host_ns_per_kernel = host_ms * 1e6 / (kernels or kernels_expected) if eager_gpu else None
        if self.markers.level == "ops" and config.cuda:
            result.nvtx_overhead_fraction = self._nvtx_overhead(runner, samples.median)
        add_what_ifs(result, config, self.ceilings)
        if config.kernels and config.cuda:
            self.progress.status(f"{label}: per-kernel event pass")
            result.kernel_pass = run_kernel_pass(
                self.model, mode, bucket, samples.median, config, self.kernel_pass_state, runner, self.markers
            )
        self.progress.advance(f"{label}: {samples.median:.3f} ms/step, {result.verdict}")
        return result

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
            how = (
                "end events in pairs a few ops apart, a few pairs per step, the offset rotating step to step, the "
                "spacing chosen so the step stays within 2% of clean; each gap measured inside one step, the "
                "picture stitched from all sampled steps"
                if config.kernel_density == "sampled"
                else "dense: an end event after every op, so the picture is the instrumented step (perturbing)"
            )
            self.notice(
                f"per-kernel pass: {how}; an event record costs {costs.host_record_ns / 1e3:.2f} us of host time, an "
                f"event node {costs.node_ns / 1e3:.2f} us of GPU time; op durations from CUPTI's kernels of clean "
                "steps where CUPTI is free, else from an events graph (durations_source says which; docs/gaps.md)"
            )
        if not config.cuda:
            self.notice("CPU path: step times are wall-clock; kernels and GPU idle are not observable")


def run_kernel_pass(
    model: Any,
    mode: str,
    bucket: int,
    clean_step_ms: float,
    config: ClassifyConfig,
    state: dict[str, Any],
    runner: Any,
    markers: Any = None,
    reach: int | None = None,
) -> KernelPass:
    """Per-kernel pass of one (mode, bucket) against its clean ``runner``; event costs measured once per run, op
    durations and kernels per op (a CUPTI counting pass) once per bucket. ``reach``: the pairs' reach (default:
    ``sampled.default_reach`` of the mode's ops)."""
    from launchprobe.analysis.sampled import StitchRefused
    from launchprobe.measure import kernel_pass

    if "costs" not in state:
        state["costs"] = kernel_pass.measure_event_costs()
    durations = state.setdefault("durations", {})

    def fallback_durations() -> list[int]:  # only where CUPTI's durations cannot be had; once per bucket
        if bucket not in durations:
            durations[bucket] = kernel_pass.graph_durations(
                bucket, model.step(bucket), config.kernel_repeats, state["costs"].pair_offset_ns
            )
        return list(durations[bucket])

    counts = state.setdefault("counts", {})
    if bucket not in counts:
        try:
            counts[bucket] = kernel_pass.kernel_counts(model.step(bucket))
        except StitchRefused as error:
            counts[bucket] = str(error)
    result = kernel_pass.kernel_pass(
        mode,
        bucket,
        model.step(bucket),
        clean=runner,
        clean_step_ms=clean_step_ms,
        costs=state["costs"],
        fallback_durations=fallback_durations,
        counts=counts[bucket],
        density=config.kernel_density,
        repeats=config.kernel_repeats,
        sampling_s=config.kernel_seconds,
        markers=markers,
        reach=reach,
        timer_pdl=config.pdl,
    )
    # Per-op achieved bandwidth, so the weak kernels of a step are visible (bytes of the bucket's batch).
    costs = costmodel.step_cost(config.shape, bucket, config.context, config.dtype).by_name()
    for row in result.ops:
        cost = costs.get(row.op)
        if cost is not None and row.time_ns_total:
            row.bytes = cost.bytes
            row.achieved_bandwidth_bytes_per_s = cost.bytes / (row.time_ns_total / 1e9)
    return result


# ----------------------------------------------------------------------------------------------------------------
# From options to a run


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
    kernel_density: str = "sampled",
    kernel_seconds: float = 5.0,
) -> ClassifyConfig:
    """Defaults depend on the device: the GPU path runs llama-3-8b in all modes, the CPU path a tiny shape eager.
    ``device`` is already resolved (``resolve_device``; a plan is of the GPU workload wherever it is printed)."""
    from launchprobe.workload.shape import load_shape

    cuda = device.startswith("cuda") or plan
    if modes and "eager" not in modes and not cuda:
        raise MissingToolError(
            f"--mode {','.join(modes)} needs CUDA graphs, and this runs on the CPU (no CUDA GPU, or --device cpu), "
            f"which runs eager only: add --mode eager or run on a GPU"
        )
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
        device="cuda" if plan else device,
        capture_sizes=capture_sizes,
        ceilings=ceilings_source,
        plan=plan,
        kernels=kernels,
        kernel_density=kernel_density,
        kernel_seconds=kernel_seconds,
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


def plan(config: ClassifyConfig, device: str) -> ClassifyRun:
    """The plan of ``config`` (built with plan=True), with the ceilings this machine has cached or knows."""
    from launchprobe.measure.ceilings import DATASHEET, cache_key, datasheet_ceilings, load_cached

    env = environment.describe(device)
    ceilings = None
    if env.gpu:
        if config.ceilings == "measured":
            ceilings = load_cached(cache_key(env.gpu, env.torch or "", config.dtype))
        if ceilings is None and env.gpu in DATASHEET:
            ceilings = datasheet_ceilings(env.gpu, None)
    return plan_run(config, env, ceilings)


def classify(config: ClassifyConfig, *, remeasure: bool = False, progress: bool = True) -> ClassifyRun:
    """Measure ``config`` on its device: ceilings (cached per GPU), then every (mode, batch)."""
    from launchprobe.measure.ceilings import get_ceilings

    env = environment.describe(config.device)
    with Progress(enabled=progress) as bar:
        if config.cuda:
            import torch

            torch.cuda.set_device(torch.device(config.device).index or 0)
        bar.status("ceilings: " + ("measuring (cached afterwards)" if remeasure else "loading or measuring"))
        ceilings = get_ceilings(
            device=config.device,
            device_name=env.gpu or f"cpu {env.platform}",
            torch_version=env.torch or "",
            dtype=config.dtype,
            l2_bytes=env.l2_bytes or environment.cpu_cache_bytes(),
            source=config.ceilings,
            remeasure=remeasure,
        )
        return measure_run(config, env, ceilings, bar)


# ----------------------------------------------------------------------------------------------------------------
# `launchprobe.classify(...)`: the Python API's classify, called on this module (docs/api.md)


class _CallableModule(types.ModuleType):
    """This module, callable: ``launchprobe.classify(batches=[1])`` is ``launchprobe.api.classify(...)``, while
    ``launchprobe.classify.build_config`` and the rest stay reachable. (Importing a submodule binds its name on the
    package, so the package's name ``classify`` cannot be a plain function.)"""

    def __call__(self, **options: Any) -> ClassifyRun:
        from launchprobe.api import classify as run_classify

        return run_classify(**options)


sys.modules[__name__].__class__ = _CallableModule
