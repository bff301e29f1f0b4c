"""The per-kernel CUDA-event pass on a real GPU: structure, sanity and the CUPTI cross-check."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("mode", ["eager", "piecewise", "full"])
def test_kernel_pass_times_every_op(mode: str) -> None:
    from launchprobe.measure import kernel_pass
    from launchprobe.workload.model import DecodeModel, plan_memory
    from launchprobe.workload.shape import load_shape

    shape = load_shape("tiny", {"layers": 3, "hidden": 1024, "ffn": 4096})
    plan = plan_memory(shape, 8, 256, "bf16", free_bytes=1 << 34, l2_bytes=1 << 20, headroom=0)
    model = DecodeModel(shape, context=256, dtype="bf16", device="cuda", max_bucket=8, plan=plan)
    costs = kernel_pass.measure_event_costs()
    assert costs.host_record_ns > 0 and costs.pair_offset_ns >= 0
    durations = kernel_pass.graph_durations(8, model.step(8), repeats=3, pair_offset_ns=costs.pair_offset_ns)
    assert len(durations) == len(model.step(8)) and min(durations) >= kernel_pass.EVENT_RESOLUTION_NS
    result = kernel_pass.kernel_pass(
        mode, 8, model.step(8), clean_step_ms=1.0, costs=costs, durations_ns=durations, repeats=3
    )
    rows = result.kernels
    assert [r.op for r in rows] == [op.name for op in model.step(8)]
    assert all(r.end_ns >= r.start_ns >= 0 for r in rows)
    assert all(0 <= (r.gap_corrected_ns or 0) <= r.gap_before_ns for r in rows)
    assert result.instrumented_step_ms and result.instrumented_step_ms > 0
    hosted = [r.host_launched for r in rows]
    if mode == "eager":
        assert all(hosted)
    elif mode == "full":
        assert not any(hosted)
    else:
        assert {r.op for r in rows if r.host_launched} == {"kv_write", "attention"}
    check = result.cupti_check
    assert check is not None and check.cupti_kernels is not None and check.cupti_kernels >= len(rows)
    assert check.cupti_busy_ns and check.cupti_busy_ns > 0
