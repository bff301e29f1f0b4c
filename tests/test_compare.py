"""compare: the noise-aware rule on constructed runs, mismatched inputs, and every exit code of the command."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import runs

from launchprobe.cli import main
from launchprobe.compare import (
    CLASSIFY_METRICS,
    IMPROVED,
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    compare_runs,
    judge,
    mann_whitney_p,
    parse_threshold,
)
from launchprobe.run.files import save_run, to_builtins
from launchprobe.run.schema import ClassifyRun

STEP = CLASSIFY_METRICS["step_ms"]
TOKENS = CLASSIFY_METRICS["tokens_per_s"]


def calls(comparison, key: str = "eager b=1") -> dict[str, str]:
    return {c.metric: c.call for c in comparison.changes if c.key == key}


# --- the rule ---


def test_same_run_is_unchanged() -> None:
    base = runs.classify_run()
    result = compare_runs(base, copy.deepcopy(base))
    assert {c.call for c in result.changes} == {UNCHANGED}
    assert result.exit_code == 0 and not result.flips


def test_regression_beyond_threshold_and_noise() -> None:
    base = runs.classify_run()
    result = compare_runs(base, runs.scaled(base, 1.10, mode="eager", batch=1))
    assert calls(result) == {"step_ms": REGRESSED, "tokens_per_s": REGRESSED}
    assert calls(result, "full b=1") == {"step_ms": UNCHANGED, "tokens_per_s": UNCHANGED}
    change = next(c for c in result.changes if c.key == "eager b=1" and c.metric == "step_ms")
    assert change.change == pytest.approx(0.10, abs=1e-6)
    assert change.band is not None and change.band < 0.03 and change.p_value is not None and change.p_value < 0.01
    assert result.exit_code == 3


def test_improvement_does_not_fail() -> None:
    base = runs.classify_run()
    result = compare_runs(base, runs.scaled(base, 0.90, mode="full", batch=64))
    assert calls(result, "full b=64") == {"step_ms": IMPROVED, "tokens_per_s": IMPROVED}
    assert result.exit_code == 0


def test_change_inside_the_noise_is_inconclusive_never_a_failure() -> None:
    base = runs.classify_run()
    new = runs.scaled(base, 1.10, mode="eager", batch=1, spread=0.25)  # 10% slower, but very noisy
    result = compare_runs(base, new)
    assert calls(result) == {"step_ms": INCONCLUSIVE, "tokens_per_s": INCONCLUSIVE}
    assert result.exit_code == 0


def test_small_change_below_threshold_is_unchanged_even_if_significant() -> None:
    base = runs.classify_run(spread=0.001)
    result = compare_runs(base, runs.scaled(base, 1.03, spread=0.001))
    assert {c.call for c in result.changes} == {UNCHANGED}
    assert compare_runs(base, runs.scaled(base, 1.03, spread=0.001), threshold=0.02).exit_code == 3


def test_band_alone_decides_without_samples() -> None:
    # medians and stored IQRs only: 10% slower, IQR bands of 30% -> inconclusive; of 1% -> regressed
    assert judge(STEP, "k", [10.0], [11.0], 0.05, 3.0, 3.0).call == INCONCLUSIVE
    assert judge(STEP, "k", [10.0], [11.0], 0.05, 0.1, 0.1).call == REGRESSED
    assert judge(STEP, "k", [10.0], [11.0], 0.05).call == REGRESSED  # noise unknown: the threshold decides
    assert judge(STEP, "k", [10.0], [11.0], 0.05).band is None


def test_rank_test_can_veto_the_band() -> None:
    # medians 10% apart, tight IQRs, but only 5 samples each with overlapping tails -> p too large
    base = [9.0, 10.0, 10.0, 10.1, 13.0]
    new = [8.5, 10.9, 11.0, 11.0, 11.5]
    change = judge(STEP, "k", base, new, 0.05)
    assert change.band is not None and abs(change.change or 0) > change.band
    assert change.p_value is not None and change.p_value >= 0.01
    assert change.call == INCONCLUSIVE


def test_higher_is_better_metric_direction() -> None:
    assert judge(TOKENS, "k", [100.0] * 10, [80.0] * 10, 0.05).call == REGRESSED
    assert judge(TOKENS, "k", [100.0] * 10, [120.0] * 10, 0.05).call == IMPROVED


def test_idle_is_compared_in_points() -> None:
    idle = CLASSIFY_METRICS["idle"]
    assert judge(idle, "k", [0.02], [0.04], 0.05).call == UNCHANGED  # +2 points, though +100% relative
    assert judge(idle, "k", [0.10], [0.60], 0.05).call == REGRESSED


def test_mann_whitney_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    a = runs.samples(10.0, 0.02, n=30, seed=1)
    b = runs.samples(10.2, 0.02, n=40, seed=2) + [a[0], a[1]]  # ties
    expected = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True).pvalue
    assert mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-9)
    assert mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0


def test_verdict_flip_is_called_out() -> None:
    base = runs.classify_run()
    new = runs.scaled(base, 0.90, mode="eager", batch=1)  # faster step, same busy time: idle drops below 50%
    result = compare_runs(base, new)
    assert [(f.key, f.base, f.new) for f in result.flips] == [("eager b=1", "launch-bound", "memory-bound")]


def test_rows_only_on_one_side_are_listed() -> None:
    result = compare_runs(runs.classify_run(batches=(1, 64)), runs.classify_run(batches=(1, 8)))
    assert result.only_base == ["eager b=64", "piecewise b=64", "full b=64"]
    assert result.only_new == ["eager b=8", "piecewise b=8", "full b=8"]
    assert result.exit_code == 0


def test_analyze_windows_pool_instances() -> None:
    base = runs.analyze_run()
    new = copy.deepcopy(base)
    for w in new.windows[:2]:
        w.span_ns = round(w.span_ns * 1.2)
    result = compare_runs(base, new)
    by_key = {c.key: c for c in result.changes}
    assert set(by_key) == {"decode_step (device 0)", "prefill (device 0)"}
    assert by_key["decode_step (device 0)"].base.n == 2 and by_key["decode_step (device 0)"].call == REGRESSED
    assert by_key["prefill (device 0)"].call == UNCHANGED


# --- inputs that cannot be compared ---


def _mutate(path: tuple[str, ...], value: object) -> ClassifyRun:
    run = runs.classify_run()
    target: Any = run
    for key in path[:-1]:
        target = getattr(target, key)
    setattr(target, path[-1], value)
    return run


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("environment", "gpu"), "NVIDIA A100", "GPU differs"),
        (("config", "shape"), "llama-3-70b", "shape differs"),
        (("shape", "layers"), 80, "shape layers differs"),
        (("config", "context"), 4096, "context differs"),
        (("config", "dtype"), "fp16", "dtype differs"),
        (("schema_version",), 2, "schema_version differs"),
        (("kind",), "analyze", "run kind differs"),
        (("config", "plan"), True, "--plan run"),
    ],
)
def test_mismatched_inputs_are_reported(path: tuple[str, ...], value: object, message: str) -> None:
    other = runs.analyze_run() if path == ("kind",) else _mutate(path, value)  # a run's kind is its type
    result = compare_runs(runs.classify_run(), other)
    assert any(message in p for p in result.problems), result.problems
    assert result.exit_code == 4 and not result.changes


def test_no_common_rows_is_incomparable() -> None:
    result = compare_runs(runs.classify_run(batches=(1,)), runs.classify_run(batches=(2,)))
    assert result.exit_code == 4 and "no results in common" in result.problems[0]


def test_software_differences_are_notes_not_problems() -> None:
    result = compare_runs(runs.classify_run(), _mutate(("environment", "torch"), "2.12.0"))
    assert result.exit_code == 0 and result.notes == ["torch differs: 2.11.0+cu130 (base) vs 2.12.0 (new)"]


def test_parse_threshold() -> None:
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold(" 2.5 ") == pytest.approx(0.025)
    for bad in ("abc", "-1%", "100%", "nan"):
        with pytest.raises(ValueError):
            parse_threshold(bad)


# --- the command and its exit codes ---


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    base = runs.classify_run()
    made = {
        "base": base,
        "same": copy.deepcopy(base),
        "slow": runs.scaled(base, 1.10, mode="eager", batch=1),
        "noisy": runs.scaled(base, 1.10, mode="eager", batch=1, spread=0.25),
        "a100": _mutate(("environment", "gpu"), "NVIDIA A100"),
        "analyze": runs.analyze_run(),
    }
    paths = {}
    for name, run in made.items():
        paths[name] = tmp_path / f"{name}.json"
        save_run(run, paths[name])
    (tmp_path / "garbage.json").write_text("{not json")
    paths["garbage"] = tmp_path / "garbage.json"
    future = to_builtins(base)
    future["schema_version"] = 99
    paths["future"] = tmp_path / "future.json"
    paths["future"].write_text(json.dumps(future))
    return paths


@dataclass
class Result:
    exit_code: int
    output: str
    err: str


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run `launchprobe compare ...` through the real entry point (errors become exit codes there)."""

    def run(*args: object) -> Result:
        try:
            main(["compare", *map(str, args)])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run


def test_exit_0_no_regression(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["same"])
    assert result.exit_code == 0, result.output
    assert "no regression beyond 5%" in result.output


def test_exit_0_when_inside_noise(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["noisy"])
    assert result.exit_code == 0 and "inconclusive" in result.output and "not a failure" in result.output


def test_exit_3_regression(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["slow"])
    assert result.exit_code == 3, result.output
    assert "REGRESSION" in result.output and "regressed" in result.output


def test_higher_threshold_passes(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    assert invoke(files["base"], files["slow"], "--threshold", "15%").exit_code == 0


def test_exit_4_incomparable(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["a100"])
    assert result.exit_code == 4 and "GPU differs: NVIDIA H200 (base) vs NVIDIA A100 (new)" in result.output
    assert invoke(files["base"], files["analyze"]).exit_code == 4


@pytest.mark.parametrize("other", ["garbage", "future", "missing"])
def test_exit_2_unreadable(invoke: Callable[..., Result], files: dict[str, Path], tmp_path: Path, other: str) -> None:
    path = files.get(other, tmp_path / "missing.json")
    result = invoke(files["base"], path)
    assert result.exit_code == 2
    assert result.err.startswith("launchprobe: error: ") and result.err.count("\n") == 1 and not result.output


def test_exit_2_bad_options(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    assert invoke(files["base"], files["same"], "--threshold", "lots").exit_code == 2
    assert invoke(files["base"], files["same"], "--metric", "joules").exit_code == 2


def test_future_file_message(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["future"])
    assert "schema_version 99 is newer than this launchprobe understands" in result.err


def test_metric_option_and_markdown_summary(
    invoke: Callable[..., Result], files: dict[str, Path], tmp_path: Path
) -> None:
    summary = tmp_path / "summary"
    summary.write_text("before\n")
    result = invoke(files["base"], files["slow"], "--metric", "step_ms,idle", "--format", "markdown", "-o", summary)
    assert result.exit_code == 3
    text = summary.read_text()
    assert text.startswith("before\n") and "| eager b=1 | ms/step |" in text and "| GPU idle |" in text
    assert "tokens/s" not in text


def test_json_output(invoke: Callable[..., Result], files: dict[str, Path]) -> None:
    result = invoke(files["base"], files["slow"], "--format", "json")
    data = json.loads(result.output)
    assert data["exit_code"] == 3 and data["changes"][0]["call"] == "regressed"
