"""A discrete model of one host thread feeding one CUDA stream, for testing the sampled kernel pass on the CPU.

Eager: the host spends ``launch_ns[i]`` per op, then the kernel runs at max(GPU free, submit + latency) for
``duration_ns[i]``. An event record costs the host ``record_ns`` and the GPU ``event_gpu_ns`` once the stream
reaches it (it fires then). At most ``queue_depth`` items may be pending: the host blocks on a full queue. Graph:
one replay call of ``replay_ns`` host time submits every node; nodes run back to back ``node_gap_ns`` apart, an
event node costing ``event_node_ns`` of GPU time; with ``overlap_ns`` (programmatic dependent launch) kernel node i
starts ``overlap_ns[i]`` earlier than it otherwise would, unless an event node sits before it: an event's cost then
depends on the kernel after it, as on the GPU; with ``slowdown_ns``, kernel i then also ends ``slowdown_ns[i]``
later (the early blocks of kernel i + 1 share its SMs), so an event after it, which keeps kernel i + 1 from starting
early, moves its end. With ``refill_ns``, the launch pipeline an event node drained refills over a few kernels: the
k-th kernel-to-kernel edge after an event node is ``refill_ns[k - 1]`` longer (a chain of identical kernels on the
H200 read so, docs/performance.md). With ``start_ns``, a graph step's first kernel starts no sooner than that long
after the boundary event, and ``fresh_start_ns`` sooner where one of its first ``first_piece`` ops has an event
after it, or the step before had one after one of its last ``last_piece`` ops (piecewise on the H200: the gap into a
step depended on which graphs ran on either side of the boundary, the clean runner's or pieces captured afresh with
an event node). With ``segment_ns``, an event node leaves the GPU idle that much longer per kernel that follows it
before the next event node or the step's last kernel, up to ``segment_cap`` kernels (CUPTI on the H200: 3.5 us after
an event node 3 kernels before the next, 3.9-4.3 at 4, 5.1-5.6 at 12 or more; the wrap pair's anchors, 3 kernels
before the step's end or an event after its last op, idled alike). With ``early_ns``, kernel i with an event node
after it starts ``early_ns[i]`` sooner and ends where it would have, so CUPTI reads it that much longer (the
PDL-launched norms on the H200 started 0.4-0.8 us sooner with an event after them, docs/gaps.md; no event can see a
start). With ``past_piece_ns``, an event node at or before op ``piece_end`` (the first graph piece's last op) whose
next event lies past it idles that much longer (piecewise on the H200, with or without CUPTI: the far anchor of the
pair for the host-launched op after a piece idled 0.8-1.7 us longer than the near one, whose next event closes the
piece). A step may time ops "after the replay" (``step(after_replay=True)``): a host event recorded right after the
piece's replay, which fires when the op ends and, being no node in the graph, neither makes the piece fresh nor
idles past it. Every step starts with the clean timing's boundary event. Returns, per step, the boundary time, each
event's fire time and each kernel's (start, end): what the CUDA events and CUPTI would report.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from launchprobe.analysis.sampled import CLEAN_EVERY, SampledStep


@dataclass
class Stream:
    duration_ns: list[int]
    launch_ns: list[int]
    graph: bool = False
    record_ns: int = 4_000
    event_gpu_ns: int = 300
    event_node_ns: int = 1_900
    latency_ns: int = 2_000
    queue_depth: int = 1_000
    replay_ns: int = 6_000
    node_gap_ns: int = 1_000
    overlap_ns: list[int] = field(default_factory=list)
    refill_ns: list[int] = field(default_factory=list)
    slowdown_ns: list[int] = field(default_factory=list)
    early_ns: list[int] = field(default_factory=list)
    jitter_ns: int = 0
    start_ns: int = 0
    fresh_start_ns: int = 0
    segment_ns: int = 0
    segment_cap: int = 8
    first_piece: int = 0
    last_piece: int = 0
    piece_end: int = -1
    past_piece_ns: int = 0
    seed: int = 0
    _fresh_last: bool = False
    host: float = 0.0
    gpu: float = 0.0
    _starts: list[float] = field(default_factory=list)
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _host(self, cost: float) -> float:
        self.host += cost + (self._rng.uniform(0, self.jitter_ns) if self.jitter_ns else 0.0)
        if len(self._starts) >= self.queue_depth:
            self.host = max(self.host, self._starts[-self.queue_depth])
        return self.host

    def _run(self, earliest: float, busy: float) -> tuple[float, float]:
        start = max(self.gpu, earliest)
        self.gpu = start + busy
        self._starts.append(start)
        return start, self.gpu

    def event(self) -> float:
        submit = self._host(self.record_ns)
        fire, _ = self._run(submit + self.latency_ns, self.event_gpu_ns)
        return fire

    def step(
        self, sampled: Sequence[int] = (), after_replay: bool = False
    ) -> tuple[float, dict[int, float], list[tuple[float, float]]]:
        """One step: boundary event, then the ops with an end event after each op in ``sampled`` (graph: host
        events after the replay with ``after_replay``, else event nodes)."""
        boundary = self.event()
        marks = set(sampled)
        nodes = set() if after_replay else marks
        ends: dict[int, float] = {}
        kernels: list[tuple[float, float]] = []
        if self.graph:
            submit = self._host(self.replay_ns)
            n = len(self.duration_ns)
            fresh = self._fresh_last or any(i in nodes for i in range(self.first_piece))
            self._fresh_last = any(i in nodes for i in range(n - self.last_piece, n))
            earliest = max(submit + self.latency_ns, self.gpu + self.start_ns - (self.fresh_start_ns if fresh else 0))
            since_event = len(self.refill_ns) + 1  # kernels run since the last event node (none yet: refilled)
            for i, duration in enumerate(self.duration_ns):
                start, finish = self._run(earliest, duration)
                if i in nodes and i < len(self.early_ns):
                    start -= self.early_ns[i]
                kernels.append((start, finish))
                since_event += 1
                earliest = self.gpu + self.node_gap_ns
                if i in marks:
                    ends[i], _ = self._run(earliest, self.event_node_ns if i in nodes else self.event_gpu_ns)
                    following = max(0, min([j for j in marks if j > i], default=n - 1) - i)
                    earliest = self.gpu + self.node_gap_ns + self.segment_ns * min(following, self.segment_cap)
                    nxt = min([j for j in marks if j > i], default=None)
                    if i in nodes and i <= self.piece_end and (nxt is None or nxt > self.piece_end):
                        earliest += self.past_piece_ns
                    since_event = 0
                elif 1 <= since_event <= len(self.refill_ns):
                    earliest += self.refill_ns[since_event - 1]
                elif i + 1 < len(self.overlap_ns):  # the next kernel may start before this one ends
                    self.gpu -= self.overlap_ns[i + 1]
                    earliest -= self.overlap_ns[i + 1]
                    if i < len(self.slowdown_ns) and self.overlap_ns[i + 1]:  # and its early blocks slow this one
                        start, finish = kernels[-1]
                        kernels[-1] = (start, finish + self.slowdown_ns[i])
            return boundary, ends, kernels
        for i, (duration, launch) in enumerate(zip(self.duration_ns, self.launch_ns)):
            submit = self._host(launch)
            kernels.append(self._run(submit + self.latency_ns, duration))
            if i in marks:
                ends[i] = self.event()
        return boundary, ends, kernels


def run_sampled(
    stream: Stream,
    plan: Sequence[Sequence[int]],
    cycles: int,
    lead_in: int = 2,
    follows: dict[int, int] | None = None,
    every: int = CLEAN_EVERY,
    at_group: Callable[[Stream, int, int], None] | None = None,
    extra: Sequence[int] = (),
    rounds: int = 0,
    after_replay: Collection[int] = (),
) -> tuple[list[SampledStep], list[list[tuple[float, float]]]]:
    """As kernel_pass.py runs them: a warm-up pass over the variants, then cycles of groups of ``every`` variants
    (rotated), a clean block of ``lead_in`` steps before each group and after the last, its last step timed; after
    each cycle ``rounds`` short cycles over the variants in ``extra``. The variants in ``after_replay`` time their
    ops by host events after the replay (``Stream.step``).
    ``at_group(stream, cycle, g)``, called before the clean block ahead of group g, may change the stream (a host
    that moves). Returns the sampled steps (each with the mean of
    the clean steps timed around its group) and the kernels of every sampled step."""
    from launchprobe.analysis.sampled import cycle_groups, variant_order

    def clean_block() -> float:
        for _ in range(lead_in - 1):
            stream.step()
        boundary, _, _ = stream.step()
        return stream.event() - boundary

    out: list[SampledStep] = []
    kernels: list[list[tuple[float, float]]] = []
    for v in variant_order(len(plan), 0, follows):
        stream.step(plan[v], v in after_replay)

    def one_cycle(cycle: int, order: list[int]) -> None:
        groups = cycle_groups(order, every, follows)
        references = []
        recorded = []
        for g, group in enumerate(groups):
            if at_group is not None:
                at_group(stream, cycle, g)
            references.append(clean_block())
            records = [(v, stream.step(plan[v], v in after_replay)) for v in group]
            final = stream.event()  # the boundary after the group's last step
            recorded.append((records, final))
        references.append(clean_block())
        for g, (records, final) in enumerate(recorded):
            starts = [rec[0] for _, rec in records] + [final]
            for j, (variant, (boundary, ends, ks)) in enumerate(records):
                out.append(
                    SampledStep(
                        variant=variant,
                        step_ns=round(starts[j + 1] - boundary),
                        ends={i: round(t - boundary) for i, t in ends.items()},
                        reference_ns=(references[g] + references[g + 1]) / 2,
                    )
                )
                kernels.append(ks)
        stream.gpu = max(stream.gpu, stream.host)  # the cycle ends in a sync
        stream.host = stream.gpu

    for cycle in range(cycles):
        one_cycle(cycle, variant_order(len(plan), cycle, follows))
        for round_ in range(rounds if extra else 0):
            one_cycle(cycle, variant_order(len(plan), cycle * rounds + round_, follows, extra))
    return out, kernels


def clean_steps(stream: Stream, steps: int, warm: int = 3) -> tuple[list[float], list[list[tuple[float, float]]]]:
    """Back-to-back clean steps: step lengths (boundary to boundary) and kernels, after ``warm`` steps."""
    bounds, kernels = [], []
    for _ in range(warm):
        stream.step()
    for _ in range(steps):
        boundary, _, ks = stream.step()
        bounds.append(boundary)
        kernels.append(ks)
    bounds.append(stream.event())
    return [b - a for a, b in zip(bounds, bounds[1:])], kernels


def clean_gaps(kernels: list[list[tuple[float, float]]]) -> list[float]:
    """The gap before every op of the last clean step (op 0: from the previous step's last kernel)."""
    last, previous = kernels[-1], kernels[-2]
    gaps = [last[0][0] - previous[-1][1]]
    gaps += [last[i][0] - last[i - 1][1] for i in range(1, len(last))]
    return gaps
