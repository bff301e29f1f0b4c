"""classify end to end on the CPU path, and its errors: exit codes, formats, run files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from launchprobe.run import SCHEMA_VERSION, load_run, to_builtins

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--device", "cpu", "--steps", "3", "--warmup", "1", "-q"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ceilings cache for the module, so the CPU ceilings are measured once."""
    path = tmp_path_factory.mktemp("cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(path)
    yield path
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


def launchprobe(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "launchprobe", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def test_cpu_path_end_to_end_json_and_run_file(cache_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = launchprobe("classify", *FAST, "--batch", "1,3", "--format", "json", "--output", str(out), cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run == to_builtins(load_run(out))
    assert run["schema_version"] == SCHEMA_VERSION and run["kind"] == "classify"
    assert run["environment"]["device"] == "cpu" and run["environment"]["torch"] == torch.__version__
    assert run["shape"]["name"] == "tiny"
    assert any(n.startswith("CPU path") for n in run["notices"])
    assert {u["mode"] for u in run["unavailable"]} == {"piecewise", "full"}
    required = {
        "mode", "batch", "bucket", "step_ms_median", "step_ms_p90", "tokens_per_s", "kernels_per_step",
        "gpu_busy_ms", "idle_fraction", "bytes_per_step", "flops_per_step", "achieved_bandwidth_fraction",
        "achieved_flops_fraction", "verdict", "capture_s", "capture_bytes", "padding_fraction",
    }  # fmt: skip
    for record in run["results"]:
        assert required <= set(record)
        assert record["mode"] == "eager" and record["bucket"] == record["batch"]
        assert record["verdict"] in ("launch-bound", "memory-bound", "compute-bound")
        assert len(record["step_ms_samples"]) == 3
        assert record["tokens_per_s"] == pytest.approx(record["batch"] / record["step_ms_median"] * 1e3)
        assert record["kernels_per_step"] is None  # not observable on the CPU, never assumed
    assert run["ceilings"]["source"] in ("measured", "cached")
    # the CPU path runs the plain-torch reference: no Triton kernels, so no programmatic dependent launch
    assert run["config"]["projections"] == "cublas" and run["config"]["pdl"] is False


def test_plain_report_is_the_default_when_piped(cache_dir: Path) -> None:
    proc = launchprobe("classify", *FAST, "--batch", "2", cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert "launch-bound" in proc.stdout or "memory-bound" in proc.stdout or "compute-bound" in proc.stdout
    assert "\x1b[" not in proc.stdout  # no ANSI codes in a log
    assert proc.stdout.splitlines()[0].startswith("launchprobe classify: CPU path")  # said on the first line


def test_plan_runs_nothing_and_reports_costs(tmp_path: Path) -> None:
    proc = launchprobe("classify", "--plan", "--shape", "llama-3-70b", "--batch", "1,3", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["config"]["plan"] is True
    records = {(r["mode"], r["batch"]): r for r in run["results"]}
    assert records[("full", 3)]["bucket"] == 4 and records[("full", 3)]["padding_fraction"] == 0.25
    assert records[("eager", 1)]["bytes_per_step"] > 139e9
    assert "step_ms_median" not in records[("eager", 1)]
    assert run["memory"]["weight_bytes"] > 140e9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch", "0"], "values must be positive"),
        (["--batch", "a,b"], "is not an integer"),
        (["--shape", "nope"], "unknown shape 'nope'"),
        (["--shape", "missing.toml"], "does not exist"),
        (["--set", "layers=x"], "is not an integer"),
        (["--set", "colour=red"], "unknown field"),
        (["--mode", "turbo"], "unknown mode"),
        (["--context", "0"], "--context must be at least 1"),
        (["--steps", "1"], "--steps must be at least 3"),
        (["--batch", "600", "--plan"], "above the largest capture size 512"),
        (["--projections", "cutlass"], "'cutlass' is not one of 'cublas', 'gemv'"),
        (["--kernels", "--kernel-seconds", "0"], "--kernel-seconds"),
        (["--kernels", "--kernel-seconds", "lots"], "is not a valid float"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = launchprobe("classify", "--device", "cpu", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_asking_for_cuda_without_a_gpu_exits_5() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = launchprobe("classify", "--device", "cuda")
    assert proc.returncode == 5 and "sees no CUDA GPU" in proc.stderr


def test_existing_output_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "keep.json"
    out.write_text("precious")
    proc = launchprobe("classify", *FAST, "--output", str(out))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert out.read_text() == "precious"


def test_bad_shape_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("layers = [")
    assert "invalid TOML" in launchprobe("classify", "--plan", "--shape", str(bad)).stderr
    odd = tmp_path / "odd.toml"
    odd.write_text(
        'name = "odd"\nlayers = 2\nhidden = 64\nffn = 128\nheads = 3\nkv_heads = 2\nhead_dim = 16\nvocab = 10\n'
    )
    proc = launchprobe("classify", "--plan", "--shape", str(odd))
    assert proc.returncode == 2 and "multiple of kv_heads" in proc.stderr


def test_help_has_examples_and_does_not_import_torch() -> None:
    proc = launchprobe("classify", "--help")
    assert proc.returncode == 0 and "Examples:" in proc.stdout and "--kernels" in proc.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from launchprobe.cli import main; "
         "sys.argv=['launchprobe','--help']\ntry:\n main()\nexcept SystemExit: pass\nprint('torch' in sys.modules)"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert probe.stdout.strip().endswith("False")


@pytest.mark.parametrize(
    ("args", "kernels", "density"),
    [
        (["--kernels", "--batch", "1"], True, "sampled"),  # a bare --kernels stays what it was: the pass, sampled
        (["--batch", "1", "--kernels"], True, "sampled"),
        (["--kernels", "dense", "--batch", "1"], True, "dense"),
        (["--kernels=sampled", "--batch", "1"], True, "sampled"),
        (["--batch", "1"], False, None),
    ],
)
def test_kernels_option_takes_an_optional_density(args: list[str], kernels: bool, density: str | None) -> None:
    proc = launchprobe("classify", "--plan", *args, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)["config"]
    assert config["kernels"] is kernels and config.get("kernel_density") == density
