"""--trace-out: the Perfetto / chrome://tracing file of a real trace and of classify runs, read back and checked
against the run it was made from (slices, categories, relative times, valid Trace Event Format)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from launchprobe.analysis.idle import CLASS_NAMES
from launchprobe.api import analyze_trace
from launchprobe.cli import main
from launchprobe.render.perfetto import cause_label, trace_events
from launchprobe.run import load_run
from launchprobe.run.schema import AnalyzeRun, ClassifyRun

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PLAIN = FIXTURES / "plain_torch.sqlite.gz"
KERNELS = FIXTURES / "h200_classify_kernels_8b.json.gz"
STEP = r"step \d+"


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def check_trace_event_format(doc: Any) -> list[dict[str, Any]]:
    """The rules Perfetto's and chrome://tracing's JSON importers hold a file to; returns the X events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ns"
    named: set[tuple[int, int]] = set()
    processes: set[int] = set()
    slices = []
    for event in doc["traceEvents"]:
        assert event["ph"] in ("X", "M")
        assert type(event["pid"]) is int and type(event["tid"]) is int
        assert isinstance(event["name"], str)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            assert isinstance(event["args"], dict)
            if event["name"] == "thread_name":
                named.add((event["pid"], event["tid"]))
            if event["name"] == "process_name":
                processes.add(event["pid"])
            continue
        assert isinstance(event["ts"], float | int) and isinstance(event["dur"], float | int)
        assert math.isfinite(event["ts"]) and event["ts"] >= 0 and event["dur"] >= 0
        assert isinstance(event["cat"], str) and event["cat"]
        slices.append(event)
    assert {(e["pid"], e["tid"]) for e in slices} <= named  # every track has a name
    assert {e["pid"] for e in slices} <= processes
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in slices:
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():  # slices of one thread never overlap (no nesting needed)
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-6, track
    return slices


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[AnalyzeRun, dict[str, Any], Any]:
    out = tmp_path_factory.mktemp("trace") / "seen.json"
    assert _cli(["analyze", str(PLAIN), "--range", STEP, "--trace-out", str(out), "-f", "json"]) == 0
    seen = analyze_trace(PLAIN, ranges=STEP)
    return seen.run, json.loads(out.read_text()), seen.timeline


def test_analyze_trace_out_is_valid_and_has_every_op(plain: tuple[AnalyzeRun, dict[str, Any], Any]) -> None:
    run, doc, timeline = plain
    slices = check_trace_event_format(doc)
    cats = {e["cat"] for e in slices}
    assert cats == {"window", "idle", "kernel", "memcpy"}
    ops = [e for e in slices if e["cat"] in ("kernel", "memcpy", "memset")]
    assert len(ops) == len(timeline.gpu_ops)
    assert sorted(e["name"] for e in ops) == sorted(timeline.gpu_ops["name"].astype(str))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {"GPU 0: NVIDIA H200"}
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"windows (verdict)", "GPU idle (cause)", "stream 7"} <= threads


def test_times_are_relative_to_the_trace_start(plain: tuple[AnalyzeRun, dict[str, Any], Any]) -> None:
    run, doc, timeline = plain
    origin = doc["otherData"]["time_origin_ns"]
    firsts = [int(f["start_ns"].min()) for f in (timeline.gpu_ops, timeline.api_calls, timeline.ranges) if len(f)]
    assert origin == min(firsts)
    slices = check_trace_event_format(doc)
    assert min(e["ts"] for e in slices) == 0.0
    ops = sorted((e for e in slices if e["cat"] == "kernel"), key=lambda e: e["ts"])
    first = timeline.gpu_ops[timeline.gpu_ops["kind"] == "kernel"]["start_ns"].min()
    assert ops[0]["ts"] == pytest.approx((first - origin) / 1e3, abs=1e-3)
    assert max(e["ts"] + e["dur"] for e in slices) < 1e7  # seconds of trace, not epoch microseconds


def test_windows_are_spans_with_their_verdict(plain: tuple[AnalyzeRun, dict[str, Any], Any]) -> None:
    run, doc, _ = plain
    origin = doc["otherData"]["time_origin_ns"]
    windows = sorted((e for e in check_trace_event_format(doc) if e["cat"] == "window"), key=lambda e: e["ts"])
    assert len(windows) == len(run.windows) == 40
    for event, window in zip(windows, sorted(run.windows, key=lambda w: w.start_ns)):
        assert event["name"] == f"{window.name}: {window.verdict}"
        assert event["args"]["verdict"] == window.verdict and event["args"]["busy_ns"] == window.busy_ns
        assert event["ts"] == pytest.approx((window.start_ns - origin) / 1e3, abs=1e-3)
        assert event["dur"] == pytest.approx(window.span_ns / 1e3, abs=2e-3)


def test_idle_slices_carry_their_cause_and_add_up(plain: tuple[AnalyzeRun, dict[str, Any], Any]) -> None:
    run, doc, _ = plain
    origin = doc["otherData"]["time_origin_ns"]
    idle = [e for e in check_trace_event_format(doc) if e["cat"] == "idle"]
    assert idle and {e["name"] for e in idle} <= {cause_label(c) for c in CLASS_NAMES}
    assert {e["args"]["cause"] for e in idle} <= set(CLASS_NAMES)
    for window in run.windows[:5]:  # the idle slices clipped to a window give its idle split
        lo, hi = (window.start_ns - origin) / 1e3, (window.end_ns - origin) / 1e3
        totals: dict[str, float] = defaultdict(float)
        for e in idle:
            overlap = min(hi, e["ts"] + e["dur"]) - max(lo, e["ts"])
            if overlap > 0:
                totals[e["args"]["cause"]] += overlap
        assert totals["host_wait"] * 1e3 == pytest.approx(window.idle_host_wait_ns, abs=50)
        assert totals["short_gap"] * 1e3 == pytest.approx(window.idle_short_gap_ns, abs=50)
        assert totals["other"] * 1e3 == pytest.approx(window.idle_other_ns, abs=50)


def test_overlapping_ops_go_to_lanes() -> None:
    from launchprobe.render.perfetto import _Lanes, _Process

    events: list[dict[str, Any]] = []
    lanes = _Lanes(_Process(events, 1, "p", 0), "stream 7")
    for start, end in ((0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (3.5, 5.0)):
        lanes.add("k", "kernel", start, end, {})
    doc = {"traceEvents": events, "displayTimeUnit": "ns"}
    slices = check_trace_event_format(doc)
    assert [e["tid"] for e in slices] == [1, 2, 1, 2]
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} == {"stream 7", "stream 7 (2)"}


def test_classify_trace_has_one_step_per_mode_side_by_side(tmp_path: Path) -> None:
    run = load_run(KERNELS)
    assert isinstance(run, ClassifyRun)
    out = tmp_path / "steps.json"
    from launchprobe.api import write_trace

    write_trace(run, out)
    doc = json.loads(out.read_text())
    slices = check_trace_event_format(doc)
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert sorted(processes.values()) == sorted(f"batch {b}" for b in {r.batch for r in run.results})
    steps = [e for e in slices if e["cat"] == "step"]
    assert len(steps) == len(run.results)
    for r in run.results:
        assert r.kernel_pass is not None
        pid = next(p for p, name in processes.items() if name == f"batch {r.batch}")
        (step,) = [e for e in steps if e["pid"] == pid and e["name"] == f"{r.mode} b={r.batch}: {r.verdict}"]
        assert step["ts"] == 0.0 and step["dur"] == pytest.approx(r.kernel_pass.step_span_ns / 1e3, abs=1e-3)
        tids = {e["tid"] for e in doc["traceEvents"] if e["name"] == "thread_name" and e["pid"] == pid
                and e["args"]["name"].startswith(f"{r.mode}: ops")}  # fmt: skip
        kernels = [e for e in slices if e["pid"] == pid and e["tid"] in tids]
        assert len(kernels) == len(r.kernel_pass.kernels) and {e["cat"] for e in kernels} == {"kernel"}
        first = min(k.start_ns for k in r.kernel_pass.kernels)
        assert min(e["ts"] for e in kernels) == pytest.approx(first / 1e3, abs=1e-3)
        assert max(e["ts"] + e["dur"] for e in kernels) <= step["dur"] + 1e-3
    assert any(e["cat"] == "idle" for e in slices)


def test_classify_cli_trace_out_on_the_cpu_path(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cpu.json"
    env = {**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(tmp_path)}
    argv = ["classify", "--device", "cpu", "--steps", "3", "--warmup", "0", "--batch", "1", "-q", "-f", "json"]
    proc = subprocess.run([sys.executable, "-m", "launchprobe", *argv, "--trace-out", str(out)], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    doc = json.loads(out.read_text())
    slices = check_trace_event_format(doc)
    (step,) = slices
    result = run["results"][0]
    assert step["cat"] == "step" and step["name"] == f"eager b=1: {result['verdict']}"
    assert step["dur"] == pytest.approx(result["step_ms_median"] * 1e3, abs=1e-3)


def test_analyze_run_needs_its_timeline() -> None:
    run = load_run(FIXTURES / "field" / "E_analyze_run.json.gz")
    with pytest.raises(ValueError, match="Timeline"):
        trace_events(run)


def test_trace_out_is_not_overwritten_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine.json"
    out.write_text("keep")
    assert _cli(["analyze", str(PLAIN), "--trace-out", str(out), "-f", "json"]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "keep"
    assert _cli(["analyze", str(PLAIN), "--trace-out", str(out), "--force", "-f", "json"]) == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_nsys_trace_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`launchprobe nsys --trace-out` draws the profile it analysed (a fake nsys that exports a synthetic loop)."""
    from test_nsys_cli import FAKE_NSYS

    from tests.fixtures import nsys_synth as synth

    sqlite = synth.write_nsys_sqlite(tmp_path / "fixture.sqlite", synth.decode_loop(synth.Loop(steps=3)))
    binary = tmp_path / "bin" / "nsys"
    binary.parent.mkdir()
    binary.write_text(FAKE_NSYS.format(python=sys.executable))
    binary.chmod(0o755)
    monkeypatch.setenv("LAUNCHPROBE_NSYS", str(binary))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(tmp_path / "nsys.log"))
    monkeypatch.setenv("FAKE_NSYS_SQLITE", str(sqlite))
    out = tmp_path / "seen.json"
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--range", "decode_.*", "--trace-out", str(out), "-f", "json"]
    assert _cli([*argv, sys.executable, "-c", "pass"]) == 0
    run = json.loads(capsys.readouterr().out)
    slices = check_trace_event_format(json.loads(out.read_text()))
    windows = [e for e in slices if e["cat"] == "window"]
    assert [e["name"] for e in windows] == [f"{w['name']}: {w['verdict']}" for w in run["windows"]]
    assert sum(e["cat"] == "kernel" for e in slices) == sum(w["kernels"] for w in run["windows"]) > 0
    assert min(e["ts"] for e in slices) == 0.0
