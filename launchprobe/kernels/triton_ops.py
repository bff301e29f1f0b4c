"""Fused Triton kernels of the decode step: one launch per op (attention: one, or two when it splits the context).

Decode ops move a few KB to a few hundred MB and do almost no math, so every kernel is written for HBM latency
and bandwidth rather than FLOPs: each program loads its working set with wide loads (rows are contiguous, so
Triton emits 16-byte vectors), computes in fp32 registers, writes each output once, and grids are sized so that
a batch of 1 still spreads over the 132 SMs of an H200 where the op is large enough to care. Nothing allocates,
syncs or branches on tensor values per call: every op is safe inside a CUDA graph (``positions`` is read on
the device, ``context_len`` is a Python int fixed per graph).

Importing this module imports triton; nothing imports it at package import time (``get_ops`` does, lazily).
Under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (that is how they are tested without a GPU).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

try:
    import triton.language.extra.cuda as _cuda_ext
except ImportError:  # pragma: no cover - older triton
    _cuda_ext = None

from launchprobe.kernels import (
    ATTN_BLOCK_N,
    ATTN_FUSED_REDUCE,
    ATTN_NUM_STAGES,
    ATTN_NUM_WARPS,
    ATTN_PROGRAMS_PER_SM,
    DEFAULT_NUM_SMS,
    GEMV_MAX_BATCH,
    AttentionPlan,
    AttentionTuning,
    GemvConfig,
    GemvPlan,
    TunedAttentionPlan,
    attention_max_splits,
    attention_split_tokens,
    gemv_config,
)
from launchprobe.kernels.reference import TorchOps, device_num_sms

LOG2E = 1.4426950408889634
# RMSNorm keeps a whole row in registers up to this many columns (16384 fp32 over 16 warps: 32 per thread);
# wider rows loop over chunks of a quarter of it (two passes, the second one served from L1/L2).
NORM_MAX_BLOCK = 16384
# Splits folded per step by the attention reduce kernel ([CHUNK, D] fp32 partials in registers).
ATTN_REDUCE_CHUNK = 16


@functools.cache
def _sms(device_type: str, index: int | None) -> int:
    if device_type == "cuda":
        return int(torch.cuda.get_device_properties(index).multi_processor_count)
    return DEFAULT_NUM_SMS


def num_sms(t: torch.Tensor) -> int:
    """SM count of a tensor's device, asked once per device and cached."""
    return _sms(t.device.type, t.device.index)


# --------------------------------------------------------------------------------------------------------------
# Launching. Triton's per-call dispatch (binding and specialising the arguments, the cache key) costs tens of
# microseconds of host time, several times a torch launch. A decode step calls each op with the same tensors
# every time, so ``TritonOps.bind`` records the compiled kernels and arguments of an op's first call and relaunches
# them directly after that (CompiledKernel[grid]), which is all Triton's own launch path does once it has a kernel.

_recording: list[tuple[Any, tuple[Any, ...]]] | None = None


# --------------------------------------------------------------------------------------------------------------
# Programmatic dependent launch (PDL, Hopper and later). A decode step is a chain of kernels each of which needs
# the previous one's output, so without PDL every kernel starts only after the previous one has drained, plus the
# launch latency: at batch 1 that bubble (HBM idle) is paid ~10 times per layer. Launched with PDL, a kernel may
# start as soon as every program of the previous kernel has started: its programs are already resident, their
# set-up done, when the previous kernel ends. Each kernel here waits for the previous one to finish and its
# writes to be visible (``griddepcontrol.wait``) before it reads anything, and only then lets the next kernel
# launch (``griddepcontrol.launch_dependents``): at most one kernel runs ahead, and every kernel waits, so
# completion is still ordered transitively (a kernel done implies all before it done). cuBLAS and torch kernels
# in between are ordinary launches and wait for everything before them. Inside a CUDA graph the PDL launches
# become programmatic edges; an event recorded between two kernels (the per-kernel pass) turns the edge back into
# a full dependency. Prefetching the GEMV's weights or attention's KV tile into L2 before the wait was tried and
# measured (docs/performance.md section 4): no gain, so the kernels do not.


# Whether ops launched from now on use PDL (where the GPU supports it). Read at an op's first call: a bound op
# keeps what it was recorded with.
PDL_ENABLED = True
# Hopper's griddepcontrol (sm_90+); missing from older Triton.
_HAVE_GDC = hasattr(_cuda_ext, "gdc_wait") if _cuda_ext is not None else False


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))  # type: ignore[return-value]


def pdl_active(device: torch.device) -> bool:
    """PDL launches for kernels on ``device``: enabled, a CUDA GPU of compute capability >= 9.0, compiled code."""
    return (
        PDL_ENABLED
        and _HAVE_GDC
        and device.type == "cuda"
        and os.environ.get("TRITON_INTERPRET") != "1"
        and _capability(device.index) >= (9, 0)
    )


@triton.jit
def _wait_for_inputs(PDL: tl.constexpr):
    """Under PDL: wait until the previous kernel has finished (its writes visible), then let the next launch."""
    if PDL:
        _cuda_ext.gdc_wait()
        _cuda_ext.gdc_launch_dependents()


def _launch(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    if pdl_active(device):
        kwargs.update(PDL=True, launch_pdl=True)
    else:
        kwargs["PDL"] = False
    compiled = kernel[grid](*args, **kwargs)
    if _recording is not None:
        params = {name: value for name, value in kwargs.items() if name in kernel.arg_names}
        bound = inspect.signature(kernel.fn).bind(*args, **params)
        bound.apply_defaults()
        grid3 = (*grid, *(1,) * (3 - len(grid)))  # CompiledKernel[grid] indexes all three dimensions
        _recording.append((compiled[grid3], tuple(bound.arguments.values())))


# Ops that are nothing but Triton launches (no torch work inside), so their recorded launches are the whole op.
# ``gemv`` is one Triton launch up to GEMV_MAX_BATCH rows and torch.mm above: a call that recorded no launch is
# not replayed but called again.
RELAUNCHABLE = frozenset({"rmsnorm", "add_rmsnorm", "rotary", "kv_write", "silu_mul", "attention", "gemv"})


def bind(fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
    """``fn(*args)`` as a closure; for a pure-Triton op, the first call records its launches for direct replay."""
    if fn.__name__ not in RELAUNCHABLE or os.environ.get("TRITON_INTERPRET") == "1":
        return lambda: fn(*args)  # the interpreter has no compiled kernels to relaunch
    launches: list[tuple[Any, tuple[Any, ...]]] = []
    state = {"recorded": False}

    def first_then_replay() -> None:
        global _recording
        if state["recorded"]:
            if not launches:
                fn(*args)
            for runner, values in launches:
                runner(*values)
            return
        _recording = launches
        try:
            fn(*args)
        finally:
            _recording = None
        state["recorded"] = True

    return first_then_replay


def _rows(t: torch.Tensor, name: str) -> None:
    if t.dim() != 2 or t.stride(1) != 1:
        raise ValueError(f"{name} must be 2-D with contiguous rows, got shape {tuple(t.shape)} strides {t.stride()}")


def _pick_block(rows: int, cols: int, sms: int, blocks: tuple[int, ...]) -> int:
    """The widest of ``blocks`` (widest first) whose grid still has >= 2 programs per SM, else the narrowest."""
    for block in blocks:
        if rows * triton.cdiv(cols, block) >= 2 * sms:
            return block
    return blocks[-1]


def _warps(block: int, per_thread: int = 8) -> int:
    """Warps so that each thread holds ``per_thread`` elements (8 x 2 bytes = one 16-byte vector)."""
    return max(1, min(16, block // (32 * per_thread)))


# --------------------------------------------------------------------------------------------------------------
# RMSNorm (plain, fused add, final): grid (B,), one program per row. A row (8-16 KB at 8B/70B) is loaded once
# with 16-byte vectors, reduced in fp32, normalised and written straight from registers: one read of x (and of
# the residual), one write of out (and of the sum). Decode batches are small, so B programs is all there is;
# the op is latency-bound at B=1 whatever the grid.


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    sum_ptr,
    n_cols,
    stride_x,
    stride_res,
    stride_out,
    stride_sum,
    eps,
    ADD_RESIDUAL: tl.constexpr,
    STORE_SUM: tl.constexpr,
    ONE_PASS: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    _wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = res_ptr + row * stride_res
    o_row = out_ptr + row * stride_out
    s_row = sum_ptr + row * stride_sum
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < n_cols
        s = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if ADD_RESIDUAL:
            s += tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
            s = s.to(res_ptr.dtype.element_ty).to(tl.float32)  # normalise what the residual stream holds
        if STORE_SUM:
            tl.store(s_row + cols, s.to(sum_ptr.dtype.element_ty), mask=mask)
        rstd = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(o_row + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        sq = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            s = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
            if ADD_RESIDUAL:
                s += tl.load(r_row + c, mask=mask, other=0.0).to(tl.float32)
                s = s.to(res_ptr.dtype.element_ty).to(tl.float32)
            if STORE_SUM:
                tl.store(s_row + c, s.to(sum_ptr.dtype.element_ty), mask=mask)
            sq += s * s
        rstd = tl.rsqrt(tl.sum(sq, axis=0) / n_cols + eps)
        tl.debug_barrier()  # the sum may have overwritten the residual in place: make it visible before re-reading
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            if STORE_SUM:
                s = tl.load(s_row + c, mask=mask, other=0.0).to(tl.float32)
            else:
                s = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
                if ADD_RESIDUAL:
                    s += tl.load(r_row + c, mask=mask, other=0.0).to(tl.float32)
                    s = s.to(res_ptr.dtype.element_ty).to(tl.float32)
            w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
            tl.store(o_row + c, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _norm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    sum_out: torch.Tensor | None,
) -> None:
    for t, name in ((x, "x"), (out, "out"), (residual, "residual"), (sum_out, "residual_out")):
        if t is not None:
            _rows(t, name)
    rows, n_cols = x.shape
    if rows == 0:
        return
    block = triton.next_power_of_2(n_cols)
    one_pass = block <= NORM_MAX_BLOCK
    if not one_pass:
        block = max(16, NORM_MAX_BLOCK // 4)
    res = residual if residual is not None else x  # unused pointer when not ADD_RESIDUAL
    dst = sum_out if sum_out is not None else out  # unused pointer when not STORE_SUM
    _launch(
        _rmsnorm_kernel,
        (rows,),
        x,
        res,
        weight,
        out,
        dst,
        n_cols,
        x.stride(0),
        res.stride(0),
        out.stride(0),
        dst.stride(0),
        float(eps),
        ADD_RESIDUAL=residual is not None,
        STORE_SUM=sum_out is not None,
        ONE_PASS=one_pass,
        BLOCK=block,
        num_warps=_warps(block, 16),
    )


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, residual_out: torch.Tensor | None
) -> None:
    """``residual_out = x``; ``out = x * rsqrt(mean(x^2) + eps) * weight``. One kernel."""
    _norm(x, None, weight, eps, out, residual_out)


def add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    store_residual: bool = True,
) -> None:
    """``residual += x`` (only if ``store_residual``); ``out = rmsnorm(residual + x) * weight``. One kernel."""
    _norm(x, residual, weight, eps, out, residual if store_residual else None)


# --------------------------------------------------------------------------------------------------------------
# Rotary (neox): grid (B, q head blocks + k head blocks). A program takes BLOCK_H heads of one row of q or of k,
# computes cos/sin of its row's position once for the D/2 frequencies (shared by all its heads: no cos/sin
# cache to read), loads both halves of each head and writes them back rotated. q and k are views into the
# fused qkv buffer, so one launch covers both. BLOCK_H is small at small batch (more programs, lower latency)
# and up to 8 heads (4 KB at D=128) at large batch (fewer, fuller programs).


@triton.jit
def _rope_heads(row_ptr, head0, n_heads, cos, sin, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    heads = head0 + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_HALF)
    mask = (heads < n_heads)[:, None] & (i < HALF)[None, :]
    p1 = row_ptr + heads[:, None] * (2 * HALF) + i[None, :]
    x1 = tl.load(p1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(p1 + HALF, mask=mask, other=0.0).to(tl.float32)
    c = cos[None, :]
    s = sin[None, :]
    tl.store(p1, (x1 * c - x2 * s).to(row_ptr.dtype.element_ty), mask=mask)
    tl.store(p1 + HALF, (x2 * c + x1 * s).to(row_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,
    k_ptr,
    pos_ptr,
    stride_q,
    stride_k,
    n_q_heads,
    n_k_heads,
    n_q_blocks,
    freq_exp2,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PDL: tl.constexpr,
):
    _wait_for_inputs(PDL)
    b = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    pos = tl.load(pos_ptr + b).to(tl.float32)
    i = tl.arange(0, BLOCK_HALF).to(tl.float32)
    angle = pos * tl.exp2(i * freq_exp2)  # pos * theta^(-2i/D), freq_exp2 = -2*log2(theta)/D
    # Reduce to [-pi, pi] before cos/sin (angles reach ~1e5 rad at long contexts, where fast sin/cos lose
    # accuracy): Cody-Waite with 2*pi = 6.28125 (exact in 8 bits, so turns * 6.28125 is exact) + remainder.
    turns = tl.floor(angle * 0.15915494309189535 + 0.5)
    angle = (angle - turns * 6.28125) - turns * 0.0019353071795864769
    cos = tl.cos(angle)
    sin = tl.sin(angle)
    if blk < n_q_blocks:
        _rope_heads(q_ptr + b * stride_q, blk * BLOCK_H, n_q_heads, cos, sin, HALF, BLOCK_HALF, BLOCK_H)
    else:
        _rope_heads(k_ptr + b * stride_k, (blk - n_q_blocks) * BLOCK_H, n_k_heads, cos, sin, HALF, BLOCK_HALF, BLOCK_H)


def rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float, head_dim: int) -> None:
    """Neox rotary embedding of q ``[B, NH*D]`` and k ``[B, NKV*D]`` in place (row-strided views ok). One kernel."""
    _rows(q, "q")
    _rows(k, "k")
    if head_dim % 2 or q.shape[1] % head_dim or k.shape[1] % head_dim:
        raise ValueError(f"head_dim {head_dim} must be even and divide q ({q.shape[1]}) and k ({k.shape[1]})")
    batch = q.shape[0]
    if batch == 0:
        return
    nh, nkv = q.shape[1] // head_dim, k.shape[1] // head_dim
    half = head_dim // 2
    block_h = 1
    for cand in (8, 4, 2):
        if batch * (triton.cdiv(nh, cand) + triton.cdiv(nkv, cand)) >= 2 * num_sms(q):
            block_h = cand
            break
    n_q_blocks = triton.cdiv(nh, block_h)
    grid = (batch, n_q_blocks + triton.cdiv(nkv, block_h))
    block_half = max(2, triton.next_power_of_2(half))
    _launch(
        _rotary_kernel,
        grid,
        q,
        k,
        positions,
        q.stride(0),
        k.stride(0),
        nh,
        nkv,
        n_q_blocks,
        -2.0 * math.log2(theta) / head_dim,
        HALF=half,
        BLOCK_HALF=block_half,
        BLOCK_H=block_h,
        num_warps=_warps(block_h * block_half * 2),
    )


# --------------------------------------------------------------------------------------------------------------
# KV-cache write: grid (B, column blocks of NKV*D). A program reads its row's position once, then copies one
# block of the new k row and the same block of the new v row into the cache row [b, pos] (NKV*D contiguous
# elements). Positions outside [0, C) are dropped, not written out of bounds.


@triton.jit
def _kv_write_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    pos_ptr,
    n_cols,
    cache_len,
    stride_k,
    stride_v,
    stride_kcb,
    stride_kcc,
    stride_vcb,
    stride_vcc,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    _wait_for_inputs(PDL)
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    pos = tl.load(pos_ptr + b).to(tl.int64)
    mask = (cols < n_cols) & (pos >= 0) & (pos < cache_len)
    kv = tl.load(k_ptr + b * stride_k + cols, mask=mask)
    tl.store(kc_ptr + b * stride_kcb + pos * stride_kcc + cols, kv, mask=mask)
    vv = tl.load(v_ptr + b * stride_v + cols, mask=mask)
    tl.store(vc_ptr + b * stride_vcb + pos * stride_vcc + cols, vv, mask=mask)


def _check_cache(c: torch.Tensor, name: str) -> None:
    if c.dim() != 4 or c.stride(3) != 1 or c.stride(2) != c.shape[3]:
        raise ValueError(f"{name} must be [B, C, NKV, D] with contiguous [NKV, D] rows, got strides {c.stride()}")


def kv_write(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
) -> None:
    """``k_cache[b, positions[b]] = k[b]``, same for v. One kernel."""
    _rows(k, "k")
    _rows(v, "v")
    _check_cache(k_cache, "k_cache")
    _check_cache(v_cache, "v_cache")
    batch, n_cols = k.shape
    if batch == 0:
        return
    if k_cache.shape[2] * k_cache.shape[3] != n_cols or k_cache.shape[0] < batch:
        raise ValueError(f"k {tuple(k.shape)} does not fit k_cache {tuple(k_cache.shape)}")
    block = _pick_block(batch, n_cols, num_sms(k), (1024, 512, 256))
    block = min(block, max(16, triton.next_power_of_2(n_cols)))
    _launch(
        _kv_write_kernel,
        (batch, triton.cdiv(n_cols, block)),
        k,
        v,
        k_cache,
        v_cache,
        positions,
        n_cols,
        k_cache.shape[1],
        k.stride(0),
        v.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        v_cache.stride(0),
        v_cache.stride(1),
        BLOCK=block,
        num_warps=_warps(block),
    )


# --------------------------------------------------------------------------------------------------------------
# Decode attention, split-K ("flash decoding"), one launch.
#
# Split kernel: grid (splits, NKV, B). A program owns one (sequence b, kv head, slice of the context) and ALL
# the q heads of that kv head's group: it loads the group's q rows once ([GROUP_PAD, D], padded to 16 rows for
# the tensor-core dot; the padding costs MMA issue slots only, never memory), then streams its slice of K and V
# in [BLOCK_N, D] tiles (each tile read from HBM once for the whole group: GQA's bandwidth saving), with an
# online softmax in fp32 (log2 domain: the scale is folded with log2(e) and exp2 is used). With one split it
# normalises and writes the output directly. Otherwise it writes the unnormalised partial output, running max
# and denominator per (head, split) to the plan's fp32 workspace, and then either
#   FUSED: bumps the (b, kv head) arrival counter (acq_rel atomic after a CTA barrier); the last program to
#   arrive merges the group's splits (in split order: deterministic) and resets the counter to 0, or
#   the reduce kernel, grid (B * NH,), merges the splits of one head per program (a second launch).
# The merge rescales each partial by exp2(m_s - max m) and divides by the rescaled sum of denominators; it reads
# only [GROUP, splits, D] fp32 from L2.
#
# The split count (see launchprobe.kernels.attention_splits) makes B=1 with 8 kv heads run ~2 programs per SM
# instead of 8 programs, and B >= 16 (8 kv heads) run one split per (b, kv head), no merge at all.


@triton.jit(do_not_specialize=["context_len", "split_tokens", "num_splits"])
def _attn_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_out_ptr,
    part_max_ptr,
    part_sum_ptr,
    stride_qb,
    stride_kb,
    stride_kc,
    stride_kh,
    stride_vb,
    stride_vc,
    stride_vh,
    stride_ob,
    context_len,
    split_tokens,
    max_splits,
    num_heads,
    num_splits,
    cnt_ptr,
    qk_scale,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE: tl.constexpr,
    FUSED: tl.constexpr,
    MERGE_G: tl.constexpr,
    MERGE_S: tl.constexpr,
    MERGE_CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    split = tl.program_id(0)
    kvh = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    gmask = g < GROUP
    dmask = d < HEAD_DIM
    heads = kvh * GROUP + g
    k_base = k_ptr + b * stride_kb + kvh * stride_kh
    v_base = v_ptr + b * stride_vb + kvh * stride_vh
    lo = split * split_tokens
    hi = tl.minimum(lo + split_tokens, context_len)
    _wait_for_inputs(PDL)
    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * HEAD_DIM + d[None, :],
        mask=gmask[:, None] & dmask[None, :],
        other=0.0,
    )
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        t = start + n
        tmask = t < hi
        tile_mask = tmask[:, None] & dmask[None, :]
        k = tl.load(k_base + t[:, None].to(tl.int64) * stride_kc + d[None, :], mask=tile_mask, other=0.0)
        # V is issued before the QK dot so that, when a split is a single tile (nothing to pipeline), both
        # loads are in flight together: one HBM round trip, not two.
        v = tl.load(v_base + t[:, None].to(tl.int64) * stride_vc + d[None, :], mask=tile_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # [GROUP_PAD, BLOCK_N], log2 units
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: every tile has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out_mask = gmask[:, None] & dmask[None, :]
    if SINGLE:
        o = acc / l_i[:, None]
        tl.store(
            out_ptr + b * stride_ob + heads[:, None] * HEAD_DIM + d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
    else:
        slot = (b * num_heads + heads) * max_splits + split  # [GROUP_PAD] workspace rows
        tl.store(part_out_ptr + slot[:, None] * HEAD_DIM + d[None, :], acc, mask=out_mask)
        tl.store(part_max_ptr + slot, m_i, mask=gmask)
        tl.store(part_sum_ptr + slot, l_i, mask=gmask)
        if FUSED:
            tl.debug_barrier()  # all of this program's partials are stored before the release below
            cnt = cnt_ptr + b * tl.num_programs(1) + kvh
            arrived = tl.atomic_add(cnt, 1, sem="acq_rel")
            if arrived == num_splits - 1:  # last of this (b, kv head): merge every split of the group
                tl.debug_barrier()
                mg = tl.arange(0, MERGE_G)
                mgmask = mg < GROUP
                rows = (b * num_heads + kvh * GROUP + mg) * max_splits  # [MERGE_G] first slot of each head
                ms = tl.arange(0, MERGE_S)
                st_mask = mgmask[:, None] & (ms < num_splits)[None, :]
                m_all = tl.load(
                    part_max_ptr + rows[:, None] + ms[None, :], mask=st_mask, other=float("-inf"), cache_modifier=".cg"
                )
                l_all = tl.load(
                    part_sum_ptr + rows[:, None] + ms[None, :], mask=st_mask, other=0.0, cache_modifier=".cg"
                )
                m_max = tl.max(m_all, axis=1)  # [MERGE_G]
                m_max = tl.where(mgmask, m_max, 0.0)  # padding heads: no -inf - -inf
                den = tl.sum(l_all * tl.exp2(m_all - m_max[:, None]), axis=1)
                den = tl.where(mgmask, den, 1.0)
                o = tl.zeros([MERGE_G, BLOCK_D], dtype=tl.float32)
                mc = tl.arange(0, MERGE_CHUNK)
                for s0 in range(0, num_splits, MERGE_CHUNK):  # [MERGE_G, MERGE_CHUNK, D] fp32 per step
                    sc = s0 + mc
                    cmask = mgmask[:, None] & (sc < num_splits)[None, :]
                    m_c = tl.load(
                        part_max_ptr + rows[:, None] + sc[None, :],
                        mask=cmask,
                        other=float("-inf"),
                        cache_modifier=".cg",
                    )
                    p_c = tl.load(
                        part_out_ptr + (rows[:, None] + sc[None, :])[:, :, None] * HEAD_DIM + d[None, None, :],
                        mask=cmask[:, :, None] & dmask[None, None, :],
                        other=0.0,
                        cache_modifier=".cg",
                    )
                    o += tl.sum(p_c * tl.exp2(m_c - m_max[:, None])[:, :, None], axis=1)
                o = o / den[:, None]
                heads_m = kvh * GROUP + mg
                tl.store(
                    out_ptr + b * stride_ob + heads_m[:, None] * HEAD_DIM + d[None, :],
                    o.to(out_ptr.dtype.element_ty),
                    mask=mgmask[:, None] & dmask[None, :],
                )
                tl.atomic_xchg(cnt, 0)  # ready for the next call / graph replay


@triton.jit(do_not_specialize=["num_splits"])
def _attn_reduce_kernel(
    part_out_ptr,
    part_max_ptr,
    part_sum_ptr,
    out_ptr,
    num_splits,
    max_splits,
    num_heads,
    stride_ob,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CHUNK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    _wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)  # b * num_heads + h
    b = row // num_heads
    h = row % num_heads
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    base = row * max_splits
    # the per-split statistics are tiny: take the global max and the rescaled denominator in one go...
    s_all = tl.arange(0, BLOCK_S)
    m_all = tl.load(part_max_ptr + base + s_all, mask=s_all < num_splits, other=float("-inf"))
    m_max = tl.max(m_all, axis=0)
    den_all = tl.load(part_sum_ptr + base + s_all, mask=s_all < num_splits, other=0.0)
    den = tl.sum(den_all * tl.exp2(m_all - m_max), axis=0)
    # ...then fold the [splits, D] partial outputs in chunks (bounded registers for any split count)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s0 in range(0, num_splits, CHUNK_S):
        s = s0 + tl.arange(0, CHUNK_S)
        smask = s < num_splits
        m = tl.load(part_max_ptr + base + s, mask=smask, other=float("-inf"))
        part = tl.load(
            part_out_ptr + (base + s)[:, None] * HEAD_DIM + d[None, :], mask=smask[:, None] & dmask[None, :], other=0.0
        )
        acc += tl.sum(part * tl.exp2(m - m_max)[:, None], axis=0)
    tl.store(out_ptr + b * stride_ob + h * HEAD_DIM + d, (acc / den).to(out_ptr.dtype.element_ty), mask=dmask)


def attention_plan(
    batch: int,
    context_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    device: torch.device | str,
    num_sms: int | None = None,
    *,
    block_n: int = ATTN_BLOCK_N,
    programs_per_sm: int = ATTN_PROGRAMS_PER_SM,
    fused_reduce: bool = ATTN_FUSED_REDUCE,
    num_warps: int = ATTN_NUM_WARPS,
    num_stages: int = ATTN_NUM_STAGES,
) -> AttentionPlan:
    """Split count, kernel knobs and fp32 split-K workspace (plus zeroed arrival counters for the fused reduce)
    for one (batch bucket, context); make once, outside graph capture, and reuse every step.

    The keyword knobs default to the tuned constants of ``launchprobe.kernels``; the sweep benchmark varies them.
    """
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n {block_n} must be a power of two >= 16")
    sms = device_num_sms(device) if num_sms is None else num_sms
    max_splits = attention_max_splits(batch, num_kv_heads, context_len, sms, block_n, programs_per_sm)
    bufs: dict[str, torch.Tensor] = {}
    if max_splits > 1:
        f32 = torch.float32
        bufs = {
            "partial_out": torch.empty(batch, num_heads, max_splits, head_dim, dtype=f32, device=device),
            "partial_max": torch.empty(batch, num_heads, max_splits, dtype=f32, device=device),
            "partial_sum": torch.empty(batch, num_heads, max_splits, dtype=f32, device=device),
        }
        if fused_reduce:
            bufs["counters"] = torch.zeros(batch, num_kv_heads, dtype=torch.int32, device=device)
    return TunedAttentionPlan(
        batch,
        context_len,
        num_heads,
        num_kv_heads,
        head_dim,
        sms,
        max_splits,
        bufs.get("partial_out"),
        bufs.get("partial_max"),
        bufs.get("partial_sum"),
        bufs.get("counters"),
        AttentionTuning(block_n, programs_per_sm, fused_reduce, num_warps, num_stages),
    )


# The fused merge holds [MERGE_G, MERGE_CHUNK, D] fp32 partials at once: at most this many elements.
ATTN_MERGE_ELEMS = 8192


def attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    context_len: int,
    out: torch.Tensor,
    scale: float,
    plan: AttentionPlan,
) -> None:
    """Grouped-query decode attention; ``plan.kernels(context_len)`` launches (1, or 2 without the fused reduce)."""
    _rows(q, "q")
    _rows(out, "out")
    _check_cache(k_cache, "k_cache")
    _check_cache(v_cache, "v_cache")
    batch = q.shape[0]
    _, cache_len, nkv, d = k_cache.shape
    nh = q.shape[1] // d
    if batch == 0:
        return
    if not 1 <= context_len <= min(cache_len, plan.context_len):
        raise ValueError(f"context_len {context_len} must be in [1, min(cache {cache_len}, plan {plan.context_len})]")
    if batch > plan.batch or (nh, nkv, d) != (plan.num_heads, plan.num_kv_heads, plan.head_dim):
        raise ValueError(f"attention inputs (B={batch}, NH={nh}, NKV={nkv}, D={d}) do not match the plan {plan}")
    group = nh // nkv
    splits = plan.splits(context_len)
    single = splits == 1
    tuning = plan.tuning
    fused = tuning.fused_reduce and not single
    if single:
        ws_out = ws_max = ws_sum = out  # unused pointers
    else:
        if plan.partial_out is None or plan.partial_max is None or plan.partial_sum is None:
            raise ValueError("this attention plan has no split-K workspace (made by the torch ops?)")
        ws_out, ws_max, ws_sum = plan.partial_out, plan.partial_max, plan.partial_sum
    if fused:
        if plan.counters is None:
            raise ValueError("this attention plan has no arrival counters for the fused reduce")
        counters = plan.counters
    else:
        counters = out  # unused pointer
    block_d = max(16, triton.next_power_of_2(d))
    merge_g = triton.next_power_of_2(group)
    _launch(
        _attn_split_kernel,
        (splits, nkv, batch),
        q,
        k_cache,
        v_cache,
        out,
        ws_out,
        ws_max,
        ws_sum,
        q.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        out.stride(0),
        context_len,
        attention_split_tokens(splits, context_len, tuning.block_n),
        plan.max_splits,
        nh,
        splits,
        counters,
        float(scale) * LOG2E,
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=d,
        BLOCK_D=block_d,
        BLOCK_N=tuning.block_n,
        SINGLE=single,
        FUSED=fused,
        MERGE_G=merge_g,
        MERGE_S=max(2, triton.next_power_of_2(plan.max_splits)),
        MERGE_CHUNK=max(1, min(triton.next_power_of_2(plan.max_splits), ATTN_MERGE_ELEMS // (merge_g * block_d))),
        num_warps=tuning.num_warps,
        num_stages=tuning.num_stages,
    )
    if not single and not fused:
        _launch(
            _attn_reduce_kernel,
            (batch * nh,),
            ws_out,
            ws_max,
            ws_sum,
            out,
            splits,
            plan.max_splits,
            nh,
            out.stride(0),
            HEAD_DIM=d,
            BLOCK_D=block_d,
            BLOCK_S=max(2, triton.next_power_of_2(splits)),
            CHUNK_S=ATTN_REDUCE_CHUNK,
            num_warps=4,
        )


# --------------------------------------------------------------------------------------------------------------
# SiLU-and-mul: grid (B, column blocks of F). A program reads one block of gate and the matching block of up
# (same row, F apart), and writes silu(gate) * up. Blocks shrink at small batch so B=1 still fills the SMs.


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, n_cols, stride_gu, stride_out, BLOCK: tl.constexpr, PDL: tl.constexpr):
    _wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """``out = silu(gate_up[:, :F]) * gate_up[:, F:]``. One kernel."""
    _rows(gate_up, "gate_up")
    _rows(out, "out")
    batch, f = out.shape
    if gate_up.shape[1] != 2 * f or gate_up.shape[0] != batch:
        raise ValueError(f"gate_up {tuple(gate_up.shape)} must be [B, 2*F] for out {tuple(out.shape)}")
    if batch == 0:
        return
    block = _pick_block(batch, f, num_sms(out), (2048, 1024, 512, 256))
    block = min(block, max(16, triton.next_power_of_2(f)))
    _launch(
        _silu_mul_kernel,
        (batch, triton.cdiv(f, block)),
        gate_up,
        out,
        f,
        gate_up.stride(0),
        out.stride(0),
        BLOCK=block,
        num_warps=_warps(block),
    )


# --------------------------------------------------------------------------------------------------------------
# GEMV for small batches: out[B, N] = x[B, K] @ W^T, W [N, K] row-major (nn.Linear's layout). ONE launch.
#
# Default (config.splits == 1, use_dot): _gemv_kernel, 7558c14's one-pass kernel, restored. Grid (N / BLOCK_N,).
# A program owns BLOCK_N weight rows and walks all of K from 0 in [BLOCK_N, BLOCK_K] tiles of GEMV_TILE_ELEMS
# elements (each row segment >= 128 contiguous bytes: full 16-byte vectors, whole sectors), pipelined
# num_stages deep; x's [B, BLOCK_K] slice (padded to 16 rows for the tensor-core dot, padding rows not loaded)
# comes from L2. fp32 accumulation; the weight is read from HBM exactly once; no workspace, no atomics.
# BLOCK_N is the widest of 64/32/16 that still gives >= 2 programs per SM (gemv_block_n: o_proj 4096 rows -> 16
# -> 256 programs; gate_up 28672 rows -> 64 -> 448 programs).
#
# Option (config.splits > 1, or the CUDA-core B=1 path): _gemv_splitk_kernel, grid (N tiles, K splits):
#   each program stores its fp32 partial to the plan's workspace [SPLITS, B, N], then (after a CTA barrier, so
#   all its threads' stores are ordered before) bumps its N tile's arrival counter with an acq_rel atomic; the
#   program that arrives last sums the SPLITS partials in split order (deterministic whatever the arrival
#   order), writes out, and resets the counter to 0 for the next call or graph replay (no memset kernel).
#
# Why the split-K kernel (ead8863) ran at 1.3-1.7 TB/s where this one ran at 2.5-4.3, even with SPLITS=1:
#   1. Lost 16-byte loads AND the cp.async pipeline. Its K loop starts at lo = pid_s * k_split with k_split in
#      do_not_specialize, so Triton's alignment analysis knows nothing about lo's divisibility: the loop
#      variable k0 (divisibility gcd(lo, BLOCK_K) = 1), hence every W and x address, is only known 2-byte
#      aligned. Compiled for sm_90 (triton.compile to PTX, no GPU needed; bf16, 16x256 tiles, EVEN_K) it emits
#      64 scalar ld.global.b16 per thread per tile and no cp.async at all (cp.async copies 4/8/16 aligned
#      bytes), so num_stages pipelines nothing either; this kernel (loop from 0, constexpr step, K specialised
#      divisible by 16) emits 16-byte cp.async.cg copies into shared memory, 4 stages deep. The split-K kernel
#      below now states lo's alignment (tl.multiple_of; gemv() checks k_split is whole BLOCK_K tiles) and
#      compiles to the same 16-byte cp.async pipeline (not yet timed on the GPU).
#   2. Rows per program: its default took 32 rows whenever 64 left < 2 programs per SM, never 16, so at 8B
#      o_proj/down/qkv and 70B o_proj/down a no-split grid had 128-256 programs of 32 rows (about one per SM,
#      too few loads in flight for HBM) where 7558c14 had 256-512 of 16.
#   3. With SPLITS > 1 every program also stores an fp32 partial, waits on a CTA barrier, does an acq_rel
#      atomic (a fence) and the last one re-reads SPLITS partials: extra traffic and a serial tail per tile.
#   The padded tl.dot over 16 rows with the transposed W tile, 4 warps and 4 stages are the same in both.


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    n_batch,
    N,
    K,
    stride_xb,
    stride_wn,
    stride_ob,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rb = tl.arange(0, BLOCK_B)
    rk = tl.arange(0, BLOCK_K)
    nmask = rn < N
    bmask = rb < n_batch
    w_rows = w_ptr + rn[:, None].to(tl.int64) * stride_wn
    _wait_for_inputs(PDL)
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    acc = _dot_tiles(acc, x_ptr + rb[:, None] * stride_xb, w_rows, rk, 0, K, nmask, bmask, BLOCK_K, EVEN_K)
    tl.store(
        out_ptr + rb[:, None] * stride_ob + rn[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=bmask[:, None] & nmask[None, :],
    )


@triton.jit
def _dot_tiles(acc, x_rows, w_rows, rk, lo, hi, nmask, bmask, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """``acc += x[:, lo:hi] @ W[rows, lo:hi].T`` in [rows, BLOCK_K] tiles, on tensor cores (x padded to BLOCK_B)."""
    for k0 in range(lo, hi, BLOCK_K):
        kk = k0 + rk
        if EVEN_K:
            w = tl.load(w_rows + kk[None, :], mask=nmask[:, None], other=0.0)
            x = tl.load(x_rows + kk[None, :], mask=bmask[:, None], other=0.0)
        else:
            kmask = kk < hi
            w = tl.load(w_rows + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)
            x = tl.load(x_rows + kk[None, :], mask=bmask[:, None] & kmask[None, :], other=0.0)
        acc += tl.dot(x, tl.trans(w))
    return acc


@triton.jit
def _load_w(ptrs, mask, W_HINT: tl.constexpr):
    """A tile of weights, read once: W_HINT 0 plain, 1 not cached in L1 (.cg), 2 first out of L2 (evict_first)."""
    if W_HINT == 1:
        w = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    elif W_HINT == 2:
        w = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        w = tl.load(ptrs, mask=mask, other=0.0)
    return w


@triton.jit(do_not_specialize=["n_batch", "k_split"])
def _gemv_splitk_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    ws_ptr,
    cnt_ptr,
    n_batch,
    N,
    K,
    k_split,
    stride_xb,
    stride_wn,
    stride_ob,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLITS: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_DOT: tl.constexpr,
    W_HINT: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rb = tl.arange(0, BLOCK_B)
    rk = tl.arange(0, BLOCK_K)
    nmask = rn < N
    bmask = rb < n_batch
    w_rows = w_ptr + rn[:, None].to(tl.int64) * stride_wn
    lo = tl.multiple_of(pid_s * k_split, BLOCK_K)  # k_split is whole tiles (gemv checks): keeps 16-byte loads
    hi = tl.minimum(lo + k_split, K)
    _wait_for_inputs(PDL)
    if USE_DOT:
        acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
        acc = _dot_tiles(acc, x_ptr + rb[:, None] * stride_xb, w_rows, rk, lo, hi, nmask, bmask, BLOCK_K, EVEN_K)
    else:  # BLOCK_B == 1: CUDA cores, W straight into registers, products summed across K once at the end.
        # Loads that feed no tl.dot are not software-pipelined by Triton, so the loop is pipelined by hand: the
        # next tile's loads are issued before the current tile's multiply (two tiles in flight per program).
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        if EVEN_K:  # every split is whole tiles: the first one is full
            w_cur = _load_w(w_rows + (lo + rk)[None, :], nmask[:, None], W_HINT)
            x_cur = tl.load(x_ptr + lo + rk)
        else:
            kmask0 = (lo + rk) < hi
            w_cur = _load_w(w_rows + (lo + rk)[None, :], nmask[:, None] & kmask0[None, :], W_HINT)
            x_cur = tl.load(x_ptr + lo + rk, mask=kmask0, other=0.0)
        for k0 in range(lo + BLOCK_K, hi, BLOCK_K):
            kk = k0 + rk
            if EVEN_K:
                w_nxt = _load_w(w_rows + kk[None, :], nmask[:, None], W_HINT)
                x_nxt = tl.load(x_ptr + kk)
            else:
                kmask = kk < hi
                w_nxt = _load_w(w_rows + kk[None, :], nmask[:, None] & kmask[None, :], W_HINT)
                x_nxt = tl.load(x_ptr + kk, mask=kmask, other=0.0)
            acc2 += w_cur.to(tl.float32) * x_cur.to(tl.float32)[None, :]
            w_cur = w_nxt
            x_cur = x_nxt
        acc2 += w_cur.to(tl.float32) * x_cur.to(tl.float32)[None, :]
        acc = tl.sum(acc2, axis=1)[None, :]
    omask = bmask[:, None] & nmask[None, :]
    out_ptrs = out_ptr + rb[:, None] * stride_ob + rn[None, :]
    if SPLITS == 1:
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=omask)
    else:
        part = rb[:, None] * N + rn[None, :]  # [BLOCK_B, BLOCK_N] offsets in one split's [B, N] slab
        tl.store(ws_ptr + pid_s * n_batch * N + part, acc, mask=omask)
        tl.debug_barrier()  # every thread's partial is stored before the release below
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
        if arrived == SPLITS - 1:
            tl.debug_barrier()
            total = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            for s in tl.static_range(SPLITS):  # fixed order: bitwise the same result on every call
                total += tl.load(ws_ptr + s * n_batch * N + part, mask=omask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=omask)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)  # ready for the next call


def gemv_plan(
    n: int,
    k: int,
    batch: int,
    device: torch.device | str,
    num_sms: int | None = None,
    config: GemvConfig | None = None,
) -> GemvPlan:
    """The GEMV configuration for (N, K, batch) and, when it splits K, its workspace and zeroed counters.

    Allocates (and zeroes the counters): call outside CUDA graph capture. ``config`` overrides the heuristic
    (``launchprobe.kernels.gemv_config`` with explicit knobs), e.g. for a sweep.
    """
    sms = device_num_sms(device) if num_sms is None else num_sms
    cfg = config or gemv_config(n, k, batch, sms)
    if cfg.splits == 1:
        return GemvPlan(n, k, batch, cfg)
    workspace = torch.empty(cfg.splits, batch, n, dtype=torch.float32, device=device)
    counters = torch.zeros(triton.cdiv(n, cfg.block_n), dtype=torch.int32, device=device)
    return GemvPlan(n, k, batch, cfg, workspace, counters)


# Plans made by gemv() itself, one per (N, K, batch, device); made at the first (warm-up) call.
_GEMV_PLANS: dict[tuple[int, int, int, torch.device], GemvPlan] = {}


def _cached_gemv_plan(n: int, k: int, batch: int, device: torch.device) -> GemvPlan:
    key = (n, k, batch, device)
    plan = _GEMV_PLANS.get(key)
    if plan is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"gemv: no plan yet for N={n} K={k} B={batch} on {device}; call gemv once with this shape "
                "before capturing a CUDA graph (the plan allocates and zeroes its workspace)"
            )
        plan = _GEMV_PLANS[key] = gemv_plan(n, k, batch, device)
    return plan


# Cache hint of the CUDA-core GEMV's weight loads (see _load_w); read at an op's first call. evict_first: the
# weights, read once, leave L1 to x; llama-3-8b's full-graph step at batch 1 went 4.199 -> 4.153 ms with it (.cg:
# 4.198), side by side in `bench_speed_of_light.py --hints` on the H200 (docs/performance.md section 4).
GEMV_W_HINT = 2


def gemv(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, plan: GemvPlan | None = None) -> None:
    """``out = x @ w.T``, ``w`` ``[N, K]`` row-major. One Triton kernel for B <= GEMV_MAX_BATCH, else cuBLAS.

    ``plan`` defaults to one cached per (N, K, B, device), made at the first call: warm up before graph capture.
    """
    _rows(x, "x")
    _rows(w, "w")
    _rows(out, "out")
    batch, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k or tuple(out.shape) != (batch, n):
        raise ValueError(f"gemv shapes do not match: x {tuple(x.shape)}, w {tuple(w.shape)}, out {tuple(out.shape)}")
    if batch == 0:
        return
    if batch > GEMV_MAX_BATCH:
        torch.mm(x, w.t(), out=out)
        return
    if plan is None:
        plan = _cached_gemv_plan(n, k, batch, w.device)
    elif (plan.n, plan.k, plan.batch) != (n, k, batch):
        raise ValueError(f"gemv plan (N={plan.n}, K={plan.k}, B={plan.batch}) does not match N={n}, K={k}, B={batch}")
    cfg = plan.config
    if cfg.k_split % cfg.block_k or cfg.splits * cfg.k_split < k:
        raise ValueError(f"gemv config {cfg} must cut K={k} into whole BLOCK_K tiles")
    if not cfg.split_k:  # the default: one pass over K, no workspace
        _launch(
            _gemv_kernel,
            (triton.cdiv(n, cfg.block_n),),
            x,
            w,
            out,
            batch,
            n,
            k,
            x.stride(0),
            w.stride(0),
            out.stride(0),
            BLOCK_B=16,
            BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k,
            EVEN_K=k % cfg.block_k == 0,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        return
    if cfg.splits > 1:
        if plan.workspace is None or plan.counters is None:
            raise ValueError("this gemv plan splits K but has no workspace")
        ws, cnt = plan.workspace, plan.counters
    else:
        ws, cnt = out, out  # unused pointers
    use_dot = cfg.use_dot or batch > 1
    _launch(
        _gemv_splitk_kernel,
        (triton.cdiv(n, cfg.block_n), cfg.splits),
        x,
        w,
        out,
        ws,
        cnt,
        batch,
        n,
        k,
        cfg.k_split,
        x.stride(0),
        w.stride(0),
        out.stride(0),
        BLOCK_B=16 if use_dot else 1,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        SPLITS=cfg.splits,
        EVEN_K=k % cfg.block_k == 0,
        USE_DOT=use_dot,
        W_HINT=GEMV_W_HINT,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


class TritonOps(TorchOps):
    """The fused Triton ops behind the ``Ops`` interface; embedding and linear stay torch (one kernel each)."""

    name = "triton"

    rmsnorm = staticmethod(rmsnorm)
    add_rmsnorm = staticmethod(add_rmsnorm)
    rotary = staticmethod(rotary)
    kv_write = staticmethod(kv_write)
    silu_mul = staticmethod(silu_mul)
    gemv = staticmethod(gemv)
    bind = staticmethod(bind)
    attention = staticmethod(attention)  # type: ignore[assignment]  # requires the plan the reference may omit
    attention_plan = staticmethod(attention_plan)
    gemv_plan = staticmethod(gemv_plan)
