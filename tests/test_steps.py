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
