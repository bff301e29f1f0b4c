"""Kernel and range names are text (issue 14): never read as rich markup or emoji codes, and their control
characters (raw escape codes) never reach the terminal; in tables, notices, progress, compare keys and errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import runs
from rich.console import Console

from launchprobe.cli import main
from launchprobe.compare import compare_runs
from launchprobe.console import make_console, printable
from launchprobe.progress import Progress
from launchprobe.render import build_report, render_text
from launchprobe.render import comparison as comparison_report
from launchprobe.render.markdown import report_markdown
from launchprobe.render.terminal import print_report
from launchprobe.run.files import save_run
from launchprobe.run.schema import AnalyzeRun, TopKernel

NAMES = ["[forward] layer", "[/x]", "\x1b[31mred", "[bold]b[/bold] :smile: \\", "tab\tnew\nline"]
SHOWN = ["[forward] layer", "[/x]", "\\x1b[31mred", "[bold]b[/bold] :smile: \\", "tab\\x09new\\x0aline"]


def hostile_run() -> AnalyzeRun:
    run = runs.analyze_run()
    kernels = [TopKernel(name=name, count=3, total_ns=3000, mean_ns=1000, share=0.1) for name in NAMES]
    run.windows = [
        runs.window(name, 0, 9.5 + i, 4.4, 480, top_kernels=kernels, verdict_reason=f"why {name}")
        for i, name in enumerate(NAMES)
    ]
    run.notices = [f"notice about {name}" for name in NAMES]
    return run


def rich_console() -> Console:
    return Console(file=io.StringIO(), width=200, force_terminal=True, color_system="truecolor", record=True)


def drawn(console: Console) -> str:
    """What a styled console showed, without its own style codes; a raw escape code of a name stays in it."""
    assert isinstance(console.file, io.StringIO)
    assert "\x1b[31mred" not in console.file.getvalue()
    return console.export_text(styles=False)


def check_text(text: str) -> None:
    for shown in SHOWN:
        assert shown in text, shown
    assert "😄" not in text and "\x1b" not in text


@pytest.mark.parametrize("window_count", [len(NAMES), 40])  # every window shown, or the slowest few
def test_analyze_report_shows_names_as_text(window_count: int) -> None:
    run = hostile_run()
    run.windows = (run.windows * 8)[:window_count]
    check_text(render_text(run, "plain", width=200))
    console = rich_console()
    print_report(build_report(run), console)
    check_text(drawn(console))
    markdown = report_markdown(build_report(run))
    assert "\x1b" not in markdown and "\\x1b[31mred" in markdown


def test_plain_console_on_a_narrow_terminal() -> None:
    buffer = io.StringIO()
    print_report(build_report(hostile_run()), make_console(buffer, plain=True, width=40))
    check_text(buffer.getvalue())


def test_compare_of_hostile_names_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = hostile_run()
    save_run(run, tmp_path / "a.json")
    save_run(run, tmp_path / "b.json")
    for fmt in ("plain", "table", "markdown"):
        with pytest.raises(SystemExit) as exit_info:
            main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", fmt])
        out = capsys.readouterr()
        assert exit_info.value.code == 0, out.err
        assert "[/x] (device 0)" in out.out and "\x1b" not in out.out
    console = rich_console()
    print_report(comparison_report.build(compare_runs(run, run), "a", "b", run, run), console)
    check_text(drawn(console))


def test_progress_text_is_not_markup() -> None:
    console = rich_console()
    with Progress(console=console) as bar:
        bar.start(2)
        for name in NAMES:
            bar.status(name)
            bar.advance(name)
    assert "[/x]" in drawn(console) and "\x1b[31mred" not in drawn(console)


def test_progress_lines_in_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress(console=Console(file=io.StringIO())) as bar:
        bar.status("\x1b[31mred")
    assert "\\x1b[31mred" in capsys.readouterr().err


def test_error_lines_show_control_characters_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "\x1b[31mred\nrun.json")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "\x1b" not in err and err.count("\n") == 1
    assert "\\x1b[31mred\\x0arun.json: no such file" in err


def test_printable() -> None:
    assert printable("a\x00b\x7f\x9bc\u202e") == "a\\x00b\\x7f\\x9bc\\u202e"
    assert printable("décodé [x] 名前") == "décodé [x] 名前"
