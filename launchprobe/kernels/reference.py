"""Plain-torch reference of the decode-step ops: the CPU path, and the ground truth the Triton kernels are tested
against. Any device. Each op writes into the caller's buffers (``out=`` or in place); it may launch several torch
kernels and make temporaries, but never syncs with the host or branches on tensor values, so it also captures in
a CUDA graph. Math is fp32, results are rounded once to the buffer's dtype, as the Triton kernels do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from launchprobe.kernels.ops import KernelSettings
from launchprobe.kernels.plans import DEFAULT_NUM_SMS, AttentionPlan, attention_max_splits


def embedding(ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None:
    """``out[b] = table[ids[b]]``: one gather kernel."""
    torch.index_select(table, 0, ids, out=out)


def linear(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """``out = x @ w.T`` with ``w`` stored ``[N, K]`` row-major (out_features x in_features, nn.Linear's layout).

    Recommended weight layout for decode: exactly this. ``w.t()`` is a free view, and cuBLAS then sees the "TN"
    problem in which every output is the dot product of one contiguous weight row with x: the weight, which is
    almost all the bytes, streams through in long coalesced rows, which is the layout its GEMV-like decode kernels
    are tuned for. Storing ``w`` as ``[K, N]`` instead makes each output column a strided walk at small batch.
    """
    torch.mm(x, w.t(), out=out)


def gemv(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """Same contract as ``linear``; the reference is cuBLAS."""
    torch.mm(x, w.t(), out=out)


def _rms_normalise(s: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    sf = s.float()
    rstd = torch.rsqrt(sf.square().mean(dim=-1, keepdim=True) + eps)
    return sf * rstd * weight.float()


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, residual_out: torch.Tensor | None
) -> None:
    """Layer 0's input norm: ``residual_out = x`` (skipped when None); ``out = x * rsqrt(mean(x^2) + eps) * w``."""
    if residual_out is not None:
        residual_out.copy_(x)
    out.copy_(_rms_normalise(x, weight, eps))


def add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    store_residual: bool = True,
) -> None:
    """``residual += x`` (in place, in the model dtype); ``out = rmsnorm(residual) * weight``.

    With ``store_residual=False`` (the final norm) the sum is normalised but ``residual`` is left untouched.
    The norm is taken of the sum rounded to the model dtype, i.e. of what the residual stream holds.
    """
    if store_residual:
        residual.add_(x)
        s = residual
    else:
        s = residual + x
    out.copy_(_rms_normalise(s, weight, eps))


def rotary_inv_freq(head_dim: int, theta: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """``theta ** (-2i / head_dim)`` for i < head_dim / 2, computed in float64, returned as float32."""
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    return torch.pow(float(theta), -2.0 * i / head_dim).float()


def rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float, head_dim: int) -> None:
    """Neox-style rotary embedding of q ``[B, NH*D]`` and k ``[B, NKV*D]``, in place.

    For each head, halves ``x1 = x[:D/2]``, ``x2 = x[D/2:]`` become ``x1*cos - x2*sin`` and ``x2*cos + x1*sin`` with
    angle ``positions[b] * theta ** (-2i/D)``. q and k may be row-strided slices of a fused qkv buffer.
    """
    half = head_dim // 2
    angle = positions.to(torch.float32)[:, None] * rotary_inv_freq(head_dim, theta, positions.device)[None, :]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]  # [B, 1, half]
    for t in (q, k):
        heads = t.view(t.shape[0], t.shape[1] // head_dim, head_dim)
        x1, x2 = heads[..., :half].float(), heads[..., half:].float()
        heads.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))


def kv_write(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
) -> None:
    """``k_cache[b, positions[b]] = k[b]`` and the same for v; caches ``[B, C, NKV, D]``, k and v ``[B, NKV*D]``."""
    batch = k.shape[0]
    _, _, nkv, d = k_cache.shape
    rows = torch.arange(batch, device=positions.device)
    pos = positions.to(torch.int64)
    k_cache[rows, pos] = k.view(batch, nkv, d)
    v_cache[rows, pos] = v.view(batch, nkv, d)


def attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    context_len: int,
    out: torch.Tensor,
    scale: float,
    plan: AttentionPlan | None = None,
) -> None:
    """Grouped-query decode attention over the first ``context_len`` cache entries, in fp32.

    q ``[B, NH*D]`` (row-strided ok), caches ``[>=B, C, NKV, D]``, out ``[B, NH*D]``; q head h reads kv head
    ``h // (NH // NKV)``. ``plan`` is ignored (the reference needs no workspace).
    """
    batch = q.shape[0]
    _, _, nkv, d = k_cache.shape
    nh = q.shape[1] // d
    group = nh // nkv
    qf = q.reshape(batch, nkv, group, d).float()
    kf = k_cache[:batch, :context_len].float()  # [B, L, NKV, D]
    vf = v_cache[:batch, :context_len].float()
    scores = torch.einsum("bhgd,blhd->bhgl", qf, kf) * scale
    probs = torch.softmax(scores, dim=-1)
    o = torch.einsum("bhgl,blhd->bhgd", probs, vf)
    out.view(batch, nh, d).copy_(o.reshape(batch, nh, d))


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """``out = silu(gate_up[:, :F]) * gate_up[:, F:]`` with F = ``out.shape[1]``."""
    f = out.shape[1]
    g, u = gate_up[:, :f].float(), gate_up[:, f : 2 * f].float()
    out.copy_(F.silu(g) * u)


def device_num_sms(device: torch.device | str) -> int:
    """SM count of a CUDA device (asked once, at setup), or the H200's for anything else."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).multi_processor_count)
    return DEFAULT_NUM_SMS


def make_attention_plan(
    batch: int,
    context_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    device: torch.device | str,
    num_sms: int | None = None,
    workspace: bool = True,
) -> AttentionPlan:
    """Split count and (with ``workspace``) the fp32 split-K buffers, sized for contexts up to ``context_len``."""
    sms = device_num_sms(device) if num_sms is None else num_sms
    max_splits = attention_max_splits(batch, num_kv_heads, context_len, sms)
    bufs: dict[str, torch.Tensor] = {}
    if workspace and max_splits > 1:
        f32 = torch.float32
        bufs = {
            "partial_out": torch.empty(batch, num_heads, max_splits, head_dim, dtype=f32, device=device),
            "partial_max": torch.empty(batch, num_heads, max_splits, dtype=f32, device=device),
            "partial_sum": torch.empty(batch, num_heads, max_splits, dtype=f32, device=device),
        }
    return AttentionPlan(batch, context_len, num_heads, num_kv_heads, head_dim, sms, max_splits, **bufs)


class TorchOps:
    """The reference ops behind the ``Ops`` interface (``get_ops("cpu")`` or ``impl="torch"``); ``settings`` are
    kept for the interface and change nothing here."""

    name = "torch"

    def __init__(self, settings: KernelSettings | None = None) -> None:
        self.settings = settings or KernelSettings()

    embedding = staticmethod(embedding)
    linear = staticmethod(linear)
    gemv = staticmethod(gemv)
    rmsnorm = staticmethod(rmsnorm)
    add_rmsnorm = staticmethod(add_rmsnorm)
    rotary = staticmethod(rotary)
    kv_write = staticmethod(kv_write)
    silu_mul = staticmethod(silu_mul)

    @staticmethod
    def bind(fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
        """``fn(*args)`` as a closure (the Triton ops replace this with a faster relaunch)."""
        return lambda: fn(*args)

    attention = staticmethod(attention)
    attention_plan = staticmethod(functools.partial(make_attention_plan, workspace=False))

    def pdl_active(self, device: torch.device) -> bool:
        """Never: torch launches its kernels one after another."""
        return False
