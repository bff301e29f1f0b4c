"""Outputs that behave: CSV tables with every scalar column, -o the same in every command, JSON written straight
to the stream, a closed pipe that ends quietly, a windows plot that stays readable when one window dwarfs the rest."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import runs

from launchprobe.cli import main
from launchprobe.render import emit, file_format, render_text
from launchprobe.render import flat as flat_tables
from launchprobe.render.plots import plot_windows
from launchprobe.run import load_run, to_builtins
from launchprobe.run.files import from_builtins
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


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run.json"
    assert _cli(["analyze", str(PLAIN), "--range", STEP, "-o", str(out), "-f", "plain"]) == 0
    return out


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_analyze_csv_keeps_kernels_and_every_scalar(run_file: Path) -> None:
    run = load_run(run_file)
    assert isinstance(run, AnalyzeRun)
    rows = _rows(render_text(run, "csv"))
    assert [int(r["kernels"]) for r in rows] == [w.kernels for w in run.windows]
    record = to_builtins(run)["windows"][0]
    scalars = {k for k, val in record.items() if not isinstance(val, (list, dict))}
    assert scalars <= set(rows[0])
    assert rows[0]["launch_api_ns.p50"] == str(run.windows[0].launch_api_ns.p50)  # an integer, not 1234.0
    assert rows[0]["start_ns"] == str(run.windows[0].start_ns) and "." not in rows[0]["busy_ns"]


@pytest.mark.parametrize("table", ["windows", "summaries", "idle_stretches", "top_kernels"])
def test_report_table_selects_one_csv_table(run_file: Path, table: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = load_run(run_file)
    assert _cli(["report", str(run_file), "--table", table]) == 0  # --table alone: that table, as CSV
    rows = _rows(capsys.readouterr().out)
    assert len(rows) == len(flat_tables.table_rows(run, table)) > 0
    assert rows[0]["source"] == str(PLAIN)
    if table == "idle_stretches":
        assert {"window_index", "window", "start_ns", "duration_ns", "kind"} <= set(rows[0])
    if table == "summaries":
        assert rows[0]["name"] == "step <n>" and int(rows[0]["instances"]) == 40


def test_idle_stretch_kind_wins_over_the_run_kind(run_file: Path) -> None:
    run = load_run(run_file)
    rows = _rows(render_text(run, "csv", table="idle_stretches"))
    assert {r["kind"] for r in rows} <= {"host_wait", "short_gap", "other"}  # the record's field wins


def test_classify_tables(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = load_run(KERNELS)
    assert isinstance(run, ClassifyRun)
    kernels = sum(len(r.kernel_pass.kernels) for r in run.results if r.kernel_pass)
    for table, count in (("results", 6), ("kernels", kernels), ("ops", None)):
        out = tmp_path / f"{table}.csv"
        assert _cli(["report", str(KERNELS), "--table", table, "-o", str(out)]) == 0
        rows = _rows(out.read_text())
        assert count is None or len(rows) == count
        assert rows[0]["shape"] == "llama-3-8b" and rows[0]["mode"] == "eager"
    assert _cli(["report", str(KERNELS), "--table", "windows"]) == 2
    assert "has no table 'windows'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "fmt", "check"),
    [
        ("run.json", None, "json"),
        ("run.csv", None, "csv"),
        ("run.md", None, "markdown"),
        ("run.txt", None, "plain"),
        ("run", None, "json"),
        ("run.out", "csv", "csv"),
        ("run.json", "plain", "json"),  # analyze prints plain; the file is what its name says
    ],
)
def test_output_means_the_same_in_every_command(name: str, fmt: str | None, check: str, tmp_path: Path) -> None:
    extra = ["-f", fmt] if fmt else []
    out = tmp_path / name
    assert _cli(["analyze", str(PLAIN), "--range", STEP, "-o", str(out), *extra]) == 0
    assert file_format(fmt, out) == check
    text = out.read_text()
    if check == "json":
        assert from_builtins(json.loads(text)).kind == "analyze"
    elif check == "csv":
        assert _rows(text)[0]["name"] == "step 0"
    elif check == "markdown":
        assert text.lstrip().startswith("#") or "|" in text
    else:
        assert "launch-bound" in text and "|" not in text.splitlines()[0]
    # report writes the same file from the saved run
    if check == "json":
        again = tmp_path / f"again-{name}"
        assert _cli(["report", str(out), "-o", str(again)]) == 0
        assert from_builtins(json.loads(again.read_text())) == load_run(out)


def test_classify_csv_output_is_csv(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "run.csv"
    env = {**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(tmp_path)}
    argv = ["classify", "--device", "cpu", "--steps", "3", "--warmup", "0", "--batch", "1", "-q", "-o", str(out)]
    proc = subprocess.run([sys.executable, "-m", "launchprobe", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out.read_text())  # not JSON in a file named .csv
    assert len(rows) == 1 and rows[0]["mode"] == "eager" and rows[0]["batch"] == "1"


def test_report_refuses_a_format_the_name_contradicts(run_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    assert _cli(["report", str(run_file), "-f", "markdown", "-o", str(out)]) == 2
    assert not out.exists()
    assert _cli(["report", str(run_file), "-f", "json", "--table", "windows"]) == 2
    assert _cli(["compare", str(run_file), str(run_file), "-f", "markdown", "-o", str(out)]) == 2


def test_json_goes_to_the_stream_as_is() -> None:
    class Stream(io.StringIO):
        pass

    from launchprobe.console import make_console

    buffer = Stream()
    run = runs.analyze_run()
    emit(run, fmt="json", output=None, console=make_console(buffer, width=20))  # a narrow console: no wrapping
    assert buffer.getvalue() == render_text(run, "json")


def test_a_closed_pipe_ends_quietly(run_file: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "launchprobe", "report", str(run_file), "-f", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10).startswith(b"{")
    proc.stdout.close()
    code = proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert code == 0 and err == ""


def test_windows_plot_survives_a_dwarfing_window(run_file: Path) -> None:
    pytest.importorskip("matplotlib")
    run = load_run(run_file)
    assert isinstance(run, AnalyzeRun)
    plot = plot_windows(run)
    assert plot is not None and plot.data["scale"] == "shares"  # step 0 is 100x the others
    shares = plot.data["share_pct"]
    totals = [sum(parts) for parts in zip(*shares.values(), strict=True)]
    assert totals == pytest.approx([100.0] * len(run.windows))
    spans = plot.figure.axes[0]
    assert spans.get_xscale() == "log"
    even = plot_windows(runs.analyze_run())
    assert even is not None and even.data["scale"] == "ms" and len(even.figure.axes) == 1
