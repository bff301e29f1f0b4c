"""`launchprobe report`: re-render saved runs in every format, with plots, and refuse bad input cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import runs

from launchprobe.cli import main
from launchprobe.run.files import save_run


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    try:
        main([*map(str, args)])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    save_run(runs.classify_run(), path)
    return path


def test_report_plain_when_piped(capsys: pytest.CaptureFixture[str], run_file: Path) -> None:
    code, out, _ = run_cli(capsys, "report", run_file)
    assert code == 0 and "launch-bound" in out and "\x1b[" not in out


@pytest.mark.parametrize("fmt", ["plain", "markdown", "json", "csv", "table"])
def test_report_formats(capsys: pytest.CaptureFixture[str], run_file: Path, fmt: str) -> None:
    code, out, _ = run_cli(capsys, "report", run_file, "--format", fmt)
    assert code == 0 and out
    if fmt == "json":
        assert json.loads(out)["kind"] == "classify"


def test_report_output_and_plots(capsys: pytest.CaptureFixture[str], run_file: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "report", run_file, "-o", tmp_path / "r.md", "--plot", tmp_path / "png")
    assert code == 0
    assert (tmp_path / "r.md").read_text().startswith("## launchprobe classify")
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["gaps-b1.png", "regime.png", "timeline-b1.png"]
    assert "wrote" in err
    code, _, err = run_cli(capsys, "report", run_file, "--plot", tmp_path / "png")
    assert code == 2 and "--force" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "invalid JSON"),
        ("[]", "not a launchprobe run file"),
        ('{"schema_version": 7, "kind": "classify"}', "newer than this launchprobe"),
        ('{"schema_version": 0, "kind": "classify"}', "invalid schema_version"),
    ],
)
def test_report_bad_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run_cli(capsys, "report", path)
    assert code == 2 and message in err and err.count("\n") == 1 and not out


def test_report_refuses_to_overwrite(capsys: pytest.CaptureFixture[str], run_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("mine")
    code, _, err = run_cli(capsys, "report", run_file, "-o", target)
    assert code == 2 and "--force" in err and target.read_text() == "mine"
    code, _, _ = run_cli(capsys, "report", run_file, "-o", target, "--force")
    assert code == 0 and target.read_text().startswith("kind,")
