"""The kernels of one decode step, behind one interface (``Ops``) with two implementations, and their settings.

``get_ops("cuda")`` gives the fused Triton kernels (``launchprobe.kernels.triton``: one launch per op);
``get_ops("cpu")`` gives the plain-torch reference (``launchprobe.kernels.reference``: several torch kernels per
op, any device). Both write into caller-owned buffers (``out=`` or in place) and never allocate, sync or branch on
tensor values per call, so a step built from them can be captured in a CUDA graph. The kernel switches
(``KernelSettings``) belong to the ops object: two ops objects with different settings can run side by side.

This module imports neither torch nor triton.

Interface (``Ops``), all tensors in the model dtype (bf16/fp16) unless said, rows = batch ``B``:

- ``embedding(ids, table, out)``: ``out[b] = table[ids[b]]`` (torch: one gather kernel).
- ``linear(x, w, out)``: ``out = x @ w.T``, ``w`` is ``[N, K]`` row-major (torch.mm, cuBLAS).
- ``gemv(x, w, out)``: same contract as ``linear``; Triton GEMV for small batches on CUDA: one launch (by default
  one pass over K; an optional split-K config reduces inside the kernel). Its per-shape plan (a ``GemvPlan``,
  keyed by (N, K, B, device); split-K configs hold a workspace) is made at the ops object's first call with that
  shape: make that call (a warm-up) before capturing a CUDA graph; the Triton ``gemv`` refuses to make one during
  capture. Or pass ``plan=ops.gemv_plan(...)`` to the Triton ops explicitly.
- ``rmsnorm(x, weight, eps, out, residual_out)``: ``residual_out = x``; ``out = rmsnorm(x) * weight``.
- ``add_rmsnorm(x, residual, weight, eps, out, store_residual=True)``: ``residual += x`` (kept only when
  ``store_residual``); ``out = rmsnorm(residual) * weight``.
- ``rotary(q, k, positions, theta, head_dim)``: neox rotary embedding of q ``[B, NH*D]`` and k ``[B, NKV*D]``,
  in place.
- ``kv_write(k, v, k_cache, v_cache, positions)``: ``k_cache[b, positions[b]] = k[b]`` (and v), caches
  ``[B, C, NKV, D]``.
- ``attention_plan(batch, context_len, num_heads, num_kv_heads, head_dim, device, num_sms=None)``: the
  preallocated split-K workspace, made once per (batch bucket, context).
- ``attention(q, k_cache, v_cache, context_len, out, scale, plan)``: grouped-query decode attention over the
  first ``context_len`` cache entries; one launch (split-K merged in the kernel; see ``plans.ATTN_FUSED_REDUCE``).
- ``silu_mul(gate_up, out)``: ``out = silu(gate_up[:, :F]) * gate_up[:, F:]``.
- ``bind(fn, *args)``: ``fn(*args)`` as a closure (the Triton ops relaunch the recorded kernels directly).
- ``pdl_active(device)``: whether this ops object launches its kernels on ``device`` with programmatic dependent
  launch (always False for the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from launchprobe.kernels.plans import NORM_MAX_BLOCK, AttentionPlan

if TYPE_CHECKING:
    import torch

IMPLS = ("torch", "triton")
# Cache hints of the batch-1 CUDA-core GEMV's weight loads, by name: plain loads, not cached in L1 (.cg), or first
# out of L1 (evict_first: the weights are read once, so x keeps L1). Values: the GEMV kernel's W_HINT constexpr.
GEMV_WEIGHT_HINTS = {"none": 0, "cg": 1, "evict_first": 2}


@dataclass(frozen=True)
class KernelSettings:
    """Switches of the Triton kernels, fixed for the life of one ops object (the reference ignores them).

    ``pdl``: launch with programmatic dependent launch where the GPU supports it (compute capability 9.0+).
    ``gemv_weight_hint``: cache hint of the CUDA-core GEMV's weight loads, one of GEMV_WEIGHT_HINTS.
    ``norm_max_block``: the widest RMSNorm row kept whole in registers (a power of two >= 16); wider rows are
    normalised in chunks of a quarter of it.
    """

    pdl: bool = True
    gemv_weight_hint: str = "evict_first"
    norm_max_block: int = NORM_MAX_BLOCK

    def __post_init__(self) -> None:
        if self.gemv_weight_hint not in GEMV_WEIGHT_HINTS:
            hints = ", ".join(GEMV_WEIGHT_HINTS)
            raise ValueError(f"gemv_weight_hint {self.gemv_weight_hint!r}: expected one of {hints}")
        block = self.norm_max_block
        if block < 16 or block & (block - 1):
            raise ValueError(f"norm_max_block {block} must be a power of two >= 16")


class Ops(Protocol):
    """The decode-step kernels; see the module docstring for each op's contract."""

    name: str
    settings: KernelSettings

    def embedding(self, ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None: ...

    def linear(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None: ...

    def gemv(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None: ...

    def rmsnorm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, residual_out: torch.Tensor | None
    ) -> None: ...

    def add_rmsnorm(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        out: torch.Tensor,
        store_residual: bool = True,
    ) -> None: ...

    def rotary(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float, head_dim: int
    ) -> None: ...

    def kv_write(
        self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
    ) -> None: ...

    def attention_plan(
        self,
        batch: int,
        context_len: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        device: torch.device | str,
        num_sms: int | None = None,
    ) -> AttentionPlan: ...

    def attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        context_len: int,
        out: torch.Tensor,
        scale: float,
        plan: AttentionPlan,
    ) -> None: ...

    def silu_mul(self, gate_up: torch.Tensor, out: torch.Tensor) -> None: ...

    def bind(self, fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
        """``fn(*args)`` as a closure for a decode step, whose arguments never change between calls."""
        ...

    def pdl_active(self, device: torch.device) -> bool:
        """Whether kernels launched on ``device`` use programmatic dependent launch."""
        ...


def get_ops(device_type: str, impl: str | None = None, settings: KernelSettings | None = None) -> Ops:
    """The ops for a device: ``"cuda"`` gives the Triton kernels, anything else the torch reference.

    ``impl`` forces one: ``"torch"`` (the unfused reference, any device) or ``"triton"`` (CUDA, or CPU tensors
    under ``TRITON_INTERPRET=1``). ``settings`` (default ``KernelSettings()``) are the kernel switches of the
    returned object. A missing triton package is a MissingToolError.
    """
    from launchprobe.errors import MissingToolError, UsageError

    chosen = impl or ("triton" if device_type == "cuda" else "torch")
    settings = settings or KernelSettings()
    if chosen == "torch":
        from launchprobe.kernels.reference import TorchOps

        return TorchOps(settings)
    if chosen == "triton":
        try:
            from launchprobe.kernels.triton import TritonOps
        except ImportError as exc:
            raise MissingToolError(
                f"the Triton kernels need the triton package ({exc}): pip install 'launchprobe[gpu]'"
            ) from exc
        return TritonOps(settings)
    raise UsageError(f"unknown kernel implementation {chosen!r}; choose one of {', '.join(IMPLS)}")
