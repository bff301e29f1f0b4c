"""The per-kernel pass: CUDA events around every op, in eager launches and as event nodes inside graphs.

Two instrumented runs per (mode, batch):
- durations: the whole step captured as one graph with an event before and after every op. Nothing on the host
  can delay a replayed node, so end minus start is the op's own time (plus about one event node).
- the mode itself, with the same events: host-recorded for host-launched ops, event nodes inside captured pieces.
  Its end events place each op on the step's timeline; start = end - duration (analysis/kernel_gaps.py).
Both capture fresh graphs (the clean graphs stay event-free). docs/gaps.md has the method and its limits.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launchprobe.analysis.kernel_gaps import (
    OpTiming,
    aggregate_ops,
    compare_with_cupti,
    gap_distribution,
    step_rows,
)
from launchprobe.measure.cupti import cuda_intervals
from launchprobe.measure.markers import Markers
from launchprobe.workload.model import Op
from launchprobe.workload.modes import StepRunner, prepare

if TYPE_CHECKING:
    from launchprobe.run.schema import KernelPass

BLOCK_STEPS = 3
# CUDA event timing resolution (CUDA runtime docs: about 0.5 us): no duration is reported below it.
EVENT_RESOLUTION_NS = 500  # steps run back to back before reading the last one, so the queue is in its steady state


@dataclass
class EventCosts:
    host_record_ns: float  # host time of one event record (eager)
    node_ns: float  # device time one event node adds inside a graph
    pair_offset_ns: float  # what a start/end event pair adds to a replayed kernel's measured duration
    pair_offset_method: str = ""


class InstrumentedStep:
    """A step whose ops are each wrapped by a start and an end event (``external`` so graphs can hold them)."""

    def __init__(self, mode: str, bucket: int, ops: Sequence[Op], pool: Any) -> None:
        import torch

        self.ops = list(ops)
        self.starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in self.ops]
        self.ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in self.ops]
        wrapped = [
            Op(op.name, op.layer, _timed(op, start, end)) for op, start, end in zip(self.ops, self.starts, self.ends)
        ]
        # A step-level NVTX range of its own, so an nsys trace can set these steps beside the events.
        self.runner: StepRunner = prepare(mode, bucket, wrapped, pool, Markers("steps"), range_name="kernel_pass")
        graphed = {id(op) for seg in self.runner.segments if seg.graphed for op in seg.ops}
        self.timings = [
            OpTiming(op.name, op.layer, host_launched=id(w) not in graphed) for op, w in zip(self.ops, wrapped)
        ]

    def read(self) -> tuple[list[int], list[int]]:
        """Start and end of every op of the last step, in ns from the step's first start event."""
        first = self.starts[0]
        starts = [round(first.elapsed_time(e) * 1e6) for e in self.starts]
        ends = [round(first.elapsed_time(e) * 1e6) for e in self.ends]
        return starts, ends

    def sample(self, repeats: int) -> list[tuple[list[int], list[int]]]:
        import torch

        samples = []
        for _ in range(repeats):
            for _ in range(BLOCK_STEPS):
                self.runner.run()
            torch.cuda.synchronize()
            samples.append(self.read())
        return samples


def _timed(op: Op, start: Any, end: Any) -> Any:
    def run() -> None:
        start.record()
        op.run()
        end.record()

    return run


def measure_event_costs(nodes: int = 400) -> EventCosts:
    """Host cost of an event record; in a graph of tiny kernels, an event node's cost and a pair's offset.

    The offset calibrates durations: a tiny kernel timed by the event pair around it inside a graph, minus the
    same kernels' duration as CUPTI reports it (the one place CUPTI is used as a reference, on a known load).
    """
    import torch

    from launchprobe.measure.timing import time_call

    x = torch.zeros(1, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(nodes)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(nodes)]
    for e in starts:
        e.record()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for e in starts:
            e.record()
        samples.append((time.perf_counter_ns() - t0) / nodes)
        torch.cuda.synchronize()
    host = statistics.median(samples)

    def graph(with_events: bool) -> Any:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for start, end in zip(starts, ends):
                if with_events:
                    start.record()
                x.add_(1)
                if with_events:
                    end.record()
        return g

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.synchronize()
    plain, marked = graph(False), graph(True)
    plain.replay()
    marked.replay()
    t_plain = statistics.median(time_call("cuda", plain.replay) for _ in range(10))
    t_marked = statistics.median(time_call("cuda", marked.replay) for _ in range(10))
    # Calibrate the pair against CUPTI on these tiny kernels (a known load, not the workload being measured).
    kernel_ns = [end - start for _, start, end in cuda_intervals(marked.replay)]
    pair = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e6
    if kernel_ns:
        offset, method = pair - statistics.median(kernel_ns), "event pair minus CUPTI kernel duration, tiny kernels"
    else:  # CUPTI held by another profiler: the kernels' time per node in a graph without events stands in
        offset, method = pair - t_plain * 1e9 / nodes, "event pair minus time per node of an event-free graph"
    return EventCosts(
        host_record_ns=host,
        node_ns=max(0.0, (t_marked - t_plain) * 1e9 / (2 * nodes)),
        pair_offset_ns=max(0.0, offset),
        pair_offset_method=method,
    )


def kernel_pass(
    mode: str,
    bucket: int,
    ops: Sequence[Op],
    *,
    clean_step_ms: float,
    costs: EventCosts,
    durations_ns: list[int],
    repeats: int,
    cupti: bool = True,
) -> KernelPass:
    """Measure one (mode, bucket) op by op; ``durations_ns`` come from ``graph_durations`` of the same bucket."""
    import msgspec
    import torch

    from launchprobe.measure.samples import Samples
    from launchprobe.measure.timing import time_steps_cuda, warm_up

    pool = torch.cuda.graph_pool_handle() if mode != "eager" else None
    step = InstrumentedStep(mode, bucket, ops, pool)
    warm_up(step.runner.run, 3, cuda=True)
    instrumented = Samples.of(time_steps_cuda(step.runner.run, 20))
    samples = step.sample(repeats)
    # The sample whose span is the median one stands for "one step" on the timeline.
    spans = [ends[-1] - starts[0] for starts, ends in samples]
    chosen = samples[spans.index(sorted(spans)[len(spans) // 2])]
    rows = step_rows(
        step.timings, chosen[1], durations_ns, host_event_ns=costs.host_record_ns, node_event_ns=costs.node_ns
    )
    step_ns = instrumented.median * 1e6
    gaps = [r["gap_before_ns"] for r in rows[1:]]
    result: dict[str, Any] = {
        "source": "cuda-events",
        "clean_step_ms": clean_step_ms,
        "instrumented_step_ms": instrumented.median,
        "overhead_fraction": instrumented.median / clean_step_ms - 1.0,
        "event_cost_ns": costs.host_record_ns,
        "event_node_ns": costs.node_ns,
        "event_pair_offset_ns": costs.pair_offset_ns,
        "event_pair_offset_method": costs.pair_offset_method,
        "events_per_op": 2,
        "span_ns": rows[-1]["end_ns"] - rows[0]["start_ns"] if rows else 0,
        "kernels": rows,
        "ops": aggregate_ops(rows, step_ns),
        "gaps": gap_distribution(gaps),
        "gaps_corrected": gap_distribution([r["gap_corrected_ns"] for r in rows[1:]]),
    }
    if cupti:
        result["cupti_check"] = cross_check(step, durations_ns, costs)
    del step
    from launchprobe.run.schema import KernelPass

    return msgspec.convert(result, KernelPass)


def graph_durations(bucket: int, ops: Sequence[Op], repeats: int, pair_offset_ns: float) -> list[int]:
    """Each op's own time: events around it inside one captured graph of the whole step (median of repeats),
    less the calibrated offset an event pair adds, and never below the events' resolution."""
    import torch

    step = InstrumentedStep("full", bucket, ops, torch.cuda.graph_pool_handle())
    samples = step.sample(repeats)
    durations = [
        max(
            EVENT_RESOLUTION_NS,
            int(statistics.median(end - start for start, end in zip(col_s, col_e)) - pair_offset_ns),
        )
        for col_s, col_e in zip(zip(*(s for s, _ in samples)), zip(*(e for _, e in samples)))
    ]
    del step
    return durations


def cross_check(step: InstrumentedStep, durations_ns: list[int], costs: EventCosts) -> dict[str, Any]:
    """The same instrumented step seen by CUPTI (torch.profiler) and by the events, compared."""

    def block() -> None:
        for _ in range(BLOCK_STEPS):
            step.runner.run()

    kernels = [(start, end) for _, start, end in cuda_intervals(block)]
    _, ends = step.read()
    if not kernels:
        return {"available": False, "note": "torch.profiler saw no kernels: CUPTI is held by another profiler (nsys)"}
    per_step = len(kernels) // BLOCK_STEPS
    last = kernels[-per_step:] if per_step else []
    rows = step_rows(step.timings, ends, durations_ns, host_event_ns=costs.host_record_ns, node_event_ns=costs.node_ns)
    check = compare_with_cupti(rows, [s for s, _ in last], [e for _, e in last])
    check["available"] = True
    check["note"] = (
        "same instrumented step, last of a block of 3 run under torch.profiler; CUPTI counts every kernel "
        "(cuBLAS may add split-K kernels inside one op), events count ops"
    )
    return check
