"""Renderers: formats, files, missing values, plain consoles."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import runs
from rich.console import Console

from launchprobe.console import make_console
from launchprobe.errors import UsageError
from launchprobe.render import build_report, emit, pick_format, render_table, render_text
from launchprobe.render.markdown import report_markdown
from launchprobe.render.model import Strip
from launchprobe.run.files import from_builtins, load_run, to_builtins
from launchprobe.run.schema import (
    AnchorEffect,
    CaptureCheck,
    CaptureShift,
    ClassGapTotal,
    EventLag,
    FreshCaptureClass,
    FreshCaptures,
    IdleStretch,
    Run,
    StartShift,
    TimerPairClass,
    TimerPairs,
    TopKernel,
)


def plain_output(run: Run, width: int = 100) -> str:
    buffer = io.StringIO()
    render_table(run, make_console(buffer, plain=True, width=width))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("fmt", "output", "expected"),
    [
        (None, None, "table"),
        (None, "run.json", "json"),
        (None, "run.CSV", "csv"),
        (None, "summary.md", "markdown"),
        (None, "report.txt", "plain"),
        (None, "summary", "json"),  # -o without a known extension: the run file
        ("markdown", "x.json", "markdown"),
    ],
)
def test_pick_format(fmt: str | None, output: str | None, expected: str) -> None:
    assert pick_format(fmt, Path(output) if output else None) == expected


def test_unknown_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown format"):
        pick_format("html", None)


MINIMAL_CLASSIFY: dict[str, Any] = {
    "schema_version": 1,
    "kind": "classify",
    "config": {"shape": "x", "batches": [1], "context": 1, "modes": ["eager"], "dtype": "bf16"},
    "shape": {"name": "x", "layers": 1, "hidden": 8, "ffn": 8, "heads": 1, "kv_heads": 1, "head_dim": 8, "vocab": 8},
}
ONE_RESULT = {"mode": "eager", "batch": 1, "bucket": 1, "padding_fraction": 0.0, "bytes_per_step": 1,
              "flops_per_step": 1, "kernels_expected": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "loads"),
    [
        ({"schema_version": 1, "kind": "classify"}, False),
        ({"schema_version": 1, "kind": "analyze"}, True),
        (MINIMAL_CLASSIFY, True),
        ({**MINIMAL_CLASSIFY, "results": [{"mode": "eager"}, "junk", {"batch": "x"}], "ceilings": None}, False),
        ({**MINIMAL_CLASSIFY, "config": {**MINIMAL_CLASSIFY["config"], "plan": True}, "results": [ONE_RESULT]}, True),
        ({"schema_version": 1, "kind": "analyze", "windows": [{"name": "w"}, None], "source": None}, False),
        ({**MINIMAL_CLASSIFY, "results": [{**ONE_RESULT, "kernel_pass": {}}]}, True),
        ({**MINIMAL_CLASSIFY, "results": [{**ONE_RESULT, "kernel_pass": {"kernels": [{"start_ns": 5}]}}]}, False),
    ],
)
def test_partial_run_files_render_or_are_refused(raw: dict, loads: bool) -> None:
    """A run file with values missing renders with dashes where the schema lets them be missing; one missing what
    the schema requires is refused by the loader in one line naming the field, never rendered half-way."""
    if not loads:
        with pytest.raises(UsageError, match=r"^x.json: not a valid launchprobe run file: \S"):
            from_builtins(raw, "x.json")
        return
    run = from_builtins(raw, "x.json")
    for fmt in ("plain", "markdown", "csv", "json"):
        assert render_text(run, fmt)
    assert "—" in report_markdown(build_report(run))
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    render_table(run, console)


def test_plain_tables_are_not_wrapped_on_a_narrow_console() -> None:
    text = plain_output(runs.classify_run(), width=60)
    rows = [line for line in text.splitlines() if line.startswith(("eager ", "piecewise ", "full "))]
    assert rows and all(line.split()[-1] in ("launch-bound", "memory-bound", "-") or "%" in line for line in rows)
    decode_rows = [line for line in rows if line.endswith("-bound")]
    assert len(decode_rows) == 6  # every row of the step table on one line, verdict included


def test_table_falls_back_to_plain_when_not_a_tty() -> None:
    buffer = io.StringIO()
    emit(runs.classify_run(), fmt=None, output=None, console=make_console(buffer))
    text = buffer.getvalue()
    assert "launch-bound" in text and "─" not in text and "\x1b[" not in text


def test_no_color_makes_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    buffer = io.StringIO()
    emit(runs.classify_run(), fmt="table", output=None, console=make_console(buffer))
    assert "-----" in buffer.getvalue() and "█" not in buffer.getvalue()


def test_plain_format_on_a_rich_console_is_plain() -> None:
    buffer = io.StringIO()
    emit(runs.classify_run(), fmt="plain", output=None, console=Console(file=buffer, force_terminal=True, width=100))
    text = buffer.getvalue()
    assert "\x1b[" not in text and "#" in text and "█" not in text


def test_json_to_console_is_the_run() -> None:
    buffer = io.StringIO()
    run = runs.classify_run()
    emit(run, fmt="json", output=None, console=make_console(buffer))
    assert from_builtins(json.loads(buffer.getvalue())) == run
    assert json.loads(buffer.getvalue()) == to_builtins(run)


def test_csv_is_flat_without_samples_or_kernels(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    emit(runs.classify_run(), fmt=None, output=out)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 6
    assert {"mode", "batch", "step_ms_median", "verdict", "kernel_pass.gaps.p90_ns", "shape"} <= set(rows[0])
    assert not any("samples" in c or c.endswith(".kernels") or c.endswith(".ops") for c in rows[0])
    assert rows[0]["mode"] == "eager" and float(rows[0]["step_ms_median"]) == pytest.approx(9.47)


def test_csv_of_analyze_run_has_one_row_per_window() -> None:
    rows = list(csv.DictReader(io.StringIO(render_text(runs.analyze_run(), "csv"))))
    assert [r["name"] for r in rows] == ["decode_step", "decode_step", "prefill"]
    assert rows[0]["launches.cudaLaunchKernel"] == "480" and rows[0]["source"] == "traces/decode.nsys-rep"


def test_json_output_round_trips_and_refuses_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "copy.json"
    run = runs.analyze_run()
    emit(run, fmt=None, output=out)
    assert load_run(out) == run
    with pytest.raises(UsageError, match="already exists"):
        emit(run, fmt=None, output=out)
    emit(runs.classify_run(), fmt=None, output=out, force=True)
    assert load_run(out).kind == "classify"


def test_markdown_appends_to_an_existing_summary(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary"
    summary.write_text("# earlier step\n")
    emit(runs.classify_run(), fmt="markdown", output=summary)
    emit(runs.analyze_run(), fmt="markdown", output=summary)
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert "## launchprobe classify" in text and "## launchprobe analyze" in text


def test_markdown_never_appends_to_a_json_file(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    out.write_text("{}")
    with pytest.raises(UsageError, match="already exists"):
        emit(runs.classify_run(), fmt="markdown", output=out)
    assert out.read_text() == "{}"


def test_plain_file_refuses_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    out.write_text("mine")
    with pytest.raises(UsageError, match="--force"):
        emit(runs.classify_run(), fmt="table", output=out)
    assert out.read_text() == "mine"
    emit(runs.classify_run(), fmt="table", output=out, force=True)
    assert "launchprobe classify" in out.read_text() and "█" not in out.read_text()


def test_output_into_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        emit(runs.classify_run(), fmt="csv", output=tmp_path / "no" / "run.csv")


def test_plan_run_shows_floors_not_measurements() -> None:
    text = plain_output(runs.plan_run(), width=120)
    assert "Plan: cost model and floors per step" in text
    assert "Decode step" not in text and "launch-bound" not in text
    assert "16,194.7" in text and "3.740" in text  # MB per step and the memory floor


def test_cpu_run_says_graph_modes_are_unavailable() -> None:
    text = plain_output(runs.cpu_classify_run())
    assert "! piecewise unavailable: CUDA graphs need a CUDA GPU" in text
    assert "! CPU path" in text


def test_kernel_pass_sections() -> None:
    text = plain_output(runs.classify_run(), width=140)
    assert "Per-kernel pass: eager, batch 1 (stitched from sampled steps)" in text
    assert "gaps before kernels: p50" in text and "instrumentation: 9.673 ms per sampled step" in text
    assert "picture: stitched from 1,385 sampled steps: end events in pairs, one pair every 135 ops per step" in text
    assert "within the 2% budget" in text and "gaps less" not in text  # no linear correction in a sampled pass
    assert "slowest variant +1.1% +/- 0.2%" in text and "m=135 +1.1% +/- 0.1%" in text
    assert text.count("host UNSTEADY: the ") == 1 and "spread 12% (p10-p90)" in text  # eager only
    run = runs.classify_run()
    moved = next(r.kernel_pass for r in run.sorted_results() if r.mode == "eager")
    moved.overhead_within_budget, moved.variant_overhead_max_error_fraction = None, 0.05
    assert "+1.1% +/- 5.0%): the 2% budget NOT DECIDED (the slowest variant's error" in plain_output(run, width=140)
    # a moving host where no variant stands out: judged by the pooled overhead, with what the slowest of alike reads
    moved.overhead_basis, moved.overhead_error_fraction = "pooled: no variant stands out", 0.001
    moved.variant_standout_p, moved.variant_overhead_shuffled_q95_fraction = 0.55, 0.254
    moved.overhead_within_budget = True
    pooled = plain_output(run, width=300)
    assert "no variant stands out: with the labels shuffled the slowest reads up to +25.4%, p 0.55" in pooled
    assert "within the 2% budget (the pooled overhead at two standard errors)" in pooled
    moved.overhead_within_budget = None
    assert "budget NOT DECIDED (the pooled overhead's error takes it past" in plain_output(run, width=300)
    # with how many more steps would decide it, and the --kernel-seconds that gives them from the run's own
    moved.overhead_steps_to_decide = 2.3
    assert "the host moved; about 2.3x the steps per variant with --kernel-seconds)" in plain_output(run, width=300)
    kernel_seconds, run.config.kernel_seconds = run.config.kernel_seconds, 5.0
    hint = "the host moved; about 2.3x the steps per variant: --kernel-seconds 12 or more (this run: 5))"
    assert hint in plain_output(run, width=300)
    run.config.kernel_seconds, moved.overhead_steps_to_decide = kernel_seconds, None
    moved.overhead_basis = None
    assert "caveat: where ops overlap" in text and "end shifts:" not in text
    moved.end_shift_source = "CUPTI: each op's duration in the steps of 9 variants with an event after it"
    shifted = plain_output(run, width=200)
    assert "end shifts: where ops overlap under programmatic dependent launch" in shifted
    assert shifted.count("caveat: where ops overlap") == text.count("caveat: where ops overlap") - 1
    assert "beyond 5%" in text and "check, op for op: not made" in text  # eager: CUPTI slows the host
    assert "check, median gap per op class vs CUPTI: 4 of 5 within 1 us or 15%: DISAGREE (attention +1.40 us)" in text
    assert "like for like" not in text  # files without the cycle read under CUPTI
    assert "one-per-step ops" not in text and "gap between steps:" not in text
    full_pass_ = next(r.kernel_pass for r in run.sorted_results() if r.kernel_pass and r.mode == "full")
    full_pass_.one_per_step_variants, full_pass_.one_per_step_runs = 7, 65
    full_pass_.tail_ns, full_pass_.tail_measured_ns, full_pass_.tail_noise_ns = 0, 210, 380.0
    rounds = plain_output(run, width=300)
    assert "one-per-step ops (no layers to average over): their 7 variants ran 65 steps each" in rounds
    assert "measured at 0.21 +/- 0.38 us: within its noise of zero, taken as 0" in rounds
    full_pass_.tail_ns = full_pass_.tail_measured_ns = 5_000
    kept = plain_output(run, width=300)
    assert "measured at 5.00 +/- 0.38 us: kept: it stands out of its noise; it closes the stitched step" in kept
    assert "no part of op 0's gap" in kept
    assert "event lags" not in rounds  # files without the diagnostic
    full_pass_.event_lags = [
        EventLag(kinds="node-host", pairs=120, lag_ns_median=1_200.0, lag_noise_ns=150.0),
        EventLag(kinds="node-node", pairs=600, lag_ns_median=10.0, lag_noise_ns=20.0),
    ]
    lags = plain_output(run, width=400)
    assert "node-host +1.20 +/- 0.15 us (120), node-node +0.01 +/- 0.02 us (600)" in lags
    assert "reported, not corrected" in lags
    full_pass_.event_lags = None
    assert "CUPTI anchor effect" not in lags
    full_pass_.cupti_anchor_effects = [
        AnchorEffect(op="down", effect_ns=640.0, anchors=16),
        AnchorEffect(op="rotary", effect_ns=-30.0, anchors=16),
    ]
    anchors = plain_output(run, width=400)
    assert "down +0.64, rotary -0.03; taken out of the like-for-like reading only" in anchors
    full_pass_.cupti_anchor_effects = None
    assert "start shifts" not in anchors
    full_pass_.cupti_start_shifts = [
        StartShift(op="silu_mul", shift_ns=-610.0, bias_ns=-600.0, ops=16),
        StartShift(op="down", shift_ns=10.0, bias_ns=620.0, ops=16),
    ]
    starts = plain_output(run, width=500)
    assert "silu_mul -0.61 (bias -0.60); reported, not corrected" in starts and "down +0.01" not in starts
    full_pass_.cupti_start_shifts = [StartShift(op="down", shift_ns=10.0, bias_ns=None, ops=16)]
    assert "none of 1 classes by 0.2 us or more" in plain_output(run, width=500)
    full_pass_.cupti_start_shifts = None
    assert "timer pairs" not in anchors
    classes = [
        TimerPairClass(op="silu_mul", count=16, gap_ns_median=610.0, raw_gap_ns_median=900.0,
                       cupti_gap_ns_median=650.0, gap_diff_ns=-40.0, gap_agrees=True),
        TimerPairClass(op="qkv", count=16, gap_ns_median=1_800.0, raw_gap_ns_median=2_100.0,
                       cupti_gap_ns_median=450.0, gap_diff_ns=1_350.0, gap_agrees=False),
    ]  # fmt: skip
    full_pass_.timer_pairs = TimerPairs(
        measured=True, ops_covered=162, steps=960, overhead_fraction=0.003, mean_excess_ns=290.0,
        classes=classes, ops_agree=False,
    )  # fmt: skip
    timers = plain_output(run, width=500)
    assert (
        "timer pairs (a timer kernel after op i - 1 and op i of one step; 162 ops, 960 steps, +0.3% against" in timers
    )
    assert "mean excess +0.29 us over the stitched gaps taken out" in timers
    assert "1 of 2 op classes within 1 us or 15% of CUPTI's clean gap, DISAGREE (qkv +1.35 us)" in timers
    assert "timer pair" in timers and "timers vs" in timers  # the op table's columns
    qkv_rows = [line for line in timers.splitlines() if line.strip().startswith("qkv")]
    assert sum("1.80" in row and row.rstrip().endswith("DIFF") for row in qkv_rows) == 1, qkv_rows  # full mode only
    full_pass_.timer_pairs.ops_agree = None
    assert "not judged: CUPTI not trusted op for op (qkv +1.35 us)" in plain_output(run, width=500)
    full_pass_.timer_pairs.classes = classes[:1]
    full_pass_.timer_pairs.ops_agree = True
    assert "1 of 1 op classes within 1 us or 15% of CUPTI's clean gap, AGREE" in plain_output(run, width=500)
    assert "own durations" not in plain_output(run, width=500)
    classes[0].duration_shift_ns = 3_100.0  # the timer steps' duration of a class moved beyond the bar: named
    full_pass_.timer_pairs.durations_source = "CUPTI's, of the timer steps (16 of each variant)"
    shown = plain_output(run, width=500)
    assert (
        "the timer steps' own durations taken off, where CUPTI saw them differ from clean: silu_mul +3.10 us" in shown
    )
    assert "; op durations" not in shown
    full_pass_.timer_pairs.durations_source = "CUPTI's, of clean steps: CUPTI not used"
    assert "; op durations CUPTI's, of clean steps: CUPTI not used" in plain_output(run, width=500)
    # a class judged like for like, and every class with the events' verdict for those the timers do not read
    assert full_pass_.cupti_check is not None
    event_ops = full_pass_.cupti_check.ops
    assert event_ops, "the fixture's pass has an op check"
    classes[0].gap_agrees, classes[0].gap_verdict, classes[0].gap_diff_ns = False, "agree like for like", -1_500.0
    full_pass_.timer_pairs.classes_from_events = [event_ops[0].op]
    event_ops[0].gap_verdict, event_ops[0].gap_diff_ns = "disagree", -1_940.0
    full_pass_.timer_pairs.with_events_ops_agree = False
    shown = plain_output(run, width=800)
    assert "0 of 1 op classes within 1 us or 15% of CUPTI's clean gap, 1 more like for like (CUPTI moves them)" in shown
    assert "CUPTI moves the pairs of" not in shown  # no effect of the timers' own
    classes[0].cupti_effect_ns, classes[0].cupti_effect_noise_ns = 1_300.0, 200.0
    classes[0].cupti_effect_source, classes[0].gap_under_cupti_diff_ns = "timers under CUPTI", -200.0
    moved = plain_output(run, width=800)
    assert "CUPTI moves the pairs of silu_mul +1.30 +/- 0.20 us (the same pairs read under CUPTI)" in moved
    silu_rows = [line for line in shown.splitlines() if line.strip().startswith("silu_mul")]
    assert any(row.rstrip().endswith("ok like for like") for row in silu_rows), silu_rows  # the op table's column
    assert (
        f"every op class, the events' verdict for those the timers do not read ({event_ops[0].op}): "
        f"DISAGREE ({event_ops[0].op} -1.94 us (events))"
    ) in shown
    assert "host fell behind" not in shown
    assert "ran the gap of" not in shown
    # a class CUPTI saw the timer steps run apart: named, and every class takes the events' verdict for it
    classes[0].gap_verdict, classes[0].timer_steps_moved = "disagree", True
    classes[0].timer_steps_shift_ns, classes[0].timer_steps_shift_noise_ns = 1_040.0, 60.0
    full_pass_.timer_pairs.classes_from_events = [event_ops[0].op, "silu_mul"]
    apart = plain_output(run, width=900)
    assert (
        "CUPTI saw the timer steps run the gap of silu_mul +1.04 +/- 0.06 us apart from its clean reference (beyond "
        "the typical op's): the pairs read their own steps there, and every class takes the events' reading of it"
    ) in apart
    assert "-1.50 us (timers)" not in apart  # the timers' miss there is not the every-class verdict's
    assert "the events' verdict for those the timers do not read or whose timer steps ran apart (" in apart
    full_pass_.timer_pairs.with_events_ops_agree = None  # no every-class verdict: the line does not promise one
    unjudged = plain_output(run, width=900)
    assert "the pairs read their own steps there;" in unjudged or "the pairs read their own steps there:" in unjudged
    assert "every class takes the events' reading of it" not in unjudged
    full_pass_.timer_pairs.with_events_ops_agree = False
    # a miss whose timer steps CUPTI saw shifted under the bar: the shift and the reading against it beside the miss
    classes[0].gap_verdict, classes[0].timer_steps_moved = "disagree", False
    classes[0].timer_steps_shift_ns, classes[0].gap_timer_steps_diff_ns = 670.0, 640.0
    kept_diff, classes[0].gap_diff_ns = classes[0].gap_diff_ns, 1_310.0  # +1.31 less the shift +0.67: +0.64
    full_pass_.timer_pairs.classes_from_events = [event_ops[0].op]
    full_pass_.timer_pairs.ops_agree = False
    shifted = plain_output(run, width=900)
    assert (
        "0 of 1 op classes within 1 us or 15% of CUPTI's clean gap, DISAGREE (silu_mul +1.31 us (CUPTI saw its timer "
        "steps shifted +0.67 +/- 0.06 us; +0.64 us against that))"
    ) in shifted
    classes[0].gap_diff_ns, classes[0].gap_timer_steps_diff_ns = kept_diff, None
    full_pass_.timer_pairs.ops_agree = True
    classes[0].gap_verdict, classes[0].timer_steps_moved = "agree like for like", None
    full_pass_.timer_pairs.classes_from_events = [event_ops[0].op]
    assert full_pass_.kernels is not None
    unread = full_pass_.kernels[24].op
    full_pass_.timer_pairs.after_piece_behind = [24]  # a host-launched target left unread: named
    assert (
        f"not read, their variant's steps over the 2% budget (the host fell behind its timers): {unread} (op 24)"
    ) in plain_output(run, width=800)
    full_pass_.timer_pairs = TimerPairs(measured=False, note="no two consecutive ops inside one captured graph")
    assert "timer pairs: not measured (no two consecutive ops inside one captured graph)" in plain_output(run, 500)
    full_pass_.timer_pairs = None
    assert "second capture of the clean graphs" not in anchors
    full_pass_.cupti_capture_check = CaptureCheck(
        classes=[
            CaptureShift(op="o_proj", count=32, shift_ns=-1_050.0, beyond_bar=True),
            CaptureShift(op="qkv", count=32, shift_ns=30.0, beyond_bar=False),
        ],
        step_shift_ns=200.0,
        step_shift_error_ns=5_000.0,
    )
    check_ = full_pass_.cupti_check
    assert check_ is not None and check_.ops
    missed = check_.ops[0]  # a class that misses CUPTI's, and the one the second capture moved
    was = missed.gap_agrees, missed.gap_diff_ns, missed.gap_verdict
    missed.gap_agrees, missed.gap_diff_ns, missed.gap_verdict = False, 1_300.0, "disagree"
    full_pass_.cupti_capture_check.classes[0].op = missed.op
    capture = plain_output(run, width=400)
    assert f"{missed.op} -1.05 us (32); the step +0.20 +/- 5.00 us (without CUPTI)" in capture
    assert "ran the clean step" not in capture  # within two of its errors: no clause beside the gap total
    assert f"{missed.op} +1.30 us (CUPTI's gap -1.05 us in a second capture)" in capture
    missed.gap_verdict = "agree across captures"  # within the bar of the second capture's value
    across = plain_output(run, width=400)
    assert f"{missed.op} +1.30 us (CUPTI's gap -1.05 us in a second capture) (ok against it)" in across
    assert "1 more against a second capture that moves CUPTI's value" in across
    assert "ok across captures" in across  # the op table's mark
    missed.gap_agrees, missed.gap_diff_ns, missed.gap_verdict = was
    assert "qkv" not in capture.split("second capture of the clean graphs")[1].splitlines()[0]
    full_pass_.cupti_capture_check.classes = full_pass_.cupti_capture_check.classes[1:]
    assert "second capture of the clean graphs (no events; its gap less the first's): no class moved" in plain_output(
        run, width=400
    )
    # a move within the bar but beyond its error and 0.5 us (a piece start's two values) is listed too
    full_pass_.cupti_capture_check.classes[0].shift_ns, full_pass_.cupti_capture_check.classes[0].moved = 940.0, True
    assert "its gap less the first's): qkv +0.94 us (32)" in plain_output(run, width=400)
    full_pass_.cupti_capture_check = CaptureCheck(classes=[], note="not measured: CUPTI saw no kernels of it")
    unread = plain_output(run, width=400)
    assert "second capture of the clean graphs: not measured: CUPTI saw no kernels of it" in unread
    full_pass_.cupti_capture_check = None
    full_pass = next(r.kernel_pass for r in run.sorted_results() if r.kernel_pass and r.kernel_pass.cupti_check.ops)
    check = full_pass.cupti_check
    for o in check.ops:  # read under CUPTI: every class as CUPTI's but one, 1.5 us long
        o.gap_under_cupti_diff_ns = 1_500.0 if o is check.ops[0] else 0.0
        o.events_gap_under_cupti_ns_median = o.cupti_gap_ns_median + o.gap_under_cupti_diff_ns
        o.gap_under_cupti_agrees = o is not check.ops[0]
    check.ops_under_cupti_agree, check.under_cupti_steps = False, 407
    like = plain_output(run, width=300)
    assert (
        f"like for like (the pass's cycle read again while CUPTI ran, 407 steps): {len(check.ops) - 1} of "
        f"{len(check.ops)} within 1 us or 15% ({check.ops[0].op} +1.50 us); CUPTI moves no class"
    ) in like
    # a class whose clean reading misses CUPTI's by 2 us, which CUPTI moves by 2 us and which agrees like for like
    moved = check.ops[1]
    moved.gap_diff_ns, moved.gap_agrees, moved.gap_verdict = -2_000.0, False, "agree like for like"
    moved.cupti_effect_ns, moved.cupti_effect_noise_ns, moved.cupti_trusted_here = 2_000.0, 300.0, False
    check.ops_agree = all(o.gap_agrees or o.gap_verdict == "agree like for like" for o in check.ops)
    like = plain_output(run, width=400)
    within = sum(o.gap_agrees for o in check.ops)
    assert (
        f"check, median gap per op class vs CUPTI: {within} of {len(check.ops)} within 1 us or 15%, 1 more like for "
        f"like where CUPTI moves the class: {'AGREE' if check.ops_agree else 'DISAGREE'}"
    ) in like
    assert f"{moved.op} -2.00 us (like for like ok)" in like and "ok like for like" in like
    assert f"CUPTI moves 1 class(es), so its value is not their clean gap ({moved.op} +2.00 +/- 0.30 us)" in like
    moved.cupti_effect_source = "head variant"  # piecewise: the head's class, its effect from the head variant
    assert f"({moved.op} +2.00 +/- 0.30 us by the head variant)" in plain_output(run, width=400)
    moved.cupti_effect_source = "piece variant"  # piecewise o_proj: its effect from the piece variants
    assert f"({moved.op} +2.00 +/- 0.30 us by the piece variant)" in plain_output(run, width=400)
    # a start bias beside the miss, and the op table's start bias column, once any class carries one
    assert "start bias" not in like
    moved.start_bias_ns = -610.0
    biased = plain_output(run, width=400)
    assert f"{moved.op} -2.00 us (like for like ok) (start bias -0.61)" in biased
    assert "start bias: how much the events' gap moves" in biased and "-0.61" in biased
    moved.start_bias_ns = None
    # the gap between steps: how much later than the events' end CUPTI saw the boundary event complete, beside the miss
    moved.boundary_lag_ns, moved.boundary_lag_noise_ns = 1_060.0, 30.0
    lagged = plain_output(run, width=500)
    assert (
        f"{moved.op} -2.00 us (like for like ok) (CUPTI: the boundary event lags the last kernel +1.06 +/- 0.03 us "
        "more than the events' end, unseen by them)"
    ) in lagged  # a file from before CUPTI's gap less the lag was stored
    moved.cupti_gap_less_boundary_lag_ns = 4_740.0
    assert "unseen by them; CUPTI's gap less that lag 4.74 us)" in plain_output(run, width=500)
    moved.boundary_lag_ns = moved.boundary_lag_noise_ns = moved.cupti_gap_less_boundary_lag_ns = None
    # a plain miss where CUPTI moves the class by less than the bar, beyond two errors: the effect said beside it
    miss = check.ops[2]
    kept_fields = (miss.gap_diff_ns, miss.gap_agrees, miss.gap_verdict, miss.gap_under_cupti_diff_ns)
    miss.gap_diff_ns, miss.gap_agrees, miss.gap_verdict = 1_350.0, False, "disagree"
    miss.cupti_effect_ns, miss.cupti_effect_noise_ns, miss.cupti_trusted_here = -820.0, 60.0, True
    miss.gap_under_cupti_diff_ns = 530.0
    effect = plain_output(run, width=500)
    assert f"{miss.op} +1.35 us (CUPTI moves it -0.82 +/- 0.06 us, under the bar; like for like +0.53 us)" in effect
    miss.cupti_effect_noise_ns = 500.0  # within two errors: not said
    assert "under the bar" not in plain_output(run, width=500)
    miss.cupti_effect_ns = miss.cupti_effect_noise_ns = miss.cupti_trusted_here = None
    miss.gap_diff_ns, miss.gap_agrees, miss.gap_verdict, miss.gap_under_cupti_diff_ns = kept_fields
    # CUPTI's own clean steps later in the pass put a disagreeing class elsewhere: said beside its miss
    miss = next(o for o in check.ops if not o.gap_agrees)
    miss.cupti_cycle_gap_ns_median, miss.cupti_cycle_off_bar_fraction = 1_660.0, 0.68
    assert "(CUPTI's gap 1.66 us in its clean steps later in the pass, 68% beyond the bar)" in plain_output(
        run, width=500
    )
    # most of them: the class is not decided, and the classes' verdict with it
    miss.gap_verdict, miss.cupti_cycle_off_bar_fraction = "not decided", 0.99
    ops_agree, check.ops_agree = check.ops_agree, None
    assert (
        "1 not decided: CUPTI's own clean steps later in the pass put the class beyond the bar of its reference: "
        "not decided ("
    ) in plain_output(run, width=500)
    miss.gap_verdict, check.ops_agree = "disagree", ops_agree
    miss.cupti_cycle_off_bar_fraction = 0.05  # a few steps: not said
    assert "later in the pass" not in plain_output(run, width=500)
    miss.cupti_cycle_gap_ns_median = miss.cupti_cycle_off_bar_fraction = None
    assert text.count("CUPTI cross-check: AGREE") == 2 and text.count("CUPTI cross-check: DISAGREE") == 1
    # a stitched total too noisy to check the tolerance with: the gap total and the whole check not decided
    eager_check = next(r.kernel_pass for r in run.sorted_results() if r.mode == "eager").cupti_check
    assert eager_check is not None
    eager_check.total_gap_noise_ns, eager_check.total_gap_agrees, eager_check.agrees = 300_000.0, None, None
    eager_check.total_gap_steps_to_decide = (2 * 300 / 478) ** 2  # as analysis.sampled gives it
    undecided = plain_output(run, width=400)
    assert (
        "difference 0.308 +/- 300 us against 478 us allowed: not decided (at two standard errors the stitched total "
        "cannot be told within or beyond it: its steps vary too much, as where the host moves; about 1.6x the steps "
        "per variant with --kernel-seconds)"
    ) in undecided  # (2 x 300 / 478) squared: the error halves with four times the steps
    assert undecided.count("CUPTI cross-check: NOT DECIDED") == 1
    # beyond the tolerance by less than two errors: the steps that would put two errors inside the excess
    eager_check.total_gap_steps_to_decide = 4.0
    assert "about 4.0x the steps per variant" in plain_output(run, width=400)
    eager_check.total_gap_steps_to_decide = 64.0
    assert "about 64x the steps per variant" in plain_output(run, width=400)
    eager_check.total_gap_steps_to_decide = None  # nothing would decide it
    assert "more steps per variant with --kernel-seconds" in plain_output(run, width=400)
    # where the run file has its --kernel-seconds, the value that would give those steps (rounded up)
    kernel_seconds, run.config.kernel_seconds = run.config.kernel_seconds, 5.0
    eager_check.total_gap_steps_to_decide = (2 * 300 / 478) ** 2
    assert "about 1.6x the steps per variant: --kernel-seconds 8 or more (this run: 5))" in plain_output(run, width=400)
    eager_check.total_gap_steps_to_decide = 1_000.0
    assert "more than --kernel-seconds allows (3600; this run: 5))" in plain_output(run, width=400)
    eager_check.total_gap_steps_to_decide = None
    assert "more steps per variant with --kernel-seconds)" in plain_output(run, width=400)
    run.config.kernel_seconds = kernel_seconds
    # an error mostly the positions' scatter: said with the total, and why more steps would (not) decide it
    eager_check.total_gap_noise_ns, eager_check.total_gap_scatter_ns = 300_000.0, 260_000.0
    eager_check.total_gap_scatter_bound = True  # two of it, 520 us, fill the 478 allowed: as the analysis gives it
    scattered = plain_output(run, width=500)
    assert "+/- 300 (of which 260 from its positions scattering beyond their own errors) us against 478" in scattered
    assert (
        "and more steps would not tell it: its positions scatter within their op classes beyond their own errors, "
        "260 us on the total; docs/gaps.md)"
    ) in scattered
    eager_check.total_gap_scatter_ns, eager_check.total_gap_steps_to_decide = 230_000.0, 9.0  # two of it, 460 < 478
    eager_check.total_gap_scatter_bound = False
    assert (
        "cannot be told within or beyond it: its positions scatter within their op classes beyond their own errors; "
        "about 9.0x the steps"
    ) in plain_output(run, width=500)
    eager_check.total_gap_scatter_ns, eager_check.total_gap_steps_to_decide = 500.0, None  # under 1 us: not said
    assert "scatter" not in plain_output(run, width=500)
    eager_check.total_gap_scatter_ns = eager_check.total_gap_scatter_bound = None
    # a busy short of CUPTI's by what its noisy positions may overlap: said, with the overlap, and not decided
    assert "the gaps' noise alone" not in text
    eager_check.busy_noise_overlap_ns, eager_check.busy_agrees = 525_300.0, None
    noisy = plain_output(run, width=500)
    assert (
        "5% allowed; the gaps' noise alone overlaps ops by about 525 us: too much to tell it within 5% or beyond "
        "(more steps per variant with --kernel-seconds)): not decided"
    ) in noisy
    eager_check.busy_noise_overlap_ns, eager_check.busy_agrees = 12_000.0, True
    assert "5% allowed; the gaps' noise alone overlaps ops by about 12.0 us): AGREE" in plain_output(run, width=500)
    eager_check.busy_noise_overlap_ns = None
    assert "CUPTI\ngap us" not in text and "DIFF" in text  # the op table carries CUPTI's column where compared
    strips = [line for line in text.splitlines() if line.lstrip().startswith(("eager ", "full ")) and "|" in line]
    eager, full = strips
    assert "." in eager and "#" in eager
    # shared time scale: the full-graph step is shorter, so its strip is shorter
    assert full.index("|", full.index("|") + 1) < eager.index("|", eager.index("|") + 1)


def test_strip_cells() -> None:
    strip = Strip("x", busy=[(0.0, 0.25), (0.5, 0.6)], length=0.8, caption="")
    assert strip.cells(10) == [True, True, True, False, False, True, False, False]
    assert Strip("x", busy=[], length=1.0, caption="").cells(4) == [False] * 4


def test_analyze_report_has_windows_reasons_and_lists() -> None:
    run = runs.analyze_run()
    run.windows[0].top_kernels = [TopKernel(name="sm90_xmma_gemm_bf16", count=128, total_ns=3_900_000, mean_ns=30_469)]
    run.windows[0].largest_idle = [IdleStretch(start_ns=1_200_000, end_ns=1_320_000, duration_ns=120_000,
                                               kind="host wait")]  # fmt: skip
    text = plain_output(run, width=140)
    assert "decode_step" in text and "undetermined" in text
    assert "--gpu-metrics-devices=all" in text
    assert "Top kernels" in text and "sm90_xmma_gemm_bf16" in text
    assert "Largest idle stretches" in text


def test_rendering_does_not_import_torch_or_matplotlib() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'tests'); import runs; from launchprobe.render import render_text;"
        "[render_text(r, f) for r in (runs.classify_run(), runs.analyze_run()) for f in ('plain','markdown','csv')];"
        "import launchprobe.cli.report, launchprobe.cli.compare;"
        "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules, 'heavy import'"
    )
    root = Path(__file__).parent.parent
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_many_windows_summarised_per_range_name() -> None:
    run = runs.analyze_many_run()
    assert len(run.windows) == 42
    text = plain_output(run, width=200)
    assert text.count("Largest idle stretches") == 2 and text.count("Top kernels") == 2  # once per range name
    assert "Slowest 8 of 42 windows" in text and "34 more windows in the JSON/CSV" in text
    ranges = text.split("Ranges", 1)[1].split("\n\n", 1)[0]
    assert "step <n>  " in ranges and "launch-bound 30" in ranges and "gpu-bound 12" in ranges
    assert len(list(csv.DictReader(io.StringIO(render_text(run, "csv"))))) == 42  # CSV and JSON keep every window
    assert len(json.loads(render_text(run, "json"))["windows"]) == 42
    assert "step &lt;n>" in render_text(run, "markdown")  # not an HTML tag on GitHub


def test_few_windows_listed_one_by_one() -> None:
    run = runs.analyze_many_run()
    run.windows = [w for w in run.windows if w.name.startswith("decode_step")]
    run.summaries = [s for s in run.summaries if s.name.startswith("decode_step")]
    text = plain_output(run, width=200)
    assert "Windows\n" in text and "more windows" not in text
    assert "decode_step mode=full bucket=1 #11" in text
    for s in run.summaries:  # a run saved before pooling: the slowest window's lists
        s.top_kernels = s.largest_idle = None
    assert "Top kernels: decode_step mode=full bucket=1 (device 0), slowest window" in plain_output(run, width=200)


def test_dense_refused_and_legacy_kernel_passes() -> None:
    run = runs.classify_run(modes=("eager", "piecewise", "full"))
    eager, piecewise, full = (r.kernel_pass for r in run.sorted_results() if r.batch == 1)
    assert eager is not None and piecewise is not None and full is not None
    eager.density, eager.picture, eager.perturbing, eager.stride_probes = "dense", "instrumented", True, None
    piecewise.stitched, piecewise.kernels, piecewise.ops = False, [], []
    piecewise.refusal = "sampled variant 3 ran a different kernel sequence from the clean step (kernel 7: 'a' vs 'b')"
    piecewise.cupti_check = None
    full.density = None  # a run file from before sampling: rendered as it was
    text = plain_output(run, width=140)
    assert "(dense: the instrumented step, perturbed)" in text and "PERTURBING" in text
    assert "NOT STITCHED: sampled variant 3 ran a different kernel sequence" in text
    assert "Per-kernel pass: piecewise" not in text  # no rows, no table
    assert "with events around every kernel" in text  # the legacy line of the old file
    assert "busy: stitched (sampled) steps, and instrumented steps where dense, as each caption says" in text
    assert "(instrumented)" in text and "(stitched)" in text  # each strip's caption says which


def test_idle_stretch_times_in_tables_are_from_the_first_gpu_op() -> None:
    from launchprobe.render import values as v

    run = runs.analyze_many_run()
    origin = run.source.time_origin_ns
    assert origin is not None and origin > 0
    idle = run.summaries[0].largest_idle
    assert idle
    stretch = idle[0]
    text = plain_output(run, width=260)
    assert "Largest idle stretches (times from the first GPU op)" in text
    row = next(line for line in text.splitlines() if line.startswith(stretch.window + " ") and stretch.kind in line)
    assert v.sig(stretch.start_ns - origin, 1e-3) in row.split()
    assert json.loads(render_text(run, "json"))["summaries"][0]["largest_idle"][0]["start_ns"] == stretch.start_ns


def _pass_lines(text: str, mode: str) -> list[str]:
    """The lines of one mode's per-kernel pass in a plain report, from its table's title to the next blank line after
    its lines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"Per-kernel pass: {mode}, "))
    body = lines[start:]
    first = next(i for i, line in enumerate(body) if line.strip().startswith("picture:"))
    end = next((i for i in range(first, len(body)) if not body[i].strip()), len(body))
    return [line.strip() for line in body[first:end]]


def test_gap_total_line_gives_the_step_a_second_capture_moved_beyond_its_errors() -> None:
    run = runs.classify_run()
    pw = next(r.kernel_pass for r in run.sorted_results() if r.mode == "piecewise" and r.kernel_pass is not None)
    pw.cupti_capture_check = CaptureCheck(classes=[], step_shift_ns=14_100.0, step_shift_error_ns=1_100.0)
    line = next(x for x in _pass_lines(plain_output(run, width=900), "piecewise") if x.startswith("check, gap total"))
    assert line.endswith(
        ": AGREE (a second capture of the clean graphs, made after the variants', ran the clean step +14.1 +/- 1.1 us)"
    )
    pw.cupti_capture_check.step_shift_ns = -2_000.0  # within two of its errors: nothing said
    assert "ran the clean step" not in plain_output(run, width=900)
    pw.cupti_capture_check.step_shift_error_ns = None  # files before the error: nothing said either
    assert "ran the clean step" not in plain_output(run, width=900)


def test_gap_total_parts_line_splits_the_difference_into_classes_and_cuptis_steps() -> None:
    run = runs.classify_run()
    pw = next(r.kernel_pass for r in run.sorted_results() if r.mode == "piecewise" and r.kernel_pass is not None)
    assert "gap total, its parts" not in plain_output(run, width=900)  # files before the field: no line
    check = pw.cupti_check
    assert check is not None and check.clean_gap_total_ns is not None
    classes = [("o_proj", 24_100.0), ("silu_mul", -25_500.0), ("down", 21_200.0), ("qkv", 19_100.0), ("rotary", 100.0)]
    check.gap_total_by_class = [
        ClassGapTotal(op=op, count=32, stitched_ns=50_000.0 + diff, cupti_ns=50_000.0, diff_ns=diff)
        for op, diff in classes
    ]
    check.cupti_gap_sum_ns = check.clean_gap_total_ns + 34_000.0
    check.cupti_gap_part_ns = 34_000.0
    line = next(x for x in _pass_lines(plain_output(run, width=900), "piecewise") if x.startswith("gap total, its"))
    assert line == (
        "gap total, its parts (us): stitched less CUPTI's clean gaps by class silu_mul -25.5, o_proj +24.1, "
        "down +21.2, qkv +19.1, the other classes +0.1; CUPTI's gaps less the clean step's +34.0 (CUPTI's gaps sum "
        f"to {check.cupti_gap_sum_ns / 1e3:.1f})"
    )
    check.gap_total_tail_ns = -1_500
    assert "; a kept tail -1.5; CUPTI's" in plain_output(run, width=900)
    check.gap_total_by_class[0].diff_ns = None  # files before each class's part was stored: no line, none derived
    assert "gap total, its parts" not in plain_output(run, width=900)


def test_fresh_capture_line_names_the_classes_a_fresh_capture_moves() -> None:
    run = runs.classify_run()
    pw = next(r.kernel_pass for r in run.sorted_results() if r.mode == "piecewise" and r.kernel_pass is not None)
    assert "variants' own captures" not in plain_output(run, width=900)  # files before the field: no line
    pw.cupti_fresh_captures = FreshCaptures(
        positions=255,
        gap_sum_ns=-27_012.0,
        classes=[
            FreshCaptureClass(op="o_proj", count=32, shift_ns=-950.0, sum_ns=-29_800.0),
            FreshCaptureClass(op="qkv", count=31, shift_ns=10.0, sum_ns=400.0),
        ],
    )
    line = next(x for x in _pass_lines(plain_output(run, width=900), "piecewise") if "variants' own captures" in x)
    assert ": o_proj -0.95 (32); summed over 255 positions -27.0 us." in line and "qkv" not in line
    pw.cupti_fresh_captures.classes = pw.cupti_fresh_captures.classes[1:]
    assert "no class moved 0.2 us or more; summed over 255" in plain_output(run, width=900)
    # beside a class that misses CUPTI's clean gap, what the variants' own captures do to it, and the miss against it
    pw.cupti_fresh_captures.classes.append(FreshCaptureClass(op="attention", count=32, shift_ns=1_100.0, sum_ns=0.0))
    assert pw.cupti_check is not None and pw.cupti_check.ops
    attention = next(o for o in pw.cupti_check.ops if o.op == "attention")
    assert "own captures move CUPTI's gap" not in plain_output(run, width=900)  # the producer's difference: absent
    attention.gap_fresh_capture_diff_ns = 300.0  # the producer's: the events' +1.40 less the captures' +1.10
    assert (
        "DISAGREE (attention +1.40 us (the variants' own captures move CUPTI's gap +1.10 us; +0.30 against that))"
    ) in plain_output(run, width=900)


def test_kernel_pass_checks_line_comes_second_with_the_overall_verdict() -> None:
    run = runs.classify_run()
    text = plain_output(run, width=900)
    eager, piecewise = _pass_lines(text, "eager"), _pass_lines(text, "piecewise")
    head = "checks against the clean step: sampled step +1.1% (slowest variant) against the 2% budget: within; "
    assert eager[1] == (
        head + "gap total +0.3 +/- 41.0 us (478 allowed): AGREE; busy 0.2% apart: AGREE; every op class vs CUPTI: not "
        "made (CUPTI not trusted op for op); overall AGREE"
    )  # the class check not made (CUPTI's step beyond 5%) is no part of the overall verdict
    assert piecewise[1] == (
        head + "gap total -5.2 +/- 3.2 us (50.0 allowed): AGREE; busy 0.2% apart: AGREE; every op class vs CUPTI (the "
        "events): DISAGREE (attention +1.40 us); overall DISAGREE"
    )
    assert piecewise[-1] == "CUPTI cross-check: DISAGREE"
    # with the timer pairs: every class by the better reading decides, and the last line says it is the events'
    passes = {r.mode: r.kernel_pass for r in run.sorted_results() if r.kernel_pass is not None}
    pw = passes["piecewise"]
    assert pw is not None and pw.cupti_check is not None and pw.cupti_check.ops
    attention = next(o for o in pw.cupti_check.ops if o.op == "attention")
    timer_classes = [
        TimerPairClass(op="attention", count=32, gap_ns_median=-1_300.0, raw_gap_ns_median=-1_000.0,
                       cupti_gap_ns_median=-1_400.0, gap_diff_ns=100.0, gap_agrees=True),
    ]  # fmt: skip
    pw.timer_pairs = TimerPairs(
        measured=True, ops_covered=200, steps=900, classes=timer_classes, ops_agree=True,
        with_events_ops_agree=True, classes_from_events=[o.op for o in pw.cupti_check.ops if o.op != "attention"],
    )  # fmt: skip
    timed = _pass_lines(plain_output(run, width=900), "piecewise")
    assert (
        "every op class vs CUPTI (the timer pairs where they read it, the events elsewhere): AGREE; overall AGREE"
    ) in timed[1]
    assert timed[-1] == "CUPTI cross-check (the events' reading): DISAGREE"
    # a timer miss is named as the timers'; an events' miss in a class taken from them, as the events'
    timer_classes[0].gap_agrees, timer_classes[0].gap_diff_ns = False, 1_600.0
    pw.timer_pairs.ops_agree = pw.timer_pairs.with_events_ops_agree = False
    embed = pw.cupti_check.ops[0]
    embed.gap_verdict, embed.gap_diff_ns = "disagree", -2_100.0
    missed = _pass_lines(plain_output(run, width=900), "piecewise")[1]
    assert "DISAGREE (attention +1.60 us (timers), embed -2.10 us (events)); overall DISAGREE" in missed
    assert attention.gap_diff_ns == 1_400.0  # the events' own miss there is not the verdict's
    # one check not decided and none failed: not decided; a step over the budget fails it whatever the rest says
    pw.timer_pairs.with_events_ops_agree, embed.gap_verdict = True, "agree"
    timer_classes[0].gap_agrees = True
    pw.cupti_check.total_gap_agrees = None
    assert _pass_lines(plain_output(run, width=900), "piecewise")[1].endswith(
        "(50.0 allowed): not decided; busy 0.2% apart: AGREE; every op class vs CUPTI (the timer pairs where they read "
        "it, the events elsewhere): AGREE; overall not decided"
    )
    # a verdict the producer stored is the one given, with its every-class reading (older files derive both)
    pw.checks_verdict, pw.every_class_agrees, pw.every_class_checked = "disagree", False, True
    stored = _pass_lines(plain_output(run, width=900), "piecewise")[1]
    assert "the events elsewhere): DISAGREE" in stored and stored.endswith("overall DISAGREE")
    pw.checks_verdict = pw.every_class_agrees = pw.every_class_checked = None
    pw.overhead_within_budget = False
    over = _pass_lines(plain_output(run, width=900), "piecewise")[1]
    assert "against the 2% budget: OVER;" in over and over.endswith("overall DISAGREE")
    # judged by the pooled steps where no variant stands out: that overhead is the one shown
    pw.overhead_within_budget, pw.overhead_basis, pw.overhead_fraction = True, "pooled: no variant stands out", 0.004
    assert "sampled step +0.4% (pooled: no variant stands out) against the 2% budget: within" in plain_output(
        run, width=900
    )
    # a pass that refused to stitch has no checks to give
    pw.refusal = "the kernel sequence changed between steps"
    assert not any(line.startswith("checks against") for line in _pass_lines(plain_output(run, width=900), "piecewise"))


def test_gap_total_line_gives_cuptis_own_idle_beside_the_clean_reference() -> None:
    run = runs.classify_run()
    piecewise = _pass_lines(plain_output(run, width=900), "piecewise")
    total = next(line for line in piecewise if line.startswith("check, gap total:"))
    assert (
        "0.055 ms clean (clean step less CUPTI's op durations; gaps signed; CUPTI's own steps, which it slows, idle "
        "0.055 ms), difference"
    ) in total
    eager = _pass_lines(plain_output(run, width=900), "eager")
    eager_total = next(line for line in eager if line.startswith("check, gap total:"))
    assert "CUPTI's own steps, which it slows, idle 6.595 ms)" in eager_total
    pw = next(r.kernel_pass for r in run.sorted_results() if r.mode == "piecewise")
    assert pw is not None and pw.cupti_check is not None
    pw.cupti_check.cupti_total_gap_ns = None  # files without it: the clean reference alone
    plain = next(
        line for line in _pass_lines(plain_output(run, width=900), "piecewise") if line.startswith("check, gap total:")
    )
    assert "(clean step less CUPTI's op durations; gaps signed), difference" in plain


def test_terminal_colours_the_verdict_words_of_a_reports_lines() -> None:
    console = Console(record=True, width=2000, file=io.StringIO(), force_terminal=True, color_system="standard")
    render_table(runs.classify_run(), console)
    styled = console.export_text(styles=True)
    checks = next(
        line for line in styled.splitlines() if "checks against the clean step" in line and "DISAGREE" in line
    )
    assert "\x1b[1;31mDISAGREE\x1b[0m" in checks  # bold red, and the AGREE inside it is not coloured apart
    assert "\x1b[32mAGREE\x1b[0m" in checks
    assert "\x1b[1;31mUNSTEADY\x1b[0m" in styled and "\x1b[32mAGREE" in styled
    assert "\x1b[" not in plain_output(runs.classify_run(), width=900)  # plain output stays plain
