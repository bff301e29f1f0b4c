"""Step detection on the field traces (tests/fixtures/field/README.md) with the truth stripped, against the truth
computed independently by tests/test_field_traces.py's sqlite3 / json helpers, and on the shared traces.

A truth step is matched to the detected step whose GPU period holds the end of the truth step's own work; the
detection matches one for one when every truth step lands in a different detected step. A truth step's time is
the end of its work minus the end of the previous truth step's work (the period it owns), as a detected step's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from launchprobe.analysis.steps import NO_STEPS, Step, StepResult, detect_steps
from launchprobe.collect import load_trace
from tests.test_field_traces import (
    FIELD,
    gunzip,
    kineto_events,
    kineto_steps,
    nsys_steps,
    strip_nvtx_domain,
    union_length,
)
from tests.test_field_traces import Step as Truth

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("steps_field")


def detect(path: Path) -> StepResult:
    return detect_steps(load_trace(path), "auto")


def match(truth: list[Truth], steps: list[Step]) -> list[Step | None]:
    """The detected step holding each truth step's last GPU op end (None when none does)."""
    ordered = sorted(steps, key=lambda s: s.end_ns)
    ends = np.array([s.end_ns for s in ordered], dtype=np.int64)
    out: list[Step | None] = []
    for t in truth:
        i = int(np.searchsorted(ends, t.gpu_end, side="left"))
        hit = ordered[i] if i < len(ordered) and ordered[i].gpu_start_ns <= t.gpu_end <= ordered[i].end_ns else None
        out.append(hit)
    return out


def check_one_for_one(truth: list[Truth], result: StepResult, *, rel: float = 0.10) -> None:
    matched = match(truth, result.steps)
    hits = [m for m in matched if m is not None]
    assert len({id(m) for m in hits}) == len(hits)  # never two truth steps in one detected step
    assert len(hits) >= 0.99 * len(truth)  # count within 1%
    truth_times = np.diff([t.gpu_end for t in truth])
    mine = np.array([m.span_ns for m in matched[1:] if m is not None])
    assert np.median(mine) == pytest.approx(np.median(truth_times), rel=rel)
    (kind,) = {m.kind for m in hits}  # one kind for a loop of one kind...
    (stats,) = [k for k in result.kinds if k.key == kind and k.device == hits[0].device]
    assert stats.span_p50_ns == pytest.approx(np.median(truth_times), rel=rel)  # ...and its step-time p50


def test_graph_loop(tmp: Path) -> None:
    path = gunzip("A_graph_loop.sqlite.gz", tmp)
    truth = nsys_steps(path, r"truth_step \d+")
    result = detect(strip_nvtx_domain(path, "truth"))
    check_one_for_one(truth, result)
    assert {s.signal for s in match(truth, result.steps) if s} == {"graph launch"}
    assert {s.kernels for s in match(truth, result.steps) if s} == {84}


@pytest.mark.parametrize("name", ["B_server.sqlite.gz", "B_server_ctxsw.sqlite.gz"])
def test_server_bursts(name: str, tmp: Path) -> None:
    path = gunzip(name, tmp)
    truth = nsys_steps(path, r"truth_step \d+")
    result = detect(strip_nvtx_domain(path, "truth"))
    check_one_for_one(truth, result)
    assert len(result.steps) == 100
    assert {s.signal for s in result.steps} == {"host sync"}
    # the first step of a burst owns from its own first op, not from the previous burst 1.5 s earlier
    assert max(s.span_ns for s in result.steps) < 10e6


def check_prefill_then_decode(truth: list[Truth], result: StepResult) -> None:
    """Forward 0 (the prefill) is a step of its own, of a kind labelled prefill; the decode forwards are one for
    one, of one kind labelled decode."""
    check_one_for_one(truth[1:], result)
    labels = {k.key: k.label for k in result.kinds}
    (prefill,) = match(truth[:1], result.steps)
    decode = [m for m in match(truth[1:], result.steps) if m is not None]
    assert prefill is not None and all(prefill is not m for m in decode)
    assert labels[prefill.kind].startswith("prefill, eager") and labels[decode[0].kind].startswith("decode, eager")


def test_hf_eager_nsys(tmp: Path) -> None:
    path = gunzip("C_hf_eager.sqlite.gz", tmp)
    truth = nsys_steps(path, r"truth_forward \d+")
    check_prefill_then_decode(truth, detect(strip_nvtx_domain(path, "truth")))


def test_hf_eager_kineto() -> None:
    """Only the recorded generate() is in the profile: its prefill occurs once, next to the decode steps."""
    events = kineto_events(FIELD / "C_hf_eager_kineto.json.gz")
    truth = kineto_steps(events, r"truth_forward \d+")
    check_prefill_then_decode(truth, detect(FIELD / "C_hf_eager_kineto.json.gz"))  # truth annotations: no markers


def test_hf_compiled_nsys(tmp: Path) -> None:
    """torch.compile (inductor, no CUDA graphs) of the same model: 74 fused kernels a decode forward. Inductor's
    autotuning before it repeats 2-3 op benchmark loops between syncs: no steps (a step runs at least 4 ops)."""
    path = gunzip("C_hf_compiled.sqlite.gz", tmp)
    truth = nsys_steps(path, r"truth_forward \d+")
    assert len(truth) == 32 and {t.kernels for t in truth[1:]} == {74}
    result = detect(strip_nvtx_domain(path, "truth"))
    check_one_for_one(truth[1:], result)  # the decode forwards, each with generate()'s own work after it
    decode = {m.kind for m in match(truth[1:], result.steps) if m is not None}
    commonest = max(result.kinds, key=lambda k: k.instances)
    assert decode == {commonest.key}, [(k.label, k.instances) for k in result.kinds]  # not an autotuning loop


def test_hf_compiled_prefill(tmp: Path) -> None:
    """The compiled prefill forward syncs once per layer, each time after an upload (a host-to-device copy, then
    cudaStreamSynchronize): those syncs read nothing back and end no step, so the prefill is a step of its own
    (not three 21-op steps and an uncovered rest)."""
    path = gunzip("C_hf_compiled.sqlite.gz", tmp)
    truth = nsys_steps(path, r"truth_forward \d+")
    assert (truth[0].kernels, truth[0].ops) == (85, 93)
    result = detect(strip_nvtx_domain(path, "truth"))
    check_prefill_then_decode(truth, result)
    (prefill,) = match(truth[:1], result.steps)
    assert prefill is not None and prefill.gpu_start_ns == truth[0].gpu_start  # the whole forward, from its first op


def test_jax(tmp: Path) -> None:
    path = gunzip("D_jax.sqlite.gz", tmp)
    truth = nsys_steps(path, r"truth_step \d+")
    result = detect(strip_nvtx_domain(path, "truth"))
    check_one_for_one(truth, result)
    assert {s.signal for s in match(truth, result.steps) if s} == {"graph launch"}


@pytest.mark.parametrize("mode", ["full", "eager"])
@pytest.mark.parametrize("bucket", [1, 8])
def test_classify(mode: str, bucket: int, tmp: Path) -> None:
    """Full mode: one graph replay per step; eager: no per-step sync, the launch sequence's period (not a layer's),
    the warm-up step that stalls on loading across a quiet stretch included."""
    path = gunzip("E_classify_nsys.sqlite.gz", tmp)
    truth = nsys_steps(path, rf"decode_step mode={mode} bucket={bucket}", domain="launchprobe")
    result = detect(strip_nvtx_domain(path, "launchprobe"))
    check_one_for_one(truth, result)
    signal = "graph launch" if mode == "full" else "repeating launch sequence"
    assert {s.signal for s in match(truth, result.steps) if s} == {signal}


def test_classify_buckets_are_kinds(tmp: Path) -> None:
    """The same kernels at batch 1 and 8: told apart by their GPU busy time, one kind per (mode, bucket)."""
    path = gunzip("E_classify_nsys.sqlite.gz", tmp)
    result = detect(strip_nvtx_domain(path, "launchprobe"))
    kinds = set()
    for mode in ("eager", "full"):
        for bucket in (1, 8):
            truth = nsys_steps(path, rf"decode_step mode={mode} bucket={bucket}", domain="launchprobe")
            kinds.add(frozenset(m.kind for m in match(truth, result.steps) if m))
    assert len(kinds) == 4 and all(len(k) == 1 for k in kinds)
    assert len(result.kinds) == 4  # nothing else: no layer-sized steps, no model-init loop


def test_training_profiler_steps() -> None:
    events = kineto_events(FIELD / "F_train_kineto.json.gz")
    truth = kineto_steps(events, r"truth_train_step \d+", any_thread=True)
    result = detect(FIELD / "F_train_kineto.json.gz")  # auto: the ProfilerStep annotations are ignored
    check_one_for_one(truth, result)
    marked = detect_steps(load_trace(FIELD / "F_train_kineto.json.gz"), "annotations")
    assert marked.mode == "annotations" and len(marked.steps) == 6
    assert {s.kernels for s in marked.steps} == {165}  # any thread of the process: backward included


def test_no_loop_says_so(tmp: Path) -> None:
    """The first 40 API calls' worth of a real trace: setup, no iterations."""
    path = gunzip("A_graph_loop.sqlite.gz", tmp)
    timeline = load_trace(strip_nvtx_domain(path, "truth"))
    first_graph = timeline.api_calls[timeline.api_calls["category"] == "graph_launch"]["start_ns"].min()
    ops = timeline.gpu_ops
    timeline.gpu_ops = ops[ops["start_ns"] < first_graph].reset_index(drop=True)
    api = timeline.api_calls
    timeline.api_calls = api[api["start_ns"] < first_graph].reset_index(drop=True)
    result = detect_steps(timeline, "auto")
    assert len(timeline.gpu_ops) > 100
    assert (result.steps, result.reason) == ([], NO_STEPS) or all(s.kernels == 14 for s in result.steps)


# --- shared traces ------------------------------------------------------------------------------------------------

KINETO = ["rank0.json.gz", "test.json.gz", "control.json.gz", "nccl_data.json.gz", "df_index_resolver.json.gz"]


@pytest.mark.parametrize("name", KINETO)
def test_shared_profiler_steps(name: str) -> None:
    """``auto`` (annotations ignored) recovers the ProfilerStep#N steps, each in its own detected step, the last
    too (where the trace ends inside its sync group: a step cut short by the capture)."""
    path = SHARED / "kineto" / name
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    timeline = load_trace(path)
    marked = detect_steps(timeline, "annotations")
    auto = detect_steps(timeline, "auto")
    assert marked.mode == "annotations" and len(marked.steps) >= 3
    assert len(marked.kinds) == 1  # the same ops each step: one kind
    annotated = [_AsTruth(s.end_ns) for s in sorted(marked.steps, key=lambda s: s.end_ns)]
    found = match(annotated, auto.steps)  # type: ignore[arg-type]
    assert all(m is not None for m in found)
    assert len({id(m) for m in found}) == len(found)


class _AsTruth:
    def __init__(self, gpu_end: int) -> None:
        self.gpu_end = gpu_end


def test_shared_trace_without_a_loop() -> None:
    """nvFuser's pytest run (18 kernels over 3.2 s, each test different): no steps, and it says so."""
    path = SHARED / "nsys" / "nvfuser_nsys2025.1.1_report1.sqlite"
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    result = detect_steps(load_trace(path), "auto")
    assert (result.steps, result.reason) == ([], NO_STEPS)


@pytest.mark.parametrize("name", ["A_graph_loop.sqlite.gz", "C_hf_eager.sqlite.gz", "E_classify_nsys.sqlite.gz"])
def test_step_busy_is_its_ops_union(name: str, tmp: Path) -> None:
    """Busy per step (from the device's idle stretches where a step is alone on it) is the union of its ops."""
    timeline = load_trace(gunzip(name, tmp))
    ops = timeline.gpu_ops
    for step in detect_steps(timeline, "auto").steps:
        intervals = sorted(zip(ops["start_ns"].to_numpy()[step.rows], ops["end_ns"].to_numpy()[step.rows]))
        assert step.busy_ns == union_length([(int(a), int(b)) for a, b in intervals])
