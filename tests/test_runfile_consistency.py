"""A run file whose stored numbers disagree with each other is refused at load (issue 14): compare works from the
samples, so an edited median must not compare as "unchanged". One line, exit 2, naming the row and both values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launchprobe.cli import main
from launchprobe.errors import UsageError
from launchprobe.run.files import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "h200_classify_default.json"


def edited(tmp_path: Path, edit: Any, name: str = "edited.json") -> Path:
    raw = json.loads(FIXTURE.read_text())
    edit(raw["results"][0])  # eager b=1: median 5.713 ms, 175.03 tokens/s
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_the_fixture_is_consistent() -> None:
    run = load_run(FIXTURE)
    assert run.kind == "classify" and len(run.results) == 12


def test_a_median_tiny_rounding_away_is_accepted(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda r: r.update(step_ms_median=r["step_ms_median"] * (1 + 1e-12)))
    assert load_run(path).kind == "classify"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda r: r.update(step_ms_median=9.0),
            r"result eager b=1: step_ms_median 9 disagrees with the median of its 50 step_ms_samples, 5\.71344",
        ),
        (
            lambda r: r.update(step_ms_samples=[x * 2 for x in r["step_ms_samples"]]),
            r"result eager b=1: step_ms_median 5\.71344 disagrees with the median of its 50 step_ms_samples, 11\.4269",
        ),
        (
            lambda r: r.update(tokens_per_s=999.0),
            r"result eager b=1: tokens_per_s 999 disagrees with batch 1 / step_ms_median 5\.71344 ms = 175\.026",
        ),
        (lambda r: r.update(step_ms_median=None), r"result eager b=1: step_ms_samples without a step_ms_median"),
        (lambda r: r.update(step_ms_samples=[-1.0, 5.7, 5.8]), r"result eager b=1: step times must be positive"),
        (lambda r: r.update(step_ms_median=0.0), r"result eager b=1: step times must be positive"),
    ],
)
def test_inconsistent_results_are_refused(tmp_path: Path, edit: Any, message: str) -> None:
    path = edited(tmp_path, edit)
    with pytest.raises(UsageError, match=rf"^{path}: inconsistent run file: {message}"):
        load_run(path)


def test_huge_numbers_that_overflow_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(FIXTURE.read_text().replace('"step_ms_p90": ', '"step_ms_p90": 1e999, "x": ', 1))
    with pytest.raises(UsageError, match=r"1e999 is not a finite number"):
        load_run(path)


def test_compare_refuses_an_edited_median(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = edited(tmp_path, lambda r: r.update(step_ms_median=9.0))
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(FIXTURE), str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "eager b=1: step_ms_median 9 disagrees" in err
