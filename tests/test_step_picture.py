"""The picture of each step kind (``typical_step``): the instance chosen and its busy intervals, against an
independent computation, on a constructed timeline and on a field trace (truth stripped); the cap; the plot."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from launchprobe.analysis.step_picture import cap_intervals, step_picture
from launchprobe.api import analyze_timeline
from launchprobe.collect import load_trace
from launchprobe.run.schema import AnalyzeRun, Summary, Window
from launchprobe.timeline import API_CALL_COLUMNS, GPU_OP_COLUMNS, RANGE_COLUMNS, Timeline, api_category, conform
from tests.fixtures import nsys_synth as synth
from tests.test_field_traces import gunzip, nsys_steps, strip_nvtx_domain

OVERHEADS = [30, 80, 45, 60, 35, 95, 50, 70, 40, 65, 55, 85]  # us of host time before each step's launches
KERNELS = ["gemv", "rms_norm", "attention", "silu_mul", "gemv", "argmax"]
OP_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}
OVERLAP = 3  # this kernel of each step runs on past the next one's start (a second stream)


def loop_timeline() -> tuple[Timeline, list[list[tuple[int, int]]]]:
    """Synchronised eager steps of 6 kernels, each after a different host overhead; and each step's kernels."""
    ops, apis, kernels = [], [], []
    t, corr = 1_000_000, 0
    names = {1: "cudaLaunchKernel", 3: "cudaStreamSynchronize"}
    for overhead in OVERHEADS:
        d = synth.decode_loop(synth.Loop(steps=1, kernels_per_step=6, step_overhead_ns=overhead * 1000), t0=t)
        ends = d["k_end"].copy()
        ends[OVERLAP] += 5_000
        kernels.append([(int(s), int(e)) for s, e in zip(d["k_start"], ends, strict=True)])
        for k, (s, e, c) in enumerate(zip(d["k_start"], ends, d["k_corr"], strict=True)):
            ops.append({"kind": "kernel", "name": KERNELS[k], "start_ns": s, "end_ns": e, "device": 0, "stream": 7,
                        "pid": 1, "correlation_id": c + corr, "graph_node_id": -1, "bytes": 0})  # fmt: skip
        for s, e, n, c in zip(d["r_start"], d["r_end"], d["r_name"], d["r_corr"], strict=True):
            name = names[int(n)]
            apis.append({"name": name, "category": api_category(name), "start_ns": s, "end_ns": e, "pid": 1,
                         "tid": 1, "correlation_id": c + corr})  # fmt: skip
        t = int(d["step_end"][0])
        corr += int(np.max(d["r_corr"])) + 1
    ranges = conform(pd.DataFrame({k: [] for k in RANGE_COLUMNS}), RANGE_COLUMNS)
    timeline = Timeline(
        gpu_ops=conform(pd.DataFrame(ops), GPU_OP_COLUMNS),
        api_calls=conform(pd.DataFrame(apis), API_CALL_COLUMNS),
        ranges=ranges,
        meta={"format": "nsys-sqlite", "path": "loop.sqlite", "notices": []},
    )
    return timeline, kernels


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def kind_of(run: AnalyzeRun) -> tuple[Summary, list[Window]]:
    (kind,) = [s for s in run.summaries if s.step_kind]
    return kind, [w for w in run.windows if w.step_kind == kind.step_kind]


def test_typical_step_of_a_constructed_loop() -> None:
    timeline, kernels = loop_timeline()
    run = analyze_timeline(timeline, steps="auto")
    kind, windows = kind_of(run)
    assert len(windows) == len(OVERHEADS)
    # independently: a step owns from the previous step's last kernel end to its own (the first from its own start)
    bounds = [(k[0][0] if i == 0 else max(e for _, e in kernels[i - 1]), max(e for _, e in k))
              for i, k in enumerate(kernels)]  # fmt: skip
    assert [(w.start_ns, w.end_ns) for w in windows] == bounds
    spans = sorted(end - start for start, end in bounds)
    p50 = spans[(len(spans) + 1) // 2 - 1]  # inverted-CDF median: a real step's time
    chosen = min(range(len(bounds)), key=lambda i: (abs(bounds[i][1] - bounds[i][0] - p50), i))
    picture = kind.typical_step
    assert picture is not None
    assert (picture.instance, picture.start_ns, picture.end_ns) == (chosen, *bounds[chosen])
    assert picture.window == f"{kind.name} #{chosen}" and picture.span_ns == p50 == kind.span_p50_ns
    start, end = bounds[chosen]
    clipped = [(max(s, start) - start, min(e, end) - start) for s, e in kernels[chosen]]
    expected = union([(s, e) for s, e in clipped if e > s])
    assert len(expected) < len(KERNELS)  # the overlapping kernel merged with its neighbour
    assert picture.busy_intervals == expected and picture.intervals == len(expected)
    assert picture.busy_ns == sum(e - s for s, e in expected) == windows[chosen].busy_ns
    assert picture.merged_idle_ns == 0


def test_the_cap_fills_the_shortest_gaps() -> None:
    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.integers(1_000, 5_000, 40) + rng.integers(1, 300, 40)).astype(np.int64)
    ends = starts + 1_000
    s, e, merged = cap_intervals(starts, ends, 10)
    gaps = list(starts[1:] - ends[:-1])
    kept = sorted(sorted(range(len(gaps)), key=lambda i: (-gaps[i], i))[:9])  # the 9 longest gaps stay
    assert list(s) == [int(starts[0])] + [int(starts[i + 1]) for i in kept]
    assert list(e) == [int(ends[i]) for i in kept] + [int(ends[-1])]
    assert merged == sum(gaps) - sum(gaps[i] for i in kept)
    assert int((e - s).sum()) == int((ends - starts).sum()) + merged  # drawn busy = busy + the idle filled
    same = cap_intervals(starts, ends, 40)
    assert same[0] is starts and same[2] == 0


def test_capped_picture_keeps_the_exact_busy() -> None:
    from launchprobe.analysis.step_run import step_records
    from launchprobe.analysis.windows import AnalysisOptions, prepare

    timeline, _ = loop_timeline()
    options = AnalysisOptions()
    prep = prepare(timeline, options)
    result, records, summaries = step_records(timeline, options, "auto", prep)
    step = sorted(result.steps, key=lambda s: s.end_ns)[4]
    full = step_picture(step, records[4], prep)
    capped = step_picture(step, records[4], prep, cap=2)
    assert len(capped.busy_intervals) == 2 and capped.intervals == full.intervals > 2
    assert capped.busy_ns == full.busy_ns == records[4].busy_ns
    drawn = sum(e - s for s, e in capped.busy_intervals)
    assert drawn == capped.busy_ns + capped.merged_idle_ns and capped.merged_idle_ns > 0


# --- a field trace: B, a server serving bursts of graph replays, each step ending in tokens.cpu() --------------


def sqlite_union(path: Path, lo: int, hi: int) -> tuple[int, list[tuple[int, int]]]:
    """The union of every GPU op (kernels, copies, sets: one device, one process at work) within [lo, hi), from
    sqlite3, clipped to it and from ``lo``."""
    con = sqlite3.connect(path)
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = []
    for table in sorted(tables & OP_TABLES):
        rows += con.execute(f"SELECT start, end FROM {table} WHERE end > ? AND start < ?", (lo, hi)).fetchall()
    con.close()
    ops = np.clip(np.array(rows, dtype=np.int64), lo, hi) - lo
    merged = union([(int(s), int(e)) for s, e in ops if e > s])
    return sum(e - s for s, e in merged), merged


def test_typical_step_of_a_field_trace(tmp_path: Path) -> None:
    path = gunzip("B_server.sqlite.gz", tmp_path)
    stripped = strip_nvtx_domain(path, "truth")
    run = analyze_timeline(load_trace(stripped), steps="auto")
    kind, windows = kind_of(run)
    picture = kind.typical_step
    assert picture is not None
    typical = [w for w in windows if not w.outlier]
    spans = sorted(w.span_ns for w in typical)
    assert picture.span_ns == spans[(len(spans) + 1) // 2 - 1]
    (window,) = [w for w in windows if w.instance == picture.instance]
    assert (window.start_ns, window.end_ns) == (picture.start_ns, picture.end_ns)
    busy, intervals = sqlite_union(path, picture.start_ns, picture.end_ns)
    assert picture.busy_ns == busy == window.busy_ns
    assert picture.busy_intervals == intervals and picture.merged_idle_ns == 0
    # the truth step ending there: the union of the ops launched inside its range (unclipped) is the same busy
    (truth,) = [t for t in nsys_steps(path, r"truth_step \d+") if t.gpu_end == picture.end_ns]
    assert truth.busy == busy and truth.gpu_start >= picture.start_ns


def test_step_kinds_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from launchprobe.render import plots

    run = analyze_timeline(loop_timeline()[0], steps="auto")
    kind, _ = kind_of(run)
    plot = plots.plot_step_kinds(run)
    assert plot is not None
    (row,) = plot.data["rows"]
    picture = kind.typical_step
    assert picture is not None
    assert row["busy_ms"] == [(s / 1e6, (e - s) / 1e6) for s, e in picture.busy_intervals]
    assert row["step_ms"] == picture.span_ns / 1e6 and row["verdict"] == kind.verdict
    paths = plots.write_plots(run, tmp_path / "plots")
    assert [p.name for p in paths] == ["windows.png", "step-kinds.png"]
    assert paths[1].read_bytes().startswith(b"\x89PNG") and paths[1].stat().st_size > 5_000


def test_analyze_cli_writes_the_picture(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from launchprobe.cli import main
    from launchprobe.run.files import load_run

    trace = synth.write_nsys_sqlite(tmp_path / "c.sqlite", synth.decode_loop(synth.Loop(steps=8)))
    out, pngs = tmp_path / "run.json", tmp_path / "png"
    with pytest.raises(SystemExit) as done:
        main(["analyze", str(trace), "--format", "json", "--output", str(out), "--plot", str(pngs)])
    assert done.value.code in (0, None)
    assert sorted(p.name for p in pngs.iterdir()) == ["step-kinds.png", "windows.png"]
    run = load_run(out)
    assert isinstance(run, AnalyzeRun)
    kind, windows = kind_of(run)
    picture = kind.typical_step
    assert picture is not None and picture.busy_intervals and picture.span_ns == kind.span_p50_ns
    (window,) = [w for w in windows if w.instance == picture.instance]
    assert picture.busy_ns == window.busy_ns == sum(e - s for s, e in picture.busy_intervals)


def test_step_kinds_plot_of_a_saved_run() -> None:
    """From the run alone (no trace): a row per kind in the run's order, the cap's merging said in the caption."""
    pytest.importorskip("matplotlib")
    import runs

    from launchprobe.render import plots

    run = runs.analyze_steps_run()
    plot = plots.plot_step_kinds(run)
    assert plot is not None and plot.data["total"] == 2
    decode, prefill = plot.data["rows"]
    assert decode["label"] == "decode, graph replay, 84 ops" and decode["step_ms"] == pytest.approx(0.70)
    assert decode["busy_fraction"] == pytest.approx(0.418 / 0.70) and "launch-bound" in decode["caption"]
    assert "786 shortest gaps (150 us of idle) drawn busy" in prefill["caption"]
    assert plots.plot_step_kinds(runs.analyze_run()) is None  # no step kinds, no picture


def test_the_report_lists_the_kinds_with_most_steps() -> None:
    """Dozens of small repeating kinds (a JAX model's initialisation) around the loop: the Ranges table keeps the
    12 with most steps and says how many more the JSON holds."""
    import msgspec

    from launchprobe.render import render_text
    from tests import runs

    run = runs.analyze_steps_run()
    decode = run.summaries[0]
    extra = [
        msgspec.structs.replace(decode, name=f"step: init {i}", step_kind=f"init {i}", instances=3) for i in range(14)
    ]
    run = msgspec.structs.replace(run, summaries=[*run.summaries, *extra])
    text = render_text(run, "plain", width=400)
    assert "step: init 9 " in text and "step: init 10 " not in text  # 2 kinds + the first 10 of the 14
    assert "4 more step kinds (12 steps, fewest steps each) in the JSON" in text
