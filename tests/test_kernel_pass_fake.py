"""The GPU side of the kernel pass (measure/kernel_pass.py) driven end to end on the CPU, against a fake
``torch.cuda``: a virtual clock with one host thread and one stream (launch costs, event records, graph capture
and replay with event nodes) and a fake CUPTI that reports the kernels it saw. It checks the glue: variants,
rotation, reading events, the stride search, CUPTI sequences, the typed result; the physics is in
tests/test_sampled_gaps.py and, on a real GPU, tests/test_kernel_pass_gpu.py."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from launchprobe.analysis import sampled
from launchprobe.measure import kernel_pass
from launchprobe.workload.model import Op
from launchprobe.workload.modes import StepRunner, split_segments


class Clock:
    def __init__(self, record_ns: float = 4_000, launch_ns: float = 8_000, node_ns: float = 1_900) -> None:
        self.host = 0.0
        self.gpu = 0.0
        self.record_ns, self.launch_ns, self.node_ns = record_ns, launch_ns, node_ns
        self.capturing: list[Callable[[], None]] | None = None
        self.trace: list[tuple[str, int, int]] | None = None
        self.launches = 0
        self.queue_depth: int | None = None  # host-launched kernels in flight before a launch blocks (None: unbounded)
        self.in_flight: list[float] = []  # their GPU end times

    def kernel(self, name: str, duration: float) -> None:
        if self.capturing is not None:
            self.capturing.append(lambda: self._run(name, duration, replayed=True))
            return
        if self.queue_depth is not None:  # a full launch queue holds the host until its oldest kernel ends
            self.in_flight = [end for end in self.in_flight if end > self.host]
            if len(self.in_flight) >= self.queue_depth:
                self.host = self.in_flight[len(self.in_flight) - self.queue_depth]
                self.in_flight = self.in_flight[len(self.in_flight) - self.queue_depth + 1 :]
        self.host += self.launch_ns
        self._run(name, duration, replayed=False)
        self.in_flight.append(self.gpu)

    def _run(self, name: str, duration: float, replayed: bool) -> None:
        start = max(self.gpu, self.host + (0 if replayed else 2_000))
        self.gpu = start + duration
        if self.trace is not None:
            self.trace.append((name, round(start), round(self.gpu)))

    def event_time(self, replayed: bool) -> float:
        if not replayed:
            self.host += self.record_ns
        fire = max(self.gpu, self.host)
        self.gpu = fire + (self.node_ns if replayed else 300)
        return fire


CLOCK = Clock()


class FakeEvent:
    def __init__(self, enable_timing: bool = False, external: bool = False) -> None:
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        if CLOCK.capturing is not None:
            CLOCK.capturing.append(self._replayed)
            return
        self.t = CLOCK.event_time(replayed=False)

    def _replayed(self) -> None:
        self.t = CLOCK.event_time(replayed=True)

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t is not None and other.t is not None, "reading an event that never fired"
        return (other.t - self.t) / 1e6

    def synchronize(self) -> None:
        CLOCK.host = max(CLOCK.host, CLOCK.gpu)


class FakeGraph:
    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []

    def replay(self) -> None:
        CLOCK.host += 6_000
        for call in self.calls:
            call()


@contextlib.contextmanager
def fake_capture(graph: FakeGraph, pool: Any = None) -> Iterator[None]:
    assert CLOCK.capturing is None, "nested capture"
    CLOCK.capturing = graph.calls
    try:
        yield
    finally:
        CLOCK.capturing = None


class FakeStream:
    def wait_stream(self, other: Any) -> None:
        pass


def synchronize() -> None:
    CLOCK.host = max(CLOCK.host, CLOCK.gpu) + 1_000_000  # a sync, and the host's pause after it


def fake_intervals(work: Callable[[], Any]) -> list[tuple[str, int, int]]:
    CLOCK.trace = []
    try:
        work()
    finally:
        rows, CLOCK.trace = CLOCK.trace, None
    return sorted(rows, key=lambda row: row[1])


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Clock:
    global CLOCK
    CLOCK = Clock()
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: FakeStream())
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (1 << 30, 1 << 31))
    monkeypatch.setattr(kernel_pass, "cuda_intervals", fake_intervals)
    monkeypatch.setattr(kernel_pass, "COUNT_PAUSE_S", 0.0)
    monkeypatch.setattr(kernel_pass, "SAMPLING_TIME_S", 0.05)
    return CLOCK


def fake_ops(layers: int = 3, *, splitk: bool = False) -> list[Op]:
    names = [
        ("attn_norm", 2_500), ("qkv", 12_000), ("rotary", 2_000), ("kv_write", 2_000), ("attention", 6_000),
        ("o_proj", 28_000), ("mlp_norm", 2_500), ("gate_up", 56_000), ("silu_mul", 2_500), ("down", 30_000),
    ]  # fmt: skip

    def op(name: str, layer: int, duration: int) -> Op:
        def run() -> None:
            CLOCK.kernel(name, duration)
            if splitk and name == "o_proj":
                CLOCK.kernel("splitk_reduce", 1_000)

        return Op(name, layer, run)

    ops = [op("embed", -1, 2_000)]
    ops += [op(name, layer, d) for layer in range(layers) for name, d in names]
    return [*ops, op("final_norm", -1, 2_000), op("lm_head", -1, 250_000)]


def clean_runner(mode: str, ops: list[Op]) -> tuple[StepRunner, float]:
    from launchprobe.measure.samples import Samples
    from launchprobe.measure.timing import time_steps_cuda, warm_up

    runner = StepRunner(mode, 8, split_segments(ops, mode))
    if mode != "eager":
        runner.capture(None)
    warm_up(runner.run, 3, True)
    return runner, Samples.of(time_steps_cuda(runner.run, 20)).median


COSTS = kernel_pass.EventCosts(host_record_ns=4_000, node_ns=1_900, pair_offset_ns=1_900, pair_offset_method="t")


def run_pass(mode: str, density: str = "sampled", splitk: bool = False, sampling_s: float | None = None) -> Any:
    ops = fake_ops(splitk=splitk)
    runner, clean_ms = clean_runner(mode, ops)
    counts = kernel_pass.kernel_counts(ops)
    return kernel_pass.kernel_pass(
        mode, 8, ops, clean=runner, clean_step_ms=clean_ms, costs=COSTS,
        fallback_durations=lambda: kernel_pass.graph_durations(8, ops, 3, COSTS.pair_offset_ns), counts=counts,
        density=density, repeats=3, sampling_s=sampling_s,
    )  # fmt: skip


def test_more_sampling_time_runs_more_cycles(fake_cuda: Clock) -> None:
    short, longer = run_pass("full"), run_pass("full", sampling_s=0.5)  # the fixture's default is 0.05 s
    assert short.stitched and longer.stitched
    assert longer.cycles > short.cycles and longer.sampled_steps > short.sampled_steps


@pytest.mark.parametrize("mode", ["eager", "piecewise", "full"])
def test_sampled_pass_end_to_end(fake_cuda: Clock, mode: str) -> None:
    result = run_pass(mode, splitk=True)
    assert result.stitched and result.picture == "stitched", result.refusal
    assert result.sequence_check.startswith("same kernel sequence (36 kernels)"), result.sequence_check
    assert result.pairing.startswith("paired events") and result.stride_probes
    # eager probes the plan's paired variants as the cycles run them, the graph modes the densest variant alone
    ran = {p.variants for p in result.stride_probes}
    assert ran == {1} if mode != "eager" else all(2 <= (r or 0) <= sampled.PROBE_VARIANTS for r in ran), ran
    reach = result.reach  # eager: a layer's 10 ops + 1 (``default_reach``), else the default
    assert reach == (11 if mode == "eager" else sampled.DEFAULT_REACH)
    assert result.stride is not None and reach + 2 <= result.stride <= 33 - reach
    # plain, solos of ops 0..r-1, 2 wrap and 2 per anchor; piecewise 2 head variants past the first graph piece and
    # one piece variant per two pieces after a host-launched op
    head = 2 if mode == "piecewise" else 0
    pieces = [k for k in range(1, 33) if result.kernels[k - 1].host_launched and not result.kernels[k].host_launched]
    assert result.piece_variants == -(-len(pieces) // sampled.PIECES_PER_STEP) and (len(pieces) > 0) == (
        mode == "piecewise"
    )
    assert result.variants == 3 + reach + 2 * result.stride + head + result.piece_variants
    assert len(result.kernels) == 33 and result.ops and result.gaps is not None
    check = result.cupti_check
    assert (
        check is not None and check.available and check.cupti_kernels == 36
    )  # 33 ops, 3 of them with a split-K reduce
    assert check.grouping.startswith("by a counting pass")  # the split-K reduce grouped into its op
    assert (result.durations_source or "").startswith("CUPTI") and check.durations_from_cupti
    assert all(o.duration_agrees is None for o in check.ops)  # the same source: not compared
    assert check.cupti_trusted  # nothing in the fake slows the host under CUPTI
    assert check.total_gap_agrees and check.busy_agrees, (check.events_total_gap_ns, check.clean_idle_ns)
    # the stitched total's error reaches the run file, well inside the tolerance on the fake's steady host
    assert check.total_gap_noise_ns is not None and check.total_gap_tolerance_ns is not None
    assert 0 <= check.total_gap_noise_ns < check.total_gap_tolerance_ns / 2
    # and the overlap the gaps' noise makes, beside the busy check: small beside its 5% there
    assert check.busy_noise_overlap_ns is not None and check.cupti_op_busy_ns is not None
    assert abs(check.busy_noise_overlap_ns) < 0.01 * check.cupti_op_busy_ns
    assert check.ops and check.ops_agree, [(o.op, o.gap_diff_ns) for o in check.ops if not o.gap_agrees]
    assert check.agrees
    # the gap total's difference from clean in its parts: by class, a kept tail and what CUPTI's steps add
    parts = sum(c.stitched_ns - c.cupti_ns for c in check.gap_total_by_class) + (check.gap_total_tail_ns or 0)
    assert check.gap_total_tail_ns == result.tail_ns  # sampled: the kept tail, in the total and no op's gap
    assert check.cupti_gap_sum_ns is not None and check.clean_gap_total_ns is not None
    assert parts + check.cupti_gap_sum_ns - check.clean_gap_total_ns == pytest.approx(check.total_gap_diff_ns)
    assert check.cupti_gap_part_ns == pytest.approx(check.cupti_gap_sum_ns - check.clean_gap_total_ns)
    assert [c.op for c in check.gap_total_by_class] == list(dict.fromkeys(r.op for r in result.kernels))
    assert all(c.diff_ns == pytest.approx(c.stitched_ns - c.cupti_ns) for c in check.gap_total_by_class)
    # the producer stores every class by the better reading and the verdict over the checks, as the report gives them
    timers = result.timer_pairs
    better = timers.with_events_ops_agree if timers is not None and timers.classes_from_events is not None else None
    assert result.every_class_checked and result.every_class_agrees is (better if better is not None else True)
    assert result.checks_verdict == "agree"
    # the pass's cycle read again while the fake CUPTI ran: nothing in the fake moves under CUPTI, so alike
    assert check.under_cupti_steps and check.ops_under_cupti_agree
    assert all(o.events_gap_under_cupti_ns_median is not None for o in check.ops)
    # CUPTI's effect per class; in piecewise the head's class (op 0) takes it from the head variant: none in the fake
    sources = {o.op: o.cupti_effect_source for o in check.ops}
    assert sources.pop(result.kernels[0].op) == ("head variant" if mode == "piecewise" else "stitched under CUPTI")
    # and the class opening the pieces after a host-launched op takes it from the piece variants
    opening_pieces = {result.kernels[k].op for k in pieces}
    assert all(sources.pop(name) == "piece variant" for name in opening_pieces)
    assert set(sources.values()) == {"stitched under CUPTI"}
    assert all(o.cupti_effect_ns == 0 and o.cupti_trusted_here for o in check.ops if o.op in opening_pieces)
    # CUPTI's clean steps later in the pass (the cycle's), per class: the fake replays them as the reference's
    assert all(o.cupti_cycle_gap_ns_median is not None and o.cupti_cycle_off_bar_fraction == 0 for o in check.ops
               if o.op != result.kernels[0].op)  # fmt: skip
    opening = next(o for o in check.ops if o.op == result.kernels[0].op)
    assert opening.cupti_effect_ns == 0 and opening.cupti_trusted_here
    # the gap between steps: CUPTI's in the cycle's clean steps too, and the fake's boundary event completes with
    # the step before's last kernel (no lag); no other class carries a boundary lag
    assert opening.cupti_cycle_gap_ns_median == opening.cupti_gap_ns_median
    assert opening.boundary_lag_ns == 0 and opening.boundary_lag_noise_ns == 0
    assert all(o.boundary_lag_ns is None for o in check.ops if o is not opening)
    # where an event after an op moves its start: nowhere in the fake, so every class's shift and bias are 0
    shifts = result.cupti_start_shifts or []
    assert {s.op for s in shifts} == {o.op for o in check.ops} - {"embed"}
    assert all(s.shift_ns == 0 and s.bias_ns in (0, None) and s.ops > 0 for s in shifts)
    assert all(o.start_bias_ns == 0 for o in check.ops if o.op != "embed")
    assert result.overhead_within_budget and abs(result.overhead_fraction) <= 0.02
    # the events against CUPTI's op ends on the CUPTI cycle's steps, by kind: the fake's events have no lag
    kinds = {"eager": {"host-host"}, "piecewise": {"node-node", "node-host", "host-node"}, "full": {"node-node"}}
    seen = {lag.kinds for lag in result.event_lags or []}
    assert kinds[mode] <= seen <= kinds[mode] | {"host-host"}
    assert all(lag.pairs > 0 and lag.lag_ns_median == 0 for lag in result.event_lags)
    # graph modes: a second capture of the clean graphs, which in the fake replays exactly as the first
    # the variants' own captures against the clean one, away from their events: the fake's are alike
    fresh = result.cupti_fresh_captures
    if mode == "eager":
        assert fresh is None  # no graph piece to capture afresh
    else:
        assert fresh is not None and fresh.positions > 0 and fresh.gap_sum_ns == 0
        assert all(c.shift_ns == 0 and c.count > 0 for c in fresh.classes)
        # beside each class the captures read, the events' gap against CUPTI's plus that shift (the fake: 0)
        fresh_ops = {c.op for c in fresh.classes}
        assert all(o.gap_fresh_capture_diff_ns == o.gap_diff_ns for o in check.ops if o.op in fresh_ops)
        assert all(o.gap_fresh_capture_diff_ns is None for o in check.ops if o.op not in fresh_ops)
    capture = result.cupti_capture_check
    if mode == "eager":
        assert capture is None
    else:
        assert capture is not None and {c.op for c in capture.classes} == {o.op for o in check.ops} - {"embed"}
        assert all(c.shift_ns == 0 and not c.beyond_bar for c in capture.classes)
        assert capture.step_shift_ns is not None and abs(capture.step_shift_ns) < 1_000
    import msgspec

    assert msgspec.convert(msgspec.to_builtins(result), type(result)) == result  # the record round-trips


def test_the_eager_probe_reads_what_the_cycles_read_where_the_launch_queue_hides_a_variant_run_after_clean_steps(
    fake_cuda: Clock,
) -> None:
    """A model of the 8B eager case (docs/performance.md, 2026-12-03): a host just faster than the GPU (9.4 us a
    launch, 10 us a kernel) banks a lead in the launch queue during clean steps, and a variant's records (8 us each,
    8 a step) spend more than the step's slack: two variant steps after two clean ones run mostly on the lead (the
    graph modes' probe reads a third of the cost), eight back to back in the cycles exhaust it. The eager probe runs
    its variants as the cycles do and reads what they read."""
    fake_cuda.launch_ns, fake_cuda.record_ns, fake_cuda.queue_depth = 9_400, 8_000, 64
    ops = [Op(f"op{i % 10}", i // 10, lambda: CLOCK.kernel("k", 10_000)) for i in range(60)]
    clean, clean_ms = clean_runner("eager", ops)
    plan = sampled.pair_plan(len(ops), 13, reach=11)
    paired = [v for v, role in enumerate(plan.roles) if role in ("far", "near")]
    every = kernel_pass.Variants(clean, ops, [plan.variants[v] for v in paired], None, None)
    steps, _ = kernel_pass.run_cycles(every, clean, 6, order_kind="alternate")
    cycles = statistics.median(s.step_ns / (s.reference_ns or 1) - 1 for s in steps)
    probed = kernel_pass.Variants(clean, ops, [plan.variants[v] for v in sampled.probe_variants(plan)], None, None)
    _, probe, _ = kernel_pass.cycled(probed, clean, clean_ms, "alternate")
    densest = kernel_pass.Variants(clean, ops, [plan.densest], None, None)
    _, alone, _ = kernel_pass.alternating(densest.runners[0].run, clean.run, clean_ms)
    assert cycles > 0.03  # the records cost the cycles' steps (6-8 events of 8 us against a 0.6 ms step)
    assert abs(probe - cycles) < 0.25 * cycles, (probe, cycles)
    assert alone < 0.5 * cycles, (alone, cycles)


@pytest.mark.parametrize("mode", ["eager", "full"])
def test_dense_pass_end_to_end(fake_cuda: Clock, mode: str) -> None:
    result = run_pass(mode, density="dense")
    assert result.picture == "instrumented" and result.perturbing and result.stride == 1
    assert result.overhead_fraction > 0.005  # an event after every op: 33 events cost the step ~1.4% here
    if mode == "full":
        assert result.gaps_corrected is not None
    else:
        assert result.gaps_corrected is None


def test_refusal_end_to_end(fake_cuda: Clock) -> None:
    state = {"n": 0}

    def alternating() -> None:
        state["n"] += 1
        CLOCK.kernel("b", 5_000)
        if state["n"] % 2 == 0:
            CLOCK.kernel("b_extra", 1_000)

    ops = [Op("a", 0, lambda: CLOCK.kernel("a", 5_000)), Op("b", 0, alternating)] * 3
    runner, clean_ms = clean_runner("eager", ops)
    result = kernel_pass.kernel_pass(
        "eager", 8, ops, clean=runner, clean_step_ms=clean_ms, costs=COSTS, fallback_durations=lambda: [5_000] * 6,
        counts="not counted", repeats=3,
    )  # fmt: skip
    assert result.stitched is False and result.kernels == [] and result.refusal
    assert "not constant" in result.refusal or "not the same kernel sequence" in result.refusal


def test_durations_fall_back_to_the_events_graph_and_say_so(fake_cuda: Clock) -> None:
    ops = fake_ops()
    runner, clean_ms = clean_runner("full", ops)
    calls: list[int] = []

    def fallback() -> list[int]:
        calls.append(1)
        return kernel_pass.graph_durations(8, ops, 3, COSTS.pair_offset_ns)

    result = kernel_pass.kernel_pass(
        "full", 8, ops, clean=runner, clean_step_ms=clean_ms, costs=COSTS, fallback_durations=fallback,
        counts="no counting pass here", repeats=3,
    )  # fmt: skip
    assert calls == [1] and result.stitched
    assert (result.durations_source or "").startswith("events graph (not grouped: no counting pass here)")
    assert result.cupti_check is not None and result.cupti_check.durations_from_cupti is False


def test_the_pass_runs_on_one_core(fake_cuda: Clock) -> None:
    import os

    from launchprobe.measure.timing import current_cpu, pinned_host

    if not hasattr(os, "sched_getaffinity") or current_cpu() is None:
        pytest.skip("no thread affinity on this platform")
    before = os.sched_getaffinity(0)
    with pinned_host() as cpu:
        assert cpu is not None and os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before  # given back
    result = run_pass("full")
    assert result.host_cpu is not None and result.host_cpu in before
    assert os.sched_getaffinity(0) == before


def test_the_cupti_cycle_repeats_the_one_per_step_variants_and_refuses_a_variant_that_changes(
    fake_cuda: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launchprobe.analysis import sampled

    ops = fake_ops()
    runner, _ = clean_runner("full", ops)
    plan = sampled.pair_plan(len(ops), 8)
    variants = kernel_pass.Variants(runner, ops, plan.variants, None, None)
    extra = sampled.one_per_step_variants(plan, [op.name for op in ops])
    per_step = len(fake_intervals(runner.run))
    seen = kernel_pass.variant_kernels(variants, runner, per_step, plan.follows, extra)
    runs = {v: len(steps) for v, steps in seen.kernels.items()}
    assert runs == {v: 1 + (kernel_pass.SHIFT_ROUNDS if v in extra else 0) for v in range(len(plan.variants))}
    assert sorted(s.variant for s in seen.steps) == sorted(v for v, k in runs.items() for _ in range(k))
    assert all(len(s.ends) == len(plan.variants[s.variant]) for s in seen.steps)  # read by the events too
    # the gap into each clean step that ran right after another clean one (the first of a clean block follows a
    # variant's step, whose gap into the next is not the clean step's)
    clean_at = [j for j, v in enumerate(seen.ran) if v < 0]
    assert len(clean_at) == len(seen.clean) and len(seen.clean_heads) < len(seen.clean)
    expected = [
        seen.clean[k][0][0] - max(e for _, e in seen.clean[k - 1])
        for k in range(1, len(clean_at))
        if clean_at[k] - clean_at[k - 1] == 1
    ]
    assert seen.clean_heads == expected and len(expected) > 0
    # per variant step, the latest kernel end of the step before it in the cycle (the steps laid out in run order)
    taken = {v: iter(steps) for v, steps in seen.kernels.items()}
    clean_steps = iter(seen.clean)
    in_order = [next(clean_steps) if v < 0 else next(taken[v]) for v in seen.ran]
    wanted: dict[int, list[int | None]] = {}
    for j, v in enumerate(seen.ran):
        if v >= 0:
            wanted.setdefault(v, []).append(max(e for _, e in in_order[j - 1]) if j else None)
    assert seen.previous_ends == wanted and {v: len(ends) for v, ends in wanted.items()} == runs

    def renamed(work: Callable[[], Any]) -> list[tuple[str, int, int]]:  # the later half launches other kernels
        rows = fake_intervals(work)
        return rows[: len(rows) // 2] + [("other", s, e) for _, s, e in rows[len(rows) // 2 :]]

    monkeypatch.setattr(kernel_pass, "cuda_intervals", renamed)
    with pytest.raises(sampled.StitchRefused, match="launched other kernels when it ran again"):
        kernel_pass.variant_kernels(variants, runner, per_step, plan.follows, extra)


def test_the_head_variants_replay_the_clean_first_piece_and_time_its_end_from_the_host(fake_cuda: Clock) -> None:
    from launchprobe.analysis import sampled
    from launchprobe.measure.timing import time_steps_cuda

    ops = fake_ops()
    runner, _ = clean_runner("piecewise", ops)
    timings, _ = kernel_pass.op_layout("piecewise", ops)
    head = sampled.head_op(timings)
    assert head is not None and ops[head].name == "rotary"  # the first piece: embed .. rotary
    plan = sampled.pair_plan(len(ops), 8, 4, head)
    variants = kernel_pass.Variants(runner, ops, plan.variants, None, None, after_replay=plan.after_replay)
    first = runner.segments[0].graph
    for v in plan.after_replay:
        mine = variants.runners[v].segments[0]
        assert mine.graph.graph is first  # the clean runner's own capture of the piece, replayed
        assert variants.runners[v].segments[1:] == runner.segments[1:]  # and every other segment as clean
    solo = variants.runners[plan.index("solo", 0)].segments[0]
    assert solo.graph is not first  # a solo's event node needs a capture afresh
    # the host event fires when the piece's last kernel ends (the fake's trace of the same step)
    head_variant = plan.roles.index("head")
    rows = fake_intervals(lambda: time_steps_cuda(variants.runners[head_variant].run, 1))
    events = variants.events[head_variant]
    rotary_end = [end for name, _, end in rows if name == "rotary"][0]
    assert events[head].t == pytest.approx(rotary_end, abs=1)


class LateGraph(FakeGraph):
    """A graph that starts its first kernel 1.5 us late: a capture whose start the GPU runs slower."""

    delay = 1_500

    def replay(self) -> None:
        CLOCK.host += 6_000
        CLOCK.gpu = max(CLOCK.gpu, CLOCK.host) + self.delay  # after its launch and the work before it
        for call in self.calls:
            call()


def test_the_capture_check_sees_a_second_capture_start_late(fake_cuda: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    original = kernel_pass.recapture

    def late(*args: Any, **kwargs: Any) -> StepRunner:
        with monkeypatch.context() as patch:  # the second capture's graphs start late, the first's do not
            patch.setattr(torch.cuda, "CUDAGraph", LateGraph)
            return original(*args, **kwargs)

    monkeypatch.setattr(kernel_pass, "recapture", late)
    result = run_pass("piecewise")
    capture = result.cupti_capture_check
    assert capture is not None
    shifts = {c.op: c for c in capture.classes}
    # the fake step's pieces are embed..rotary, o_proj..rotary (twice) and o_proj..lm_head: their first ops move
    moved = {op for op, c in shifts.items() if c.beyond_bar}
    assert moved == {"o_proj"}, {op: c.shift_ns for op, c in shifts.items()}
    assert shifts["o_proj"].shift_ns == pytest.approx(1_500, abs=200)
    # here the lateness is real time: the second capture's step, four graphs, is 4 x 1.5 us longer, as measured
    assert capture.step_shift_ns == pytest.approx(6_000, abs=300)
    # the op check sets o_proj against both captures: the events (the first capture's timing) agree with the first
    o_proj = next(o for o in result.cupti_check.ops if o.op == "o_proj")
    assert o_proj.gap_verdict == "agree" and o_proj.capture_moved
    assert o_proj.cupti_second_capture_gap_ns_median == pytest.approx(o_proj.cupti_gap_ns_median + 1_500, abs=200)
    assert o_proj.gap_second_capture_agrees is False  # 1.5 us off the late capture


def test_the_capture_check_says_why_when_the_second_capture_cannot_be_read(
    fake_cuda: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = kernel_pass.clean_reference
    calls = {"n": 0}

    def second_refused(clean: StepRunner) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the pass's own clean reference first, then the second capture's
            raise kernel_pass.sampled.StitchRefused("the clean steps split into 35 kernels, not 36")
        return original(clean)

    monkeypatch.setattr(kernel_pass, "clean_reference", second_refused)
    result = run_pass("full")
    capture = result.cupti_capture_check
    assert capture is not None and capture.classes == [] and capture.step_shift_ns is None
    assert capture.note == "not measured: the clean steps split into 35 kernels, not 36"
    assert result.stitched and result.cupti_check is not None and result.cupti_check.available


def test_the_lab_tools_count_kernels_again_where_the_clustering_split_an_op(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_sampled_gaps as bench

    calls: list[int] = []

    def counting(ops: Any) -> tuple[list[int], list[str]]:
        calls.append(1)
        if len(calls) < 3:
            raise sampled.StitchRefused("an op split in two")
        return [1, 2], ["a", "b", "b"]

    monkeypatch.setattr(kernel_pass, "kernel_counts", counting)
    assert bench.kernel_counts([]) == [1, 2] and len(calls) == 3
    calls.clear()
    with pytest.raises(sampled.StitchRefused):
        bench.kernel_counts([], attempts=2)
    assert len(calls) == 2


def test_the_benchs_cell_line_gives_cuptis_own_gap_total_beside_the_clean_one() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_sampled_gaps as bench

    cell: dict[str, Any] = {
        "shape": "llama-3-8b", "mode": "piecewise", "batch": 1, "status": "ok", "clean_ms": 4.792, "stride": 103,
        "overhead": 0.002, "overhead_max_variant": 0.007, "stitched_gap_total_us": 225.1, "clean_gap_total_us": 173.6,
        "cupti_gap_total_us": 233.0, "gap_total_agrees": None, "op_classes_agree": 12, "op_classes": 13,
        "cupti_step_vs_clean": 0.013, "seconds": 78.2, "stitched": True,
    }  # fmt: skip
    text = bench.line(cell)
    assert "gap total 225.1 vs clean 173.6 us (CUPTI's steps 233.0): n/d, op gaps 12/13" in text
    assert "clean 4.792 ms, m=103" in text  # a record with no pass: the bench's own timing
    # the pass's clean step is what the checks use; the bench's timing before the pass only where the host moved it
    assert "clean 4.800 ms, m=103" in bench.line({**cell, "kernel_pass": {"clean_step_ms": 4.8}})
    moved = bench.line({**cell, "clean_ms": 3.747, "kernel_pass": {"clean_step_ms": 4.535}})
    assert "clean 4.535 ms (timed at 3.747 before the pass), m=103" in moved
    del cell["cupti_gap_total_us"]  # records from before the field
    assert "vs clean 173.6 us (CUPTI's steps -): n/d" in bench.line(cell)
    # the table gives the pass's verdict over its checks, which the producer stored (records before it: no row)
    cell.update(within_2pct=True, checks_verdict="not decided")
    assert (
        "every class by the better reading where CUPTI is trusted op for op): llama-3-8b piecewise b1: not decided"
        in bench.table([cell])
    )
    del cell["checks_verdict"]
    assert "the pass's verdict over its checks" not in bench.table([cell])
    # and what the variants' own captures did to CUPTI's gaps, beside the second capture's step
    cell.update(fresh_captures={"o_proj": -950.0, "sum": -27_012.0}, capture_shifts={"step": 2_129.0})
    text = bench.table([cell])
    assert "'sum': over all positions): llama-3-8b piecewise b1: o_proj -0.95, sum -27.01" in text
    assert "llama-3-8b piecewise b1: step +2.13" in text


def test_the_stored_checks_take_every_class_by_the_better_reading() -> None:
    check = {"available": True, "cupti_trusted": True, "ops": [{"op": "qkv"}], "ops_agree": False,
             "total_gap_agrees": True, "busy_agrees": True}  # fmt: skip
    result: dict[str, Any] = {"cupti_check": check, "overhead_within_budget": True}
    # no timer pairs: the events' verdict
    assert kernel_pass._checks(result) == {
        "every_class_agrees": False, "every_class_checked": True, "checks_verdict": "disagree"
    }  # fmt: skip
    # timer pairs that judged every class with the events' help: theirs, whatever the events alone said
    result["timer_pairs"] = {"classes_from_events": ["embed"], "with_events_ops_agree": True}
    assert kernel_pass._checks(result)["checks_verdict"] == "agree"
    # timer pairs without that verdict (files before it, or none taken from the events): the events' again
    result["timer_pairs"] = {"classes_from_events": None, "with_events_ops_agree": True}
    assert kernel_pass._checks(result)["every_class_agrees"] is False
    # CUPTI not trusted op for op: no class check is made, and the rest decides
    check.update(cupti_trusted=False, ops_agree=None)
    del result["timer_pairs"]
    assert kernel_pass._checks(result) == {
        "every_class_agrees": None, "every_class_checked": False, "checks_verdict": "agree"
    }  # fmt: skip
    check["total_gap_agrees"] = None
    assert kernel_pass._checks(result)["checks_verdict"] == "not decided"


def test_the_capture_spread_lab_tool_times_captures_side_by_side_and_after_a_crowd(fake_cuda: Clock) -> None:
    import argparse
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    spec = importlib.util.spec_from_file_location("capture_spread_lab", root / "benchmarks/field/capture_spread.py")
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)

    ops = fake_ops()
    clean, clean_ms = clean_runner("piecewise", ops)
    again = kernel_pass.recapture(clean, None, None)
    timed = lab.interleaved([clean.run, again.run], rounds=3, block=2, seed=1)
    # three rounds each; the fake replays every capture alike: one step time for both, about the clean step's
    assert [len(t) for t in timed] == [3, 3] and len({x for t in timed for x in t}) == 1
    assert timed[0][0] == pytest.approx(clean_ms, rel=1e-3)
    args = argparse.Namespace(crowd=4, captures=2, rounds=3, block=2)
    record = lab.crowded(clean, None, None, [clean.run, again.run], args)
    assert record["captures"] == 4 and len(record["early"]) == 2 and len(record["late"]) == 2
    assert {x["median_us"] for x in record["early"] + record["late"]} == {timed[0][0] * 1e3}
