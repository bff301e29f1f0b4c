"""GEMV for small batches, ``out[B, N] = x[B, K] @ W[N, K].T``: one kernel per call (cuBLAS above GEMV_MAX_BATCH
rows), with its per-shape plans."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from launchprobe.kernels.ops import GEMV_WEIGHT_HINTS
from launchprobe.kernels.plans import GEMV_MAX_BATCH, GemvConfig, GemvPlan, gemv_config
from launchprobe.kernels.reference import device_num_sms
from launchprobe.kernels.triton.common import Launch, check_rows, wait_for_inputs

# One-pass kernel (config.splits == 1 with use_dot; the default at B = 2-16): _gemv_kernel, grid (N / BLOCK_N,).
# A program owns BLOCK_N weight rows and walks all of K from 0 in [BLOCK_N, BLOCK_K] tiles of GEMV_TILE_ELEMS
# elements (each row segment >= 128 contiguous bytes: full 16-byte vectors, whole sectors), pipelined
# num_stages deep; x's [B, BLOCK_K] slice (padded to 16 rows for the tensor-core dot, padding rows not loaded)
# comes from L2. fp32 accumulation; the weight is read from HBM exactly once; no workspace, no atomics.
# BLOCK_N is the widest of 64/32/16 that still gives >= 2 programs per SM (gemv_block_n: o_proj 4096 rows -> 16
# -> 256 programs; gate_up 28672 rows -> 64 -> 448 programs).
#
# Split-K kernel (config.splits > 1, or the CUDA-core path, the default at B=1): _gemv_splitk_kernel, grid
# (N tiles, K splits): each program stores its fp32 partial to the plan's workspace [SPLITS, B, N], then (after a
# CTA barrier, so all its threads' stores are ordered before) bumps its N tile's arrival counter with an acq_rel
# atomic; the program that arrives last sums the SPLITS partials in split order (deterministic whatever the
# arrival order), writes out, and resets the counter to 0 for the next call or graph replay (no memset kernel).
#
# Both kernels keep the W tiles' 16-byte alignment visible to Triton: a K loop whose start Triton cannot prove
# aligned compiles to 2-byte scalar loads and no cp.async pipeline (tests/test_kernels_ptx.py checks the PTX).
# The one-pass kernel loops from 0 with a constexpr step; the split-K kernel states its start's alignment with
# tl.multiple_of (gemv() checks that k_split is whole BLOCK_K tiles).


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
    wait_for_inputs(PDL)
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
    """A tile of weights, read once: W_HINT 0 plain, 1 not cached in L1 (.cg), 2 first out of L1 (evict_first)."""
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
    wait_for_inputs(PDL)
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


class GemvPlans:
    """The plans ``gemv`` makes itself, one per (N, K, batch, device), each at the first (warm-up) call."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, int, int, torch.device], GemvPlan] = {}

    def get(self, n: int, k: int, batch: int, device: torch.device) -> GemvPlan:
        key = (n, k, batch, device)
        plan = self._plans.get(key)
        if plan is None:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"gemv: no plan yet for N={n} K={k} B={batch} on {device}; call gemv once with this shape "
                    "before capturing a CUDA graph (the plan allocates and zeroes its workspace)"
                )
            plan = self._plans[key] = gemv_plan(n, k, batch, device)
        return plan


def gemv(
    launch: Launch,
    plans: GemvPlans,
    x: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    plan: GemvPlan | None = None,
    *,
    weight_hint: str = "evict_first",
) -> None:
    """``out = x @ w.T``, ``w`` ``[N, K]`` row-major. One Triton kernel for B <= GEMV_MAX_BATCH, else cuBLAS.

    ``plan`` defaults to the one ``plans`` holds for (N, K, B, device), made at the first call: warm up before
    graph capture. ``weight_hint``: the cache hint of the CUDA-core kernel's weight loads (``GEMV_WEIGHT_HINTS``).
    """
    check_rows(x, "x")
    check_rows(w, "w")
    check_rows(out, "out")
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
        plan = plans.get(n, k, batch, w.device)
    elif (plan.n, plan.k, plan.batch) != (n, k, batch):
        raise ValueError(f"gemv plan (N={plan.n}, K={plan.k}, B={plan.batch}) does not match N={n}, K={k}, B={batch}")
    cfg = plan.config
    if cfg.k_split % cfg.block_k or cfg.splits * cfg.k_split < k:
        raise ValueError(f"gemv config {cfg} must cut K={k} into whole BLOCK_K tiles")
    if not cfg.split_k:  # the default: one pass over K, no workspace
        launch(
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
    launch(
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
        W_HINT=GEMV_WEIGHT_HINTS[weight_hint],
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
