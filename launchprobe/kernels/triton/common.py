"""What every Triton kernel family shares: the in-kernel PDL wait, the launch callable they are given, argument
checks, and the block and warp rules of the element-wise kernels."""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch
import triton
import triton.language as tl

from launchprobe.kernels.plans import DEFAULT_NUM_SMS

try:
    import triton.language.extra.cuda as _cuda_ext
except ImportError:  # pragma: no cover - older triton
    _cuda_ext = None

# Hopper's griddepcontrol (sm_90+); missing from older Triton.
HAVE_GDC = hasattr(_cuda_ext, "gdc_wait") if _cuda_ext is not None else False


class Launch(Protocol):
    """Launches ``kernel[grid](*args, **kwargs)``, adding the ``PDL`` constexpr (see ``launch.Launcher``)."""

    def __call__(self, kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None: ...


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """Under PDL: wait until the previous kernel has finished (its writes visible), then let the next launch."""
    if PDL:
        _cuda_ext.gdc_wait()
        _cuda_ext.gdc_launch_dependents()


@functools.cache
def _sms(device_type: str, index: int | None) -> int:
    if device_type == "cuda":
        return int(torch.cuda.get_device_properties(index).multi_processor_count)
    return DEFAULT_NUM_SMS


def num_sms(t: torch.Tensor) -> int:
    """SM count of a tensor's device, asked once per device and cached."""
    return _sms(t.device.type, t.device.index)


def check_rows(t: torch.Tensor, name: str) -> None:
    if t.dim() != 2 or t.stride(1) != 1:
        raise ValueError(f"{name} must be 2-D with contiguous rows, got shape {tuple(t.shape)} strides {t.stride()}")


def check_cache(c: torch.Tensor, name: str) -> None:
    if c.dim() != 4 or c.stride(3) != 1 or c.stride(2) != c.shape[3]:
        raise ValueError(f"{name} must be [B, C, NKV, D] with contiguous [NKV, D] rows, got strides {c.stride()}")


def pick_block(rows: int, cols: int, sms: int, blocks: tuple[int, ...]) -> int:
    """The widest of ``blocks`` (widest first) whose grid still has >= 2 programs per SM, else the narrowest."""
    for block in blocks:
        if rows * triton.cdiv(cols, block) >= 2 * sms:
            return block
    return blocks[-1]


def warps_for(block: int, per_thread: int = 8) -> int:
    """Warps so that each thread holds ``per_thread`` elements (8 x 2 bytes = one 16-byte vector)."""
    return max(1, min(16, block // (32 * per_thread)))
