"""The Python API (launchprobe/api.py, docs/api.md): the worked example runs, frames keep integers, str and Path
both work, the package stays light to import, and the installs are declared as the README says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import launchprobe
from launchprobe import api
from launchprobe.analysis import idle
from launchprobe.analysis.windows import percentiles
from launchprobe.cli import output
from launchprobe.errors import MissingToolError, NoDataError, UsageError
from launchprobe.render import flat
from launchprobe.run import load_run, to_builtins
from launchprobe.run.schema import AnalyzeRun, ClassifyRun, Window

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PLAIN = FIXTURES / "plain_torch.sqlite.gz"
KERNELS = FIXTURES / "h200_classify_kernels_8b.json.gz"
STEP = r"step \d+"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)


@pytest.fixture(scope="module")
def plain_run() -> AnalyzeRun:
    return launchprobe.analyze(PLAIN, ranges=STEP)


def test_docs_worked_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # the example names the fixture from the repository root
    exec(compile(_blocks()[0], "docs/api.md", "exec"), {"__name__": "docs_api"})
    out = capsys.readouterr().out
    assert out.startswith("launch-bound\n") and "host_wait" in out and "step 0" in out


def test_docs_classify_example_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    code = _blocks()[1].replace("steps=5, warmup=1", "steps=3, warmup=0, device='cpu'")
    exec(compile(code, "docs/api.md", "exec"), {"__name__": "docs_api"})
    assert "eager" in capsys.readouterr().out


def test_import_launchprobe_is_light() -> None:
    code = (
        "import sys, launchprobe; heavy = [m for m in ('pandas', 'numpy', 'torch', 'rich', 'msgspec') "
        "if m in sys.modules]; print(heavy); assert callable(launchprobe.analyze)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_str_and_path_give_the_same_run(plain_run: AnalyzeRun) -> None:
    again = launchprobe.analyze(str(PLAIN), ranges=[STEP])
    assert again.windows == plain_run.windows and again.summaries == plain_run.summaries
    assert launchprobe.load_run(str(KERNELS)) == launchprobe.load_run(KERNELS) == load_run(KERNELS)


def test_analyze_is_what_the_cli_saves(plain_run: AnalyzeRun, tmp_path: Path) -> None:
    from launchprobe.cli import main

    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(PLAIN), "--range", STEP, "-o", str(out), "-f", "plain"])
    assert exc.value.code == 0
    saved = to_builtins(load_run(out))
    mine = to_builtins(plain_run)
    for key in ("windows", "summaries", "source", "config", "environment"):
        assert saved[key] == mine[key]


def test_windows_frame_has_the_json_names_and_int64(plain_run: AnalyzeRun) -> None:
    frame = plain_run.windows_frame()
    record = to_builtins(plain_run)["windows"][0]
    scalars = {k for k, val in record.items() if not isinstance(val, (list, dict))}
    assert scalars <= set(frame.columns)
    assert {"launch_api_ns.p50", "queue_ns.count", "launches.cudaLaunchKernel"} <= set(frame.columns)
    for column in ("start_ns", "end_ns", "span_ns", "busy_ns", "kernels", "gpu_ops", "idle_host_wait_ns"):
        assert frame[column].dtype == np.int64, column
    assert frame["start_ns"].tolist() == [w.start_ns for w in plain_run.windows]
    assert frame["kernels"].tolist() == [w.kernels for w in plain_run.windows]
    assert len(frame) == len(plain_run.windows) == 40


def test_summaries_and_idle_stretches_frames(plain_run: AnalyzeRun) -> None:
    summaries = plain_run.summaries_frame()
    assert summaries["name"].tolist() == ["step <n>"] and summaries["span_ns"].dtype == np.int64
    idle_frame = plain_run.idle_stretches_frame()
    assert len(idle_frame) == sum(len(w.largest_idle) for w in plain_run.windows)
    assert set(idle_frame["kind"]) <= set(idle.CLASS_NAMES)
    assert idle_frame["duration_ns"].dtype == np.int64 and idle_frame["window_index"].dtype == np.int64
    first = plain_run.windows[0].largest_idle[0]
    row = idle_frame.iloc[0]
    assert (row["window"], row["start_ns"], row["duration_ns"]) == ("step 0", first.start_ns, first.duration_ns)
    joined = idle_frame.merge(plain_run.windows_frame(), left_on="window_index", right_index=True)
    assert (joined["start_ns_x"] >= joined["start_ns_y"]).all() and (joined["end_ns_x"] <= joined["end_ns_y"]).all()
    tops = plain_run.top_kernels_frame()
    assert tops["total_ns"].dtype == np.int64 and len(tops) == sum(len(w.top_kernels) for w in plain_run.windows)


def test_missing_integers_are_nullable_not_float() -> None:
    run = load_run(FIXTURES / "h200_classify_default.json")
    assert isinstance(run, ClassifyRun)
    frame = run.results_frame()
    assert len(frame) == len(run.results)
    assert frame["batch"].dtype == np.int64 and frame["bytes_per_step"].dtype == np.int64
    assert frame["step_ms_median"].dtype == np.float64
    assert run.kernels_frame().empty  # no per-kernel pass in this run
    kernel_run = load_run(KERNELS)
    assert isinstance(kernel_run, ClassifyRun)
    kernels = kernel_run.kernels_frame()
    assert len(kernels) == sum(len(r.kernel_pass.kernels) for r in kernel_run.results if r.kernel_pass)
    assert kernels["start_ns"].dtype == np.int64 and {"mode", "batch", "op", "gap_before_ns"} <= set(kernels.columns)
    # a column with a missing value stays integer (nullable)
    mixed = pd.Series([1, None], dtype="Int64")
    frame_run = AnalyzeRun(windows=[plain_window(instance=3), plain_window(instance=None)])
    assert frame_run.windows_frame()["instance"].dtype == mixed.dtype


def plain_window(**extra: object) -> Window:
    fields: dict[str, object] = {"name": "w", "device": 0, "start_ns": 0, "end_ns": 10, "span_ns": 10, "kernels": 1,
        "gpu_ops": 1, "busy_ns": 5, "idle_host_wait_ns": 5, "idle_short_gap_ns": 0, "idle_other_ns": 0,
        "verdict": "launch-bound", "verdict_reason": "r"}  # fmt: skip
    return Window(**{**fields, **extra})  # type: ignore[arg-type]


def test_frames_name_the_tables_csv_has() -> None:
    assert {"analyze": tuple(flat.ANALYZE_TABLES), "classify": tuple(flat.CLASSIFY_TABLES)} == output.KIND_TABLES
    assert set(output.ALL_TABLES) == set(flat.TABLES)
    assert api.DEFAULT_SHORT_GAP_NS == idle.DEFAULT_SHORT_GAP_NS
    from launchprobe.analysis import no_work

    assert api.DEFAULT_QUIET_NS == no_work.DEFAULT_QUIET_NS


def test_errors_are_launchprobe_errors() -> None:
    with pytest.raises(UsageError, match="not a valid regular expression"):
        launchprobe.analyze(PLAIN, ranges="step (")
    with pytest.raises(UsageError, match="steps='every': choose one of auto, annotations, off"):
        launchprobe.analyze(PLAIN, steps="every")
    with pytest.raises(NoDataError):
        launchprobe.analyze(PLAIN, ranges="never-there")
    with pytest.raises(UsageError, match="no such file"):
        launchprobe.load_run("no-such-run.json")


def test_classify_is_a_callable_module() -> None:
    import launchprobe.classify as job

    assert launchprobe.classify is job and callable(job)
    assert job.build_config is not None and job.resolve_device is not None


def test_classify_plan_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    run = launchprobe.classify(plan=True, shape="llama-3-8b", batches=[1, 64], modes="eager,full")  # type: ignore[operator]
    assert isinstance(run, ClassifyRun) and run.is_plan
    frame = run.results_frame()
    assert frame[["mode", "batch"]].values.tolist() == [["eager", 1], ["eager", 64], ["full", 1], ["full", 64]]
    with pytest.raises(UsageError, match="unknown mode"):
        api.classify(plan=True, modes="warp")


def test_classify_without_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec says: not installed
    with pytest.raises(MissingToolError, match=r"launchprobe\[classify\]") as exc:
        api.classify(batches=[1])
    assert exc.value.exit_code == 5


def test_write_trace_from_python(plain_run: AnalyzeRun, tmp_path: Path) -> None:
    seen = launchprobe.analyze_trace(PLAIN, ranges=STEP)
    launchprobe.write_trace(seen.run, str(tmp_path / "t.json"), timeline=seen.timeline)
    assert json.loads((tmp_path / "t.json").read_text())["displayTimeUnit"] == "ns"
    with pytest.raises(ValueError, match="Timeline"):
        launchprobe.write_trace(plain_run, tmp_path / "u.json")
    launchprobe.analyze(PLAIN, ranges=STEP, trace_out=tmp_path / "v.json")
    assert (tmp_path / "v.json").stat().st_size > 1000


@pytest.mark.parametrize("n", [*range(1, 400), 1000, 4096, 10_000, 99_991, 100_000])
def test_percentiles_are_numpys_inverted_cdf(n: int) -> None:
    values = np.random.default_rng(n).integers(0, 10**12, size=n)
    qs = (50, 90, 99)
    assert percentiles(values, qs) == [int(x) for x in np.percentile(values, qs, method="inverted_cdf")]


def test_packaging_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "torch" not in base and "matplotlib" not in base and "triton" not in base and "numpy" in base
    extras = project["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["classify"])
    assert not any("triton" in d for d in extras["classify"])  # the CPU path stays light
    assert any("triton" in d and "platform_machine" in d for d in extras["gpu"])
    assert any(d.startswith("matplotlib") for d in extras["plot"])
    assert any(d.startswith("scipy") for d in extras["test"])
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["mypy"]["python_version"] == project["requires-python"].removeprefix(">=")
    assert set(tool["hatch"]["build"]["targets"]["wheel"]) <= {"packages", "force-include"}


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set up and run") : readme.index("## What a GPU run looks like")]
    commands = [line.strip() for line in setup.splitlines() if line.startswith("    pip install")]
    assert len(commands) == 2 and "[classify]" in commands[0] and "[test]" in commands[1]
    assert "`gpu`" in setup
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci
    assert "](" not in readme  # no links that break off the repository: docs are named as paths


def test_no_torch_for_analyze_report_compare(tmp_path: Path) -> None:
    """Block torch (and matplotlib) in a fresh interpreter: the torch-free commands work, the others name the
    extra in one line and exit 5."""
    run_file = tmp_path / "run.json"
    script = f"""
import sys
sys.modules["torch"] = None
sys.modules["matplotlib"] = None
from launchprobe.cli import run
codes = [
    run(["analyze", {str(PLAIN)!r}, "--range", {STEP!r}, "-o", {str(run_file)!r}, "-f", "json"]),
    run(["report", {str(run_file)!r}, "-f", "markdown"]),
    run(["compare", {str(run_file)!r}, {str(run_file)!r}]),
    run(["report", {str(KERNELS)!r}, "--table", "ops"]),
    run(["classify", "--device", "cpu"]),
    run(["report", {str(run_file)!r}, "--plot", {str(tmp_path / "png")!r}]),
]
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None], "torch imported"
print("CODES", codes)
"""
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CODES [0, 0, 0, 0, 5, 5]" in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("launchprobe: error:")]
    assert errors == [
        "launchprobe: error: launchprobe classify needs torch: pip install 'launchprobe[classify]'",
        "launchprobe: error: --plot needs matplotlib: pip install 'launchprobe[plot]'",
    ]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["classify", "analyze", "nsys", "report", "compare"])
def test_help_loads_no_heavy_module(command: str) -> None:
    code = (
        f"import sys; from launchprobe.cli import run; run([{command!r}, '--help']); "
        "print([m for m in ('pandas', 'numpy', 'torch', 'matplotlib') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_steps_are_found_from_python_as_from_the_cli() -> None:
    run = launchprobe.analyze(PLAIN, steps="auto")
    kinds = [s for s in run.summaries if s.step_kind]
    assert kinds and kinds[0].instances >= 30 and run.config.steps == "auto"
    assert launchprobe.analyze(PLAIN, steps="off").summaries == []
