"""Shapes from hostile or careless input (issue 14): shadowed presets, non-UTF-8 files, absurd values, the plan's
cost in the layer count, and presets found as package data."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchprobe.errors import UsageError
from launchprobe.workload import costmodel
from launchprobe.workload.model import kernels_per_step
from launchprobe.workload.shape import load_shape, parse_override, preset_names

ROOT = Path(__file__).parents[1]


def test_presets_win_over_files_of_the_same_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-3-8b").mkdir()  # a folder named like a preset
    (tmp_path / "tiny").write_text('name = "mine"\nlayers = 1\nhidden = 64\nffn = 64\nheads = 1\nkv_heads = 1\n'
                                   "head_dim = 64\nvocab = 64\n")  # fmt: skip
    assert load_shape("llama-3-8b").layers == 32
    assert load_shape("tiny").name == "tiny" and load_shape("tiny").layers == 2
    assert load_shape("./tiny").name == "mine"  # a path separator makes it the user's file
    (tmp_path / "mine.toml").write_text((tmp_path / "tiny").read_text())
    assert load_shape("mine.toml").name == "mine"
    (tmp_path / "other").write_text("")
    with pytest.raises(UsageError, match="write ./other"):  # not a preset: say how to mean the file
        load_shape("other")


def test_unknown_preset_and_missing_file() -> None:
    with pytest.raises(UsageError, match="unknown shape 'nope'; presets: llama-3-70b"):
        load_shape("nope")
    with pytest.raises(UsageError, match="does not exist"):
        load_shape("no/such.toml")


def test_non_utf8_and_unreadable_shape_files(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(UsageError, match="not UTF-8"):
        load_shape(str(bad))
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(UsageError, match="is not a file"):
        load_shape(str(tmp_path / "dir.toml"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rms_eps=nan", "rms_eps=nan is outside its valid range (0, 1]"),
        ("rms_eps=inf", "rms_eps=inf is outside"),
        ("rms_eps=0", "rms_eps=0.0 is outside"),
        ("rope_theta=-1", "rope_theta=-1.0 is outside its valid range [1, 1e+12]"),
        ("layers=10000000", "layers=10000000 is outside its valid range 1..1024"),
        ("layers=0", "layers=0 is outside its valid range 1..1024"),
        ("hidden=100000000000", "hidden=100000000000 is outside its valid range 1..131072"),
        ("vocab=" + "9" * 40, "vocab=99999999... (40 digits) is outside"),
    ],
)
def test_absurd_values_are_refused_naming_field_and_range(override: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        load_shape("tiny", dict([parse_override(override)]))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [("rms_eps = nan", "rms_eps=nan"), ("tie_embeddings = 1", "tie_embeddings must be true or false"),
     ('name = 3', "name must be a string"), ("rope_theta = true", "rope_theta must be a number")],
)  # fmt: skip
def test_absurd_values_in_files(tmp_path: Path, line: str, message: str) -> None:
    text = (ROOT / "workloads" / "tiny.toml").read_text()
    key = line.split(" = ")[0]
    lines = [entry for entry in text.splitlines() if not entry.startswith(f"{key} ")]
    path = tmp_path / "shape.toml"
    path.write_text("\n".join([*lines, line]) + "\n")
    with pytest.raises(UsageError, match=message):
        load_shape(str(path))


def test_cli_refuses_absurd_context_batch_and_layers(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cases = [
        (["--context", str(10**30)], "--context"),
        (["--batch", str(10**9)], "--batch: 1000000000 is outside the valid range 1..65536"),
        (["--set", "layers=10000000"], "layers=10000000 is outside its valid range 1..1024"),
    ]
    for args, message in cases:
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "launchprobe", "classify", "--plan", *args],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert time.perf_counter() - t0 < 60
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("launchprobe: error: ") and message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_step_cost_and_kernel_count_are_constant_time_in_layers() -> None:
    base = load_shape("llama-3-8b")
    huge = dataclasses.replace(base, layers=10_000_000)  # past validation: the model itself must not care
    t0 = time.perf_counter()
    cost = costmodel.step_cost(huge, 64, 1024, "bf16")
    small = costmodel.step_cost(base, 64, 1024, "bf16")
    per_layer = costmodel.step_cost(dataclasses.replace(base, layers=2), 64, 1024, "bf16")
    one = costmodel.step_cost(dataclasses.replace(base, layers=1), 64, 1024, "bf16")
    assert cost.bytes == one.bytes + (huge.layers - 1) * (per_layer.bytes - one.bytes)
    assert cost.by_name()["qkv"].flops == huge.layers * small.by_name()["qkv"].flops // base.layers
    assert kernels_per_step(huge, 1, 1024, 132) >= huge.layers * 10
    assert time.perf_counter() - t0 < 0.5
    assert len(small.ops) == costmodel.logical_ops_per_step(base)  # the full list is still there when asked
    assert [op.layer for op in small.ops[1:22:10]] == [0, 1, 2]


def _copy_package(target: Path) -> None:
    shutil.copytree(ROOT / "launchprobe", target / "launchprobe", ignore=shutil.ignore_patterns("__pycache__"))


def _presets_in(site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "from launchprobe.workload.shape import presets, preset_names, load_shape; " \
           "print(presets()); print(preset_names()); print(load_shape('llama-3-8b').layers)"  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def test_presets_are_package_data_in_an_installed_wheel(tmp_path: Path) -> None:
    """The wheel's layout (pyproject force-includes workloads as launchprobe/_workloads), run from elsewhere."""
    site = tmp_path / "site"
    _copy_package(site)
    shutil.copytree(ROOT / "workloads", site / "launchprobe" / "_workloads")
    (site / "workloads").mkdir()  # a stray folder beside the package is no source tree and is never read
    done = _presets_in(site, tmp_path)
    assert done.returncode == 0, done.stderr
    where, names, layers = done.stdout.splitlines()
    assert Path(where) == site / "launchprobe" / "_workloads"
    assert names == str(preset_names()) and layers == "32"


def test_presets_are_not_guessed_outside_a_source_tree(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _copy_package(site)
    shutil.copytree(ROOT / "workloads", site / "workloads")  # looks like a checkout, but has no pyproject.toml
    done = _presets_in(site, tmp_path)
    assert done.returncode == 1 and "cannot find launchprobe's shape presets" in done.stderr
    (site / "pyproject.toml").write_text('[project]\nname = "launchprobe"\n')  # now it is a source tree
    done = _presets_in(site, tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.splitlines()[0]) == site / "workloads"
