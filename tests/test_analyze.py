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


# --- issue 11: windows as the GPU saw them, idle with no work, typical instances ---------------------------------


def test_host_ahead_windows_are_their_own_gpu_work() -> None:
    # The host queues both steps within 20 us; the GPU runs them 2 ms later, step 1's kernel (another stream)
    # inside step 0's gap. Each window is its own ops' span and union; the gap filled by step 1 is not idle host wait.
    ms = 1_000 * US
    tl = timeline(
        ops=[(2 * ms, 2 * ms + 10 * US, 1), (2 * ms + 40 * US, 2 * ms + 50 * US, 2),
             (2 * ms + 15 * US, 2 * ms + 35 * US, 3)],
        apis=[("cudaLaunchKernel", 1 * US, 3 * US, 1), ("cudaLaunchKernel", 4 * US, 5 * US, 2),
              ("cudaLaunchKernel", 11 * US, 12 * US, 3)],
        ranges=[("step 0", 0, 10 * US), ("step 1", 10 * US, 20 * US)],
    )  # fmt: skip
    records, [summary] = analyze_timeline(tl, AnalysisOptions(ranges=("step.*",)))
    w0, w1 = records
    assert (w0.start_ns, w0.end_ns, w0.span_ns, w0.busy_ns) == (2 * ms, 2 * ms + 50 * US, 50 * US, 20 * US)
    assert (w0.idle_host_wait_ns, w0.idle_short_gap_ns, w0.idle_other_ns, w0.idle_no_work_ns) == (0, 0, 30 * US, 0)
    assert (w0.range_start_ns, w0.range_ns, w0.host_ahead_ns) == (0, 10 * US, 2 * ms - 3 * US)
    assert "evidence against launch-bound" in w0.verdict_reason
    assert (w1.span_ns, w1.busy_ns, w1.idle_ns, w1.host_ahead_ns) == (20 * US, 20 * US, 0, 2 * ms + 15 * US - 12 * US)
    assert summary.host_ahead_p50_ns == 2 * ms - 3 * US


def _quiet_timeline(thread_states: list[tuple[int, int]] | None = None) -> Timeline:
    """Two kernels 100 ms apart and no API call between their launches (a server waiting for a request)."""
    tl = timeline(
        ops=[(0, 10 * US, 1), (100_000 * US, 100_010 * US, 2)],
        apis=[("cudaLaunchKernel", 0, 1 * US, 1), ("cudaLaunchKernel", 99_990 * US, 99_995 * US, 2)],
    )
    if thread_states is not None:
        tl.thread_states = pd.DataFrame(
            {"pid": 1, "tid": 1, "start_ns": [s for s, _ in thread_states], "end_ns": [e for _, e in thread_states]}
        )
    return tl


def test_quiet_stretch_without_thread_state_is_no_work() -> None:
    [w], _ = analyze_timeline(_quiet_timeline(), AnalysisOptions())
    assert w.no_work_source == "quiet-heuristic"
    assert (w.idle_no_work_ns, w.idle_host_wait_ns) == (99_980 * US, 10 * US)  # until the launch call started
    assert w.idle_host_wait_ns + w.idle_short_gap_ns + w.idle_other_ns + w.idle_no_work_ns == w.idle_ns
    assert w.active_ns == w.span_ns - w.idle_no_work_ns == 30 * US
    assert w.verdict == "gpu-bound"  # active: 20 us busy of 30 us; never launch-bound for the wait
    assert w.verdict_reason.startswith("idle: no work issued") and "heuristic" in w.verdict_reason
    assert w.largest_idle[0].kind == "no_work"
    [off], _ = analyze_timeline(_quiet_timeline(), AnalysisOptions(quiet_ns=0))  # heuristic off: as before
    assert (off.idle_no_work_ns, off.idle_host_wait_ns, off.verdict) == (0, 99_990 * US, "launch-bound")
    [long], _ = analyze_timeline(_quiet_timeline(), AnalysisOptions(quiet_ns=200_000 * US))
    assert long.idle_no_work_ns == 0


def test_quiet_stretch_with_thread_state_counts_only_time_switched_out() -> None:
    # The launching thread slept 20 us .. 60 ms, then ran (host work, no launch) until it launched at 99.99 ms.
    tl = _quiet_timeline([(20 * US, 60_000 * US)])
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert w.no_work_source == "thread-state"
    assert w.idle_no_work_ns == 60_000 * US - 20 * US
    # the running part: the host was late
    assert w.idle_ns is not None and w.idle_host_wait_ns == w.idle_ns - w.idle_no_work_ns
    assert w.verdict == "launch-bound" and "thread-state" in w.verdict_reason
    # switched out inside a CUDA call (a blocking sync) is waiting for the GPU, not having no work
    tl = _quiet_timeline([(0, 1 * US)])
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert w.idle_no_work_ns == 0


def test_summary_reports_the_typical_instance_and_names_outliers() -> None:
    # step 0 waits 1 ms for its launch (a warm-up); steps 1-4 are GPU-bound.
    ops, apis, ranges = [], [], []
    t = 0
    for i in range(5):
        wait = 1_000 * US if i == 0 else 0
        late = t + 2 * US + wait
        apis += [("cudaLaunchKernel", t, t + 1 * US, 2 * i + 1), ("cudaLaunchKernel", late, late + 1 * US, 2 * i + 2)]
        ops += [(t + 2 * US, t + 12 * US, 2 * i + 1), (t + 13 * US + wait, t + 23 * US + wait, 2 * i + 2)]
        ranges.append((f"step {i}", t, t + 25 * US + wait))
        t += 100 * US + wait
    records, [s] = analyze_timeline(timeline(ops, apis, ranges), AnalysisOptions(ranges=("step.*",)))
    assert [r.verdict for r in records] == ["launch-bound"] + ["gpu-bound"] * 4
    assert [(o.window, o.span_ns) for o in s.outliers] == [("step 0", 1_021 * US)]
    assert (s.typical_instances, s.verdict, s.totals_verdict) == (4, "gpu-bound", "launch-bound")
    assert s.span_ns == sum(r.span_ns for r in records)  # totals kept
    assert s.idle_fraction_p50 == round(1 / 21, 6)
    assert s.verdict_reason.startswith("typical instance (4 of 5): 4 are gpu-bound") and "step 0" in s.verdict_reason


def test_profiler_step_counts_work_of_every_thread_of_its_process() -> None:
    tl = timeline(
        ops=[(10, 20, 1), (30, 40, 2)],
        apis=[("cudaLaunchKernel", 1, 2, 1), ("cudaLaunchKernel", 5, 6, 2, 7)],  # the second from autograd's thread
        ranges=[("ProfilerStep#3", 0, 25), ("step", 0, 25)],
    )
    records, _ = analyze_timeline(tl, AnalysisOptions(ranges=("ProfilerStep#.*", "step")))
    by = {r.name: r for r in records}
    assert (by["ProfilerStep#3"].kernels, by["ProfilerStep#3"].attribution) == (2, "process")
    assert (by["step"].kernels, by["step"].attribution) == (1, "thread")
    records, _ = analyze_timeline(tl, AnalysisOptions(ranges=("ProfilerStep#.*",), same_thread=True))
    assert records[0].kernels == 1


def test_long_kernel_names_are_shortened_in_tables_only() -> None:
    from launchprobe.render import render_text

    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"  # noqa: E501
    tl = timeline(ops=[(0, 10, 1)], apis=[("cudaLaunchKernel", 0, 1, 1)])
    tl.gpu_ops["name"] = name
    run = build_run(tl, AnalysisOptions())
    text = render_text(run, "plain", width=200, name_width=40)
    assert name not in text and "vectorized_elementwise_kernel<…>(…)" in text
    assert name in render_text(run, "json")
