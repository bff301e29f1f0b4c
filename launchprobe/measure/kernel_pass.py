"""The per-kernel pass on a GPU: sampled end events (default) or an end event after every op (dense).

The GPU-specific part is thin: build the step's instrumented variants (an end event after the ops of one
variant's plan: host-recorded for host-launched ops, ``external`` event nodes inside freshly captured graphs),
run them in rotation back to back, read the event times, and run clean steps and variants under CUPTI. Which ops
go in which variant, the stitching, the choice of the spacing and the checks are pure functions in
analysis/sampled.py.
Op durations come from CUPTI's kernels of clean steps, grouped into ops by a counting pass (a kernel's time does
not depend on the host); only where that cannot be had (CUPTI held by nsys, kernels
not grouped) from a separate pass, the whole step as one graph with an event pair around every op
(``graph_durations``), labelled so. docs/gaps.md has the method and its limits.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol

from launchprobe.analysis import sampled, timer_pairs
from launchprobe.analysis.kernel_gaps import OpTiming, gap_distribution
from launchprobe.measure.cupti import cuda_intervals
from launchprobe.measure.markers import Markers
from launchprobe.measure.timing import pinned_host
from launchprobe.run.schema import GAP_DISAGREE
from launchprobe.workload.model import Op
from launchprobe.workload.modes import Segment, StepRunner, split_segments

if TYPE_CHECKING:
    from launchprobe.run.schema import KernelPass

P = ParamSpec("P")

# CUDA event timing resolution (CUDA runtime docs: about 0.5 us): no duration is reported below it.
EVENT_RESOLUTION_NS = 500
LEAD_IN = 2  # steps of a clean block (the last timed), so the launch queue is in its steady state again
# Clean steps under CUPTI: dropped, then used. lm_head's duration varies by 1-2.6 us (sd) from step to step on the
# H200; the median of 8 steps was up to 0.9 us off that of the hundreds of clean steps timed in the cycles.
REFERENCE_WARM, REFERENCE_STEPS = 2, 64
# The variants run under CUPTI in one cycle as the pass runs them: their kernel sequences are checked against the
# clean step's, and their op durations give each op's end shift (``sampled.end_shifts``).
# After that cycle, the variants measuring an op that occurs once per step run this many more rounds: lm_head's
# duration varies by 1-2.6 us (sd) from step to step, and its end shift is a median of its durations there. As
# many steps as the pass gives them without CUPTI (``ONE_PER_STEP_SAMPLES``): CUPTI's effect on such a class is the
# difference of the two readings, and with 25 steps under CUPTI its noise (0.4-1.0 us for lm_head on the H200,
# docs/performance.md) left the like-for-like check of lm_head undecided at the 1 us bar.
SHIFT_ROUNDS = sampled.ONE_PER_STEP_SAMPLES - 1
COUNT_PAUSE_S, COUNT_SEPARATION_NS = 0.001, 300_000  # counting pass: pause between ops, cluster threshold
SAMPLING_TIME_S = 5.0  # device time for the sampled cycles of one (mode, batch), by default
PROBE_TIME_S = 0.3  # device time of one round of a stride probe
PROBE_TIME_MAX_S = 1.5  # rounds are added until the probe's error is within PROBE_ERROR, or this much is spent
PROBE_ERROR = 0.002


@dataclass
class EventCosts:
    host_record_ns: float  # host time of one event record (eager)
    node_ns: float  # device time one event node adds inside a graph
    pair_offset_ns: float  # what a start/end event pair adds to a replayed kernel's measured duration
    pair_offset_method: str = ""


def measure_event_costs(nodes: int = 400) -> EventCosts:
    """Host cost of an event record; in a graph of tiny kernels, an event node's cost and a pair's offset.

    The offset calibrates durations: a tiny kernel timed by the event pair around it inside a graph, minus the
    same kernels' duration as CUPTI reports it (the one place CUPTI is used as a reference, on a known load).
    """
    import torch

    from launchprobe.measure.timing import time_call

    x = torch.zeros(1, device="cuda")
    stream = torch.cuda.current_stream()
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(nodes)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(nodes)]
    for e in starts + ends:
        e.record(stream)
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for e in starts:
            e.record(stream)  # as the pass records them: the stream bound once
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


# ----------------------------------------------------------------------------------------------------------------
# Durations: the whole step as one graph, an event pair around every op


def graph_durations(bucket: int, ops: Sequence[Op], repeats: int, pair_offset_ns: float) -> list[int]:
    """Each op's own time: events around it inside one captured graph of the whole step (median of repeats),
    less the calibrated offset an event pair adds, and never below the events' resolution. Nothing on the host
    can delay a replayed node; the events break programmatic dependent launch, so this is the kernel's own time."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in ops]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in ops]

    def timed(op: Op, start: Any, end: Any) -> Op:
        def run() -> None:
            start.record()
            op.run()
            end.record()

        return Op(op.name, op.layer, run)

    wrapped = [timed(op, s, e) for op, s, e in zip(ops, starts, ends)]
    runner = StepRunner("full", bucket, split_segments(wrapped, "full"))
    runner.capture(torch.cuda.graph_pool_handle())
    columns: list[list[float]] = [[] for _ in ops]
    for _ in range(repeats):
        runner.run()
        torch.cuda.synchronize()
        for column, s, e in zip(columns, starts, ends):
            column.append(s.elapsed_time(e) * 1e6)
    del runner
    return [max(EVENT_RESOLUTION_NS, int(statistics.median(c) - pair_offset_ns)) for c in columns]


# ----------------------------------------------------------------------------------------------------------------
# Variants


def op_layout(mode: str, ops: Sequence[Op]) -> tuple[list[OpTiming], list[int]]:
    """Per op: its timing record (host-launched or graph-replayed in ``mode``) and the index of its segment."""
    timings, segment_of = [], []
    for index, segment in enumerate(split_segments(ops, mode)):
        for op in segment.ops:
            timings.append(OpTiming(op.name, op.layer, host_launched=not segment.graphed))
            segment_of.append(index)
    return timings, segment_of


class StepVariants(Protocol):
    """What ``run_cycles`` runs: one runner per variant, and each variant's marks as read after a sync."""

    runners: list[StepRunner]

    def __len__(self) -> int: ...

    def read(self, variant: int, boundary: Any) -> dict[int, int]: ...


class Variants:
    """Instrumented variants of one step: variant v records an end event after each op of ``plan[v]``.

    Eager ops record on the host (the stream bound once); graphed segments holding a sampled op are captured
    afresh with ``external`` event nodes, the others reuse the clean runner's graphs, so the variants replay
    exactly the clean step's graphs wherever they time nothing. The variants in ``after_replay`` (the plan's head,
    wrap_head and piece variants) time a graphed segment's last op by a host event recorded right after the clean
    graph's replay instead, leaving the piece as the clean runner captured it."""

    def __init__(
        self,
        clean: StepRunner,
        ops: Sequence[Op],
        plan: Sequence[Sequence[int]],
        pool: Any,
        markers: Markers | None,
        after_replay: Collection[int] = (),
    ) -> None:
        import torch

        self.plan = [list(p) for p in plan]
        self.events: list[dict[int, Any]] = []
        self.runners: list[StepRunner] = []
        stream = torch.cuda.current_stream()
        for sampled_ops in self.plan:
            events = {i: torch.cuda.Event(enable_timing=True, external=True) for i in sampled_ops}
            for event in events.values():
                event.record(stream)  # created and valid before any capture
            self.events.append(events)
        torch.cuda.synchronize()
        for v, events in enumerate(self.events):
            self.runners.append(self._variant(clean, ops, events, pool, markers, stream, v in after_replay))

    @staticmethod
    def _variant(
        clean: StepRunner,
        ops: Sequence[Op],
        events: dict[int, Any],
        pool: Any,
        markers: Markers | None,
        stream: Any,
        after_replay: bool = False,
    ) -> StepRunner:
        def mark(op: Op, i: int, graphed: bool) -> Op:
            return _then_record(op, events[i], None if graphed else stream)

        def replay_then_record(segment: Segment, mine: range) -> Segment | None:
            if not (after_replay and segment.graphed):
                return None
            if [i for i in mine if i in events] != [mine[-1]]:
                raise ValueError("a host event after a graph's replay times the piece's last op alone")
            return Segment(segment.ops, graphed=True, graph=_ReplayThenRecord(segment.graph, events[mine[-1]], stream))

        return _marked_runner(clean, ops, events, mark, pool, markers, replay_then_record)

    def __len__(self) -> int:
        return len(self.runners)

    def read(self, variant: int, boundary: Any) -> dict[int, int]:
        return {i: round(boundary.elapsed_time(e) * 1e6) for i, e in self.events[variant].items()}


def _marked_runner(
    clean: StepRunner,
    ops: Sequence[Op],
    marked: Collection[int],
    mark: Callable[[Op, int, bool], Op],
    pool: Any,
    markers: Markers | None,
    as_is: Callable[[Segment, range], Segment | None] | None = None,
) -> StepRunner:
    """The clean runner with ``mark(op, i, graphed)`` in place of each op i in ``marked``: a graphed segment holding
    one is captured afresh, a host-launched one runs the marked ops as they are; segments with none are the clean
    runner's. ``as_is(segment, its op indices)`` may give the segment to use instead (the head variants)."""
    import torch

    segments: list[Segment] = []
    at = 0
    for clean_segment in clean.segments:
        mine = range(at, at + len(clean_segment.ops))
        at += len(clean_segment.ops)
        if not any(i in marked for i in mine):
            segments.append(clean_segment)
            continue
        instead = as_is(clean_segment, mine) if as_is is not None else None
        if instead is not None:
            segments.append(instead)
            continue
        graphed = clean_segment.graphed
        wrapped = [mark(ops[i], i, graphed) if i in marked else ops[i] for i in mine]
        segments.append(_captured(wrapped, pool) if graphed else Segment(wrapped, graphed=False))
    torch.cuda.synchronize()
    return StepRunner(clean.mode, clean.bucket, segments, markers=markers, range_name="kernel_pass")


def timers_available() -> bool:
    """Whether timer kernels can run here: a CUDA GPU, Triton importable, kernels compiled (not interpreted)."""
    import os

    import torch

    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        import launchprobe.kernels.triton.timer  # noqa: F401
    except ImportError:
        return False
    return True


class TimerVariants:
    """Timer-pair variants of one step (``analysis.timer_pairs``): variant v puts a timer kernel after op i - 1 and
    op i of each of its targets, in the graphed segments that hold them, captured afresh; every other segment is the
    clean runner's. ``read`` gives each timer's reading (ns, the GPU's clock) once the step has synced. Same
    interface as ``Variants`` for ``run_cycles``."""

    def __init__(
        self,
        clean: StepRunner,
        ops: Sequence[Op],
        targets: Sequence[Sequence[int]],
        pool: Any,
        markers: Markers | None,
        pdl: bool,
    ) -> None:
        import torch

        from launchprobe.kernels.triton.timer import record_time

        self.marks = [timer_pairs.marked_ops(t) for t in targets]
        self.buffers = [torch.zeros(len(ops), dtype=torch.int64, device="cuda") for _ in targets]
        record_time(self.buffers[0], 0, pdl)  # compiled before any capture
        torch.cuda.synchronize()
        self.runners = [
            _marked_runner(clean, ops, set(marks), functools.partial(_then_time, buffer=buffer, pdl=pdl), pool, markers)
            for marks, buffer in zip(self.marks, self.buffers)
        ]

    def __len__(self) -> int:
        return len(self.runners)

    def read(self, variant: int, boundary: Any) -> dict[int, int]:
        values = self.buffers[variant].tolist()
        return {i: int(values[i]) for i in self.marks[variant]}


def _then_time(op: Op, slot: int, graphed: bool, *, buffer: Any, pdl: bool) -> Op:
    """``op`` followed by a timer kernel writing ``buffer[slot]`` on the current stream: launched through Triton
    inside a capture, relaunched directly where the host launches it in the step (``bound_timer``)."""
    from launchprobe.kernels.triton.timer import bound_timer, record_time

    run = op.run
    launch = functools.partial(record_time, buffer, slot, pdl) if graphed else bound_timer(buffer, slot, pdl)

    def timed() -> None:
        run()
        launch()

    return Op(op.name, op.layer, timed)


class _ReplayThenRecord:
    """A captured graph whose replay the host follows with an event record on the stream: the end of the graph's
    last kernel, timed with no event node in the graph."""

    def __init__(self, graph: Any, event: Any, stream: Any) -> None:
        self.graph, self.event, self.stream = graph, event, stream

    def replay(self) -> None:
        self.graph.replay()
        self.event.record(self.stream)


def _captured(ops: Sequence[Op], pool: Any) -> Segment:
    """``ops`` captured as one graph, a graphed segment."""
    import torch

    segment = Segment(list(ops), graphed=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        for op in ops:
            op.run()
    segment.graph = graph
    return segment


def recapture(clean: StepRunner, pool: Any, markers: Markers | None) -> StepRunner:
    """The clean step with every graphed segment captured afresh, no event in any: a second capture of the same
    graphs (the eager segments are the clean runner's own)."""
    import torch

    segments = [_captured(seg.ops, pool) if seg.graphed else seg for seg in clean.segments]
    torch.cuda.synchronize()
    return StepRunner(clean.mode, clean.bucket, segments, markers=markers, range_name="kernel_pass")


def _then_record(op: Op, event: Any, stream: Any) -> Op:
    """``op`` followed by an end event: ``stream`` bound (host-launched) or the current one (inside a capture)."""
    run = op.run
    record: Callable[[], Any] = (lambda: event.record(stream)) if stream is not None else event.record

    def timed() -> None:
        run()
        record()

    return Op(op.name, op.layer, timed)


def _timed_after(run: Callable[[], Any], lead_in: int) -> tuple[Any, Any]:
    """``lead_in - 1`` untimed steps of ``run``, then one between a start and an end event (returned)."""
    import torch

    for _ in range(lead_in - 1):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    return start, end


def alternating(variant: Callable[[], Any], clean: Callable[[], Any], step_ms: float) -> tuple[float, float, float]:
    """The variant against the clean step, in alternating blocks of two steps (clean, clean, variant, variant,
    ..., clean, clean), each block's second step timed: the variant as it runs after itself, the clean step after
    itself, each variant step set against the clean steps just before and after it, so that a host which moves
    between speeds moves both alike. Rounds of about ``PROBE_TIME_S`` run until the median ratio's standard
    error is within ``PROBE_ERROR`` or ``PROBE_TIME_MAX_S`` is spent (a noisy eager host). Returns the clean
    step's median ms, the median ratio less 1 and its standard error."""
    import torch

    pairs = max(8, min(60, int(PROBE_TIME_S * 1e3 / (4 * max(step_ms, 1e-3)))))
    variant()
    clean()
    cleans: list[float] = []
    ratios: list[float] = []
    spent_ms = 0.0
    while True:
        spans = [_timed_after(clean if block % 2 == 0 else variant, 2) for block in range(2 * pairs + 1)]
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in spans]
        spent_ms += 2 * sum(times)
        round_cleans, round_variants = times[0::2], times[1::2]
        ratios += [v / ((round_cleans[k] + round_cleans[k + 1]) / 2) for k, v in enumerate(round_variants)]
        cleans += round_cleans
        error = sampled.median_error(ratios)
        if error <= PROBE_ERROR or spent_ms >= PROBE_TIME_MAX_S * 1e3:
            break
    return statistics.median(cleans), statistics.median(ratios) - 1.0, error


def cycled(variants: StepVariants, clean: StepRunner, step_ms: float, order_kind: str) -> tuple[float, float, float]:
    """The variants against the clean step as the cycles run them (``run_cycles``: groups of ``CLEAN_EVERY``
    variant steps back to back between clean blocks), each step set against the clean steps beside its group, in
    rounds of about ``PROBE_TIME_S`` until the median ratio's standard error is within ``PROBE_ERROR`` or
    ``PROBE_TIME_MAX_S`` is spent. The eager stride probe (``sampled.PROBE_VARIANTS``). Returns the clean step's
    median ms, the median ratio less 1 and its standard error."""
    n = len(variants)
    per_cycle = n + LEAD_IN * (-(-n // sampled.CLEAN_EVERY) + 1)
    cycles = max(1, round(PROBE_TIME_S * 1e3 / (per_cycle * max(step_ms, 1e-3))))
    cleans: list[int] = []
    overheads: list[float] = []
    spent_ms = 0.0
    first = 0
    while True:
        steps, clean_ns = run_cycles(
            variants, clean, cycles, warm=first == 0, order_kind=order_kind, first_cycle=first
        )  # fmt: skip
        first += cycles
        overheads += [s.step_ns / s.reference_ns - 1.0 for s in steps if s.reference_ns]
        cleans += clean_ns
        spent_ms += (sum(s.step_ns for s in steps) + LEAD_IN * sum(clean_ns)) / 1e6
        error = sampled.median_error(overheads)
        if error <= PROBE_ERROR or spent_ms >= PROBE_TIME_MAX_S * 1e3:
            break
    return statistics.median(cleans) / 1e6, statistics.median(overheads), error


def run_cycles(
    variants: StepVariants,
    clean: StepRunner,
    cycles: int,
    follows: dict[int, int] | None = None,
    every: int = sampled.CLEAN_EVERY,
    extra: Sequence[int] = (),
    rounds: int = 0,
    warm: bool = True,
    ran: list[int] | None = None,
    order_kind: str = "rotate",
    first_cycle: int = 0,
) -> tuple[list[sampled.SampledStep], list[int]]:
    """One warm-up pass over the variants (not read: a captured graph's first replays upload it), then cycles:
    every variant once (in ``order_kind``), back to back in groups of ``every``, with a clean block of ``LEAD_IN``
    steps before each group and after the last, its last step timed; sync and read. After each cycle, ``rounds`` short
    cycles over the variants in ``extra`` alone (``sampled.extra_rounds``). Each sampled step carries the mean of
    the clean steps timed just before and after its group. Returns the sampled steps and every timed clean step,
    in run order; ``ran``, if given, gets every step run after the warm-up pass (``warm``): its variant, or -1 for a
    clean step. ``order_kind``: the cycles' order (``sampled.variant_order``, ``sampled.default_order``);
    ``first_cycle``: the number of the first cycle in that order (a probe's later rounds go on from its first)."""
    import torch

    out: list[sampled.SampledStep] = []
    clean_ns: list[int] = []
    n = len(variants)
    for variant in sampled.variant_order(n, 0, follows) if warm else []:
        variants.runners[variant].run()
    torch.cuda.synchronize()
    log = ran if ran is not None else []

    def one_cycle(order: list[int]) -> None:
        groups = sampled.cycle_groups(order, every, follows)
        references = [_timed_after(clean.run, LEAD_IN)]
        log.extend([-1] * LEAD_IN)
        bounds: list[list[Any]] = []
        for group in groups:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(group) + 1)]
            events[0].record()
            for j, variant in enumerate(group):
                variants.runners[variant].run()
                events[j + 1].record()
            bounds.append(events)
            log.extend(group)
            references.append(_timed_after(clean.run, LEAD_IN))
            log.extend([-1] * LEAD_IN)
        torch.cuda.synchronize()
        timed = [round(start.elapsed_time(end) * 1e6) for start, end in references]
        clean_ns.extend(timed)
        for g, (group, events) in enumerate(zip(groups, bounds)):
            reference = (timed[g] + timed[g + 1]) / 2
            for j, variant in enumerate(group):
                out.append(
                    sampled.SampledStep(
                        variant=variant,
                        step_ns=round(events[j].elapsed_time(events[j + 1]) * 1e6),
                        ends=variants.read(variant, events[j]),
                        reference_ns=reference,
                    )
                )

    for cycle in range(first_cycle, first_cycle + cycles):
        one_cycle(sampled.variant_order(n, cycle, follows, order_kind=order_kind))
        for round_ in range(rounds if extra else 0):
            one_cycle(sampled.variant_order(n, cycle * rounds + round_, follows, extra, order_kind))
    return out, clean_ns


# ----------------------------------------------------------------------------------------------------------------
# CUPTI: the clean reference, the variants' kernel sequences, kernels per op


@dataclass
class CleanReference:
    names: list[list[str]]  # per step
    kernels: list[list[tuple[int, int]]]  # per step, CUPTI clock
    step_ns: list[float]  # per step, boundary events under CUPTI


def clean_reference(clean: StepRunner) -> CleanReference | None:
    """Clean steps back to back under CUPTI, with the clean timing's boundary events; None without CUPTI."""
    from launchprobe.measure.timing import time_steps_cuda

    total = REFERENCE_WARM + REFERENCE_STEPS
    times: list[float] = []
    rows = cuda_intervals(lambda: times.extend(time_steps_cuda(clean.run, total)))
    if not rows:
        return None
    steps = sampled.split_steps([name for name, _, _ in rows], total)
    per = len(steps[0])
    keep = slice(REFERENCE_WARM, total)
    chunks = [rows[i * per : (i + 1) * per] for i in range(total)][keep]
    return CleanReference(
        names=steps[keep],
        kernels=[[(s, e) for _, s, e in chunk] for chunk in chunks],
        step_ns=[t * 1e6 for t in times[keep]],
    )


@dataclass
class VariantKernels:
    names: dict[int, list[str]]  # per variant, one step's kernel names
    kernels: dict[int, list[list[tuple[int, int]]]]  # per variant, per step it ran: (start, end), CUPTI clock
    steps: list[sampled.SampledStep]  # the same steps as the events read them, CUPTI running
    clean: list[list[tuple[int, int]]] = field(default_factory=list)  # the cycle's clean steps, in run order
    # per clean step that ran right after another: its first kernel's start less that step's latest kernel end
    clean_heads: list[int] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)  # the variants in run order, clean steps as negative numbers
    # per variant, per step it ran: the latest kernel end of the step run right before it (None: the cycle's first)
    previous_ends: dict[int, list[int | None]] = field(default_factory=dict)


def variant_kernels(
    variants: Variants, clean: StepRunner, per_step: int, follows: dict[int, int] | None, extra: Sequence[int] = ()
) -> VariantKernels:
    """The variants under CUPTI as the pass runs them (``run_cycles``): one cycle over all of them, in groups
    between clean blocks, then ``SHIFT_ROUNDS`` rounds over those in ``extra``, so that the op durations behind
    the end shifts are taken in the arrangement the events were read in (a long op's duration varies by
    microseconds with its context: docs/performance.md), and the events of that cycle are kept for the
    like-for-like check. Every run of a variant must launch the kernels of its first."""
    ran: list[int] = []
    read: list[sampled.SampledStep] = []

    def work() -> None:
        read.extend(run_cycles(variants, clean, 1, follows, extra=extra, rounds=SHIFT_ROUNDS, warm=False, ran=ran)[0])

    rows = cuda_intervals(work)
    if len(rows) != per_step * len(ran):
        raise sampled.StitchRefused(
            f"the {len(ran)} steps of a cycle of the variants ran {len(rows)} kernels, not {len(ran)} x {per_step} "
            "as the clean step: the events changed what runs"
        )
    names: dict[int, list[str]] = {}
    kernels: dict[int, list[list[tuple[int, int]]]] = {}
    clean_steps: list[list[tuple[int, int]]] = []
    heads: list[int] = []
    previous: dict[int, list[int | None]] = {}
    for j, v in enumerate(ran):
        mine = rows[j * per_step : (j + 1) * per_step]
        before = max(end for _, _, end in rows[(j - 1) * per_step : j * per_step]) if j else None
        if v < 0:
            clean_steps.append([(start, end) for _, start, end in mine])
            if before is not None and ran[j - 1] < 0:
                heads.append(min(start for _, start, _ in mine) - before)
            continue
        previous.setdefault(v, []).append(before)
        step = [name for name, _, _ in mine]
        if names.setdefault(v, step) != step:
            diff = sampled.first_difference(names[v], step)
            raise sampled.StitchRefused(f"variant {v} launched other kernels when it ran again ({diff})")
        kernels.setdefault(v, []).append([(start, end) for _, start, end in mine])
    return VariantKernels(
        names=names, kernels=kernels, steps=read, clean=clean_steps, clean_heads=heads, ran=ran, previous_ends=previous
    )


def kernel_counts(ops: Sequence[Op]) -> tuple[list[int], list[str]]:
    """Kernels per op: the ops one by one, a sync and a pause between them, under CUPTI; clustered by time.
    Returns the counts and the kernel names in order (to match against the step's sequence)."""
    import torch

    def work() -> None:
        for op in ops:
            op.run()
            torch.cuda.synchronize()
            time.sleep(COUNT_PAUSE_S)

    rows = cuda_intervals(work)
    return sampled.counts_from_clusters(rows, len(ops), COUNT_SEPARATION_NS), [name for name, _, _ in rows]


# ----------------------------------------------------------------------------------------------------------------
# The pass


def _on_one_core(measure: Callable[P, KernelPass]) -> Callable[P, KernelPass]:
    """Run ``measure`` with the host thread pinned to the core it is on (``pinned_host``); record that core."""

    @functools.wraps(measure)
    def pinned(*args: P.args, **kwargs: P.kwargs) -> KernelPass:
        with pinned_host() as cpu:
            result = measure(*args, **kwargs)
        result.host_cpu = cpu
        return result

    return pinned


@_on_one_core
def kernel_pass(
    mode: str,
    bucket: int,
    ops: Sequence[Op],
    *,
    clean: StepRunner,
    clean_step_ms: float,
    costs: EventCosts,
    fallback_durations: Callable[[], list[int]],
    counts: tuple[list[int], list[str]] | str | None,
    density: str = "sampled",
    repeats: int = 5,
    sampling_s: float | None = None,
    markers: Markers | None = None,
    cupti: bool = True,
    reach: int | None = None,
    timer_pdl: bool = False,
) -> KernelPass:
    """Measure one (mode, bucket) op by op against its clean runner ``clean``.

    Durations are CUPTI's of clean steps where its kernels group into ops by ``counts`` (from ``kernel_counts``,
    or a string saying why there are none); otherwise ``fallback_durations()`` (``graph_durations`` of the
    bucket). ``clean_step_ms`` is the clean pass's time, used until this pass has re-timed the clean step beside
    its own steps. ``sampling_s``: device time for the sampled cycles (default ``SAMPLING_TIME_S``; at most 40
    cycles per 5 s). ``reach``: the pairs' reach (default ``sampled.default_reach``: a layer's ops + 1 in eager, 4
    otherwise). In graph modes, where timer kernels can run, the timer pairs follow (``timer_pdl``: launch them
    with programmatic dependent launch, as the step's own kernels are). The host thread stays on one core
    throughout."""
    import msgspec
    import torch

    from launchprobe.run.schema import KernelPass

    if density not in ("sampled", "dense"):
        raise ValueError(f"unknown kernel-pass density {density!r}")
    timings, segment_of = op_layout(mode, ops)
    reach = sampled.default_reach(timings) if reach is None else reach
    names = [op.name for op in ops]
    pool = torch.cuda.graph_pool_handle() if mode != "eager" else None
    per_op_cost = [costs.host_record_ns if t.host_launched else costs.node_ns for t in timings]
    result: dict[str, Any] = {
        "source": "cuda-events",
        "density": density,
        "perturbing": density == "dense",
        "overhead_budget_fraction": sampled.OVERHEAD_BUDGET,
        "event_cost_ns": costs.host_record_ns,
        "event_node_ns": costs.node_ns,
        "event_pair_offset_ns": costs.pair_offset_ns,
        "event_pair_offset_method": costs.pair_offset_method,
        "events_per_op": 1,
    }
    plan, probes = _choose_plan(ops, timings, clean, clean_step_ms, per_op_cost, density, reach, pool, markers)
    if density == "sampled":
        result["stride_probes"] = probes.probes
    order = sampled.default_order(timings) if density == "sampled" else "rotate"
    result["pairing"] = sampled.pairing_note(plan, order)
    result["reach"] = plan.reach if density == "sampled" else None
    variants = Variants(clean, ops, plan.variants, pool, markers, after_replay=plan.after_replay)
    if density == "dense":
        probes.times.append(alternating(variants.runners[0].run, clean.run, clean_step_ms)[0])
    probe_ms = statistics.median(probes.times) if probes.times else None
    clean_ns = (probe_ms or clean_step_ms) * 1e6
    time_s = sampling_s or SAMPLING_TIME_S
    cycles = (
        repeats
        if density == "dense"
        else sampled.cycles_for(
            len(plan.variants),
            clean_ns,
            time_s * 1e9,
            minimum=repeats,
            maximum=max(40, round(40 * time_s / SAMPLING_TIME_S)),
        )  # fmt: skip
    )
    solo_extra = sampled.one_per_step_variants(plan, names)
    extra = sorted({*solo_extra, *plan.piece_variants})  # piece variants: enough steps under CUPTI too
    rounds = sampled.extra_rounds(cycles) if extra else 0
    steps, clean_in_cycles = run_cycles(
        variants, clean, cycles, plan.follows, extra=extra, rounds=rounds, order_kind=order
    )
    clean_ns = statistics.median(clean_in_cycles)  # timed beside the sampled steps, on the same core
    spread = sampled.clean_spread(clean_in_cycles)
    result.update(
        clean_step_ms=clean_ns / 1e6,
        clean_step_probe_ms=probe_ms,
        stride=plan.spacing,
        variants=len(plan.variants),
        cycles=cycles,
        sampled_steps=len(steps),
        one_per_step_variants=len(solo_extra),
        piece_variants=len(plan.piece_variants),
        one_per_step_runs=cycles * (1 + rounds) if solo_extra else None,
        clean_references=len(clean_in_cycles),
        clean_step_spread_fraction=spread,
        host_steady=spread <= sampled.HOST_STEADY_SPREAD,
        predicted_overhead_fraction=max(sum(per_op_cost[i] for i in p) for p in plan.variants) / clean_ns,
    )
    checked = SequenceCheck(None, None, "not checked: CUPTI not used")
    if cupti:
        checked = _check_sequences(clean, variants, plan.follows, extra if density == "sampled" else ())
    result["sequence_check"] = checked.note
    ref = _cupti_reference(checked.reference, counts) if checked.reference is not None else None
    durations_ns, result["durations_source"] = _durations(ref, fallback_durations)
    if ref is not None and density == "sampled" and clean.graphs:
        result["cupti_capture_check"] = _capture_check(clean, names, ref, counts, pool, markers, clean_ns / 1e6)
    shifts: list[int | None] | None = None
    anchor_bias: list[int | None] | None = None
    start_bias: dict[str, float | None] | None = None
    seen_ops: dict[int, list[list[tuple[int, int]]]] | None = None
    if density == "sampled":
        seen_ops = _grouped_ops(checked.seen, counts)
        shifts, result["end_shift_source"] = _end_shifts(plan, ref, seen_ops)
        if checked.seen is not None and seen_ops is not None:
            hosted = [t.host_launched for t in timings]
            result["event_lags"] = _event_lags(plan, hosted, checked.seen.steps, seen_ops)
            anchor_bias, result["cupti_anchor_effects"] = sampled.anchor_effects(plan, names, hosted, seen_ops)
            if ref is not None and ref.op_gap_ns is not None:
                _, starts = sampled.start_shifts(plan, names, ref.op_gap_ns, seen_ops)
                result["cupti_start_shifts"] = starts
                start_bias = {row["op"]: row["bias_ns"] for row in starts}
                result["cupti_fresh_captures"] = sampled.fresh_capture_shifts(
                    plan, names, hosted, segment_of, ref.op_gap_ns, seen_ops
                )
    try:
        if checked.refusal is not None:
            raise sampled.StitchRefused(checked.refusal)
        picture = sampled.stitch(timings, steps, plan, durations_ns, clean_ns, shifts)
    except sampled.StitchRefused as error:
        picture = None
        result.update(stitched=False, refusal=str(error), picture=None)
    overheads = sampled.local_overheads(steps, clean_ns)
    result.update(
        instrumented_step_ms=statistics.median(s.step_ns for s in steps) / 1e6,
        overhead_fraction=overheads.pooled,
        variant_overhead_max_fraction=overheads.slowest,
        variant_overhead_max_error_fraction=overheads.slowest_error,
        overhead_error_fraction=overheads.pooled_error,
        variant_standout_p=overheads.standout_p,
        variant_overhead_shuffled_q95_fraction=overheads.shuffled_slowest_q95,
        overhead_within_budget=overheads.within(sampled.OVERHEAD_BUDGET),
        overhead_steps_to_decide=overheads.steps_to_decide(sampled.OVERHEAD_BUDGET),
        overhead_basis=overheads.basis,
    )
    if picture is not None:
        result.update(_picture_fields(picture, density, segment_of, costs.node_ns))
        if cupti:
            under = None
            if checked.seen is not None and density == "sampled":
                try:  # the same pass's steps as read while CUPTI ran: the like-for-like op check
                    under = sampled.stitch(
                        timings, checked.seen.steps, plan, durations_ns, None, shifts, pair_bias_ns=anchor_bias
                    )
                except sampled.StitchRefused:
                    under = None
            captured = (result.get("cupti_capture_check") or {}).get("classes", [])
            seen = checked.seen
            head = sampled.head_cupti_effect(plan, steps, seen.steps) if seen is not None else None
            piece = sampled.piece_cupti_effects(plan, names, steps, seen.steps) if seen is not None else None
            lag = None
            if seen is not None and seen_ops is not None:
                lag = sampled.boundary_lag(plan, seen_ops, seen.previous_ends, seen.steps)
            later = None
            gaps = ref.op_gap_ns if ref is not None else None
            if seen is not None and seen.clean and isinstance(counts, tuple) and gaps is not None:
                grouped = [sampled.group_ops(step, counts[0]) for step in seen.clean]
                later = sampled.cycle_clean_gaps(names, grouped, gaps, seen.clean_heads)
            result["cupti_check"] = _cupti_check(
                picture, clean_ns, ref, under, result["host_steady"], captured,
                head_effect=head, start_bias=start_bias, piece_effects=piece, cycle_clean=later, boundary=lag,
            )  # fmt: skip
            _add_fresh_capture_diffs(result["cupti_check"], result.get("cupti_fresh_captures"))
    elif cupti and checked.reference is None:
        result["cupti_check"] = {"available": False, "note": checked.note}
    del variants
    if density == "sampled" and picture is not None and clean.graphs and timers_available():
        trusted = bool((result.get("cupti_check") or {}).get("cupti_trusted"))
        op_counts = counts[0] if isinstance(counts, tuple) and cupti else None
        reference_names = checked.reference.names[0] if checked.reference is not None else None
        result["timer_pairs"] = _timer_pairs(
            clean, ops, timings, picture, durations_ns, ref, pool, markers, timer_pdl, trusted,
            counts=op_counts, clean_names=reference_names,
            event_ops=(result.get("cupti_check") or {}).get("ops") or [],
        )  # fmt: skip
    if density == "sampled" and picture is not None and (result.get("cupti_check") or {}).get("available"):
        result.update(_checks(result))
    return msgspec.convert(_plain(result), KernelPass)


def _add_fresh_capture_diffs(check: dict[str, Any], fresh: Mapping[str, Any] | None) -> None:
    """Per op class of the op check that the variants' own captures read: the events' gap less CUPTI's clean one
    plus what those captures do to it (``OpCheck.gap_fresh_capture_diff_ns``, a diagnostic beside the verdict)."""
    shifts = {c["op"]: c["shift_ns"] for c in (fresh or {}).get("classes", [])}
    for op in check.get("ops") or []:
        if op["op"] in shifts:
            op["gap_fresh_capture_diff_ns"] = op["gap_diff_ns"] - shifts[op["op"]]


def _checks(result: Mapping[str, Any]) -> dict[str, Any]:
    """The every-class verdict by the better reading (the timer pairs' where they read a class, the events'
    elsewhere; the events' alone without timer pairs), whether that check was made, and the verdict over the
    pass's checks against the clean step (``sampled.checks_verdict``)."""
    check, timers = result["cupti_check"], result.get("timer_pairs") or {}
    if timers.get("classes_from_events") is not None:
        every = timers.get("with_events_ops_agree")
    else:
        every = check.get("ops_agree")
    made = sampled.class_check_made(every, check.get("cupti_trusted"), bool(check.get("ops")))
    return {
        "every_class_agrees": every,
        "every_class_checked": made,
        "checks_verdict": sampled.checks_verdict(
            result.get("overhead_within_budget"), check.get("total_gap_agrees"), check.get("busy_agrees"), every, made
        ),
    }


def _timer_pairs(
    clean: StepRunner,
    ops: Sequence[Op],
    timings: Sequence[OpTiming],
    picture: sampled.Stitched,
    durations_ns: Sequence[int],
    ref: sampled.CuptiReference | None,
    pool: Any,
    markers: Markers | None,
    pdl: bool,
    trusted: bool,
    counts: Sequence[int] | None = None,
    clean_names: Sequence[str] | None = None,
    event_ops: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The gap from a timer pair of each op after a graphed one, split so the covered ops sum to the stitch
    (``timer_pairs``), and per class against CUPTI's clean gaps (``ops_agree`` only where CUPTI is trusted op for
    op). The variants that time a one-per-step op run ``SOLO_ROUNDS`` more rounds; a host-launched op's pair is not
    read where its variant's steps ran beyond the budget (``host_behind``). With CUPTI's kernels per op (``counts``)
    and the clean step's kernel names, each op's duration taken off its pair is CUPTI's in the timer steps; else the
    clean one.
    ``event_ops``: the events' op check (``cupti_check.ops``), for the classes CUPTI moves (``timer_pairs.judge``)
    and for the verdict over every class, the events' where the timers read none (``with_events``)."""
    graphed = [not t.host_launched for t in timings]
    targets = timer_pairs.pair_targets(graphed)
    if not targets:
        return {"measured": False, "note": "no op after one inside a captured graph"}
    after_pieces = timer_pairs.after_piece_variants(graphed, targets)
    names = [op.name for op in ops]
    variants = TimerVariants(clean, ops, targets, pool, markers, pdl)
    solo = timer_pairs.solo_variants(names, targets)
    steps, references = run_cycles(variants, clean, timer_pairs.PAIR_STEPS, extra=solo, rounds=timer_pairs.SOLO_ROUNDS)
    in_timer_steps, source = None, "CUPTI's, of clean steps: CUPTI not used"
    under_cupti: list[sampled.SampledStep] = []
    step_gaps: dict[int, list[float]] = {}
    if counts is not None and clean_names is not None:
        try:
            seen = _timer_step_durations(variants, clean, targets, solo, counts, clean_names)
            in_timer_steps, under_cupti, step_gaps = seen.durations, seen.steps, seen.gaps
            source = f"CUPTI's, of the timer steps ({timer_pairs.CUPTI_ROUNDS} of each variant)"
        except sampled.StitchRefused as error:
            source = f"CUPTI's, of clean steps: {error}"
    del variants
    clean_ns = statistics.median(references)
    overheads = sampled.local_overheads(steps, clean_ns)
    behind = timer_pairs.host_behind(targets, after_pieces, overheads.per_variant, sampled.OVERHEAD_BUDGET)
    readings = {i: r for i, r in timer_pairs.pair_readings(steps, targets).items() if i not in behind}
    readings_under_cupti = {i: r for i, r in timer_pairs.pair_readings(under_cupti, targets).items() if i not in behind}
    taken_off = in_timer_steps if in_timer_steps is not None else durations_ns
    split = timer_pairs.split(
        timer_pairs.pair_gaps(readings, taken_off), [row["gap_before_ns"] for row in picture.rows]
    )
    shifts = {i: d - durations_ns[i] for i, d in in_timer_steps.items()} if in_timer_steps is not None else None
    effects = timer_pairs.span_effects(names, readings, readings_under_cupti)
    apart = None
    if ref is not None and ref.op_gap_ns is not None and step_gaps:
        read_gaps = {i: g for i, g in step_gaps.items() if i in readings}
        apart = timer_pairs.timer_step_shifts(names, read_gaps, ref.op_gap_ns, ref.op_gap_error_ns)
    classes = timer_pairs.judge(
        timer_pairs.class_checks(names, split, ref.op_gap_ns if ref is not None else None, shifts),
        event_ops,
        effects.classes,
        apart.classes if apart is not None else None,
    )
    both = timer_pairs.with_events(classes, event_ops)
    verdicts = [c["gap_verdict"] != GAP_DISAGREE for c in classes if "gap_verdict" in c]
    return {
        "measured": True,
        "pdl": pdl,
        "spacing": timer_pairs.PAIR_SPACING,
        "variants": len(targets),
        "steps": len(steps),
        "clean_step_ms": clean_ns / 1e6,
        "solo_variants": len(solo),
        "after_piece_variants": len(after_pieces),
        "after_piece_behind": behind,
        "durations_source": source,
        "ops_covered": len(split.gaps_ns),
        "mean_excess_ns": split.mean_excess_ns,
        "cupti_typical_effect_ns": effects.typical_ns if effects.classes else None,
        "cupti_timer_steps_typical_shift_ns": apart.typical_ns if apart is not None and apart.classes else None,
        "overhead_fraction": overheads.pooled,
        "variant_overhead_max_fraction": overheads.slowest,
        "gaps_ns": [split.gaps_ns.get(i) for i in range(len(ops))],
        "classes": classes,
        "ops_agree": all(verdicts) if verdicts and trusted else None,
        "with_events_ops_agree": both.ops_agree if trusted else None,
        "classes_from_events": both.from_events,
    }


@dataclass
class TimerStepsUnderCupti:
    durations: dict[int, float]  # per target op, its median duration in its variant's steps, as CUPTI saw them
    steps: list[sampled.SampledStep]  # the same steps' timer readings (GPU clock), for CUPTI's effect on the pairs
    gaps: dict[int, list[float]]  # per target op, CUPTI's gap before it in each of its variant's steps, timers aside


def _timer_step_durations(
    variants: TimerVariants,
    clean: StepRunner,
    targets: Sequence[Sequence[int]],
    solo: Sequence[int],
    counts: Sequence[int],
    clean_names: Sequence[str],
) -> TimerStepsUnderCupti:
    """The timer variants under CUPTI as the pass ran them (``run_cycles``, ``CUPTI_ROUNDS`` cycles, the solo
    variants' extra rounds; already warm): per target op, its median duration in its variant's steps, the timers'
    readings of those steps, and CUPTI's gap before it in each (``timer_pairs.timer_step_gaps``). The readings
    are copied back after each cycle's sync, outside its steps; their copies (CUPTI's memcpy rows) are set
    aside."""
    ran: list[int] = []
    read: list[sampled.SampledStep] = []

    def cycles() -> None:
        steps, _ = run_cycles(
            variants, clean, timer_pairs.CUPTI_ROUNDS, extra=solo, rounds=timer_pairs.SOLO_ROUNDS, warm=False, ran=ran
        )
        read.extend(steps)

    rows = [row for row in cuda_intervals(cycles) if not row[0].lower().startswith("memcpy")]
    if not rows:
        raise sampled.StitchRefused("CUPTI saw no kernels of the timer steps")
    per_step = sum(counts)
    sizes = [per_step + (len(variants.marks[v]) if v >= 0 else 0) for v in ran]
    if len(rows) != sum(sizes):
        raise sampled.StitchRefused(
            f"the timer steps under CUPTI ran {len(rows)} kernels, not the {sum(sizes)} they launch"
        )
    steps, at = [], 0
    for v, size in zip(ran, sizes):
        if v >= 0:
            steps.append((v, rows[at : at + size]))
        at += size
    durations = timer_pairs.timer_step_durations(steps, counts, clean_names, targets)
    return TimerStepsUnderCupti(durations, read, timer_pairs.timer_step_gaps(steps, counts, targets))


@dataclass
class Probes:
    """What choosing the spacing measured: the clean step's median of each probe, and the probes themselves."""

    times: list[float]
    probes: list[dict[str, float]]


def _choose_plan(
    ops: Sequence[Op],
    timings: Sequence[OpTiming],
    clean: StepRunner,
    clean_step_ms: float,
    per_op_cost: Sequence[float],
    density: str,
    reach: int,
    pool: Any,
    markers: Markers | None,
) -> tuple[sampled.Plan, Probes]:
    """The variants to run: the paired plan at the spacing measured to keep the step within budget (sampled),
    or one step with every op timed (dense). In piecewise a head variant times past the first graph piece."""
    n = len(ops)
    probes = Probes(times=[], probes=[])
    if density != "sampled":
        return sampled.dense_plan(n), probes
    head = sampled.head_op(timings)
    eager = all(t.host_launched for t in timings)
    ran: dict[int, int] = {}

    def overhead_at(spacing: int) -> tuple[float, float]:
        plan = sampled.pair_plan(n, spacing, reach, head)
        if eager:  # as the cycles run them (sampled.PROBE_VARIANTS)
            probed = Variants(clean, ops, [plan.variants[v] for v in sampled.probe_variants(plan)], pool, markers)
            clean_ms, overhead, error = cycled(probed, clean, clean_step_ms, sampled.default_order(timings))
        else:
            probed = Variants(clean, ops, [plan.densest], pool, markers)
            clean_ms, overhead, error = alternating(probed.runners[0].run, clean.run, clean_step_ms)
        ran[spacing] = len(probed)
        probes.times.append(clean_ms)
        return overhead, error

    start = sampled.initial_spacing(per_op_cost, clean_step_ms * 1e6, reach=reach)
    choice = sampled.choose_stride(
        sampled.widest_spacing(n, reach), start, overhead_at, lowest=sampled.min_spacing(reach),
        search_down=any(t.host_launched for t in timings),
    )  # fmt: skip
    probes.probes = [
        {"stride": k, "overhead_fraction": o, "error_fraction": e, "variants": ran[k]} for k, o, e in choice.probes
    ]
    return sampled.pair_plan(n, choice.stride, reach, head, sampled.piece_boundaries(timings)), probes


def _durations(ref: sampled.CuptiReference | None, fallback: Callable[[], list[int]]) -> tuple[list[int], str]:
    """Each op's duration and where it came from: CUPTI's clean steps grouped into ops, else the events graph."""
    if ref is not None and ref.op_duration_ns is not None:
        source = f"CUPTI: each op's first kernel start to last kernel end, median of {ref.steps} clean steps"
        return [round(d) for d in ref.op_duration_ns], source
    why = ref.grouping if ref is not None else "CUPTI not available"
    return fallback(), (
        f"events graph ({why}): an event pair around every op in one captured graph, less the calibrated pair "
        "offset; it breaks PDL overlaps and its per-op error adds up in the gaps"
    )


def _picture_fields(
    picture: sampled.Stitched, density: str, segment_of: Sequence[int], node_ns: float
) -> dict[str, Any]:
    """The run fields of a stitched (sampled) or instrumented (dense) picture; a dense one gets the linear
    correction where it is sound (``sampled.sound_corrections``)."""
    rows = picture.rows
    fields: dict[str, Any] = {}
    if density == "dense":
        for row, corrected in zip(rows, sampled.sound_corrections(rows, segment_of, node_ns)):
            row["gap_corrected_ns"] = corrected
        if len(rows) > 1 and all(r["gap_corrected_ns"] is not None for r in rows[1:]):
            fields["gaps_corrected"] = gap_distribution([r["gap_corrected_ns"] for r in rows[1:]])
    fields.update(
        stitched=density == "sampled",
        picture="stitched" if density == "sampled" else "instrumented",
        position_noise_ns=picture.position_noise_ns,
        step_ns=picture.step_ns,
        busy_ns=picture.busy_ns,
        idle_ns=picture.idle_ns,
        gap_total_ns=picture.gap_total_ns,
        tail_ns=picture.tail_ns,
        tail_measured_ns=picture.tail_measured_ns,
        tail_noise_ns=picture.tail_noise_ns,
        span_ns=rows[-1]["end_ns"] - rows[0]["start_ns"],
        kernels=rows,
        **sampled.summarise(picture, picture.step_ns),
    )
    return fields


def _plain(value: Any) -> Any:
    """Numpy scalars to Python numbers, through dicts and lists (msgspec takes neither np.int64 nor np.float64)."""
    if isinstance(value, dict):
        return {k: _plain(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(x) for x in value]
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, bool | int | float | str):
        return item()
    return value


@dataclass
class SequenceCheck:
    reference: CleanReference | None
    refusal: str | None
    note: str
    seen: VariantKernels | None = None


def _check_sequences(
    clean: StepRunner, variants: Variants, follows: dict[int, int] | None = None, repeated: Sequence[int] = ()
) -> SequenceCheck:
    """The clean reference under CUPTI and the same-sequence condition."""
    try:
        reference = clean_reference(clean)
    except sampled.StitchRefused as error:
        return SequenceCheck(None, str(error), f"refused: {error}")
    if reference is None:
        note = "not checked: torch.profiler saw no kernels (CUPTI is held by another profiler, e.g. nsys)"
        return SequenceCheck(None, None, note)
    per_step = len(reference.names[0])
    try:
        seen = variant_kernels(variants, clean, per_step, follows, repeated)
    except sampled.StitchRefused as error:
        return SequenceCheck(reference, str(error), f"refused: {error}")
    problem = sampled.sequence_problem(reference.names, seen.names)
    if problem is not None:
        return SequenceCheck(reference, problem, f"refused: {problem}")
    note = (
        f"same kernel sequence ({per_step} kernels) in {len(reference.names)} clean steps and in "
        f"{len(seen.names)} of {len(variants)} variants (CUPTI)"
    )
    return SequenceCheck(reference, None, note, seen)


def _grouped_ops(
    seen: VariantKernels | None, counts: tuple[list[int], list[str]] | str | None
) -> dict[int, list[list[tuple[int, int]]]] | None:
    """The CUPTI cycle's kernels grouped into ops as the clean steps' were: per variant, per step it ran, each op's
    (first kernel start, last kernel end); None without the cycle or a counting pass."""
    if seen is None or not isinstance(counts, tuple):
        return None
    return {v: [sampled.group_ops(step, counts[0]) for step in steps] for v, steps in seen.kernels.items()}


def _end_shifts(
    plan: sampled.Plan,
    ref: sampled.CuptiReference | None,
    seen_ops: dict[int, list[list[tuple[int, int]]]] | None,
) -> tuple[list[int | None] | None, str]:
    """Each op's end shift from the CUPTI cycle's op intervals (``_grouped_ops``)."""
    if ref is None or ref.op_duration_ns is None or seen_ops is None:
        return None, "not measured: needs CUPTI durations grouped into ops and the variants' kernels under CUPTI"
    durations = {v: [[end - start for start, end in step] for step in steps] for v, steps in seen_ops.items()}
    shifts = sampled.end_shifts(plan, ref.op_duration_ns, durations)
    measured = sum(x is not None for x in shifts)
    runs = sum(len(steps) for steps in durations.values())
    return shifts, (
        f"CUPTI: each op's duration in the steps that time its end (an event after it, none after the op before), "
        f"from one cycle of the {len(durations)} variants run again under CUPTI ({runs} steps, the variants of "
        f"one-per-step ops and the piece variants in {SHIFT_ROUNDS} more rounds), against its clean duration; "
        f"{measured} of {len(shifts)} "
        "ops measured (the others not shifted)"
    )


def _event_lags(
    plan: sampled.Plan,
    host_launched: Sequence[bool],
    read: Sequence[sampled.SampledStep],
    seen_ops: dict[int, list[list[tuple[int, int]]]],
) -> list[dict[str, Any]]:
    """The events against CUPTI on the steps of the CUPTI cycle (``sampled.event_lags``). The k-th step of a
    variant as the events read it is the k-th of its op intervals: both in run order."""
    runs: dict[int, int] = {}
    steps, ends = [], []
    for step in read:
        k = runs.get(step.variant, 0)
        runs[step.variant] = k + 1
        mine = seen_ops.get(step.variant, [])
        if k < len(mine):
            steps.append(step)
            ends.append([end for _, end in mine[k]])
    return sampled.event_lags(plan, host_launched, steps, ends)


def _cupti_reference(
    reference: CleanReference, counts: tuple[list[int], list[str]] | str | None
) -> sampled.CuptiReference:
    """The clean steps' CUPTI kernels, grouped into ops by the counting pass where its kernel sequence is the
    step's (else ungrouped, with the reason in ``grouping``)."""
    grouped: list[int] | None = None
    why = "not grouped: no counting pass"
    if isinstance(counts, str):
        why = f"not grouped: {counts}"
    elif counts is not None:
        op_counts, names = counts
        diff = sampled.first_difference(names, reference.names[0])
        if diff is None:
            grouped = op_counts
        else:
            why = f"not grouped: the ops run one by one launch another kernel sequence than the step ({diff})"
    ref = sampled.cupti_reference(reference.kernels, reference.step_ns, grouped)
    if grouped is None:
        ref.grouping = why
    return ref


def _capture_check(
    clean: StepRunner,
    names: Sequence[str],
    ref: sampled.CuptiReference,
    counts: tuple[list[int], list[str]] | str | None,
    pool: Any,
    markers: Markers | None,
    step_ms: float,
) -> dict[str, Any] | None:
    """CUPTI's per-class gaps in a second capture of the clean graphs against the first's (``recapture``,
    ``sampled.capture_shifts``), and the two steps against each other without CUPTI (``alternating``). None where
    the first capture's CUPTI steps were not grouped into ops (the CUPTI check says why); no classes, and the
    reason, where the second's were not."""
    if ref.op_gap_ns is None:
        return None
    second = recapture(clean, pool, markers)
    second.run()  # a captured graph's first replays upload it
    try:
        seen = clean_reference(second)
    except sampled.StitchRefused as refused:
        return {"classes": [], "note": f"not measured: {refused}"}
    if seen is None:
        return {"classes": [], "note": "not measured: CUPTI saw no kernels of the second capture"}
    other = _cupti_reference(seen, counts)
    if other.op_gap_ns is None or len(other.op_gap_ns) != len(ref.op_gap_ns):
        return {"classes": [], "note": f"not measured: the second capture's CUPTI steps {other.grouping}"}
    _, shift, error = alternating(second.run, clean.run, step_ms)
    return {
        "classes": sampled.capture_shifts(
            names, ref.op_gap_ns, other.op_gap_ns, ref.op_gap_error_ns, other.op_gap_error_ns
        ),
        "step_shift_ns": shift * step_ms * 1e6,
        "step_shift_error_ns": error * step_ms * 1e6,
        "note": (
            f"the clean step's graphs captured a second time with no event: CUPTI's {ref.steps} and {other.steps} "
            "back-to-back clean steps, and the two steps alternating without CUPTI"
        ),
    }


def _cupti_check(
    picture: sampled.Stitched,
    clean_ns: float,
    ref: sampled.CuptiReference | None,
    under_cupti: sampled.Stitched | None = None,
    host_steady: bool | None = None,
    capture_classes: Sequence[dict[str, Any]] = (),
    head_effect: sampled.VariantEffect | None = None,
    start_bias: dict[str, float | None] | None = None,
    piece_effects: dict[str, sampled.VariantEffect] | None = None,
    cycle_clean: dict[str, dict[str, Any]] | None = None,
    boundary: sampled.BoundaryLag | None = None,
) -> dict[str, Any]:
    if ref is None:
        return {"available": False, "note": "torch.profiler saw no kernels: CUPTI is held by another profiler (nsys)"}
    from_ref = ref.op_duration_ns is not None
    check = sampled.clean_check(
        picture,
        clean_ns,
        ref,
        durations_from_reference=from_ref,
        under_cupti=under_cupti,
        host_steady=host_steady,
        capture_classes=capture_classes,
        head_effect=head_effect,
        start_bias=start_bias,
        piece_effects=piece_effects,
        cycle_clean=cycle_clean,
        boundary=boundary,
    )
    check["note"] = (
        "the stitched step against clean steps under CUPTI; CUPTI kernels grouped into ops by a counting pass "
        "(cuBLAS may launch more than one kernel per op)"
    )
    return check
