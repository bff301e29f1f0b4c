"""The command line's own streams and terminal settings: bare invocation, closed pipes, full disks, ASCII-only
stdout, NO_COLOR / FORCE_COLOR, COLUMNS (issue 14). Each case: one line on stderr or none, never a traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import runs

from launchprobe.cli import main
from launchprobe.run.files import save_run

ROOT = Path(__file__).parents[1]


def _launchprobe(*args: str, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen[str]:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "launchprobe", *args], text=True, env=full_env, stderr=subprocess.PIPE, **kwargs
    )  # type: ignore[call-overload]


@pytest.fixture
def run_files(tmp_path: Path) -> tuple[Path, Path]:
    base = runs.classify_run()
    save_run(base, tmp_path / "base.json")
    save_run(runs.scaled(base, 1.10, mode="eager", batch=1), tmp_path / "slow.json")
    return tmp_path / "base.json", tmp_path / "slow.json"


def test_bare_launchprobe_prints_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 0
    captured = capsys.readouterr()
    assert "Commands:" in captured.out and "classify" in captured.out
    assert captured.err == ""


@pytest.mark.parametrize(("which", "status"), [("base", 0), ("slow", 3)])
def test_closed_pipe_ends_quietly_with_the_commands_status(
    run_files: tuple[Path, Path], which: str, status: int
) -> None:
    base, slow = run_files
    proc = _launchprobe("compare", str(base), str(base if which == "base" else slow), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before anything is written: `| head -0`
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert stderr == ""


def test_full_disk_is_one_line(run_files: tuple[Path, Path]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    for fmt in ("table", "json"):
        with open("/dev/full", "w") as full:
            proc = _launchprobe("report", str(run_files[0]), "--format", fmt, stdout=full)
            _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 2
        assert stderr.strip() == "launchprobe: error: cannot write to stdout: No space left on device"


def test_ascii_only_stdout_is_one_line(run_files: tuple[Path, Path]) -> None:
    proc = _launchprobe(
        "report", str(run_files[0]), "--format", "markdown", env={"PYTHONIOENCODING": "ascii"}, stdout=subprocess.PIPE
    )
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "encoding is ascii" in lines[0] and "PYTHONIOENCODING=utf-8" in lines[0]
    ok = _launchprobe("report", str(run_files[0]), "--format", "json", env={"PYTHONIOENCODING": "ascii"},
                      stdout=subprocess.PIPE)  # fmt: skip
    out, stderr = ok.communicate(timeout=60)
    assert ok.returncode == 0 and out.startswith("{") and stderr == ""  # JSON is ASCII: it goes through


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("no_color", ["1", ""])
def test_no_color_sends_no_style_codes_in_progress(monkeypatch: pytest.MonkeyPatch, no_color: str) -> None:
    from launchprobe.progress import Progress

    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("NO_COLOR", no_color)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    with Progress() as bar:
        assert bar.live  # still the live display on a terminal: NO_COLOR is about styles
        bar.start(2)
        bar.advance("eager batch 1: 1.000 ms/step")
    styled = "\x1b[1m" in terminal.getvalue() or "\x1b[3" in terminal.getvalue()
    assert styled == (no_color == "")


def test_force_color_styles_output_that_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from launchprobe.console import make_console, stderr_console, wants_rich

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert wants_rich(io.StringIO())
    buffer = io.StringIO()
    make_console(buffer).print("[bold]x[/]")
    assert "\x1b[1m" in buffer.getvalue()
    assert stderr_console().is_terminal
    monkeypatch.setenv("FORCE_COLOR", "")
    assert not wants_rich(io.StringIO())


@pytest.mark.parametrize("columns", ["0", "-3", "abc", "", "\u00b2"])
def test_invalid_columns_count_as_unset(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    from launchprobe.console import make_console

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("LINES", columns)
    monkeypatch.setenv("FORCE_COLOR", "1")  # the rich path, which reads COLUMNS
    monkeypatch.delenv("NO_COLOR", raising=False)
    buffer = io.StringIO()
    console = make_console(buffer)
    assert console.width > 0 and console.height > 0
    console.print("launchprobe")
    assert "launchprobe" in buffer.getvalue()


def test_columns_0_report_is_printed(run_files: tuple[Path, Path]) -> None:
    proc = _launchprobe("report", str(run_files[0]), env={"COLUMNS": "0", "FORCE_COLOR": "1"}, stdout=subprocess.PIPE)
    out, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stderr == ""
    assert "launchprobe classify" in out
