"""Ctrl-C during `classify` (issue 14): the (mode, batch) rows finished before it are kept, saved with --output
as a run marked incomplete, printed, and the exit code is 130; re-rendering and comparing the partial run work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import runs

from launchprobe import classify as job
from launchprobe.cli import main
from launchprobe.measure import ceilings as ceilings_module
from launchprobe.render import render_text
from launchprobe.run.files import load_run, save_run


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    try:
        main([*map(str, args)])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def interrupt_third_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Datasheet-like ceilings (nothing measured for them), and Ctrl-C while the third row is measured."""

    def ceilings(**kwargs: Any) -> ceilings_module.Ceilings:
        return ceilings_module.Ceilings("datasheet", 50e9, 1e12, 5_000.0, None, "2026-01-01T00:00:00+00:00")

    monkeypatch.setattr(ceilings_module, "get_ceilings", ceilings)
    measure = job._Measurer.measure
    calls = []

    def measure_or_stop(self: Any, mode: str, batch: int, runner: Any) -> Any:
        calls.append((mode, batch))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return measure(self, mode, batch, runner)

    monkeypatch.setattr(job._Measurer, "measure", measure_or_stop)


ARGS = ["classify", "--device", "cpu", "--batch", "1,2,3,4", "--steps", "3", "--warmup", "0", "-q"]


@pytest.mark.usefixtures("interrupt_third_row")
def test_ctrl_c_keeps_the_finished_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    code, stdout, err = run_cli(capsys, *ARGS, "--output", out, "--format", "plain")
    assert code == 130
    assert err == f"launchprobe: error: interrupted after 2 of 4 (mode, batch) rows; the partial run (marked " \
        f"incomplete) is saved in {out}\n"  # fmt: skip
    run = load_run(out)
    assert run.kind == "classify" and run.incomplete
    assert [(r.mode, r.batch) for r in run.results] == [("eager", 1), ("eager", 2)]
    assert all(r.step_ms_median for r in run.results)
    assert any(n.startswith("incomplete: interrupted (Ctrl-C) after 2 of 4") for n in run.notices)
    assert "INCOMPLETE" in stdout and "eager b=2" in stdout  # what was measured is printed
    # the partial run re-renders and compares with a note
    assert "INCOMPLETE" in render_text(run, "plain")
    code, stdout, _ = run_cli(capsys, "compare", out, out)
    assert code == 0 and "incomplete (interrupted)" in stdout


@pytest.mark.usefixtures("interrupt_third_row")
def test_ctrl_c_without_output_prints_the_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, stdout, err = run_cli(capsys, *ARGS, "--format", "json")
    assert code == 130 and err == "launchprobe: error: interrupted after 2 of 4 (mode, batch) rows\n"
    printed = json.loads(stdout)
    assert printed["incomplete"] is True and len(printed["results"]) == 2


def test_ctrl_c_before_any_row_is_plain_130(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:  # fmt: skip
    def stop(**kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ceilings_module, "get_ceilings", stop)
    out = tmp_path / "run.json"
    code, _, err = run_cli(capsys, *ARGS, "--output", out)
    assert code == 130 and err.strip() == "launchprobe: interrupted" and not out.exists()


def test_complete_runs_are_not_marked(tmp_path: Path) -> None:
    save_run(runs.classify_run(), tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())["incomplete"] is False
    assert "INCOMPLETE" not in render_text(load_run(tmp_path / "run.json"), "plain")
