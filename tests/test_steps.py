"""Step detection on constructed timelines: each signal, owned periods, kinds and outliers, markers, no loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from launchprobe.analysis.steps import NO_STEPS, detect_steps, parse_marker
from launchprobe.cli import main
from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category, conform
from tests.fixtures import nsys_synth as synth


def synth_timeline(tmp_path: Path, loop: synth.Loop, name: str = "t.sqlite") -> Timeline:
    return read_nsys_sqlite(synth.write_nsys_sqlite(tmp_path / name, synth.decode_loop(loop)))


def test_sync_signal(tmp_path: Path) -> None:
    loop = synth.Loop(steps=12, kernels_per_step=20)
    result = detect_steps(synth_timeline(tmp_path, loop), "auto")
    assert result.mode == "structure"
    assert len(result.steps) == 12
    assert {s.kernels for s in result.steps} == {20}
    assert {s.signal for s in result.steps} == {"host sync"}
    assert "cudaStreamSynchronize" in result.kinds[0].detected_by
    # owned period: from the end of the previous step's work to the end of its own
    steps = sorted(result.steps, key=lambda s: s.end_ns)
    assert steps[0].start_ns == steps[0].gpu_start_ns
    assert all(b.start_ns == a.end_ns for a, b in zip(steps, steps[1:]))


def test_graph_signal(tmp_path: Path) -> None:
    loop = synth.Loop(steps=10, kernels_per_step=30, graph=True)
    timeline = synth_timeline(tmp_path, loop)
    api = timeline.api_calls
    timeline.api_calls = api[api["category"] != "sync"].reset_index(drop=True)  # no syncs: graph launches cut
    result = detect_steps(timeline, "auto")
    assert len(result.steps) == 10
    assert {s.signal for s in result.steps} == {"graph launch"}
    assert {s.graph_kernels for s in result.steps} == {30}
    assert result.kinds[0].label == "step, graph replay, 30 ops"


def _timeline(names: list[str], gaps: list[int]) -> Timeline:
    """One launch call per kernel, in order; ``gaps[i]``: host time before call i."""
    n = len(names)
    starts = np.cumsum(np.array(gaps, dtype=np.int64) + 5_000)
    ops = pd.DataFrame(
        {
            "kind": ["kernel"] * n,
            "name": names,
            "start_ns": starts + 6_000,
            "end_ns": starts + 8_000,
            "device": 0,
            "stream": 7,
            "pid": 1,
            "correlation_id": np.arange(n),
            "graph_node_id": -1,
            "bytes": 0,
        }
    )
    api = pd.DataFrame(
        {
            "name": ["cudaLaunchKernel"] * n,
            "category": [api_category("cudaLaunchKernel")] * n,
            "start_ns": starts,
            "end_ns": starts + 4_000,
            "pid": 1,
            "tid": 1,
            "correlation_id": np.arange(n),
        }
    )
    return Timeline(gpu_ops=conform(ops, GPU_OP_COLUMNS), api_calls=conform(api, API_CALL_COLUMNS), ranges=_no_ranges())


def _no_ranges() -> pd.DataFrame:
    return conform(pd.DataFrame({k: [] for k in RANGE_COLUMNS}), RANGE_COLUMNS)


def test_sequence_signal_cuts_where_the_host_pauses() -> None:
    """No sync, no graph: a 3-layer model (the layer repeats too) is cut at the step, where the host pauses."""
    step = ["embed"] + ["norm", "qkv", "attn", "mlp"] * 3 + ["head", "argmax"]
    names = step * 20
    gaps = ([200_000] + [1_000] * (len(step) - 1)) * 20
    result = detect_steps(_timeline(names, gaps), "auto")
    assert len(result.steps) >= 19
    assert {s.kernels for s in result.steps} == {len(step)}
    assert {s.signal for s in result.steps} == {"repeating launch sequence"}


SYNC = ("sync", 0, 0)
UPLOAD = ("upload", 2_000, 1_000)


def _calls(events: list[tuple[str, int, int]]) -> Timeline:
    """One process, one stream: each event (name, host gap before its call, GPU ns) is a kernel launch, with name
    "sync" a cudaStreamSynchronize that returns when the GPU has run everything before it, with name "upload" a
    host-to-device cudaMemcpyAsync."""
    t, gpu_free = 0, 0
    ops: dict[str, list[object]] = {k: [] for k in ("kind", "name", "start_ns", "end_ns", "correlation_id")}
    api: dict[str, list[object]] = {k: [] for k in ("name", "start_ns", "end_ns", "correlation_id")}
    for corr, (name, gap, gpu_ns) in enumerate(events):
        t += gap
        if name == "sync":
            end = max(t + 1_000, gpu_free + 1_000)
            api["name"].append("cudaStreamSynchronize")
        else:
            end = t + 4_000
            start = max(end + 1_000, gpu_free + 500)
            gpu_free = start + gpu_ns
            upload = name == "upload"
            ops["kind"].append("memcpy" if upload else "kernel")
            ops["name"].append("Memcpy HtoD" if upload else name)
            ops["start_ns"].append(start)
            ops["end_ns"].append(gpu_free)
            ops["correlation_id"].append(corr)
            api["name"].append("cudaMemcpyAsync" if upload else "cudaLaunchKernel")
        api["start_ns"].append(t)
        api["end_ns"].append(end)
        api["correlation_id"].append(corr)
        t = end
    m = len(api["name"])
    gpu = pd.DataFrame({**ops, "device": 0, "stream": 7, "pid": 1, "graph_node_id": -1, "bytes": 0})
    calls = pd.DataFrame({**api, "category": [api_category(str(x)) for x in api["name"]], "pid": [1] * m, "tid": 1})
    return Timeline(
        gpu_ops=conform(gpu, GPU_OP_COLUMNS), api_calls=conform(calls, API_CALL_COLUMNS), ranges=_no_ranges()
    )


def _step(
    names: list[str], gpu_ns: int = 3_000, first_gap: int = 100_000, sync: bool = True
) -> list[tuple[str, int, int]]:
    return [(n, first_gap if i == 0 else 2_000, gpu_ns) for i, n in enumerate(names)] + ([SYNC] if sync else [])


def test_steps_alike_in_any_order() -> None:
    """DDP-like: each step launches the same kernels in another order; the syncs that end them still cut steps."""
    rng = np.random.default_rng(3)
    names = [f"k{i}" for i in range(12)]
    result = detect_steps(_calls([e for _ in range(6) for e in _step(list(rng.permutation(names)))]), "auto")
    assert len(result.steps) == 6 and len(result.kinds) == 1


def test_last_step_cut_short_by_the_capture() -> None:
    """The capture ends inside the last step: its calls so far begin a step's sequence, so it is that step, cut
    short, listed but kept out of its kind's numbers."""
    names = [f"k{i}" for i in range(10)]
    events = [e for _ in range(5) for e in _step(names)] + _step(names[:4], sync=False)
    result = detect_steps(_calls(events), "auto")
    last = max(result.steps, key=lambda s: s.end_ns)
    assert len(result.steps) == 6 and last.truncated and last.outlier and last.kernels == 4
    (kind,) = result.kinds
    assert kind.instances == 5 and kind.outliers == (last.index,)


def test_warmup_step_stalled_across_a_quiet_stretch() -> None:
    """No sync, no graph: the first step stalls 300 ms (compiling) after its first launch; its calls are the
    step's sequence, so it is a step (owning from its own first op: an outlier), not two halves."""
    step = ["embed", *["norm", "qkv", "attn", "mlp"] * 3, "head", "argmax"]
    events = [(n, 200_000 if i == 0 else 1_000, 3_000) for _ in range(8) for i, n in enumerate(step)]
    events[1] = (events[1][0], 300_000_000, 3_000)  # longer than the quiet stretch that splits active periods
    result = detect_steps(_calls(events), "auto")
    assert len(result.steps) == 8 and {s.kernels for s in result.steps} == {len(step)}
    first = min(result.steps, key=lambda s: s.end_ns)
    assert first.outlier and first.span_ns > 300_000_000


def test_batch_buckets_are_kinds() -> None:
    """The same kernels, slower at the larger batch: one kind per bucket, told apart by GPU busy time."""
    names = [f"k{i}" for i in range(10)]
    events = [e for _ in range(6) for e in _step(names, 3_000)] + [e for _ in range(6) for e in _step(names, 3_600)]
    result = detect_steps(_calls(events), "auto")
    assert len(result.steps) == 12 and len(result.kinds) == 2
    assert {k.instances for k in result.kinds} == {6}
    assert all(k.label.startswith("step, eager, 10 ops, ") and k.label.endswith(" ms busy") for k in result.kinds)


def test_prefill_before_decode_steps() -> None:
    """generate()-like: setup work, one prefill forward (other attention kernels, more GPU time), decode forwards;
    twice. The prefill is its own kind, labelled so; the setup is no step."""
    decode = [f"layer{i}" for i in range(20)]
    prefill = [n.replace("layer1", "prefill_attn") for n in decode]
    setup = _step(["arange", "fill"]) + _step(["mask", "cumsum", "copy"])
    events = []
    for _ in range(2):
        events += setup + _step(prefill, 6_000) + [e for _ in range(8) for e in _step(decode)]
    result = detect_steps(_calls(events), "auto")
    labels = sorted(k.label for k in result.kinds)
    assert labels == ["decode, eager, 20 ops", "prefill, eager, 20 ops"]
    assert len(result.steps) == 18


def test_syncs_after_uploads_end_no_step() -> None:
    """torch.compile's prefill: after each layer an upload (a host-to-device copy, then a stream sync); those syncs
    read nothing back, so the prefill is one step of its own, not four layer-sized ones."""
    decode = [f"layer{i}" for i in range(20)]
    layer = [(f"p{i}", 2_000, 6_000) for i in range(5)]
    prefill = [e for _ in range(4) for e in [*layer, UPLOAD, SYNC]] + [("head", 2_000, 6_000), SYNC]
    setup = _step(["arange", "fill"]) + _step(["mask", "cumsum", "copy"])
    events = []
    for _ in range(2):
        events += setup + prefill + [e for _ in range(8) for e in _step(decode)]
    result = detect_steps(_calls(events), "auto")
    assert sorted(k.label for k in result.kinds) == ["decode, eager, 20 ops", "prefill, eager, 25 ops"]
    assert sorted(s.kernels for s in result.steps) == [20] * 16 + [21] * 2


def test_each_loop_at_its_own_phase() -> None:
    """Two syncs per step (HF eager generate(): one inside the forward), four generate() calls whose setups run
    one and two syncs in turn: no one phase of the sync pairs fits every call; each call's loop is grouped at its
    own, the prefill of each a step of its own."""
    step = [("tok", 100_000, 3_000), ("fwd0", 2_000, 3_000), SYNC, *[(f"fwd{i}", 2_000, 3_000) for i in range(1, 20)]]
    prefill = [(n.replace("fwd3", "prefill_attn"), gap, 3 * ns) for n, gap, ns in step]
    events = []
    for setup in (_step(["arange", "fill"]), _step(["arange", "fill"]) + _step(["mask", "cumsum", "copy"])) * 2:
        events += setup + prefill + [SYNC] + [e for _ in range(8) for e in [*step, SYNC]]
    timeline = _calls(events)
    result = detect_steps(timeline, "auto")
    labels = {k.key: k.label for k in result.kinds}
    decode, first = "decode, eager, 21 ops", "prefill, eager, 21 ops"
    assert sorted(labels.values()) == [decode, first]
    assert sorted(labels[s.kind] for s in result.steps) == [decode] * 32 + [first] * 4
    assert {timeline.gpu_ops["name"][s.first_op] for s in result.steps} == {"tok"}  # each a whole forward


def test_layer_is_not_a_step() -> None:
    """A few eager forwards of a 16-layer model with no per-step sync, too few to be a loop: the layer repeats,
    but the ops that run once per forward break its repeat at the forward's period, so no steps."""
    step = ["embed", *[f"l{j}" for j in range(6)] * 16, "head", "argmax"]
    events = [(n, 200_000 if i == 0 else 1_000, 3_000) for _ in range(2) for i, n in enumerate(step)]
    assert detect_steps(_calls(events), "auto").reason == NO_STEPS


def test_no_loop() -> None:
    rng = np.random.default_rng(1)
    names = [f"k{int(x)}" for x in rng.integers(0, 400, 300)]
    result = detect_steps(_timeline(names, [int(x) for x in rng.integers(500, 50_000, 300)]), "auto")
    assert (result.steps, result.reason) == ([], NO_STEPS)


def test_quiet_stretches_split_bursts(tmp_path: Path) -> None:
    """Two bursts 1 s apart: the first step of the second burst owns from its own first op."""
    a = synth.decode_loop(synth.Loop(steps=6, kernels_per_step=10))
    b = synth.decode_loop(synth.Loop(steps=6, kernels_per_step=10), t0=int(a["step_end"][-1]) + 1_000_000_000)
    shift = int(a["r_corr"].max()) + 1
    data = {k: np.concatenate([a[k], b[k] + (shift if "corr" in k else 0)]) for k in a}
    result = detect_steps(read_nsys_sqlite(synth.write_nsys_sqlite(tmp_path / "b.sqlite", data)), "auto")
    assert len(result.steps) == 12
    assert max(s.span_ns for s in result.steps) < 10_000_000


def test_warmup_step_is_an_outlier(tmp_path: Path) -> None:
    timeline = synth_timeline(tmp_path, synth.Loop(steps=10, kernels_per_step=10))
    ops = timeline.gpu_ops
    first = ops["start_ns"] < ops["start_ns"].iloc[10]
    ops.loc[~first, ["start_ns", "end_ns"]] += 50_000_000  # step 0 "compiles" for 50 ms before the rest runs
    api = timeline.api_calls
    later = api["start_ns"] > int(ops["end_ns"][first].max())
    api.loc[later, ["start_ns", "end_ns"]] += 50_000_000
    result = detect_steps(timeline, "auto")
    (kind,) = result.kinds
    assert len(kind.outliers) == 1 and kind.instances == len(result.steps) - 1


@pytest.mark.parametrize(
    ("name", "phase", "batch", "tokens"),
    [
        ("execute_context_0(0)_generation_8(8)", "decode", 8, 8),
        ("execute_context_2(512)_generation_0(0)", "prefill", 2, 512),
        ("execute_context_1(100)_generation_3(3)", "mixed", 4, 103),
        ("execute_new_0_cached_16", "decode", 16, None),
        ("step[DECODE bs=32]", "decode", 32, None),
        ("step[EXTEND bs=2 toks=900]", "prefill", 2, 900),
        ("[Executor] _forward_step 7: 0 ctx reqs, 12 gen reqs", "decode", 12, None),
        ("ProfilerStep#3", "step", None, None),
    ],
)
def test_markers(name: str, phase: str, batch: int | None, tokens: int | None) -> None:
    marker = parse_marker(name)
    assert marker is not None and (marker.phase, marker.batch, marker.tokens) == (phase, batch, tokens)


def test_unknown_names_are_no_markers() -> None:
    assert parse_marker("decode_step 3") is None and parse_marker("step 3") is None


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_steps(tmp_path: Path) -> None:
    path = synth.write_nsys_sqlite(tmp_path / "c.sqlite", synth.decode_loop(synth.Loop(steps=8)))
    out = tmp_path / "run.json"
    assert _cli(["analyze", str(path), "--format", "json", "--output", str(out)]) == 0
    run = json.loads(out.read_text())
    assert run["config"]["steps"] == "auto"
    kinds = [s for s in run["summaries"] if s.get("step_kind")]
    assert len(kinds) == 1 and kinds[0]["instances"] == 8 and kinds[0]["detected_by"].startswith("host sync")
    assert {"span_p50_ns", "span_p90_ns", "busy_p50_ns", "verdict", "verdict_reason"} <= set(kinds[0])
    assert sum(1 for w in run["windows"] if w.get("step_kind")) == 8
    off = tmp_path / "off.json"
    assert _cli(["analyze", str(path), "--steps", "off", "--format", "json", "--output", str(off)]) == 0
    assert not [w for w in json.loads(off.read_text())["windows"] if w.get("step_kind")]
    ranged = tmp_path / "r.json"
    assert _cli(["analyze", str(path), "-r", "decode_step", "--format", "json", "--output", str(ranged)]) == 0
    assert json.loads(ranged.read_text())["config"]["steps"] == "off"  # default with --range
