"""Grouped-query decode attention, split-K ("flash decoding"): one kernel per call (two without the fused reduce)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from launchprobe.kernels.plans import (
    ATTN_BLOCK_N,
    ATTN_FUSED_REDUCE,
    ATTN_NUM_STAGES,
    ATTN_NUM_WARPS,
    ATTN_PROGRAMS_PER_SM,
    AttentionPlan,
    AttentionTuning,
    TunedAttentionPlan,
    attention_max_splits,
    attention_split_tokens,
)
from launchprobe.kernels.reference import device_num_sms
from launchprobe.kernels.triton.common import Launch, check_cache, check_rows, wait_for_inputs

LOG2E = 1.4426950408889634
# Splits folded per step by the attention reduce kernel ([CHUNK, D] fp32 partials in registers).
ATTN_REDUCE_CHUNK = 16
# The fused merge holds [MERGE_G, MERGE_CHUNK, D] fp32 partials at once: at most this many elements.
ATTN_MERGE_ELEMS = 8192

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
# The split count (``plans.attention_splits``) makes B=1 with 8 kv heads run ~2 programs per SM instead of 8
# programs, and B >= 16 (8 kv heads) run one split per (b, kv head), no merge at all.


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
    wait_for_inputs(PDL)
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
    wait_for_inputs(PDL)
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

    The keyword knobs default to the tuned constants of ``launchprobe.kernels.plans``; the sweep benchmark varies
    them.
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


def attention(
    launch: Launch,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    context_len: int,
    out: torch.Tensor,
    scale: float,
    plan: AttentionPlan,
) -> None:
    """Grouped-query decode attention; ``plan.kernels(context_len)`` launches (1, or 2 without the fused reduce)."""
    check_rows(q, "q")
    check_rows(out, "out")
    check_cache(k_cache, "k_cache")
    check_cache(v_cache, "v_cache")
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
    launch(
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
        launch(
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
