"""The kernels of one decode step, behind one interface with two implementations.

``get_ops("cuda")`` gives the fused Triton kernels (``triton_ops``: one launch per op, attention one or two);
``get_ops("cpu")`` gives the plain-torch reference (``reference``: several torch kernels per op, any device).
Both write into caller-owned buffers (``out=`` or in place) and never allocate, sync or branch on tensor values
per call, so a step built from them can be captured in a CUDA graph.

This module imports neither torch nor triton: the split heuristics below are plain Python, so the workload and
cost model can ask how many kernels a step launches without touching a device.

Interface (``Ops``), all tensors in the model dtype (bf16/fp16) unless said, rows = batch ``B``:

- ``embedding(ids, table, out)``: ``out[b] = table[ids[b]]`` (torch: one gather kernel).
- ``linear(x, w, out)``: ``out = x @ w.T``, ``w`` is ``[N, K]`` row-major (torch.mm, cuBLAS).
- ``gemv(x, w, out)``: same contract as ``linear``; Triton GEMV for small batches on CUDA.
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
  first ``context_len`` cache entries.
- ``silu_mul(gate_up, out)``: ``out = silu(gate_up[:, :F]) * gate_up[:, F:]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

# H200 SM count: the default when the device cannot be asked (CPU, Triton interpreter).
DEFAULT_NUM_SMS = 132

# Attention tiles: tokens per K/V tile of the split kernel (the split length is a multiple of this).
ATTN_BLOCK_N = 64
# Split only when (batch x kv heads) programs would fill less than this fraction of the SMs...
ATTN_SPLIT_BELOW_FILL = 0.8
# ...and then aim for this many programs per SM (several resident CTAs hide HBM latency).
ATTN_PROGRAMS_PER_SM = 2

# Kernel launches per call of each Triton op (attention: see ``attention_kernels``).
TRITON_KERNELS = {
    "embedding": 1,  # torch index_select
    "rmsnorm": 1,
    "add_rmsnorm": 1,
    "rotary": 1,
    "kv_write": 1,
    "silu_mul": 1,
    "gemv": 1,  # batches above GEMV_MAX_BATCH fall back to cuBLAS (usually 1 kernel, 2 if it splits K)
    "linear": 1,  # cuBLAS; may add a split-K reduce kernel for some shapes
}
GEMV_MAX_BATCH = 16


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention_splits(batch: int, num_kv_heads: int, context_len: int, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """How many pieces the split-K attention cuts each (sequence, kv head) context into.

    The split kernel runs one program per (sequence, kv head, split). With enough (sequence, kv head) pairs to
    fill the chip there is one split and no reduce kernel; below that the context is cut into whole tiles so
    that about ``ATTN_PROGRAMS_PER_SM`` programs per SM run. Every split holds at least one token.
    """
    pairs = batch * num_kv_heads
    tiles = cdiv(max(context_len, 1), ATTN_BLOCK_N)
    if pairs >= ATTN_SPLIT_BELOW_FILL * num_sms:
        return 1
    want = min(cdiv(ATTN_PROGRAMS_PER_SM * num_sms, pairs), tiles)
    return cdiv(tiles, cdiv(tiles, want))


def attention_split_tokens(splits: int, context_len: int) -> int:
    """Tokens per split: a whole number of tiles, so only the last split is ragged."""
    return cdiv(cdiv(max(context_len, 1), splits), ATTN_BLOCK_N) * ATTN_BLOCK_N


def attention_max_splits(batch: int, num_kv_heads: int, context_len: int, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """Workspace size in splits: an upper bound of ``attention_splits`` for every context up to ``context_len``."""
    pairs = batch * num_kv_heads
    if pairs >= ATTN_SPLIT_BELOW_FILL * num_sms:
        return 1
    return min(cdiv(ATTN_PROGRAMS_PER_SM * num_sms, pairs), cdiv(max(context_len, 1), ATTN_BLOCK_N))


def attention_kernels(batch: int, num_kv_heads: int, context_len: int, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """Kernel launches of one Triton attention call: 1 (one split, no reduce) or 2 (split + reduce)."""
    return 1 if attention_splits(batch, num_kv_heads, context_len, num_sms) == 1 else 2


@dataclass(frozen=True)
class AttentionPlan:
    """Setup of decode attention for one (batch bucket, context): split count and preallocated workspace.

    ``batch`` is the padded batch (a call may pass fewer rows). The workspace tensors (fp32, on the device) hold
    each split's partial output and softmax statistics; they are ``None`` when no split is ever needed or for the
    reference implementation, which needs none.
    """

    batch: int
    context_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_sms: int
    max_splits: int
    partial_out: torch.Tensor | None = None  # [batch, num_heads, max_splits, head_dim] fp32, unnormalised
    partial_max: torch.Tensor | None = None  # [batch, num_heads, max_splits] fp32, running max (log2 units)
    partial_sum: torch.Tensor | None = None  # [batch, num_heads, max_splits] fp32, softmax denominator

    def splits(self, context_len: int | None = None) -> int:
        ctx = self.context_len if context_len is None else context_len
        return attention_splits(self.batch, self.num_kv_heads, ctx, self.num_sms)

    def kernels(self, context_len: int | None = None) -> int:
        """Launches of one Triton attention call under this plan."""
        return 1 if self.splits(context_len) == 1 else 2


class Ops(Protocol):
    """The decode-step kernels; see the module docstring for each op's contract."""

    name: str

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


IMPLS = ("torch", "triton")


def get_ops(device_type: str, impl: str | None = None) -> Ops:
    """The ops for a device: ``"cuda"`` gives the Triton kernels, anything else the torch reference.

    ``impl`` forces one: ``"torch"`` (the unfused reference, any device) or ``"triton"`` (CUDA, or CPU tensors
    under ``TRITON_INTERPRET=1``).
    """
    from launchprobe.errors import MissingToolError, UsageError

    chosen = impl or ("triton" if device_type == "cuda" else "torch")
    if chosen == "torch":
        from launchprobe.kernels.reference import TorchOps

        return TorchOps()
    if chosen == "triton":
        try:
            from launchprobe.kernels.triton_ops import TritonOps
        except ImportError as exc:
            raise MissingToolError(f"the Triton kernels need the triton package: {exc}") from exc
        return TritonOps()
    raise UsageError(f"unknown kernel implementation {chosen!r}; choose one of {', '.join(IMPLS)}")
