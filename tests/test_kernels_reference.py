"""CPU tests of the plain-torch reference ops: hand-checkable numbers, shapes, in-place and out= semantics."""

from __future__ import annotations

import math

import pytest
import torch

from launchprobe.errors import UsageError
from launchprobe.kernels import (
    GEMV_WEIGHT_HINTS,
    AttentionPlan,
    KernelSettings,
    attention_kernels,
    attention_max_splits,
    attention_split_tokens,
    attention_splits,
    cdiv,
    gemv_block_n,
    gemv_config,
    gemv_fma_tiles,
    gemv_kernels,
    get_ops,
)
from launchprobe.kernels import reference as R
from launchprobe.kernels.plans import ATTN_BLOCK_N, GEMV_FMA_TUNED, NORM_MAX_BLOCK

F32 = torch.float32


def test_get_ops_picks_reference_on_cpu() -> None:
    ops = get_ops("cpu")
    assert ops.name == "torch"
    assert get_ops("cuda", impl="torch").name == "torch"
    with pytest.raises(UsageError):
        get_ops("cpu", impl="nope")


def test_get_ops_hands_its_settings_to_the_ops() -> None:
    settings = KernelSettings(pdl=False, gemv_weight_hint="cg", norm_max_block=64)
    ops = get_ops("cpu", settings=settings)
    assert ops.settings is settings
    assert get_ops("cpu").settings == KernelSettings()
    assert not ops.pdl_active(torch.device("cpu"))  # the reference never uses PDL


def test_kernel_settings_defaults_and_checks() -> None:
    default = KernelSettings()
    assert (default.pdl, default.gemv_weight_hint, default.norm_max_block) == (True, "evict_first", NORM_MAX_BLOCK)
    assert set(GEMV_WEIGHT_HINTS) == {"none", "cg", "evict_first"}
    with pytest.raises(ValueError, match="gemv_weight_hint"):
        KernelSettings(gemv_weight_hint="evict_last")
    for block in (0, 8, 100):
        with pytest.raises(ValueError, match="norm_max_block"):
            KernelSettings(norm_max_block=block)


def test_triton_ops_without_triton_is_a_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """classify on a GPU box without triton: one line and exit 5 (MissingToolError), not an ImportError traceback."""
    import sys

    import launchprobe.kernels as kernels
    from launchprobe.errors import MissingToolError

    monkeypatch.delattr(kernels, "triton", raising=False)
    monkeypatch.setitem(sys.modules, "launchprobe.kernels.triton", None)  # importing it now fails
    with pytest.raises(MissingToolError, match="need the triton package"):
        kernels.get_ops("cuda")
    with pytest.raises(MissingToolError, match="need the triton package"):
        kernels.get_ops("cpu", impl="triton")


def test_kernels_package_does_not_import_torch_or_triton() -> None:
    import subprocess
    import sys

    code = "import sys, launchprobe.kernels; print('torch' in sys.modules, 'triton' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["False", "False"]


def test_rmsnorm_hand_values_and_residual_copy() -> None:
    x = torch.tensor([[2.0, -2.0, 2.0, -2.0], [3.0, 4.0, 0.0, 0.0]])  # mean squares 4 and 6.25
    w = torch.tensor([1.0, 2.0, 0.5, 1.0])
    out = torch.full_like(x, float("nan"))
    res = torch.full_like(x, float("nan"))
    out_ptr, res_ptr = out.data_ptr(), res.data_ptr()
    R.rmsnorm(x, w, 0.0, out, res)
    torch.testing.assert_close(out[0], torch.tensor([1.0, -2.0, 0.5, -1.0]))
    torch.testing.assert_close(out[1], torch.tensor([3.0 / 2.5, 8.0 / 2.5, 0.0, 0.0]))
    assert torch.equal(res, x)
    assert (out.data_ptr(), res.data_ptr()) == (out_ptr, res_ptr)  # written in place, not rebound


def test_rmsnorm_eps_and_optional_residual() -> None:
    x = torch.zeros(1, 8)
    out = torch.full_like(x, float("nan"))
    R.rmsnorm(x, torch.ones(8), 1e-5, out, None)  # all-zero row: eps keeps it finite
    assert torch.equal(out, torch.zeros(1, 8))


def test_add_rmsnorm_updates_residual_in_place() -> None:
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    residual = torch.tensor([[1.0, -3.0, 1.0, -3.0]])  # sum: [2, -2, 2, -2], rms 2
    keep = residual
    out = torch.empty_like(x)
    R.add_rmsnorm(x, residual, torch.ones(4), 0.0, out)
    assert residual is keep
    assert torch.equal(residual, torch.tensor([[2.0, -2.0, 2.0, -2.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, -1.0, 1.0, -1.0]]))


def test_add_rmsnorm_without_store_leaves_residual() -> None:
    x = torch.randn(3, 16)
    residual = torch.randn(3, 16)
    before = residual.clone()
    out = torch.empty_like(x)
    R.add_rmsnorm(x, residual, torch.ones(16), 1e-6, out, store_residual=False)
    assert torch.equal(residual, before)
    s = before + x
    torch.testing.assert_close(out, s / s.square().mean(-1, keepdim=True).add(1e-6).sqrt())


def test_add_rmsnorm_rounds_the_sum_to_the_model_dtype() -> None:
    x = torch.randn(2, 64).bfloat16()
    residual = torch.randn(2, 64).bfloat16()
    expect_sum = (x.float() + residual.float()).bfloat16()
    out = torch.empty_like(x)
    R.add_rmsnorm(x, residual, torch.ones(64, dtype=torch.bfloat16), 1e-5, out)
    assert residual.dtype == torch.bfloat16 and torch.equal(residual, expect_sum)
    s = expect_sum.float()
    torch.testing.assert_close(out, (s * torch.rsqrt(s.square().mean(-1, keepdim=True) + 1e-5)).bfloat16())


def test_rotary_inv_freq_values() -> None:
    inv = R.rotary_inv_freq(8, 10000.0)
    torch.testing.assert_close(inv, torch.tensor([1.0, 0.1, 0.01, 0.001]))


def test_rotary_rotates_pairs_by_position() -> None:
    # head_dim 2: one frequency (1.0), so position p rotates (x1, x2) by p radians.
    q = torch.tensor([[1.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 2.0]])  # 2 heads
    k = torch.tensor([[3.0, 4.0], [3.0, 4.0]])
    pos = torch.tensor([0, 1])
    R.rotary(q, k, pos, 10000.0, 2)
    c, s = math.cos(1.0), math.sin(1.0)
    torch.testing.assert_close(q[0], torch.tensor([1.0, 0.0, 0.0, 2.0]))  # position 0: identity
    torch.testing.assert_close(q[1], torch.tensor([c, s, -2 * s, 2 * c]))
    torch.testing.assert_close(k[1], torch.tensor([3 * c - 4 * s, 4 * c + 3 * s]))


def test_rotary_neox_halves_and_strided_slices() -> None:
    nh, nkv, d = 4, 2, 8
    qkv = torch.randn(3, (nh + 2 * nkv) * d)
    before = qkv.clone()
    q, k, v = qkv[:, : nh * d], qkv[:, nh * d : (nh + nkv) * d], qkv[:, (nh + nkv) * d :]
    pos = torch.tensor([5, 0, 31], dtype=torch.int32)
    R.rotary(q, k, pos, 500000.0, d)
    assert torch.equal(v, before[:, (nh + nkv) * d :])  # v untouched
    inv = 500000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None, :]  # [B, d/2]
    x = before[:, : nh * d].view(3, nh, d).double()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    expect = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1).view(3, nh * d)
    torch.testing.assert_close(q.double(), expect, rtol=1e-5, atol=1e-5)
    # rotation keeps each (x_i, x_{i+d/2}) pair's length
    kk = k.view(3, nkv, d)
    kb = before[:, nh * d : (nh + nkv) * d].view(3, nkv, d)
    norm = lambda t: t[..., : d // 2] ** 2 + t[..., d // 2 :] ** 2  # noqa: E731
    torch.testing.assert_close(norm(kk), norm(kb))


def test_kv_write_writes_one_slot_per_row() -> None:
    b, c, nkv, d = 3, 6, 2, 4
    k_cache = torch.zeros(5, c, nkv, d)  # B_max 5, op sees the first 3 rows
    v_cache = torch.zeros(5, c, nkv, d)
    qkv = torch.arange(3 * 24, dtype=F32).view(3, 24) + 1  # [q(8) | k(8) | v(8)], all non-zero
    k, v = qkv[:, 8:16], qkv[:, 16:]
    pos = torch.tensor([0, 5, 2])
    R.kv_write(k, v, k_cache[:b], v_cache[:b], pos)
    for row in range(b):
        p = int(pos[row])
        assert torch.equal(k_cache[row, p], k[row].view(nkv, d))
        assert torch.equal(v_cache[row, p], v[row].view(nkv, d))
    written = torch.zeros(5, c, dtype=torch.bool)
    written[torch.arange(b), pos] = True
    assert (k_cache[~written] == 0).all() and (v_cache[~written] == 0).all()


def _attn_inputs(b: int, c: int, nh: int, nkv: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(b, nh * d), torch.randn(b, c, nkv, d), torch.randn(b, c, nkv, d)


def test_attention_single_entry_returns_its_value() -> None:
    q, kc, vc = _attn_inputs(2, 8, 4, 2, 8)
    out = torch.full((2, 32), float("nan"))
    R.attention(q, kc, vc, 1, out, 0.3)
    for h in range(4):
        torch.testing.assert_close(out.view(2, 4, 8)[:, h], vc[:, 0, h // 2])  # head h reads kv head h // 2


def test_attention_equal_scores_average_values() -> None:
    b, c, nh, nkv, d = 2, 10, 6, 3, 4
    q = torch.randn(b, nh * d)
    kc = torch.zeros(b, c, nkv, d)  # every score 0: uniform weights
    vc = torch.randn(b, c, nkv, d)
    vc[:, 7:] = 1e6  # beyond the context: must be ignored
    out = torch.empty(b, nh * d)
    R.attention(q, kc, vc, 7, out, 1.0)
    mean = vc[:, :7].mean(dim=1)  # [b, nkv, d]
    expect = mean.repeat_interleave(nh // nkv, dim=1).reshape(b, nh * d)
    torch.testing.assert_close(out, expect)


def test_attention_matches_naive_loop_with_strided_q() -> None:
    b, c, nh, nkv, d, ctx = 3, 12, 8, 2, 16, 9
    qkv = torch.randn(b, (nh + 2 * nkv) * d)
    q = qkv[:, : nh * d]
    _, kc, vc = _attn_inputs(b, c, nh, nkv, d)
    out = torch.empty(b, nh * d)
    scale = d**-0.5
    R.attention(q, kc, vc, ctx, out, scale)
    for i in range(b):
        for h in range(nh):
            qh = q[i, h * d : (h + 1) * d]
            kh, vh = kc[i, :ctx, h // (nh // nkv)], vc[i, :ctx, h // (nh // nkv)]
            p = torch.softmax(kh @ qh * scale, dim=0)
            torch.testing.assert_close(out[i, h * d : (h + 1) * d], p @ vh, rtol=1e-5, atol=1e-5)


def test_silu_mul_hand_values() -> None:
    gate_up = torch.tensor([[0.0, 1.0, -50.0, 2.0, 3.0, 4.0]])  # gate [0, 1, -50], up [2, 3, 4]
    out = torch.full((1, 3), float("nan"))
    R.silu_mul(gate_up, out)
    torch.testing.assert_close(out, torch.tensor([[0.0, 3.0 / (1 + math.exp(-1.0)), 0.0]]))


def test_embedding_and_linear_write_into_out() -> None:
    table = torch.randn(10, 4)
    ids = torch.tensor([3, 3, 9])
    out = torch.empty(3, 4)
    ptr = out.data_ptr()
    R.embedding(ids, table, out)
    assert torch.equal(out, table[ids]) and out.data_ptr() == ptr
    x, w = torch.randn(2, 4), torch.randn(5, 4)  # w [N, K]
    y, g = torch.empty(2, 5), torch.empty(2, 5)
    R.linear(x, w, y)
    R.gemv(x, w, g)
    torch.testing.assert_close(y, x @ w.T)
    torch.testing.assert_close(g, x @ w.T)


def test_reference_ops_work_in_bf16() -> None:
    ops = get_ops("cpu")
    b, h, nh, nkv, d = 2, 32, 4, 2, 8
    bf = torch.bfloat16
    x, res, w = torch.randn(b, h, dtype=bf), torch.randn(b, h, dtype=bf), torch.randn(h, dtype=bf)
    out = torch.empty(b, h, dtype=bf)
    ops.add_rmsnorm(x, res, w, 1e-5, out)
    qkv = torch.randn(b, (nh + 2 * nkv) * d, dtype=bf)
    pos = torch.tensor([1, 3])
    q, k, v = qkv[:, : nh * d], qkv[:, nh * d : (nh + nkv) * d], qkv[:, (nh + nkv) * d :]
    ops.rotary(q, k, pos, 10000.0, d)
    kc, vc = torch.zeros(b, 4, nkv, d, dtype=bf), torch.zeros(b, 4, nkv, d, dtype=bf)
    ops.kv_write(k, v, kc, vc, pos)
    plan = ops.attention_plan(b, 4, nh, nkv, d, "cpu")
    att = torch.empty(b, nh * d, dtype=bf)
    ops.attention(q, kc, vc, 4, att, d**-0.5, plan)
    act = torch.empty(b, 16, dtype=bf)
    ops.silu_mul(torch.randn(b, 32, dtype=bf), act)
    for t in (out, res, qkv, kc, att, act):
        assert t.dtype == bf and torch.isfinite(t.float()).all()


def test_attention_split_heuristic() -> None:
    # B=1, 8 kv heads, C=1024 on 132 SMs: 8 pairs would idle 124 SMs, so the context is split (16 tiles of 64).
    assert attention_splits(1, 8, 1024, 132) == 16
    assert attention_kernels(1, 8, 1024, 132) == 1  # the splits are merged inside the split kernel...
    assert attention_kernels(1, 8, 1024, 132, fused_reduce=False) == 2  # ...or by a second, reduce kernel
    # B=256: 2048 pairs fill the chip: one split, no reduce kernel.
    assert attention_splits(256, 8, 1024, 132) == 1
    assert attention_kernels(256, 8, 1024, 132) == 1
    assert attention_kernels(64, 8, 1024, 132) == 1
    # a context of one tile cannot be split
    assert attention_splits(1, 8, ATTN_BLOCK_N, 132) == 1
    # long context, B=1: ~2 programs per SM (33 wanted; 512 tiles cut evenly into 16-tile splits gives 32)
    assert attention_splits(1, 8, 32768, 132) == 32


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 13, 16, 64, 256])
@pytest.mark.parametrize("nkv", [1, 2, 8])
@pytest.mark.parametrize("ctx", [1, 63, 64, 65, 1000, 1024, 8192])
def test_attention_splits_cover_the_context(batch: int, nkv: int, ctx: int) -> None:
    splits = attention_splits(batch, nkv, ctx, 132)
    tokens = attention_split_tokens(splits, ctx)
    assert tokens % ATTN_BLOCK_N == 0
    assert (splits - 1) * tokens < ctx <= splits * tokens  # every split non-empty, all tokens covered
    assert splits <= attention_max_splits(batch, nkv, ctx, 132)
    for smaller in (1, ctx // 2, ctx - 1):  # the plan's workspace fits every shorter context
        if smaller >= 1:
            assert attention_splits(batch, nkv, smaller, 132) <= attention_max_splits(batch, nkv, ctx, 132)
    assert cdiv(ctx, ATTN_BLOCK_N) >= splits


def test_attention_plan_workspace_shapes() -> None:
    plan = R.make_attention_plan(2, 1024, 32, 8, 128, "cpu", num_sms=132)
    assert isinstance(plan, AttentionPlan)
    assert plan.max_splits == attention_max_splits(2, 8, 1024, 132) > 1
    assert plan.partial_out is not None and plan.partial_out.shape == (2, 32, plan.max_splits, 128)
    assert plan.partial_max is not None and plan.partial_max.dtype == F32
    assert plan.kernels() == 1 and plan.kernels(64) == 1  # fused reduce by default
    big = R.make_attention_plan(256, 1024, 32, 8, 128, "cpu", num_sms=132)
    assert big.max_splits == 1 and big.partial_out is None  # never splits: no workspace
    assert get_ops("cpu").attention_plan(2, 1024, 32, 8, 128, "cpu").partial_out is None  # reference needs none


GEMV_SHAPES = {  # (N, K) of the llama-3 decode projections
    "8b qkv": (6144, 4096),
    "8b o_proj": (4096, 4096),
    "8b gate_up": (28672, 4096),
    "8b down": (4096, 14336),
    "8b lm_head": (128256, 4096),
    "70b qkv": (10240, 8192),
    "70b o_proj": (8192, 8192),
    "70b gate_up": (57344, 8192),
    "70b down": (8192, 28672),
}


def test_gemv_config_heuristic_on_h200() -> None:
    """Batch 2-16: the one-pass tensor-core GEMV, never split; 64/32/16 rows, the widest with >= 2
    programs/SM. Batch 1: the CUDA-core kernel, one pass, with the tiles tuned per llama-3 shape."""
    for batch in (8, 16):
        cfgs = {name: gemv_config(n, k, batch, 132) for name, (n, k) in GEMV_SHAPES.items()}
        assert all(c.splits == 1 and not c.split_k and c.use_dot for c in cfgs.values())
        rows = {name: c.block_n for name, c in cfgs.items()}
        assert rows["8b qkv"] == rows["8b o_proj"] == rows["8b down"] == rows["70b o_proj"] == rows["70b down"] == 16
        assert rows["70b qkv"] == 32
        assert rows["8b gate_up"] == rows["8b lm_head"] == rows["70b gate_up"] == 64
        for name, (n, _) in GEMV_SHAPES.items():
            assert cfgs[name].programs(n) >= 2 * 132 or rows[name] == 16  # 16: the narrowest there is
            assert cfgs[name].block_n * cfgs[name].block_k == 4096  # 8 KB bf16 tiles
            assert gemv_block_n(n, 132) == rows[name]
    for name, (n, k) in GEMV_SHAPES.items():
        one = gemv_config(n, k, 1, 132)
        assert not one.use_dot and one.splits == 1 and one.split_k  # the CUDA-core path runs the split-K kernel
        assert (one.block_n, one.block_k, one.num_warps) == GEMV_FMA_TUNED[(n, k)], name
    # an untuned shape, or another GPU: 8 x 512 tiles, 8 warps while that leaves < 8 programs per SM
    assert gemv_fma_tiles(4096, 4096, 100) == (8, 512, 8)
    assert gemv_fma_tiles(65536, 4096, 100) == (8, 512, 4)
    assert gemv_fma_tiles(1000, 100, 132) == (8, 128, 8)  # K tile shrinks to K (a power of two >= 64)
    # knobs given at batch 1 select the tensor-core kernel's defaults for the rest (the sweep's candidates)
    assert gemv_config(4096, 4096, 1, 132, block_n=32, use_dot=True).num_warps == 4
    # split-K stays an explicit option (benchmarks/bench_kernels_sweep.py has a heuristic for it)
    assert gemv_config(4096, 4096, 1, 132, splits=4).split_k


@pytest.mark.parametrize("batch", [1, 3, 16])
@pytest.mark.parametrize("nk", [*GEMV_SHAPES.values(), (70, 100), (1000, 300), (33, 640)])
def test_gemv_config_covers_k(nk: tuple[int, int], batch: int) -> None:
    n, k = nk
    for splits in (None, 1, 3, 8, 100):
        cfg = gemv_config(n, k, batch, 132, splits=splits)
        assert cfg.k_split % cfg.block_k == 0  # whole tiles per split: only K's own tail is ragged
        assert (cfg.splits - 1) * cfg.k_split < k <= cfg.splits * cfg.k_split  # no empty split, all of K
        assert cfg.block_n * cfg.block_k <= 4096 or cfg.block_k == 16 or not cfg.use_dot
        assert 1 <= cfg.splits <= max(1, cdiv(k, cfg.block_k))
    assert gemv_kernels(batch) == 1


def test_kernels_per_step_one_per_op() -> None:
    """Every projection (gemv) and the attention are one launch each: llama-3-70b's step is its op count."""
    from launchprobe.workload import costmodel
    from launchprobe.workload.model import kernels_per_step
    from launchprobe.workload.shape import load_shape

    for name in ("llama-3-8b", "llama-3-70b"):
        shape = load_shape(name)
        for batch in (1, 8, 64):
            assert kernels_per_step(shape, batch, 1024, 132) == costmodel.logical_ops_per_step(shape)
    assert 800 <= kernels_per_step(load_shape("llama-3-70b"), 1, 1024, 132) <= 900
