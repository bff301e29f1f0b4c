"""Neox rotary embedding of q and k in place: one kernel per call."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from launchprobe.kernels.triton.common import Launch, check_rows, num_sms, wait_for_inputs, warps_for

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
    wait_for_inputs(PDL)
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


def rotary(
    launch: Launch, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float, head_dim: int
) -> None:
    """Neox rotary embedding of q ``[B, NH*D]`` and k ``[B, NKV*D]`` in place (row-strided views ok). One kernel."""
    check_rows(q, "q")
    check_rows(k, "k")
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
    launch(
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
        num_warps=warps_for(block_h * block_half * 2),
    )
