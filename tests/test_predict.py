"""What would help: the prediction arithmetic on constructed numbers, the classify producer, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import runs

from launchprobe.analysis import predict
from launchprobe.classify import ClassifyConfig, add_what_ifs, cost_result
from launchprobe.measure.ceilings import Ceilings
from launchprobe.render import render_text
from launchprobe.workload import costmodel
from launchprobe.workload.shape import load_shape

CEILINGS = Ceilings("measured", 4.26e12, 790e12, 8_400.0, 1_000.0, "2026-12-01T00:00:00+00:00")


def test_graphs_adds_a_node_per_op_and_one_launch_to_the_busy_time() -> None:
    w = predict.graphs(step_ns=9.47e6, busy_ns=4.45e6, ops=323, node_ns=1_000.0, launch_ns=8_400.0, node_source="x")
    assert w.predictable and w.predicted_step_ns == 4_450_000 + 323_000 + 8_400
    assert w.speedup == pytest.approx(9.47e6 / 4_781_400)
    assert "323 ops x 1.00 us per node" in (w.arithmetic or "")


def test_graphs_keeps_the_idle_a_graph_does_not_remove() -> None:
    w = predict.graphs(
        step_ns=9.47e6, busy_ns=4.45e6, ops=323, node_ns=1_000.0, launch_ns=8_400.0, node_source="x",
        kept_idle_ns=2.0e6,
    )  # fmt: skip
    assert w.predicted_step_ns == 4_450_000 + 2_000_000 + 323_000 + 8_400
    assert "+ 2.000 ms idle kept" in (w.arithmetic or "") and "stays (2.000 ms" in (w.assumptions or "")
    plain = predict.graphs(step_ns=9.47e6, busy_ns=4.45e6, ops=323, node_ns=1e3, launch_ns=8.4e3, node_source="x")
    assert "idle kept" not in (plain.arithmetic or "") and "no host synchronisation" in (plain.assumptions or "")


def test_queued_idle_is_the_wait_after_the_next_ops_launch_returned_beyond_its_latency() -> None:
    from launchprobe.analysis.idle import QUEUED_AFTER_LAUNCH_NS as lat
    from launchprobe.analysis.idle import queued_idle

    starts = np.array([0, 100_000, 200_000, 300_000, 400_000])
    ends = starts + 50_000
    # launched during the stretch; before it (an "other" stretch); no launch call; 3 us before the start; no next op
    launch_end = np.array([20_000, 90_000, -1, 347_000])
    queued = queued_idle(starts, ends, np.array([0, 1, 2, 3, -1]), launch_end)
    assert queued.tolist() == [30_000 - lat, 50_000 - lat, 50_000, 0, 0]
    # no-work time is counted on its own: left out of a host-wait stretch's queued part, not of another class's
    from launchprobe.analysis.no_work import Coverage

    no_work = Coverage(np.array([40_000, 100_000]), np.array([45_000, 110_000]))
    host_wait = np.array([True, False, False, False, False])
    queued = queued_idle(starts, ends, np.array([0, 1, 2, 3, -1]), launch_end, no_work, host_wait)
    assert queued.tolist() == [30_000 - lat - 5_000, 50_000 - lat, 50_000, 0, 0]


def test_trace_windows_keep_their_queued_and_no_work_idle_and_the_whole_trace_predicts_nothing() -> None:
    step = runs.window("decode_step", 0, 10.0, 4.0, 400, idle_no_work_ns=500_000, idle_queued_ns=300_000)
    predict.trace_what_ifs(step, node_ns=1_000.0, launch_ns=2_000.0, source="x")
    kept = 300_000 + 500_000
    assert step.predicted_graph_step_ns == 4_000_000 + kept + 402 * 1_000 + 2_000
    whole = runs.window("whole trace", 0, 10.0, 4.0, 400)
    predict.trace_what_ifs(whole, node_ns=1_000.0, launch_ns=2_000.0, source="x")
    assert whole.predicted_graph_step_ns is None and "no step" in (whole.what_ifs[0].reason or "")


def test_graphs_without_busy_or_ops_is_not_predictable_and_says_why() -> None:
    w = predict.graphs(step_ns=1e6, busy_ns=None, ops=10, node_ns=1e3, launch_ns=1e3, node_source="x")
    assert not w.predictable and w.predicted_step_ns is None and "not measured" in (w.reason or "")
    assert not predict.graphs(step_ns=1e6, busy_ns=5e5, ops=0, node_ns=1e3, launch_ns=1e3, node_source="x").predictable


def test_graphs_default_node_cost_is_labelled() -> None:
    w = predict.graphs(step_ns=2e6, busy_ns=1e6, ops=100, node_ns=None, launch_ns=None, node_source="x")
    assert w.predicted_step_ns == 1_000_000 + 100 * predict.DEFAULT_GRAPH_NODE_NS + predict.DEFAULT_GRAPH_LAUNCH_NS
    assert "default" in (w.assumptions or "")


def test_fusion_is_bounded_by_the_slower_of_host_and_gpu() -> None:
    host_bound = predict.fusion(step_ns=3e6, busy_ns=1e6, host_ns=3e6, launches=180, fused_away=60, label="x")
    assert host_bound.predicted_step_ns == 2_000_000 and host_bound.speedup == pytest.approx(1.5)
    gpu_bound = predict.fusion(step_ns=3e6, busy_ns=2.5e6, host_ns=3e6, launches=180, fused_away=90, label="x")
    assert gpu_bound.predicted_step_ns == 2_500_000  # the GPU's work stays
    assert not predict.fusion(step_ns=1, busy_ns=1, host_ns=1, launches=10, fused_away=0, label="x").predictable


def test_batch_keeps_the_fraction_of_the_floor_and_finds_the_compute_bound_batch() -> None:
    floors = [(2, 2.0e6, 0.1e6), (4, 2.2e6, 0.2e6), (1024, 8e6, 9e6)]
    out = predict.batch(batch_size=1, step_ns=2.5e6, memory_floor_ns=2e6, compute_floor_ns=0.05e6, floors_at=floors)
    by_title = {w.title: w for w in out}
    assert by_title["batch 2"].predicted_step_ns == 2_500_000  # 80% of the floor now, so 2.0 ms / 0.8
    assert by_title["batch 4"].predicted_step_ns == 2_750_000
    assert by_title["batch 4"].tokens_per_s == pytest.approx(4 / 2.75e-3)
    assert by_title["batch 1024"].predicted_step_ns == round(9e6 / 0.8) and "compute" in (
        by_title["batch 1024"].arithmetic or ""
    )
    assert predict.compute_bound_from(floors) == 1024


def test_padding_scales_the_step_by_the_bytes_it_would_not_move() -> None:
    w = predict.padding(batch_size=3, bucket=4, step_ns=4e6, bytes_batch=300, bytes_bucket=400)
    assert w.predicted_step_ns == 3_000_000
    assert not predict.padding(batch_size=4, bucket=4, step_ns=4e6, bytes_batch=1, bytes_bucket=1).predictable


def test_ranked_by_gain_with_the_unpredictable_last() -> None:
    a = predict.fusion(step_ns=3e6, busy_ns=1e6, host_ns=3e6, launches=10, fused_away=5, label="a")  # 2x
    b = predict.graphs(step_ns=3e6, busy_ns=1e6, ops=10, node_ns=1e3, launch_ns=1e3, node_source="x")  # ~3x
    c = predict.graphs(step_ns=3e6, busy_ns=None, ops=10, node_ns=1e3, launch_ns=1e3, node_source="x")
    assert predict.ranked([c, a, b]) == [b, a, c]


def _config(batches: list[int], modes: list[str], context: int = 1024) -> ClassifyConfig:
    shape = load_shape("llama-3.2-1b", {})
    return ClassifyConfig(shape=shape, batches=batches, modes=modes, device="cuda", context=context)


def test_classify_eager_row_predicts_its_graph_step_and_fusions() -> None:
    config = _config([1], ["eager"])
    result = cost_result(config, "eager", 1, CEILINGS, 180)
    result.step_ms_median, result.gpu_busy_ms, result.kernels_per_step = 3.0, 1.2, 196.0
    result.host_ms_per_step, result.verdict = 2.9, "launch-bound"
    add_what_ifs(result, config, CEILINGS)
    kinds = [w.kind for w in result.what_ifs]
    assert kinds[0] == "cuda-graphs" and kinds.count("fusion") == 2
    assert result.predicted_graph_step_ms == pytest.approx((1.2e6 + 196 * 1_000 + 8_400) / 1e6)
    extra = next(w for w in result.what_ifs if "extra kernels" in w.title)
    assert f"{196 - costmodel.logical_ops_per_step(config.shape)} extra kernels" in extra.title
    gains = [w.speedup or w.throughput_gain or 0 for w in result.what_ifs if w.predictable]
    assert gains == sorted(gains, reverse=True)


def test_classify_memory_bound_row_gets_batches_and_graph_rows_their_padding() -> None:
    config = _config([3], ["full"], context=128)  # short context: the weights dominate, so batch turns it compute-bound
    result = cost_result(config, "full", 3, CEILINGS, 180)
    assert result.bucket == 4
    result.step_ms_median, result.gpu_busy_ms, result.verdict = 1.5, 1.45, "memory-bound"
    add_what_ifs(result, config, CEILINGS)
    kinds = {w.kind for w in result.what_ifs}
    assert kinds == {"batch", "padding"} and result.predicted_graph_step_ms is None
    assert result.compute_bound_from_batch is not None and 64 < result.compute_bound_from_batch <= 1024
    long_context = _config([3], ["full"])
    again = cost_result(long_context, "full", 3, CEILINGS, 180)
    again.step_ms_median, again.gpu_busy_ms, again.verdict = 1.5, 1.45, "memory-bound"
    add_what_ifs(again, long_context, CEILINGS)
    assert again.compute_bound_from_batch is None  # the KV cache read grows with the batch as fast as the FLOPs


def test_cpu_path_predicts_nothing() -> None:
    config = ClassifyConfig(shape=load_shape("tiny", {}), batches=[1], modes=["eager"], device="cpu")
    result = cost_result(config, "eager", 1, CEILINGS, 23)
    result.step_ms_median, result.verdict = 1.0, "memory-bound"
    add_what_ifs(result, config, CEILINGS)
    assert result.what_ifs == [] and result.predicted_graph_step_ms is None


def test_what_would_help_in_every_format() -> None:
    run = runs.classify_run()
    eager = next(r for r in run.results if r.mode == "eager" and r.batch == 1)
    eager.what_ifs = [predict.graphs(step_ns=9.47e6, busy_ns=4.45e6, ops=323, node_ns=1e3, launch_ns=8.4e3,
                                     node_source="classify's ceiling, measured")]  # fmt: skip
    eager.predicted_graph_step_ms = 4.7814
    plain = render_text(run, "plain", width=200)
    assert (
        "What would help" in plain and "eager b=1: capture the step in a CUDA graph: 4.781 ms per step (1.98x)" in plain
    )
    assert "capture the step in a CUDA graph" in render_text(run, "markdown")
    data = json.loads(render_text(run, "json"))
    row = next(r for r in data["results"] if r["mode"] == "eager" and r["batch"] == 1)
    assert row["predicted_graph_step_ms"] == 4.7814 and row["what_ifs"][0]["kind"] == "cuda-graphs"
    assert "predicted_graph_step_ms" in render_text(run, "csv").splitlines()[0]


def test_graph_node_gap_is_span_less_busy_per_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ceiling behind the CUDA-graph what-if: the idle between consecutive nodes of a replay, by CUPTI."""
    from launchprobe.measure import ceilings, cupti

    rows = [("k", 1_000 * i, 1_000 * i + 700, 0) for i in range(4)]  # 700 ns nodes, 300 ns apart
    monkeypatch.setattr(cupti, "cuda_intervals", lambda work: [r[:3] for r in rows])
    assert ceilings._node_gap_ns(lambda: None, nodes=4) == pytest.approx(300.0)
    assert ceilings._node_gap_ns(lambda: None, nodes=5) is None  # fewer kernels than nodes: not traced one by one


def test_eager_steps_of_a_real_trace_predict_its_full_graph_steps() -> None:
    """Issue 13 on a real nsys trace (tests/fixtures/field, E: launchprobe classify of llama-3.2-1b on an H200 under
    nsys): the CUDA-graph what-if of each eager bucket's typical step against the full-graph steps of the same trace.
    Both sides are read independently here: the full steps' span from the trace by sqlite3 (their own kernels,
    first start to last end), the prediction's inputs from the eager steps' kernels."""
    import gzip
    import shutil
    import sqlite3
    import statistics
    import tempfile
    from pathlib import Path

    from launchprobe.api import analyze

    fixture = Path(__file__).parent / "fixtures" / "field" / "E_classify_nsys.sqlite.gz"
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "e.sqlite"
        with gzip.open(fixture) as src, db.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        run = analyze(db, ranges=["decode_step.*"])
        con = sqlite3.connect(db)
        names = dict(con.execute("SELECT id, value FROM StringIds"))
        ranges = [
            (names.get(tid, text), start, end, tid_)
            for text, tid, start, end, tid_ in con.execute(
                "SELECT text, textId, start, end, globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60)"
            )
        ]
        launches = con.execute("SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
        kernels = con.execute("SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        con.close()
    by_corr: dict[int, list[tuple[int, int]]] = {}
    for corr, start, end in kernels:
        by_corr.setdefault(corr, []).append((start, end))
    full_spans: dict[int, list[int]] = {}
    for name, start, end, tid in ranges:
        if name and name.startswith("decode_step mode=full"):
            mine = [k for s, c, t in launches if t == tid and start <= s <= end for k in by_corr.get(c, [])]
            if mine:
                full_spans.setdefault(int(name.rsplit("=", 1)[1]), []).append(
                    max(e for _, e in mine) - min(s for s, _ in mine)
                )
    summaries = {s.name: s for s in run.summaries}
    for bucket, spans in full_spans.items():
        eager = summaries[f"decode_step mode=eager bucket={bucket}"]
        assert eager.predicted_graph_step_ns is not None
        full_p50 = statistics.median(spans)
        assert abs(eager.predicted_graph_step_ns / full_p50 - 1) < 0.10, (
            bucket,
            eager.predicted_graph_step_ns,
            full_p50,
        )
        full = summaries[f"decode_step mode=full bucket={bucket}"]
        assert full.predicted_graph_step_ns is None and not full.what_ifs[0].predictable  # already graph replay


SHARED_KINETO = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "kineto"


def _queued_ns(starts: np.ndarray, ends: np.ndarray, launched: np.ndarray) -> tuple[float, float]:
    """Independently of launchprobe: ops (start order) with their launch calls' ends (-1 for none) -> the idle
    before each op (after the latest end so far) in all, and its part after the op's launch call returned beyond
    10 us (all of it for an op without a launch call)."""
    reach = np.maximum.accumulate(ends)[:-1]
    idle = np.clip(starts[1:] - reach, 0, None)
    after = np.where(launched[1:] < 0, idle, np.clip(starts[1:] - np.maximum(reach, launched[1:]) - 10_000, 0, None))
    return float(idle.sum()), float(after[idle > 0].sum())


def test_a_training_step_that_idles_with_its_work_queued_keeps_that_idle() -> None:
    """HTA's rank0.json.gz (an A100 rank of a 16-rank training run, ../shared/traces): most of its steps' idle has
    the next op already queued. Independently of launchprobe (json and numpy): the idle during which the next op had
    been launched over 10 us before (or had no launch call) is most of the trace's idle, and launchprobe's
    whole-trace window has the same. The step's CUDA-graph what-if keeps its typical instance's, so it predicts no
    gain worth a graph where busy time alone said 5x."""
    import gzip
    import statistics

    import numpy as np

    from launchprobe.api import analyze

    path = SHARED_KINETO / "rank0.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    with gzip.open(path) as handle:
        events = json.load(handle)["traceEvents"]
    launch_end = {
        e["args"]["correlation"]: (e["ts"] + e["dur"]) * 1e3 for e in events if e.get("cat") == "cuda_runtime"
    }
    ops = sorted(
        (e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3, launch_end.get(e["args"].get("correlation"), -1.0))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    idle, queued = _queued_ns(*(np.array(c) for c in zip(*ops, strict=True)))
    assert queued > 0.9 * idle
    run = analyze(path)
    whole = next(w for w in run.windows if w.name == "whole trace")
    assert whole.idle_queued_ns == pytest.approx(queued, rel=0.01)
    (summary,) = [s for s in run.summaries if s.name != "whole trace"]
    typical = [w for w in run.windows if w.step_kind is not None and not w.outlier]
    kept = statistics.median(w.idle_queued_ns + w.idle_no_work_ns for w in typical)
    assert summary.idle_not_launch_p50_ns == pytest.approx(kept, abs=1)
    assert summary.busy_p50_ns is not None and summary.span_p50_ns is not None
    assert summary.predicted_graph_step_ns == pytest.approx(summary.busy_p50_ns + kept, rel=0.01)
    assert summary.what_ifs[0].speedup is not None and summary.what_ifs[0].speedup < 1.1


FIELD = Path(__file__).parent / "fixtures" / "field"


def test_a_host_callback_inside_the_step_is_kept_in_its_graph_prediction(tmp_path: Path) -> None:
    """Field trace G (benchmarks/field/host_callback_step.py, H200 under nsys): each step runs 6 layers, a host
    callback that sleeps 300 us (cuLaunchHostFunc), 6 more layers; then the same step as one CUDA graph. The eager
    steps' what-if, their ranges' truth stripped of nothing launchprobe wrote, against the graph steps of the same
    trace, their span read here by sqlite3 (first kernel start to last kernel end of the kernels launched in each
    range). Busy time alone predicts 44% short; keeping the idle queued behind the callback, within 10%."""
    import gzip
    import shutil
    import sqlite3
    import statistics

    from launchprobe.api import analyze

    db = tmp_path / "g.sqlite"
    with gzip.open(FIELD / "G_host_callback.sqlite.gz") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(db)
    ranges = con.execute(
        "SELECT COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)), start, end, globalTid "
        "FROM NVTX_EVENTS WHERE eventType IN (59, 60)"
    ).fetchall()
    calls = {
        corr: (start, end, tid)
        for start, end, corr, tid in con.execute(
            "SELECT start, end, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    }
    kernels = con.execute("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    con.close()
    steps: dict[str, list[tuple[float, float, float]]] = {"eager": [], "graph": []}
    for name, start, end, tid in ranges:
        mode = name.split()[1].removeprefix("mode=")
        mine = sorted(
            (s, e, calls[c][1])
            for s, e, c in kernels
            if c in calls and calls[c][2] == tid and start <= calls[c][0] <= end
        )
        span = mine[-1][1] - mine[0][0] if mine else 0
        idle, queued = _queued_ns(*(np.array(col) for col in zip(*mine, strict=True)))
        steps[mode].append((span, span - idle, queued))
    assert len(steps["eager"]) == len(steps["graph"]) == 40
    graph_p50 = statistics.median(s[0] for s in steps["graph"])
    eager_busy = statistics.median(s[1] for s in steps["eager"])
    eager_queued = statistics.median(s[2] for s in steps["eager"])
    assert eager_queued > 300_000  # the callback's sleep, at least
    run = analyze(db, ranges=["decode_step mode=eager.*"])
    (summary,) = run.summaries
    assert summary.idle_not_launch_p50_ns == pytest.approx(eager_queued, rel=0.02)
    assert summary.busy_p50_ns == pytest.approx(eager_busy, rel=0.02)
    predicted = summary.predicted_graph_step_ns
    assert predicted is not None and abs(predicted / graph_p50 - 1) < 0.10, (predicted, graph_p50)
    assert (eager_busy + 156 * predict.DEFAULT_GRAPH_NODE_NS) / graph_p50 < 0.65  # what busy time alone predicts
