"""The classify report's host-cost lines and per-op bandwidth column."""

from __future__ import annotations

from launchprobe.render import render_text
from launchprobe.run.schema import CuptiCheck
from tests.runs import classify_run


def test_host_cost_per_kernel_is_set_beside_the_bare_launch_cost() -> None:
    run = classify_run()
    assert run.ceilings is not None
    run.ceilings.launch_host_ns = 7400.0
    eager = next(r for r in run.results if r.mode == "eager")
    eager.host_ns_per_kernel = 24500.0
    eager.nvtx_overhead_fraction = 0.012
    text = render_text(run, "plain", width=140)
    assert "Host cost" in text
    assert f"eager b={eager.batch}: 24.5 us of host time per kernel vs 7.40 us for a bare loop" in text
    assert "NVTX ranges per op cost +1.2% of the step" in text


def test_per_op_bandwidth_column() -> None:
    run = classify_run()
    with_pass = next(r.kernel_pass for r in run.results if r.kernel_pass)
    with_pass.ops[0].achieved_bandwidth_bytes_per_s = 3.21e12
    text = render_text(run, "markdown")
    assert "achieved TB/s" in text and "| 3.21 |" in text


def test_cupti_cross_check_unavailable_under_another_profiler() -> None:
    run = classify_run()
    with_pass = next(r.kernel_pass for r in run.results if r.kernel_pass)
    with_pass.cupti_check = CuptiCheck(available=False, note="CUPTI is held by another profiler (nsys)")
    text = render_text(run, "plain", width=140)
    assert "CUPTI cross-check: not available (CUPTI is held by another profiler (nsys))" in text
