"""RMSNorm (plain, fused add, final): one kernel per call."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from launchprobe.kernels.plans import NORM_MAX_BLOCK
from launchprobe.kernels.triton.common import Launch, check_rows, wait_for_inputs, warps_for

# Grid (B,), one program per row. A row (8-16 KB at 8B/70B) is loaded once with 16-byte vectors, reduced in fp32,
# normalised and written straight from registers: one read of x (and of the residual), one write of out (and of the
# sum). Decode batches are small, so B programs is all there is; the op is latency-bound at B=1 whatever the grid.


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
    wait_for_inputs(PDL)
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
    launch: Launch,
    max_block: int,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    sum_out: torch.Tensor | None,
) -> None:
    for t, name in ((x, "x"), (out, "out"), (residual, "residual"), (sum_out, "residual_out")):
        if t is not None:
            check_rows(t, name)
    rows, n_cols = x.shape
    if rows == 0:
        return
    block = triton.next_power_of_2(n_cols)
    one_pass = block <= max_block
    if not one_pass:
        block = max(16, max_block // 4)
    res = residual if residual is not None else x  # unused pointer when not ADD_RESIDUAL
    dst = sum_out if sum_out is not None else out  # unused pointer when not STORE_SUM
    launch(
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
        num_warps=warps_for(block, 16),
    )


def rmsnorm(
    launch: Launch,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    residual_out: torch.Tensor | None,
    *,
    max_block: int = NORM_MAX_BLOCK,
) -> None:
    """``residual_out = x``; ``out = x * rsqrt(mean(x^2) + eps) * weight``. One kernel; rows wider than
    ``max_block`` are normalised in chunks."""
    _norm(launch, max_block, x, None, weight, eps, out, residual_out)


def add_rmsnorm(
    launch: Launch,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    store_residual: bool = True,
    *,
    max_block: int = NORM_MAX_BLOCK,
) -> None:
    """``residual += x`` (only if ``store_residual``); ``out = rmsnorm(residual + x) * weight``. One kernel."""
    _norm(launch, max_block, x, residual, weight, eps, out, residual if store_residual else None)
