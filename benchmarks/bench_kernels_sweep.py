"""Sweep the Triton GEMV and attention tuning knobs on the GPU: correctness first, then speed, then the winners.

GEMV: the 9 llama-3 8B/70B projection shapes at B=1, 8, 16; cuBLAS, the default (at B=1 the CUDA-core kernel
with its tuned tiles, above it 7558c14's one-pass tensor-core kernel, "old (no split)"), ead8863's split-K
heuristic, the tensor-core kernels over a few (rows per program, K splits, stages, warps) choices and, at B=1, the
CUDA-core kernel over (rows, K tile, warps, K splits): where `GEMV_FMA_TUNED` comes from. Attention: llama-3
8B (32 q heads / 8 kv heads) and 70B (64 / 8), head_dim 128, context 1024, B=1, 8, 64, over tile size, split
target, fused or two-kernel reduce, warps and stages.

Every variant is first checked against the reference (relative error < 1e-2 in bf16, and two calls bitwise equal:
the split-K arrival counters reset themselves), then timed: a CUDA graph of many calls over rotating weights /
KV caches (several times the L2 in total, so every call reads HBM) is replayed, so launch overhead stays out.
Prints one table per shape, then the recommended configuration per shape class. Budgeted to finish in under
4 minutes on an H200 (``--budget`` seconds; variants left when it runs out are reported as skipped).

    python benchmarks/bench_kernels_sweep.py [--only gemv|attention] [--budget 210]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graph_timing import time_graph  # noqa: E402  (benchmarks/, on the path as the script's folder)

from launchprobe.kernels import AttentionTuning, GemvConfig, GemvPlan, cdiv, gemv_config  # noqa: E402
from launchprobe.kernels import reference as R  # noqa: E402
from launchprobe.kernels.triton import TritonOps  # noqa: E402

DEV = "cuda"
DT = torch.bfloat16
BOUND = 1e-2
GEMV_SHAPES = {  # name: (N, K) of y[B, N] = x[B, K] @ W[N, K].T; the split-K candidates first (budget)
    "8b o_proj": (4096, 4096),
    "8b down": (4096, 14336),
    "70b o_proj": (8192, 8192),
    "70b down": (8192, 28672),
    "8b qkv": (6144, 4096),
    "70b qkv": (10240, 8192),
    "8b gate_up": (28672, 4096),
    "70b gate_up": (57344, 8192),
    "8b lm_head": (128256, 4096),
}
GEMV_BATCHES = (1, 8, 16)
ATTN_SHAPES = {"8b": (32, 8), "70b": (64, 8)}  # name: (q heads, kv heads)
ATTN_BATCHES = (1, 8, 64)
HEAD_DIM, CONTEXT = 128, 1024
START = time.monotonic()
DEFAULT_US: dict[tuple[str, str, int], float] = {}  # the shipped defaults' times, for the summary


class OutOfTime(Exception):
    pass


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@dataclass
class Row:
    name: str
    us: float | None = None  # None: failed or skipped
    tbs: float | None = None
    err: float | None = None
    note: str = ""


def check_budget(budget: float) -> None:
    if time.monotonic() - START > budget:
        raise OutOfTime


def print_table(title: str, rows: list[Row]) -> None:
    ok = [r for r in rows if r.us is not None]
    best = min((r.us for r in ok if r.us is not None), default=None)
    print(f"\n{title}")
    print(f"  {'variant':<50} {'us':>8} {'TB/s':>6} {'rel err':>8}")
    for r in sorted(rows, key=lambda r: (r.us is None, r.us or 0.0)):
        if r.us is None:
            print(f"  {r.name:<50} {'-':>8} {'-':>6} {'-':>8}  {r.note}")
            continue
        mark = " *" if r.us == best else ""
        err = f"{r.err:.1e}" if r.err is not None else "-"
        print(f"  {r.name:<50} {r.us:>8.2f} {r.tbs or 0:>6.2f} {err:>8}{mark} {r.note}")


# --------------------------------------------------------------------------------------------------------------
# GEMV


def old_gemv_config(n: int, k: int, sms: int) -> GemvConfig:
    """The GEMV before split-K (7558c14), restored as the default: widest of 64/32/16 rows with >= 2 programs per
    SM, one program per row tile, no split; ``TritonOps.gemv`` runs it with the one-pass kernel (``_gemv_kernel``)."""
    block_n = next((b for b in (64, 32, 16) if cdiv(n, b) >= 2 * sms), 16)
    cfg = gemv_config(n, k, 1, sms, block_n=block_n, splits=1, use_dot=True)
    assert not cfg.split_k
    return cfg


# ead8863's split-K heuristic: programs per SM it aims for, K tiles per split at least, splits at most.
SPLITK_PROGRAMS_PER_SM = 4
SPLITK_MIN_TILES_PER_SPLIT = 4
SPLITK_MAX_SPLITS = 16


def gemv_auto_splits(n: int, k: int, batch: int, sms: int, block_n: int = 32) -> int:
    """The split-K count of ead8863's heuristic: as many splits as keep every program resident in one wave, each
    split >= a few K tiles, the fp32 partials small."""
    block_k = gemv_config(n, k, batch, sms, block_n=block_n, use_dot=True).block_k  # the tensor-core K tile
    return max(
        1,
        min(
            SPLITK_PROGRAMS_PER_SM * sms // cdiv(n, block_n),
            cdiv(k, block_k) // SPLITK_MIN_TILES_PER_SPLIT,
            k // (16 * max(batch, 1)),
            SPLITK_MAX_SPLITS,
        ),
    )


def splitk_gemv_config(n: int, k: int, batch: int, sms: int) -> GemvConfig:
    """ead8863's split-K default (32/64 rows, splits for one wave of 4 programs per SM): the split-K kernel."""
    block_n = 64 if cdiv(n, 64) >= 2 * sms else 32
    splits = gemv_auto_splits(n, k, batch, sms, block_n)
    return gemv_config(n, k, batch, sms, block_n=block_n, splits=splits, use_dot=True)


def cfg_name(c: GemvConfig) -> str:
    core = "fma" if not c.use_dot else "dot"
    kernel = "splitk" if c.split_k else "1pass"
    return f"{kernel} bn{c.block_n} bk{c.block_k} split{c.splits} w{c.num_warps} s{c.num_stages} {core}"


def gemv_variants(n: int, k: int, batch: int, sms: int) -> list[tuple[str, GemvConfig | None]]:
    """Labelled candidates; None is cuBLAS. Duplicates of an earlier configuration are dropped."""
    default = gemv_config(n, k, batch, sms)
    old = old_gemv_config(n, k, sms)
    cands: list[tuple[str, GemvConfig | None]] = [
        ("cublas", None),
        ("default = old (no split)" if old == default else "default", default),
        ("old (no split)", old),
        ("split-K heuristic (ead8863)", splitk_gemv_config(n, k, batch, sms)),
    ]
    for block_n in (32, 64):
        for splits in (1, 2, 4, 8):
            grid = gemv_config(n, k, batch, sms, block_n=block_n, splits=splits, use_dot=True)
            if grid.programs(n) <= 8 * sms and grid.k_split >= 2 * grid.block_k:
                cands.append(("", grid))
    cands.append(("", gemv_config(n, k, batch, sms, block_n=16, splits=max(1, default.splits // 2), use_dot=True)))
    cands += [
        ("default stages 3", replace(default, num_stages=3)),
        ("default stages 6", replace(default, num_stages=6)),
        ("default warps 8", replace(default, num_warps=8)),
    ]
    if batch == 1:  # the CUDA-core kernel's tiles (the default's come from GEMV_FMA_TUNED): rows, K tile, warps, splits
        for block_n in (8, 16, 32):
            for block_k in (256, 512, 1024, 2048):
                for warps in (4, 8):
                    if not 16 <= block_n * block_k // (32 * warps) <= 64:
                        continue  # fp32 products per thread: too few loads in flight, or spills
                    for splits in (1, 2, 4):
                        if k // splits >= 2 * block_k:
                            fma = dict(block_n=block_n, block_k=block_k, num_warps=warps, splits=splits)
                            cands.append(("", gemv_config(n, k, 1, sms, use_dot=False, **fma)))
    out: list[tuple[str, GemvConfig | None]] = []
    seen: set[GemvConfig | None] = set()
    for label, c in cands:
        if c in seen:
            continue
        seen.add(c)
        if c is not None:
            label = f"{label}: {cfg_name(c)}" if label else cfg_name(c)
        out.append((label, c))
    return out


def gemv_call(
    ops: TritonOps, x: torch.Tensor, ws: list[torch.Tensor], out: torch.Tensor, plan: GemvPlan | None
) -> Callable[[int], None]:
    """Call i multiplies by weight copy i % copies: cuBLAS when ``plan`` is None, else the Triton GEMV."""
    copies = len(ws)

    def call(i: int) -> None:
        if plan is None:
            torch.mm(x, ws[i % copies].t(), out=out)
        else:
            ops.gemv(x, ws[i % copies], out, plan)

    return call


def sweep_gemv(budget: float, calls: int, reps: int) -> dict[tuple[str, int], tuple[str, GemvConfig | None, float]]:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    ops = TritonOps()
    best: dict[tuple[str, int], tuple[str, GemvConfig | None, float]] = {}
    for shape, (n, k) in GEMV_SHAPES.items():
        if time.monotonic() - START > budget:
            print(f"\nGEMV {shape}: skipped (time budget)")
            continue
        copies = max(2, cdiv(4 * l2, 2 * n * k))
        ws = [torch.empty(n, k, dtype=DT, device=DEV).normal_(0, 0.02) for _ in range(copies)]
        for batch in GEMV_BATCHES:
            x = torch.randn(batch, k, dtype=DT, device=DEV)
            ref = x.float() @ ws[0].float().T
            rows: list[Row] = []
            bytes_per_call = 2 * (n * k + batch * k + batch * n)
            nc = max(calls // 4, 8) if n * k > 2e8 else calls
            for label, cfg in gemv_variants(n, k, batch, sms):
                try:
                    check_budget(budget)
                    out = torch.full((batch, n), float("nan"), dtype=DT, device=DEV)
                    plan = None if cfg is None else ops.gemv_plan(n, k, batch, DEV, config=cfg)
                    call = gemv_call(ops, x, ws, out, plan)
                    call(0)
                    first = out.clone()
                    out.fill_(float("nan"))
                    call(0)
                    err = rel(out, ref)
                    if not (err < BOUND and torch.isfinite(out).all()):
                        rows.append(Row(label, err=err, note=f"WRONG rel err {err:.2e}"))
                        continue
                    note = "" if cfg is None or torch.equal(out, first) else "NONDETERMINISTIC"
                    sec = time_graph(call, nc, warm=copies, reps=reps)
                    rows.append(Row(label, sec * 1e6, bytes_per_call / sec / 1e12, err, note))
                    if cfg is not None and cfg == gemv_config(n, k, batch, sms):
                        DEFAULT_US[("gemv", shape, batch)] = sec * 1e6
                    if not note:
                        cur = best.get((shape, batch))
                        if cur is None or sec < cur[2]:
                            best[(shape, batch)] = (label, cfg, sec)
                except OutOfTime:
                    rows.append(Row(label, note="skipped: time budget"))
                except Exception as exc:  # one broken variant must not end the sweep
                    rows.append(Row(label, note=f"ERROR {type(exc).__name__}: {str(exc)[:80]}"))
            print_table(f"GEMV {shape} (N={n}, K={k}) B={batch}  [{time.monotonic() - START:.0f} s]", rows)
            sys.stdout.flush()
        ws.clear()
        torch.cuda.empty_cache()
    return best


# --------------------------------------------------------------------------------------------------------------
# attention

OLD_ATTN = AttentionTuning(block_n=64, programs_per_sm=2, fused_reduce=False, num_warps=4, num_stages=3)


def attn_variants(batch: int) -> dict[str, AttentionTuning]:
    default = AttentionTuning()
    cands = [("default", default), ("old (2 kernels)", OLD_ATTN)]
    if batch * 8 < 0.8 * 132:  # split regime
        for block_n, ppsm, fused, warps in (
            (64, 1, True, 4),
            (64, 4, True, 4),
            (32, 1, True, 4),
            (32, 2, True, 4),
            (32, 4, True, 4),
            (32, 2, False, 4),
            (16, 4, True, 4),
            (128, 1, True, 8),
            (64, 2, True, 8),
        ):
            cands.append(("", AttentionTuning(block_n, ppsm, fused, warps, 3)))
        cands.append(("", AttentionTuning(32, 2, True, 4, 2)))
    else:
        for block_n, warps, stages in ((32, 4, 3), (128, 4, 3), (128, 8, 3), (64, 8, 3), (64, 4, 2)):
            cands.append(("", AttentionTuning(block_n, 2, True, warps, stages)))
    out: dict[str, AttentionTuning] = {}
    for label, t in cands:
        if t in out.values():
            continue
        reduce = "fused" if t.fused_reduce else "2-kernel"
        name = f"bn{t.block_n} ppsm{t.programs_per_sm} {reduce} w{t.num_warps} s{t.num_stages}"
        out[f"{label}: {name}" if label else name] = t
    return out


def attention_call(
    ops: TritonOps, q: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]], out: torch.Tensor, plan: Any
) -> Callable[[int], None]:
    """Call i reads KV cache copy i % copies, over the whole context."""
    copies, d = len(caches), q.shape[1] // plan.num_heads
    return lambda i: ops.attention(q, caches[i % copies][0], caches[i % copies][1], CONTEXT, out, d**-0.5, plan)


def sweep_attention(budget: float, calls: int, reps: int) -> dict[tuple[str, int], tuple[str, AttentionTuning, float]]:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    ops = TritonOps()
    best: dict[tuple[str, int], tuple[str, AttentionTuning, float]] = {}
    d, c = HEAD_DIM, CONTEXT
    for model, (nh, nkv) in ATTN_SHAPES.items():
        for batch in ATTN_BATCHES:
            kv_bytes = 2 * batch * c * nkv * d * 2
            copies = max(2, cdiv(4 * l2, kv_bytes))
            caches = [
                (
                    torch.randn(batch, c, nkv, d, dtype=DT, device=DEV),
                    torch.randn(batch, c, nkv, d, dtype=DT, device=DEV),
                )
                for _ in range(copies)
            ]
            q = torch.randn(batch, nh * d, dtype=DT, device=DEV)
            ref = torch.empty(batch, nh * d, dtype=DT, device=DEV)
            R.attention(q, caches[0][0], caches[0][1], c, ref, d**-0.5)
            rows: list[Row] = []
            for name, tuning in attn_variants(batch).items():
                try:
                    check_budget(budget)
                    plan = ops.attention_plan(
                        batch,
                        c,
                        nh,
                        nkv,
                        d,
                        DEV,
                        block_n=tuning.block_n,
                        programs_per_sm=tuning.programs_per_sm,
                        fused_reduce=tuning.fused_reduce,
                        num_warps=tuning.num_warps,
                        num_stages=tuning.num_stages,
                    )
                    out = torch.full((batch, nh * d), float("nan"), dtype=DT, device=DEV)

                    call = attention_call(ops, q, caches, out, plan)
                    call(0)
                    first = out.clone()
                    out.fill_(float("nan"))
                    call(0)
                    err = rel(out, ref)
                    label = f"{name} [{plan.splits(c)} splits]"
                    if not (err < BOUND and torch.isfinite(out).all()):
                        rows.append(Row(label, err=err, note=f"WRONG rel err {err:.2e}"))
                        continue
                    note = "" if torch.equal(out, first) else "NONDETERMINISTIC"
                    sec = time_graph(call, calls, warm=min(copies, 4), reps=reps)
                    rows.append(Row(label, sec * 1e6, kv_bytes / sec / 1e12, err, note))
                    if name.startswith("default:"):
                        DEFAULT_US[("attention", model, batch)] = sec * 1e6
                    if not note:
                        cur = best.get((model, batch))
                        if cur is None or sec < cur[2]:
                            best[(model, batch)] = (label, tuning, sec)
                except OutOfTime:
                    rows.append(Row(name, note="skipped: time budget"))
                except Exception as exc:
                    rows.append(Row(name, note=f"ERROR {type(exc).__name__}: {str(exc)[:80]}"))
            title = f"attention {model} (NH={nh}, NKV={nkv}, D={d}) B={batch} C={c}, KV {kv_bytes / 2**20:.0f} MiB"
            print_table(f"{title}  [{time.monotonic() - START:.0f} s]", rows)
            sys.stdout.flush()
            caches.clear()
            torch.cuda.empty_cache()
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("gemv", "attention"))
    parser.add_argument("--budget", type=float, default=210.0, help="seconds; later variants are skipped")
    parser.add_argument("--calls", type=int, default=40, help="calls per captured graph")
    parser.add_argument("--reps", type=int, default=5, help="timed replays per variant (median)")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(
        f"{props.name}: {props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB, torch "
        f"{torch.__version__}; bf16; * = fastest; TB/s = weight (GEMV) or KV (attention) bytes per second"
    )
    gemv_best: dict[tuple[str, int], tuple[str, GemvConfig | None, float]] = {}
    attn_best: dict[tuple[str, int], tuple[str, AttentionTuning, float]] = {}
    if args.only in (None, "attention"):  # the smaller sweep first: it must not be starved by the budget
        attn_best = sweep_attention(args.budget, args.calls * 2, args.reps)
    if args.only in (None, "gemv"):
        gemv_best = sweep_gemv(args.budget, args.calls, args.reps)

    print("\nRECOMMENDED (fastest correct, deterministic variant per shape class)")
    sms = props.multi_processor_count
    for (shape, batch), (_, cfg, sec) in sorted(gemv_best.items(), key=lambda kv: (kv[0][0][:3], kv[0])):
        n, k = GEMV_SHAPES[shape]
        default = gemv_config(n, k, batch, sms)
        knobs = "cuBLAS" if cfg is None else cfg_name(cfg)
        dflt = DEFAULT_US.get(("gemv", shape, batch), float("nan"))
        print(
            f"  gemv {shape:<12} B={batch:<3} {knobs:<32} {sec * 1e6:8.2f} us; "
            f"default {cfg_name(default)} {dflt:8.2f} us"
        )
    for (model, batch), (label, tuning, sec) in sorted(attn_best.items()):
        dflt = DEFAULT_US.get(("attention", model, batch), float("nan"))
        print(
            f"  attention {model:<4} B={batch:<3} block_n={tuning.block_n} programs_per_sm={tuning.programs_per_sm} "
            f"fused_reduce={tuning.fused_reduce} num_warps={tuning.num_warps} num_stages={tuning.num_stages}"
            f"  {sec * 1e6:7.2f} us; default {dflt:7.2f} us  ({label})"
        )
    print(f"total {time.monotonic() - START:.0f} s")


if __name__ == "__main__":
    main()
