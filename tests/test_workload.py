"""The decode step itself: CPU reference path, and on a GPU graph replay equals eager and kernel counts match."""

from __future__ import annotations

import pytest
import torch

from launchprobe.errors import UsageError
from launchprobe.kernels import KernelSettings, get_ops
from launchprobe.workload import costmodel
from launchprobe.workload.model import DecodeModel, kernels_per_step, plan_memory
from launchprobe.workload.modes import prepare
from launchprobe.workload.shape import load_shape

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def make_model(
    device: str,
    layers: int = 2,
    max_bucket: int = 8,
    context: int = 64,
    projections: str = "cublas",
    kernel_settings: KernelSettings | None = None,
) -> DecodeModel:
    shape = load_shape("tiny", {"layers": layers})
    plan = plan_memory(shape, max_bucket, context, "bf16", free_bytes=1 << 34, l2_bytes=1 << 20, headroom=0)
    return DecodeModel(
        shape,
        context=context,
        dtype="bf16",
        device=device,
        max_bucket=max_bucket,
        plan=plan,
        projections=projections,
        kernel_settings=kernel_settings,
    )


def test_cpu_step_runs_every_op_and_writes_logits() -> None:
    model = make_model("cpu")
    ops = model.step(4)
    assert len(ops) == costmodel.logical_ops_per_step(model.shape)
    model.logits(4).fill_(float("nan"))
    runner = prepare("eager", 4, ops)
    runner.run()
    logits = model.logits(4)
    assert torch.isfinite(logits.float()).all()
    before = logits.clone()
    runner.run()  # same inputs, same weights: the same step again
    torch.testing.assert_close(model.logits(4), before)


def test_model_ops_carry_the_kernel_settings() -> None:
    settings = KernelSettings(pdl=False, gemv_weight_hint="none")
    model = make_model("cpu", kernel_settings=settings)
    assert model.ops.name == "torch" and model.ops.settings is settings
    assert make_model("cpu").ops.settings == KernelSettings()


def test_memory_plan_cycles_only_layers_far_larger_than_l2() -> None:
    shape = load_shape("llama-3-70b")
    layer = costmodel.layer_weight_bytes(shape, "bf16")
    free = 100 * (1 << 30)
    plan = plan_memory(shape, 1, 1024, "bf16", free_bytes=free, l2_bytes=60 << 20, headroom=2 << 30)
    assert plan.cycled(shape) and 40 < plan.distinct_layers < 80
    assert plan.weight_bytes <= free
    with pytest.raises(UsageError, match="under 4x the L2"):
        plan_memory(shape, 1, 1024, "bf16", free_bytes=free, l2_bytes=layer, headroom=0)
    with pytest.raises(UsageError, match="lower --batch or --context"):
        plan_memory(shape, 512, 32768, "bf16", free_bytes=free, l2_bytes=60 << 20, headroom=0)


def test_kernels_per_step_counts_the_attention_reduce_when_split() -> None:
    from launchprobe.kernels import attention_kernels

    shape = load_shape("llama-3-8b")
    for batch in (1, 8, 256):
        reduce = attention_kernels(batch, shape.kv_heads, 1024, 132) - 1
        assert kernels_per_step(shape, batch, 1024, 132) == 323 + 32 * reduce
    assert kernels_per_step(shape, 256, 1024, 132) == costmodel.logical_ops_per_step(shape) == 323


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("mode", ["piecewise", "full"])
def test_graph_replay_equals_eager(mode: str) -> None:
    model = make_model("cuda", layers=3, max_bucket=8, context=200)
    eager = prepare("eager", 8, model.step(8))
    eager.run()
    torch.cuda.synchronize()
    expected = model.logits(8).clone()
    graphed = prepare(mode, 8, model.step(8), torch.cuda.graph_pool_handle())
    model.logits(8).fill_(float("nan"))
    graphed.run()
    torch.cuda.synchronize()
    torch.testing.assert_close(model.logits(8), expected, rtol=0, atol=0)
    assert graphed.graphs == (4 if mode == "piecewise" else 1)
    assert graphed.capture_s is not None and graphed.capture_s > 0


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("bucket", [1, 64])
def test_cupti_counts_the_kernels_the_step_launches(bucket: int) -> None:
    from launchprobe.measure.cupti import profile_gpu_activity

    model = make_model("cuda", layers=2, max_bucket=64, context=1024)
    runner = prepare("eager", bucket, model.step(bucket))
    runner.run()
    activity = profile_gpu_activity(runner.run, steps=3)
    assert activity is not None  # None only when another profiler (nsys) holds CUPTI
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert activity.kernels_per_step == kernels_per_step(model.shape, bucket, 1024, sms)
    assert 0 < activity.busy_ns <= activity.span_ns


@pytest.mark.gpu
@cuda
def test_relaunched_kernels_compute_what_the_first_call_did() -> None:
    """Ops relaunch their recorded Triton kernels after the first call: the step must not change."""
    model = make_model("cuda", layers=2, max_bucket=4, context=300)
    runner = prepare("eager", 4, model.step(4))
    runner.run()  # first call: Triton's own dispatch, launches recorded
    torch.cuda.synchronize()
    first = model.logits(4).clone()
    for _ in range(2):
        model.logits(4).fill_(float("nan"))
        model.buffers.residual.fill_(0)
        runner.run()  # relaunch path
        torch.cuda.synchronize()
    # the residual stream is re-initialised by layer 0's norm every step, so each step is the same function
    torch.testing.assert_close(model.logits(4), first, rtol=0, atol=0)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("projections", ["cublas", "gemv"])
@pytest.mark.parametrize("bucket", [1, 8])
def test_pdl_changes_when_kernels_start_not_what_they_compute(projections: str, bucket: int) -> None:
    """With programmatic dependent launch each Triton kernel starts while the previous one still runs and waits
    in-kernel for its input: a missing wait would read stale activations. The same step with and without PDL,
    eager and as one graph, must give the same logits bit for bit (NaN-filled before each run)."""
    if not get_ops("cuda").pdl_active(torch.device("cuda")):
        pytest.skip("no PDL on this GPU (needs compute capability 9.0)")
    results = {}
    for pdl in (False, True):
        settings = KernelSettings(pdl=pdl)
        model = make_model("cuda", 4, bucket, 1024, projections, settings)
        assert model.ops.pdl_active(torch.device("cuda")) == pdl
        for mode in ("eager", "full"):
            runner = prepare(mode, bucket, model.step(bucket), torch.cuda.graph_pool_handle())
            runner.run()
            model.logits(bucket).fill_(float("nan"))
            for _ in range(3):
                runner.run()
            torch.cuda.synchronize()
            results[(pdl, mode)] = model.logits(bucket).clone()
    expected = results[(False, "eager")]
    assert torch.isfinite(expected.float()).all()
    for key, logits in results.items():
        torch.testing.assert_close(logits, expected, rtol=0, atol=0, msg=f"{key} differs")
