"""The Triton kernels on a CUDA GPU against the torch reference: numerics (bf16, fp16), full writes of poisoned
outputs, launches per op (counted with torch.profiler), and replay inside a CUDA graph. Skipped without CUDA."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from launchprobe.kernels import (
    GEMV_MAX_BATCH,
    GemvConfig,
    GemvPlan,
    Ops,
    attention_kernels,
    gemv_config,
    gemv_kernels,
    get_ops,
)
from launchprobe.kernels import reference as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

DEV = "cuda"
NAN = float("nan")
BOUND = 1e-2  # relative error ||out - ref|| / ||ref||, bf16 and fp16
DTYPES = [torch.bfloat16, torch.float16]
BATCHES = [1, 3, 64, 256]


@dataclass(frozen=True)
class S:
    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    cache: int
    theta: float


SHAPES = [S("8b", 4096, 14336, 32, 8, 128, 1024, 500000.0), S("tiny", 256, 512, 4, 2, 64, 64, 10000.0)]
SHAPE_IDS = [s.name for s in SHAPES]


@functools.cache
def tri() -> Any:
    """One Triton ops object (default settings) for the whole file, made lazily: collecting this file must work
    without triton. Its GEMV plan cache is shared by the tests, like a model's."""
    from launchprobe.kernels.triton import TritonOps

    return TritonOps()


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def full(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, NAN, dtype=dtype, device=DEV)


def randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, device=DEV)


def count_kernels(fn: Callable[[], None]) -> int:
    """GPU kernels launched by one call of ``fn`` (after a warm-up call that compiles)."""
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


@pytest.fixture(autouse=True)
def _seed(request: pytest.FixtureRequest) -> None:
    torch.manual_seed(hash(request.node.name) % 2**31)


# --------------------------------------------------------------------------------------------------------------
# numerics and full writes


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm(shape: S, batch: int, dtype: torch.dtype) -> None:
    h = shape.hidden
    x, w = randn(batch, h, dtype=dtype), randn(h, dtype=dtype)
    out, res = full(batch, h, dtype=dtype), full(batch, h, dtype=dtype)
    ref_out, ref_res = full(batch, h, dtype=dtype), full(batch, h, dtype=dtype)
    tri().rmsnorm(x, w, 1e-5, out, res)
    R.rmsnorm(x, w, 1e-5, ref_out, ref_res)
    assert torch.isfinite(out).all() and torch.equal(res, x)
    assert rel(out, ref_out) < BOUND


@pytest.mark.parametrize("store", [True, False], ids=["store", "final"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rmsnorm(shape: S, batch: int, dtype: torch.dtype, store: bool) -> None:
    h = shape.hidden
    x, w, res = randn(batch, h, dtype=dtype), randn(h, dtype=dtype), randn(batch, h, dtype=dtype)
    res_t, res_r = res.clone(), res.clone()
    out, ref_out = full(batch, h, dtype=dtype), full(batch, h, dtype=dtype)
    tri().add_rmsnorm(x, res_t, w, 1e-5, out, store_residual=store)
    R.add_rmsnorm(x, res_r, w, 1e-5, ref_out, store_residual=store)
    assert torch.isfinite(out).all()
    assert rel(out, ref_out) < BOUND
    if store:  # an fp32 add rounded once to the model dtype, as torch's own add
        torch.testing.assert_close(res_t, res_r)
    else:
        assert torch.equal(res_t, res)


def test_rmsnorm_wide_rows_two_pass() -> None:
    """Rows wider than NORM_MAX_BLOCK take the chunked two-pass path (also with the residual in place)."""
    x, w, res = (
        randn(3, 20000, dtype=torch.bfloat16),
        randn(20000, dtype=torch.bfloat16),
        randn(3, 20000, dtype=torch.bfloat16),
    )
    res_t, res_r = res.clone(), res.clone()
    out, ref = full(3, 20000, dtype=torch.bfloat16), full(3, 20000, dtype=torch.bfloat16)
    tri().add_rmsnorm(x, res_t, w, 1e-5, out)
    R.add_rmsnorm(x, res_r, w, 1e-5, ref)
    assert rel(out, ref) < BOUND
    torch.testing.assert_close(res_t, res_r)


def _qkv(shape: S, batch: int, dtype: torch.dtype) -> tuple[torch.Tensor, int, int]:
    q_dim, kv_dim = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    return randn(batch, q_dim + 2 * kv_dim, dtype=dtype), q_dim, kv_dim


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary(shape: S, batch: int, dtype: torch.dtype, pos_dtype: torch.dtype) -> None:
    qkv, qd, kvd = _qkv(shape, batch, dtype)
    pos = torch.randint(0, 8192, (batch,), dtype=pos_dtype, device=DEV)
    a, b = qkv.clone(), qkv.clone()
    tri().rotary(a[:, :qd], a[:, qd : qd + kvd], pos, shape.theta, shape.head_dim)
    R.rotary(b[:, :qd], b[:, qd : qd + kvd], pos, shape.theta, shape.head_dim)
    assert rel(a[:, :qd], b[:, :qd]) < BOUND and rel(a[:, qd : qd + kvd], b[:, qd : qd + kvd]) < BOUND
    assert torch.equal(a[:, qd + kvd :], qkv[:, qd + kvd :])  # v untouched


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_long_positions(dtype: torch.dtype) -> None:
    """Angles up to ~1e5 rad: the in-kernel range reduction keeps cos/sin accurate."""
    s = SHAPES[0]
    qkv, qd, kvd = _qkv(s, 64, dtype)
    pos = torch.randint(0, 131072, (64,), device=DEV)
    a, b = qkv.clone(), qkv.clone()
    tri().rotary(a[:, :qd], a[:, qd : qd + kvd], pos, s.theta, s.head_dim)
    R.rotary(b[:, :qd], b[:, qd : qd + kvd], pos, s.theta, s.head_dim)
    assert rel(a, b) < BOUND


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kv_write(shape: S, batch: int, dtype: torch.dtype) -> None:
    qkv, qd, kvd = _qkv(shape, batch, dtype)
    k, v = qkv[:, qd : qd + kvd], qkv[:, qd + kvd :]
    c = shape.cache
    caches = [randn(batch + 5, c, shape.kv_heads, shape.head_dim, dtype=dtype) for _ in range(2)]
    refs = [t.clone() for t in caches]
    pos = torch.randint(0, c, (batch,), dtype=torch.int32, device=DEV)
    tri().kv_write(k, v, caches[0][:batch], caches[1][:batch], pos)
    R.kv_write(k, v, refs[0][:batch], refs[1][:batch], pos)
    assert torch.equal(caches[0], refs[0]) and torch.equal(caches[1], refs[1])


@pytest.mark.parametrize("ctx_kind", ["full", "ragged"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_attention(shape: S, batch: int, dtype: torch.dtype, ctx_kind: str) -> None:
    nh, nkv, d, c = shape.heads, shape.kv_heads, shape.head_dim, shape.cache
    ctx = c if ctx_kind == "full" else c - 24 + 1  # not a multiple of the tile
    qkv, qd, _ = _qkv(shape, batch, dtype)
    q = qkv[:, :qd]
    kc, vc = randn(batch, c, nkv, d, dtype=dtype), randn(batch, c, nkv, d, dtype=dtype)
    big = full(batch, qd + 16, dtype=dtype)
    out, ref = big[:, :qd], full(batch, qd, dtype=dtype)
    plan = tri().attention_plan(batch, c, nh, nkv, d, DEV)
    tri().attention(q, kc, vc, ctx, out, d**-0.5, plan)
    R.attention(q, kc, vc, ctx, ref, d**-0.5)
    assert torch.isfinite(out).all() and big[:, qd:].isnan().all()
    assert rel(out, ref) < BOUND, f"splits={plan.splits(ctx)}"


def test_attention_padded_batch_plan() -> None:
    """A plan for a padded batch bucket serves a smaller batch (the bucket's split count, rows 0..B-1)."""
    nh, nkv, d, c = 32, 8, 128, 1024
    q, kc, vc = randn(3, nh * d, dtype=torch.bfloat16), *(randn(8, c, nkv, d, dtype=torch.bfloat16) for _ in range(2))
    plan = tri().attention_plan(8, c, nh, nkv, d, DEV)
    out, ref = full(3, nh * d, dtype=torch.bfloat16), full(3, nh * d, dtype=torch.bfloat16)
    tri().attention(q, kc[:3], vc[:3], 700, out, d**-0.5, plan)
    R.attention(q, kc[:3], vc[:3], 700, ref, d**-0.5)
    assert plan.splits(700) > 1 and rel(out, ref) < BOUND


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul(shape: S, batch: int, dtype: torch.dtype) -> None:
    gu = randn(batch, 2 * shape.ffn, dtype=dtype) * 3
    out, ref = full(batch, shape.ffn, dtype=dtype), full(batch, shape.ffn, dtype=dtype)
    tri().silu_mul(gu, out)
    R.silu_mul(gu, ref)
    assert torch.isfinite(out).all() and rel(out, ref) < BOUND


GEMV_SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (256, 256), (1000, 300)]  # (N, K)


@pytest.mark.parametrize("nk", GEMV_SHAPES, ids=[f"{n}x{k}" for n, k in GEMV_SHAPES])
@pytest.mark.parametrize("batch", [1, 3, 8, 16, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gemv(nk: tuple[int, int], batch: int, dtype: torch.dtype) -> None:
    n, k = nk
    x, w = randn(batch, k, dtype=dtype), randn(n, k, dtype=dtype)
    out = full(batch, n, dtype=dtype)
    tri().gemv(x, w, out)
    assert torch.isfinite(out).all()
    assert rel(out, x.float() @ w.float().T) < BOUND


# --------------------------------------------------------------------------------------------------------------
# launches per op


@pytest.mark.parametrize("batch", [1, 256])
def test_each_op_launches_one_kernel(batch: int) -> None:
    ops, dt, s = tri(), torch.bfloat16, SHAPES[0]
    h, f = s.hidden, s.ffn
    x, w, res = randn(batch, h, dtype=dt), randn(h, dtype=dt), randn(batch, h, dtype=dt)
    out = full(batch, h, dtype=dt)
    qkv, qd, kvd = _qkv(s, batch, dt)
    pos = torch.randint(0, s.cache, (batch,), device=DEV)
    kc = randn(batch, s.cache, s.kv_heads, s.head_dim, dtype=dt)
    vc = torch.randn_like(kc)
    gu, act = randn(batch, 2 * f, dtype=dt), full(batch, f, dtype=dt)
    calls: dict[str, Callable[[], None]] = {
        "rmsnorm": lambda: ops.rmsnorm(x, w, 1e-5, out, res),
        "add_rmsnorm": lambda: ops.add_rmsnorm(x, res, w, 1e-5, out),
        "final_norm": lambda: ops.add_rmsnorm(x, res, w, 1e-5, out, store_residual=False),
        "rotary": lambda: ops.rotary(qkv[:, :qd], qkv[:, qd : qd + kvd], pos, s.theta, s.head_dim),
        "kv_write": lambda: ops.kv_write(qkv[:, qd : qd + kvd], qkv[:, qd + kvd :], kc, vc, pos),
        "silu_mul": lambda: ops.silu_mul(gu, act),
    }
    if batch <= GEMV_MAX_BATCH:
        wo, o = randn(h, qd, dtype=dt), full(batch, h, dtype=dt)
        calls["gemv"] = lambda: ops.gemv(qkv[:, :qd], wo, o)
    counts = {name: count_kernels(fn) for name, fn in calls.items()}
    assert counts == dict.fromkeys(calls, 1)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "reduce_kernel"])
@pytest.mark.parametrize("batch", [1, 3, 16, 64, 256])
def test_attention_launches(batch: int, fused: bool) -> None:
    ops, dt, s = tri(), torch.bfloat16, SHAPES[0]
    nh, nkv, d, c = s.heads, s.kv_heads, s.head_dim, s.cache
    q, kc, vc = randn(batch, nh * d, dtype=dt), *(randn(batch, c, nkv, d, dtype=dt) for _ in range(2))
    out = full(batch, nh * d, dtype=dt)
    plan = ops.attention_plan(batch, c, nh, nkv, d, DEV, fused_reduce=fused)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    expected = attention_kernels(batch, nkv, c, sms, fused_reduce=fused)
    assert plan.kernels(c) == expected
    assert count_kernels(lambda: ops.attention(q, kc, vc, c, out, d**-0.5, plan)) == expected
    if plan.num_sms == 132:  # H200: 8 or 24 (b, kv head) pairs split (merged in-kernel when fused), >= 128 do not
        assert expected == (2 if batch <= 3 and not fused else 1)


GEMV_SPLIT_SHAPES = [(4096, 4096), (4096, 14336), (6144, 4096), (8192, 8192), (1000, 3000)]  # (N, K)


@pytest.mark.parametrize("nk", GEMV_SPLIT_SHAPES, ids=[f"{n}x{k}" for n, k in GEMV_SPLIT_SHAPES])
@pytest.mark.parametrize("batch", [1, 8, 16])
def test_gemv_launches_one_kernel(nk: tuple[int, int], batch: int) -> None:
    """The default one-pass kernel, and a split-K config: its partial sums are reduced inside the kernel (cuBLAS
    adds a splitKreduce kernel)."""
    n, k = nk
    x, w = randn(batch, k, dtype=torch.bfloat16), randn(n, k, dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for cfg in (None, gemv_config(n, k, batch, sms, splits=4)):
        out = full(batch, n, dtype=torch.bfloat16)
        plan = tri().gemv_plan(n, k, batch, DEV, config=cfg)

        def call(o: torch.Tensor = out, p: GemvPlan = plan) -> None:
            tri().gemv(x, w, o, p)

        assert count_kernels(call) == gemv_kernels(batch) == 1
        assert rel(out, x.float() @ w.float().T) < BOUND


def _gemv_configs(n: int, k: int, batch: int) -> list[GemvConfig]:
    """The default (batch 1: the CUDA-core kernel with its tuned tiles; else the one-pass tensor-core kernel), the
    tensor-core kernel at each row tile, split-K options, and at batch 1 CUDA-core tiles and splits."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfgs = [gemv_config(n, k, batch, sms)]
    assert cfgs[0].splits == 1 and cfgs[0].use_dot == (batch > 1)
    for block_n, splits in ((16, 1), (32, 1), (64, 1), (32, 3), (64, 8), (32, 16), (32, 4)):
        cfgs.append(gemv_config(n, k, batch, sms, block_n=block_n, splits=splits, use_dot=True))
    if batch == 1:
        cfgs.append(gemv_config(n, k, batch, sms, splits=4, use_dot=False))
        for block_n, block_k, warps in ((8, 512, 8), (16, 256, 4), (32, 1024, 8)):
            cfgs.append(gemv_config(n, k, 1, sms, block_n=block_n, block_k=block_k, num_warps=warps, use_dot=False))
    return cfgs


@pytest.mark.parametrize("nk", GEMV_SPLIT_SHAPES, ids=[f"{n}x{k}" for n, k in GEMV_SPLIT_SHAPES])
@pytest.mark.parametrize("batch", [1, 3, 16])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gemv_split_configs(nk: tuple[int, int], batch: int, dtype: torch.dtype) -> None:
    """Every split/tile choice: correct, fully written, bitwise identical on a second call (counters reset)."""
    n, k = nk
    x, w = randn(batch, k, dtype=dtype), randn(n, k, dtype=dtype)
    ref = x.float() @ w.float().T
    for cfg in _gemv_configs(n, k, batch):
        plan = tri().gemv_plan(n, k, batch, DEV, config=cfg)
        outs = []
        for _ in range(2):
            out = full(batch, n, dtype=dtype)
            tri().gemv(x, w, out, plan)
            outs.append(out)
        assert torch.isfinite(outs[0]).all(), cfg
        assert rel(outs[0], ref) < BOUND, cfg
        assert torch.equal(outs[0], outs[1]), cfg
        if plan.counters is not None:
            assert not plan.counters.any(), cfg


def test_gemv_plan_needs_warm_up_before_capture() -> None:
    x, w = randn(1, 4352, dtype=torch.bfloat16), randn(1024, 4352, dtype=torch.bfloat16)  # a shape no test uses
    out = full(1, 1024, dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capturing"), torch.cuda.graph(graph):
        tri().gemv(x, w, out)


@pytest.mark.parametrize("batch", [1, 8])
def test_split_kernels_replay_identically(batch: int) -> None:
    """Split-K gemv (o_proj with an explicit split config, one plan shared by calls on several weights), the default
    one-pass gemv (down) and fused-reduce attention inside one CUDA graph: the counters reset themselves, so two
    replays give bitwise the same, correct outputs."""
    ops, dt, s = tri(), torch.bfloat16, SHAPES[0]
    h, f, nh, nkv, d, c = s.hidden, s.ffn, s.heads, s.kv_heads, s.head_dim, s.cache
    x, act = randn(batch, h, dtype=dt), randn(batch, f, dtype=dt)
    w_o = [randn(h, h, dtype=dt) * 0.02 for _ in range(3)]
    w_down = [randn(h, f, dtype=dt) * 0.02 for _ in range(2)]
    q, kc, vc = randn(batch, nh * d, dtype=dt), randn(batch, c, nkv, d, dtype=dt), randn(batch, c, nkv, d, dtype=dt)
    outs_o = [full(batch, h, dtype=dt) for _ in w_o]
    outs_down = [full(batch, h, dtype=dt) for _ in w_down]
    att = full(batch, nh * d, dtype=dt)
    plan = ops.attention_plan(batch, c, nh, nkv, d, DEV)
    assert plan.splits(c) > 1 and plan.kernels(c) == 1

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan_o = tri().gemv_plan(h, h, batch, DEV, config=gemv_config(h, h, batch, sms, splits=4))
    assert plan_o.counters is not None

    def run() -> None:
        for w, o in zip(w_o, outs_o):
            ops.gemv(x, w, o, plan_o)
        for w, o in zip(w_down, outs_down):
            ops.gemv(act, w, o)
        ops.attention(q, kc, vc, c, att, d**-0.5, plan)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm-up: compiles, and makes the gemv plans (workspace, zeroed counters) outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    results = []
    for _ in range(2):
        for t in (*outs_o, *outs_down, att):
            t.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        results.append([t.clone() for t in (*outs_o, *outs_down, att)])
    for a, b in zip(*results):
        assert torch.equal(a, b)
    for w, o in zip(w_o, results[0][: len(w_o)]):
        assert rel(o, x.float() @ w.float().T) < BOUND
    for w, o in zip(w_down, results[0][len(w_o) : len(w_o) + len(w_down)]):
        assert rel(o, act.float() @ w.float().T) < BOUND
    ref = full(batch, nh * d, dtype=dt)
    R.attention(q, kc, vc, c, ref, d**-0.5)
    assert rel(results[0][-1], ref) < BOUND


ATTN_KNOBS = [
    {"block_n": 16},
    {"block_n": 32, "programs_per_sm": 4},
    {"block_n": 128, "programs_per_sm": 1, "num_warps": 8},
    {"fused_reduce": False},
    {"block_n": 32, "num_warps": 8, "num_stages": 2},
]


@pytest.mark.parametrize("knobs", ATTN_KNOBS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
@pytest.mark.parametrize("heads", [32, 64], ids=["group4", "group8"])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_attention_knobs(knobs: dict[str, Any], heads: int, batch: int) -> None:
    nkv, d, c, dt = 8, 128, 1024, torch.bfloat16
    q, kc, vc = randn(batch, heads * d, dtype=dt), randn(batch, c, nkv, d, dtype=dt), randn(batch, c, nkv, d, dtype=dt)
    plan = tri().attention_plan(batch, c, heads, nkv, d, DEV, **knobs)
    ref = full(batch, heads * d, dtype=dt)
    R.attention(q, kc, vc, c - 7, ref, d**-0.5)
    outs = []
    for _ in range(2):
        out = full(batch, heads * d, dtype=dt)
        tri().attention(q, kc, vc, c - 7, out, d**-0.5, plan)
        outs.append(out)
    assert rel(outs[0], ref) < BOUND, f"splits={plan.splits(c - 7)}"
    assert torch.equal(outs[0], outs[1])


# --------------------------------------------------------------------------------------------------------------
# CUDA graphs


@pytest.mark.parametrize("batch", [1, 64])
def test_layer_replays_in_a_cuda_graph(batch: int) -> None:
    """One attention block (norm, rotary, kv write, attention, o_proj gemv, norm, silu_mul) captured once and
    replayed with new inputs and new positions written into the static buffers: no host sync, no per-call
    allocation, and every replay matches the reference run eagerly on the same inputs."""
    fused, unfused, dt, s = get_ops("cuda"), get_ops("cuda", impl="torch"), torch.bfloat16, SHAPES[0]
    h, nh, nkv, d, c, f = s.hidden, s.heads, s.kv_heads, s.head_dim, s.cache, s.ffn
    qd, kvd = nh * d, nkv * d
    ctx = c  # attention over the whole (static) cache
    x, res, w = randn(batch, h, dtype=dt), randn(batch, h, dtype=dt), randn(h, dtype=dt)
    qkv, pos = randn(batch, qd + 2 * kvd, dtype=dt), torch.zeros(batch, dtype=torch.int64, device=DEV)
    kc, vc = randn(batch, c, nkv, d, dtype=dt), randn(batch, c, nkv, d, dtype=dt)
    wo, gu = randn(h, qd, dtype=dt) * 0.02, randn(batch, 2 * f, dtype=dt)
    normed, att, o, act = (
        full(batch, h, dtype=dt),
        full(batch, qd, dtype=dt),
        full(batch, h, dtype=dt),
        full(batch, f, dtype=dt),
    )
    plan = fused.attention_plan(batch, ctx, nh, nkv, d, DEV)

    def step(ops: Ops, bufs: dict[str, torch.Tensor]) -> None:
        b = bufs
        ops.add_rmsnorm(b["x"], b["res"], w, 1e-5, b["normed"])
        q, k, v = b["qkv"][:, :qd], b["qkv"][:, qd : qd + kvd], b["qkv"][:, qd + kvd :]
        ops.rotary(q, k, b["pos"], s.theta, d)
        ops.kv_write(k, v, b["kc"], b["vc"], b["pos"])
        ops.attention(q, b["kc"], b["vc"], ctx, b["att"], d**-0.5, plan)
        ops.gemv(b["att"], wo, b["o"])
        ops.silu_mul(b["gu"], b["act"])

    static = {
        "x": x,
        "res": res,
        "qkv": qkv,
        "pos": pos,
        "kc": kc,
        "vc": vc,
        "normed": normed,
        "att": att,
        "o": o,
        "gu": gu,
        "act": act,
    }
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(fused, {k: t.clone() for k, t in static.items()})  # compile every kernel before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(fused, static)
    for _ in range(3):
        fresh = {
            "x": randn(batch, h, dtype=dt),
            "res": randn(batch, h, dtype=dt),
            "qkv": randn(batch, qd + 2 * kvd, dtype=dt),
            "pos": torch.randint(0, c, (batch,), device=DEV),
            "gu": randn(batch, 2 * f, dtype=dt),
        }
        for k, t in fresh.items():
            static[k].copy_(t)
        ref = {k: t.clone() for k, t in static.items()}
        for k in ("normed", "att", "o", "act"):
            static[k].fill_(NAN)
        graph.replay()
        step(unfused, ref)
        torch.cuda.synchronize()
        for k in ("normed", "att", "o", "act", "qkv"):
            assert rel(static[k], ref[k]) < BOUND, k
        torch.testing.assert_close(static["res"], ref["res"])
