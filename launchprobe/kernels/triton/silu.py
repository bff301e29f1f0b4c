"""SiLU-and-mul of the MLP: one kernel per call."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from launchprobe.kernels.triton.common import Launch, check_rows, num_sms, pick_block, wait_for_inputs, warps_for

# SiLU-and-mul: grid (B, column blocks of F). A program reads one block of gate and the matching block of up
# (same row, F apart), and writes silu(gate) * up. Blocks shrink at small batch so B=1 still fills the SMs.


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, n_cols, stride_gu, stride_out, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(launch: Launch, gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """``out = silu(gate_up[:, :F]) * gate_up[:, F:]``. One kernel."""
    check_rows(gate_up, "gate_up")
    check_rows(out, "out")
    batch, f = out.shape
    if gate_up.shape[1] != 2 * f or gate_up.shape[0] != batch:
        raise ValueError(f"gate_up {tuple(gate_up.shape)} must be [B, 2*F] for out {tuple(out.shape)}")
    if batch == 0:
        return
    block = pick_block(batch, f, num_sms(out), (2048, 1024, 512, 256))
    block = min(block, max(16, triton.next_power_of_2(f)))
    launch(
        _silu_mul_kernel,
        (batch, triton.cdiv(f, block)),
        gate_up,
        out,
        f,
        gate_up.stride(0),
        out.stride(0),
        BLOCK=block,
        num_warps=warps_for(block),
    )
