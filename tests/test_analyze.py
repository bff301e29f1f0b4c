"""Trace analysis: idle attribution, range windows, verdicts, and `launchprobe analyze` end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from launchprobe.analysis.trace_run import analyze_timeline, build_run
from launchprobe.analysis.windows import AnalysisOptions, percentile
from launchprobe.cli import main
from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category, conform
from tests.fixtures import nsys_synth as synth

US = 1_000


def timeline(ops: list[tuple], apis: list[tuple], ranges: list[tuple] = ()) -> Timeline:  # type: ignore[assignment]
    """ops: (start, end, corr[, device]); apis: (name, start, end, corr[, tid]); ranges: (name, start, end[, tid])."""
    op_frame = pd.DataFrame(
        [
            {"kind": "kernel", "name": f"k{i}", "start_ns": o[0], "end_ns": o[1], "device": o[3] if len(o) > 3 else 0,
             "stream": 7, "pid": 1, "correlation_id": o[2], "graph_node_id": -1, "bytes": 0}
            for i, o in enumerate(ops)
        ]
    )  # fmt: skip
    api_frame = pd.DataFrame(
        [
            {"name": a[0], "category": api_category(a[0]), "start_ns": a[1], "end_ns": a[2], "pid": 1,
             "tid": a[4] if len(a) > 4 else 1, "correlation_id": a[3]}
            for a in apis
        ],
        columns=list(API_CALL_COLUMNS),
    )  # fmt: skip
    range_frame = pd.DataFrame(
        [
            {"name": r[0], "domain": "", "start_ns": r[1], "end_ns": r[2], "pid": 1, "tid": r[3] if len(r) > 3 else 1,
             "depth": 0}
            for r in ranges
        ],
        columns=list(RANGE_COLUMNS),
    )  # fmt: skip
    return Timeline(
        gpu_ops=conform(op_frame, GPU_OP_COLUMNS),
        api_calls=conform(api_frame, API_CALL_COLUMNS),
        ranges=conform(range_frame, RANGE_COLUMNS),
        meta={"format": "test", "notices": []},
    )


def test_idle_split_host_wait_short_other() -> None:
    tl = timeline(
        ops=[(0, 10 * US, 1), (11 * US, 20 * US, 2), (40 * US, 50 * US, 3), (80 * US, 90 * US, -1)],
        apis=[
            ("cudaLaunchKernel", 0, 1 * US, 1),
            ("cudaLaunchKernel", 1 * US, 2 * US, 2),  # queued: 1 us gap -> short
            ("cudaLaunchKernel_v7000", 30 * US, 39 * US, 3),  # launched after the GPU went idle -> host wait
            ("cudaStreamSynchronize", 50 * US, 79 * US, 9),  # 4th op has no launch call -> other
        ],
    )
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert (w.span_ns, w.busy_ns) == (90 * US, 39 * US)
    assert (w.idle_host_wait_ns, w.idle_short_gap_ns, w.idle_other_ns) == (20 * US, 1 * US, 30 * US)
    assert w.launches == {"cudaLaunchKernel": 3}
    assert w.gap_max_ns == 30 * US and w.gap_p50_ns == 20 * US
    assert w.largest_idle[0].kind == "other"
    assert w.largest_idle[0].host_api_in_flight == "cudaStreamSynchronize"
    assert w.queue_ns.max == 9 * US  # call 2 ended at 2 us, its kernel started at 11 us
    assert w.launch_api_ns.p50 == 1 * US


def test_launch_still_in_flight_counts_as_host_wait() -> None:
    # The next launch started before the previous kernel ended but returned after it: the GPU ran dry waiting.
    tl = timeline(
        ops=[(2 * US, 5 * US, 1), (12 * US, 15 * US, 2)],
        apis=[("cudaLaunchKernel", 0, 1 * US, 1), ("cudaLaunchKernel", 1 * US, 11 * US, 2)],
    )
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert w.idle_host_wait_ns == 7 * US


def test_short_gap_threshold_option() -> None:
    tl = timeline(ops=[(0, 10, 1), (15, 20, 2)], apis=[("cudaLaunchKernel", 0, 1, 1), ("cudaLaunchKernel", 1, 2, 2)])
    [w], _ = analyze_timeline(tl, AnalysisOptions(short_gap_ns=3))
    assert w.idle_other_ns == 5 and w.idle_short_gap_ns == 0


def test_range_attribution_by_launch_thread_and_overlap() -> None:
    tl = timeline(
        ops=[(10, 20, 1), (30, 40, 2), (50, 60, 3), (5, 12, -1)],
        apis=[
            ("cudaLaunchKernel", 2, 4, 1),  # inside the range, same thread
            ("cudaLaunchKernel", 6, 8, 2, 2),  # inside the range, other thread
            ("cudaLaunchKernel", 45, 47, 3),  # after the range
        ],
        ranges=[("step", 0, 25)],
    )
    [w], _ = analyze_timeline(tl, AnalysisOptions(ranges=("st.p",)))
    # op 1 (launched inside) and op 4 (no launch call, overlaps) belong; op 2 was launched by another thread.
    # The window is their GPU projection: first op start to last op end; the range stays beside it.
    assert (w.gpu_ops, w.start_ns, w.end_ns, w.range_start_ns, w.range_end_ns, w.range_ns) == (2, 5, 20, 0, 25, 25)
    assert w.attribution == "thread"
    [w], _ = analyze_timeline(tl, AnalysisOptions(ranges=("step",), same_thread=False))
    assert w.gpu_ops == 3 and w.end_ns == 40 and w.attribution == "process"  # to the end of its GPU work


def test_range_that_never_occurs_is_no_data() -> None:
    from launchprobe.errors import NoDataError

    tl = timeline(ops=[(0, 1, -1)], apis=[], ranges=[("step", 0, 5)])
    with pytest.raises(NoDataError, match="most common ranges.*'step'"):
        analyze_timeline(tl, AnalysisOptions(ranges=("decode",)))


def test_percentile_is_inverted_cdf() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9
    assert percentile([], 50) is None


def _loop_db(tmp_path: Path, loop: synth.Loop, **kwargs: Any) -> tuple[Path, dict[str, np.ndarray]]:
    data = synth.decode_loop(loop)
    return synth.write_nsys_sqlite(tmp_path / "loop.sqlite", data, **kwargs), data


def test_launch_bound_decode_loop(tmp_path: Path) -> None:
    loop = synth.Loop(steps=5, kernels_per_step=20, kernel_ns=3 * US, launch_ns=8 * US)
    path, data = _loop_db(tmp_path, loop)
    records, summaries = analyze_timeline(read_nsys_sqlite(path), AnalysisOptions(ranges=("decode_step",)))
    assert len(records) == 5
    w = records[2]
    span = 19 * 8 * US + 3 * US  # its first kernel's start to its last's end: launches 8 us apart, 3 us kernels
    assert (w.span_ns, w.busy_ns, w.kernels) == (span, 60 * US, 20)
    assert w.range_ns == 50 * US + 20 * 8 * US + 1_500 + 3 * US + 2 * US  # the host range, up to its sync
    assert w.host_ahead_ns == 1_500  # the first kernel's queue time
    assert w.idle_host_wait_ns == span - 60 * US  # every stretch waits for the next launch
    assert w.launches == {"cudaLaunchKernel": 20} and w.kernels_per_launch == 1.0
    assert w.gap_p50_ns == 5 * US
    assert w.queue_ns.p50 == 1_500 and w.launch_api_ns.p50 == 8 * US
    assert w.verdict == "launch-bound"
    assert records[-1].idle_other_ns == 0  # the GPU projection ends at the last kernel: no trailing sync stretch
    [summary] = summaries
    assert summary.instances == 5 and summary.verdict == "launch-bound"
    assert summary.kernels == 100


def test_gpu_bound_loop_resolved_by_metrics(tmp_path: Path) -> None:
    loop = synth.Loop(steps=3, kernels_per_step=20, kernel_ns=50 * US, launch_ns=8 * US)
    data = synth.decode_loop(loop)
    t0, t1 = int(data["k_start"][0]), int(data["k_end"][-1])
    metrics = [(t, "DRAM Read Bandwidth [Throughput %]", 60.0) for t in range(t0, t1, 10 * US)]
    metrics += [(t, "DRAM Write Bandwidth [Throughput %]", 10.0) for t in range(t0, t1, 10 * US)]
    metrics += [(t, "Tensor Active [Throughput %]", 20.0) for t in range(t0, t1, 10 * US)]
    path = synth.write_nsys_sqlite(tmp_path / "m.sqlite", data, metrics=metrics)
    records, _ = analyze_timeline(read_nsys_sqlite(path), AnalysisOptions(ranges=("decode_step",)))
    w = records[1]
    assert w.idle_short_gap_ns == 19 * US
    assert w.idle_fraction is not None and w.idle_fraction < 0.1
    assert w.verdict == "memory-bound"
    assert w.metrics is not None and w.metrics.dram_pct == pytest.approx(70.0)
    assert "DRAM throughput 70.0%" in w.verdict_reason
    # without metrics: GPU-bound, and the reason says what would decide it
    path2 = synth.write_nsys_sqlite(tmp_path / "n.sqlite", data)
    records, _ = analyze_timeline(read_nsys_sqlite(path2), AnalysisOptions(ranges=("decode_step",)))
    assert records[1].verdict == "gpu-bound" and "--gpu-metrics-devices" in records[1].verdict_reason


def test_graph_launch_fan_out(tmp_path: Path) -> None:
    path, _ = _loop_db(tmp_path, synth.Loop(steps=2, kernels_per_step=30, graph=True))
    [w] = build_run(read_nsys_sqlite(path), AnalysisOptions()).windows
    assert w.launches == {"cudaGraphLaunch": 2} and w.kernels_per_launch == 30.0


def test_device_filter(tmp_path: Path) -> None:
    from launchprobe.errors import NoDataError

    path, _ = _loop_db(tmp_path, synth.Loop(steps=1), device=3)
    tl = read_nsys_sqlite(path)
    assert [w.device for w in analyze_timeline(tl, AnalysisOptions(devices=(3,)))[0]] == [3]
    with pytest.raises(NoDataError, match="device 0"):
        analyze_timeline(tl, AnalysisOptions(devices=(0,)))


# --- CLI --------------------------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_json_and_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _loop_db(tmp_path, synth.Loop(steps=2))
    out = tmp_path / "run.json"
    assert _cli(["analyze", str(path), "--range", "decode_.*", "--format", "json", "--output", str(out)]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["schema_version"] == 1 and run["kind"] == "analyze"
    assert len(run["windows"]) == 2 and run["windows"][0]["verdict"] == "launch-bound"
    for key in ("name", "device", "kernels", "gpu_ops", "span_ns", "busy_ns", "idle_fraction", "idle_host_wait_ns",
                "idle_other_ns", "gap_p50_ns", "gap_p90_ns", "verdict", "verdict_reason"):  # fmt: skip
        assert key in run["windows"][0]
    assert json.loads(out.read_text())["windows"] == run["windows"]
    # no overwrite without --force
    assert _cli(["analyze", str(path), "--output", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_cli_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _loop_db(tmp_path, synth.Loop(steps=2))
    assert _cli(["analyze", str(path), "--format", "plain"]) == 0
    text = capsys.readouterr().out
    assert "whole trace" in text and "launch-bound" in text


@pytest.mark.parametrize(
    "content,code",
    [(b"hello, not a trace", 6), (b'{"traceEvents": [', 6), (b'{"traceEvents": []}', 7)],
)
def test_cli_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, code: int) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert _cli(["analyze", str(path)]) == code
    err = capsys.readouterr().err
    assert err.startswith("launchprobe: error:") and len(err.strip().splitlines()) == 1


def test_cli_range_never_occurs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _loop_db(tmp_path, synth.Loop(steps=1))
    assert _cli(["analyze", str(path), "--range", "prefill"]) == 7
    assert "decode_step" in capsys.readouterr().err


def test_cli_nsys_rep_without_nsys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"not really")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LAUNCHPROBE_NSYS", raising=False)
    assert _cli(["analyze", str(rep)]) == 5
    assert "nsys" in capsys.readouterr().err
