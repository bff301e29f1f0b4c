"""What would help, and by how much: predicted step times next to a verdict (docs/analysis.md, "What would help").

Each prediction is a pure function of numbers the run already holds (GPU busy time, kernels and launches per step,
host time per step, the cost model and the ceilings measured on this GPU) and returns a ``WhatIf`` with the
predicted step, the speed-up, the arithmetic and its assumptions, or, where the data cannot support a number,
``predictable=False`` and the reason. Nothing here measures anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from launchprobe.analysis.windows import WHOLE_TRACE
from launchprobe.run.schema import Summary, WhatIf, Window

# Defaults where this GPU has no measured ceiling (analyze of a trace from elsewhere). The node cost is classify's
# graph_node_gap_ns ceiling as measured on an H200 on 2026-12-01 (docs/performance.md): the idle between the nodes
# of a replayed graph of tiny kernels, by CUPTI; the graph launch is NVIDIA's published figure for straight-line
# graphs (CUDA 12.6: ~2.5 us + ~1 ns per node).
DEFAULT_GRAPH_NODE_NS = 84.0
DEFAULT_GRAPH_LAUNCH_NS = 2_500.0


def _speedup(current_ns: float, predicted_ns: float) -> float | None:
    return current_ns / predicted_ns if predicted_ns > 0 else None


def not_predictable(kind: str, title: str, reason: str) -> WhatIf:
    return WhatIf(kind=kind, title=title, predictable=False, reason=reason)


def graphs(
    *,
    step_ns: float,
    busy_ns: float | None,
    ops: int | None,
    node_ns: float | None,
    launch_ns: float | None,
    node_source: str,
    kept_idle_ns: float = 0.0,
) -> WhatIf:
    """An eager step replayed as one CUDA graph: the idle spent waiting for launches goes, each launch becomes a
    graph node, and the idle a graph does not remove (``kept_idle_ns``: the GPU waiting with work already queued,
    on a sync or a dependency, or the process issuing no work) stays.

    predicted = GPU busy + kept idle + ops x per-node cost + one graph launch."""
    title = "capture the step in a CUDA graph"
    if busy_ns is None:
        return not_predictable(
            "cuda-graphs",
            title,
            "GPU busy time was not measured: CUPTI was held by another profiler, or the trace has no GPU work",
        )
    if not ops:
        return not_predictable("cuda-graphs", title, "the number of GPU ops per step is not known")
    node = DEFAULT_GRAPH_NODE_NS if node_ns is None else node_ns
    launch = DEFAULT_GRAPH_LAUNCH_NS if launch_ns is None else launch_ns
    predicted = busy_ns + kept_idle_ns + ops * node + launch
    kept = f" + {kept_idle_ns / 1e6:.3f} ms idle kept" if kept_idle_ns > 0 else ""
    keeps = (
        f"the idle with work queued (behind a callback, event, sync or other stream) or none issued stays "
        f"({kept_idle_ns / 1e6:.3f} ms)"
        if kept_idle_ns > 0
        else "no host synchronisation inside the step"
    )
    return WhatIf(
        kind="cuda-graphs",
        title=title,
        predicted_step_ns=round(predicted),
        speedup=_speedup(step_ns, predicted),
        arithmetic=(
            f"{busy_ns / 1e6:.3f} ms GPU busy{kept} + {ops} ops x {node / 1e3:.2f} us per node + "
            f"{launch / 1e3:.2f} us graph launch = {predicted / 1e6:.3f} ms"
        ),
        assumptions=(
            f"the same kernels run back to back from one graph; per-node cost {node / 1e3:.2f} us "
            f"({node_source if node_ns is not None else 'default: the H200 measurement, no ceiling for this GPU'}); "
            f"{keeps}"
        ),
    )


def fusion(
    *,
    step_ns: float,
    busy_ns: float | None,
    host_ns: float | None,
    launches: int | None,
    fused_away: int,
    label: str,
) -> WhatIf:
    """Fewer launches for the same work: ``fused_away`` launches per step merged into others (their bytes kept).

    A launch-bound eager step takes the host's time; the host's time scales with the launches it issues, and the
    GPU's busy time stays: predicted = max(GPU busy, host time x (launches - fused_away) / launches)."""
    title = f"fuse {label}"
    if busy_ns is None or host_ns is None or not launches:
        return not_predictable("fusion", title, "needs GPU busy time, host time per step and launches per step")
    if fused_away <= 0 or fused_away >= launches:
        return not_predictable("fusion", title, "nothing to fuse")
    host_after = host_ns * (launches - fused_away) / launches
    predicted = max(busy_ns, host_after)
    return WhatIf(
        kind="fusion",
        title=title,
        predicted_step_ns=round(predicted),
        speedup=_speedup(step_ns, predicted),
        arithmetic=(
            f"max({busy_ns / 1e6:.3f} ms GPU busy, {host_ns / 1e6:.3f} ms host x "
            f"{launches - fused_away}/{launches} launches) = {predicted / 1e6:.3f} ms"
        ),
        assumptions=(
            "host time per launch stays what it is now; the fused kernels do the same work in the same GPU time "
            "(their bytes are kept); the step is bounded by the slower of host and GPU"
        ),
    )


def batch(
    *,
    batch_size: int,
    step_ns: float,
    memory_floor_ns: float,
    compute_floor_ns: float,
    floors_at: Sequence[tuple[int, float, float]],
) -> list[WhatIf]:
    """Larger batches of a memory-bound step: the step at each next batch from the cost model's floors, at the
    fraction of the floor the step reaches now (weights are read once per step whatever the batch).

    ``floors_at``: (batch, memory floor ns, compute floor ns) of the candidate batches."""
    now_floor = max(memory_floor_ns, compute_floor_ns)
    if step_ns <= 0 or now_floor <= 0:
        return [not_predictable("batch", "larger batches", "no floors for this step")]
    efficiency = now_floor / step_ns
    out = []
    for size, memory_ns, compute_ns in floors_at:
        if size <= batch_size:
            continue
        floor = max(memory_ns, compute_ns)
        predicted = floor / efficiency
        bound = "compute" if compute_ns > memory_ns else "memory"
        tokens_now, tokens = batch_size / step_ns * 1e9, size / predicted * 1e9
        out.append(
            WhatIf(
                kind="batch",
                title=f"batch {size}",
                predicted_step_ns=round(predicted),
                speedup=None,
                tokens_per_s=tokens,
                throughput_gain=tokens / tokens_now if tokens_now else None,
                arithmetic=(
                    f"{bound} floor {floor / 1e6:.3f} ms / {efficiency:.0%} of the floor reached now = "
                    f"{predicted / 1e6:.3f} ms per step, {tokens:,.0f} tokens/s"
                ),
                assumptions=(
                    f"the step keeps reaching {efficiency:.0%} of its floor; the step would be {bound}-bound; "
                    "KV cache and activations fit"
                ),
            )
        )
    return out


def compute_bound_from(floors_at: Sequence[tuple[int, float, float]]) -> int | None:
    """The smallest batch whose compute floor exceeds its memory floor."""
    return next((size for size, memory_ns, compute_ns in sorted(floors_at) if compute_ns > memory_ns), None)


def padding(*, batch_size: int, bucket: int, step_ns: float, bytes_batch: int, bytes_bucket: int) -> WhatIf:
    """A graph bucket larger than the batch: the step if it were captured at the batch itself, scaling the step by
    the bytes it moves (memory-bound decode: the padded sequences add their KV cache and activations)."""
    title = f"capture a graph for batch {batch_size} (now padded to {bucket})"
    if bucket <= batch_size:
        return not_predictable("padding", title, "no padding: the batch has its own bucket")
    if bytes_bucket <= 0:
        return not_predictable("padding", title, "no cost model for the bucket")
    predicted = step_ns * bytes_batch / bytes_bucket
    return WhatIf(
        kind="padding",
        title=title,
        predicted_step_ns=round(predicted),
        speedup=_speedup(step_ns, predicted),
        arithmetic=(
            f"{step_ns / 1e6:.3f} ms x {bytes_batch / 1e6:,.1f} MB / {bytes_bucket / 1e6:,.1f} MB moved = "
            f"{predicted / 1e6:.3f} ms"
        ),
        assumptions="the step time scales with the bytes it moves (memory-bound); one more captured graph",
    )


def ranked(what_ifs: Sequence[WhatIf]) -> list[WhatIf]:
    """Predictable ones first, by predicted gain (speed-up, or throughput gain for batch), then the others."""

    def gain(w: WhatIf) -> float:
        return w.speedup or w.throughput_gain or 0.0

    good = sorted((w for w in what_ifs if w.predictable), key=gain, reverse=True)
    return good + [w for w in what_ifs if not w.predictable]


# --- analysed traces ---

GRAPH_FAN_OUT = 1.5  # kernels per launch call above which a window is already graph replay


def trace_what_ifs(window: Window | Summary, *, node_ns: float | None, launch_ns: float | None, source: str) -> None:
    """What would help an analysed window, or a summary's typical instance: the CUDA-graph what-if for eager work
    (``predicted_graph_step_ns``); a step that is already graph replay, or whose busy time says nothing, gets a
    line saying so, and so does the whole trace, which is no step. The idle a graph does not remove (queued and no
    work, docs/analysis.md) is kept in the prediction. A trace has no cost model, so batch and padding what-ifs are
    not predictable from it."""
    title = "capture the step in a CUDA graph"
    if isinstance(window, Summary):
        step, busy, ops = window.span_p50_ns, window.busy_p50_ns, window.kernels_per_instance
        per_launch = window.kernels / window.launch_calls if window.launch_calls else None
        kept = window.idle_not_launch_p50_ns or 0
    else:
        step, busy, ops = window.span_ns, window.busy_ns, window.gpu_ops
        per_launch = window.kernels_per_launch
        kept = window.idle_queued_ns + window.idle_no_work_ns
    if not step:
        return
    if window.name == WHOLE_TRACE:
        what_if = not_predictable(
            "cuda-graphs", title, "the whole trace is no step: analyse its steps (--steps, --range) for one"
        )
    elif per_launch is not None and per_launch > GRAPH_FAN_OUT:
        what_if = not_predictable(
            "cuda-graphs", title, f"already graph replay ({per_launch:.0f} kernels per launch call)"
        )
    else:
        what_if = graphs(
            step_ns=step, busy_ns=busy, ops=round(ops) if ops else None, node_ns=node_ns, launch_ns=launch_ns,
            node_source=source, kept_idle_ns=kept,
        )  # fmt: skip
    window.what_ifs = [what_if]
    window.predicted_graph_step_ns = what_if.predicted_step_ns


def node_costs_for(gpu: str | None) -> tuple[float | None, float | None, str]:
    """The per-node gap and launch cost this GPU's cached ceilings hold (classify measured them here), if any."""
    from launchprobe.measure.ceilings import cached_for_gpu

    cached = cached_for_gpu(gpu) if gpu else None
    if cached is None:
        return None, None, "default"
    node = cached.graph_node_gap_ns if cached.graph_node_gap_ns is not None else cached.graph_node_ns
    return node, cached.launch_host_ns, f"this GPU's ceilings, measured {cached.measured_at[:10]}"


def annotate_run(windows: Sequence[Window], summaries: Sequence[Summary], gpu: str | None) -> None:
    """The trace what-ifs of every window and summary of an analyze run."""
    node_ns, launch_ns, source = node_costs_for(gpu)
    records: list[Window | Summary] = [*windows, *summaries]
    for record in records:
        trace_what_ifs(record, node_ns=node_ns, launch_ns=launch_ns, source=source)
