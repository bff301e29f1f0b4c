"""Run files made by `launchprobe classify` on an H200 (docs/performance.md): read, re-judged, rendered, compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launchprobe.analysis.kernel_gaps import aggregate_ops
from launchprobe.analysis.verdict import classify_step
from launchprobe.run.files import load_run
from launchprobe.run.schema import ClassifyRun

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def default_run() -> ClassifyRun:
    run = load_run(FIXTURES / "h200_classify_default.json")
    assert isinstance(run, ClassifyRun)
    return run


def kernels_run() -> ClassifyRun:
    run = load_run(FIXTURES / "h200_classify_kernels_8b.json.gz")  # gzipped run files load as they are
    assert isinstance(run, ClassifyRun)
    return run


def test_every_stored_verdict_follows_from_its_own_numbers() -> None:
    run = default_run()
    assert run.environment.gpu == "NVIDIA H200" and len(run.results) == 12
    assert run.ceilings is not None
    for r in run.results:
        assert r.step_ms_median and r.memory_floor_ms is not None and r.compute_floor_ms is not None
        assert r.gpu_busy_ms is not None and r.step_ms_samples is not None
        again = classify_step(
            step_ms=r.step_ms_median,
            idle_fraction=r.idle_fraction,
            memory_floor_ms=r.memory_floor_ms,
            compute_floor_ms=r.compute_floor_ms,
        )
        assert again.verdict == r.verdict
        # busy comes from a separate CUPTI pass and can exceed the clean step by a little: idle is clipped at 0
        assert r.idle_fraction == pytest.approx(max(0.0, 1 - r.gpu_busy_ms / r.step_ms_median))
        assert r.tokens_per_s == pytest.approx(r.batch / r.step_ms_median * 1e3)
        assert r.achieved_bandwidth_fraction == pytest.approx(
            r.bytes_per_step / (r.step_ms_median / 1e3) / run.ceilings.hbm_read_bytes_per_s
        )
        assert len(r.step_ms_samples) == run.config.steps


def test_kernel_pass_rows_add_up() -> None:
    for r in kernels_run().results:
        kp = r.kernel_pass
        assert kp is not None and kp.instrumented_step_ms is not None
        rows = kp.kernels
        assert len(rows) == 323  # 10 ops x 32 layers + embed, final norm, lm_head
        span = rows[-1].end_ns - rows[0].start_ns
        assert sum((x.duration_ns or 0) + x.gap_before_ns for x in rows) == pytest.approx(span, rel=1e-9)
        ops = aggregate_ops([x.to_dict() for x in rows], kp.instrumented_step_ms * 1e6)
        assert [o["op"] for o in ops] == [o.op for o in kp.ops]
        assert [o["count"] for o in ops] == [o.count for o in kp.ops]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launchprobe", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_report_and_self_compare_of_a_real_run(tmp_path: Path) -> None:
    path = str(FIXTURES / "h200_classify_default.json")
    plain = run_cli("report", path, "--format", "plain")
    assert plain.returncode == 0 and "NVIDIA H200" in plain.stdout and "memory-bound" in plain.stdout
    assert "kernels   projections: cuBLAS, programmatic dependent launch on" in plain.stdout
    csv = run_cli("report", path, "--format", "csv")
    assert csv.returncode == 0 and len(csv.stdout.strip().splitlines()) == 13
    same = run_cli("compare", path, path)
    assert same.returncode == 0, same.stdout + same.stderr
