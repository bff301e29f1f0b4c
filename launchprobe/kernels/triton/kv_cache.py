"""KV-cache write of the new k and v rows: one kernel per call."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from launchprobe.kernels.triton.common import (
    Launch,
    check_cache,
    check_rows,
    num_sms,
    pick_block,
    wait_for_inputs,
    warps_for,
)

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
    wait_for_inputs(PDL)
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    pos = tl.load(pos_ptr + b).to(tl.int64)
    mask = (cols < n_cols) & (pos >= 0) & (pos < cache_len)
    kv = tl.load(k_ptr + b * stride_k + cols, mask=mask)
    tl.store(kc_ptr + b * stride_kcb + pos * stride_kcc + cols, kv, mask=mask)
    vv = tl.load(v_ptr + b * stride_v + cols, mask=mask)
    tl.store(vc_ptr + b * stride_vcb + pos * stride_vcc + cols, vv, mask=mask)


def kv_write(
    launch: Launch,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
) -> None:
    """``k_cache[b, positions[b]] = k[b]``, same for v. One kernel."""
    check_rows(k, "k")
    check_rows(v, "v")
    check_cache(k_cache, "k_cache")
    check_cache(v_cache, "v_cache")
    batch, n_cols = k.shape
    if batch == 0:
        return
    if k_cache.shape[2] * k_cache.shape[3] != n_cols or k_cache.shape[0] < batch:
        raise ValueError(f"k {tuple(k.shape)} does not fit k_cache {tuple(k_cache.shape)}")
    block = pick_block(batch, n_cols, num_sms(k), (1024, 512, 256))
    block = min(block, max(16, triton.next_power_of_2(n_cols)))
    launch(
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
        num_warps=warps_for(block),
    )
