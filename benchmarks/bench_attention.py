"""Triton decode attention against the torch reference (several kernels), time per call and KV bandwidth.

Each call reads its KV cache from HBM: caches rotate over copies whose total is several times the L2 cache, and
calls are replayed from a CUDA graph so launch overhead stays out. The knobs default to the shipped tuning; set
them to try others (benchmarks/bench_kernels_sweep.py sweeps them). Run on a GPU:
    python benchmarks/bench_attention.py [--batches 1,8,64] [--context 1024] [--block-n 32 --no-fused ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graph_timing import time_graph  # noqa: E402  (benchmarks/, on the path as the script's folder)

from launchprobe.kernels import AttentionTuning, cdiv  # noqa: E402
from launchprobe.kernels import reference as R  # noqa: E402
from launchprobe.kernels.triton import TritonOps  # noqa: E402

MODELS = {"8b": (32, 8), "70b": (64, 8)}  # name: (q heads, kv heads); head_dim 128
HEAD_DIM = 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--context", type=int, default=1024)
    d = AttentionTuning()
    parser.add_argument("--block-n", type=int, default=d.block_n)
    parser.add_argument("--programs-per-sm", type=int, default=d.programs_per_sm)
    parser.add_argument("--fused", action=argparse.BooleanOptionalAction, default=d.fused_reduce)
    parser.add_argument("--num-warps", type=int, default=d.num_warps)
    parser.add_argument("--num-stages", type=int, default=d.num_stages)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    c = args.context
    print(
        f"block_n={args.block_n} programs_per_sm={args.programs_per_sm} fused_reduce={args.fused} "
        f"num_warps={args.num_warps} num_stages={args.num_stages}, context {c}, bf16"
    )
    print(
        f"{'model':<5} {'B':>4} {'splits':>6} {'launches':>8} {'Triton us':>10} {'TB/s':>6} {'torch us':>9} {'err':>8}"
    )
    for model, (nh, nkv) in MODELS.items():
        for batch in (int(b) for b in args.batches.split(",")):
            run_case(model, nh, nkv, batch, args, l2)
            torch.cuda.empty_cache()


def run_case(model: str, nh: int, nkv: int, batch: int, args: argparse.Namespace, l2: int) -> None:
    c, dim = args.context, HEAD_DIM
    kv_bytes = 2 * batch * c * nkv * dim * 2
    copies = max(2, cdiv(4 * l2, kv_bytes))
    caches = [
        tuple(torch.randn(batch, c, nkv, dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        for _ in range(copies)
    ]
    q = torch.randn(batch, nh * dim, dtype=torch.bfloat16, device="cuda")
    out, ref = (torch.empty(batch, nh * dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    ops = TritonOps()
    plan = ops.attention_plan(
        batch,
        c,
        nh,
        nkv,
        dim,
        "cuda",
        block_n=args.block_n,
        programs_per_sm=args.programs_per_sm,
        fused_reduce=args.fused,
        num_warps=args.num_warps,
        num_stages=args.num_stages,
    )

    def tri(i: int) -> None:
        kc, vc = caches[i % copies]
        ops.attention(q, kc, vc, c, out, dim**-0.5, plan)

    def ref_call(i: int) -> None:
        kc, vc = caches[i % copies]
        R.attention(q, kc, vc, c, ref, dim**-0.5)

    tri(0)
    ref_call(0)
    err = float((out.float() - ref.float()).norm() / ref.float().norm())
    t_tri = time_graph(tri, args.calls)
    t_ref = time_graph(ref_call, max(4, args.calls // 10))
    print(
        f"{model:<5} {batch:>4} {plan.splits(c):>6} {plan.kernels(c):>8} {t_tri * 1e6:>10.2f} "
        f"{kv_bytes / t_tri / 1e12:>6.2f} {t_ref * 1e6:>9.1f} {err:>8.1e}"
    )


if __name__ == "__main__":
    main()
