"""The CPU path checks real free RAM before allocating, and refuses what cannot run there (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from launchprobe import environment
from launchprobe.cli import main
from launchprobe.errors import UsageError
from launchprobe.measure.ceilings import Ceilings, cache_key, cache_path
from launchprobe.workload import model as model_module
from launchprobe.workload.model import DecodeModel, cpu_memory_budget, plan_memory
from launchprobe.workload.shape import load_shape

GIB = 1 << 30


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_available_memory_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n")
    assert environment._meminfo_available(str(meminfo)) == 2048 * 1024
    meminfo.write_text("garbage\n")
    assert environment._meminfo_available(str(meminfo)) is None
    here = environment.available_memory_bytes()
    assert here is None or 0 < here < 1 << 50  # a real figure, not "4294967296 GiB free"


def test_cpu_budget_refuses_what_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "available_memory_bytes", lambda: 4 * GIB)
    shape = load_shape("llama-3-8b")
    free, l2, headroom = cpu_memory_budget(shape, 64, 8192)
    assert free == 4 * GIB and headroom > model_module.CPU_RUNTIME_BYTES
    with pytest.raises(UsageError, match=r"needs at least \d+\.\d GiB and 4\.0 GiB is free") as info:
        plan_memory(shape, 64, 8192, "bf16", free, l2, headroom)
    assert "lower --batch or --context" in str(info.value)
    tiny = load_shape("tiny")
    plan = plan_memory(tiny, 8, 1024, "bf16", *cpu_memory_budget(tiny, 8, 1024))
    assert not plan.cycled(tiny)
    monkeypatch.setattr(environment, "available_memory_bytes", lambda: None)  # unknown: nothing to check against
    assert cpu_memory_budget(tiny, 8, 1024)[0] == 1 << 62


def test_allocation_failure_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = load_shape("tiny")
    plan = plan_memory(shape, 2, 64, "bf16", 1 << 34, 1 << 20, 0)

    def refuse(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(torch, "empty", refuse)
    with pytest.raises(UsageError, match="out of memory on cpu allocating tiny"):
        DecodeModel(shape, context=64, dtype="bf16", device="cpu", max_bucket=2, plan=plan)


@pytest.fixture
def cached_cpu_ceilings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ceilings already cached for this CPU, so the command goes straight to the model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = environment.describe("cpu")
    key = cache_key(f"cpu {env.platform}", env.torch or "", "bf16")
    entry = Ceilings("measured", 1e10, 1e11, 100.0, None, "2026-01-01T00:00:00+00:00").to_dict()
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text(json.dumps({key: entry}))


def test_cli_refuses_a_shape_larger_than_free_ram(
    cached_cpu_ceilings: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(environment, "available_memory_bytes", lambda: 2 * GIB)
    argv = ["classify", "--device", "cpu", "--shape", "llama-3-8b", "--batch", "8", "--context", "4096", "-q"]
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("launchprobe: error: llama-3-8b at batch 8, context 4096 needs at least")
    assert "2.0 GiB is free" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("modes", ["full", "piecewise,full"])
def test_graph_modes_alone_on_the_cpu_path(modes: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["classify", "--device", "cpu", "--mode", modes, "-q"]) == 5
    err = capsys.readouterr().err
    assert "needs CUDA graphs" in err and "add --mode eager" in err and len(err.strip().splitlines()) == 1
