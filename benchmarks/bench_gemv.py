"""cuBLAS (torch.mm) against launchprobe's Triton GEMV on the decode projections, achieved HBM bandwidth.

The Triton GEMV is one launch per call (by default one pass over K, no split: at batch 1 the CUDA-core kernel, at
batch 2-16 7558c14's tensor-core kernel; split-K configs reduce inside the kernel); the last column shows the
configuration its heuristic picked (rows per program, K tile, K splits). benchmarks/bench_kernels_sweep.py tries others.

Each call reads its weight from HBM: weights rotate over copies whose total is far above the L2 cache, and calls
are replayed from a CUDA graph so launch overhead stays out. Run on a GPU:
    python benchmarks/bench_gemv.py [--batches 1,4,8,16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graph_timing import time_graph  # noqa: E402  (benchmarks/, on the path as the script's folder)

SHAPES = {
    # name: (N, K) of y[B, N] = x[B, K] @ W[N, K].T
    "8b qkv": (6144, 4096),
    "8b o_proj": (4096, 4096),
    "8b gate_up": (28672, 4096),
    "8b down": (4096, 14336),
    "8b lm_head": (128256, 4096),
    "70b qkv": (10240, 8192),
    "70b o_proj": (8192, 8192),
    "70b gate_up": (57344, 8192),
    "70b down": (8192, 28672),
}


def bench(fn_name: str, n: int, k: int, batch: int, copies: int, calls: int) -> float:
    from launchprobe.kernels import get_ops

    ops = get_ops("cuda")
    fn = ops.linear if fn_name == "cublas" else ops.gemv
    ws = [torch.empty(n, k, dtype=torch.bfloat16, device="cuda").normal_(0, 0.02) for _ in range(copies)]
    x = torch.randn(batch, k, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(batch, n, dtype=torch.bfloat16, device="cuda")
    # warm-up over every copy: compiles, and makes the GEMV plan (workspace, counters) before capture
    seconds = time_graph(lambda i: fn(x, ws[i % copies], out), calls, warm=copies)
    bytes_moved = 2 * (n * k + batch * k + batch * n)
    return bytes_moved / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,4,8,16")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    from launchprobe.kernels import gemv_config

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'projection':<12} {'B':>3} {'cuBLAS TB/s':>12} {'Triton TB/s':>12} {'ratio':>6}  Triton config")
    for name, (n, k) in SHAPES.items():
        copies = max(2, -(-4 * l2 // (2 * n * k)))
        for batch in batches:
            cublas = bench("cublas", n, k, batch, copies, 40)
            triton = bench("gemv", n, k, batch, copies, 40)
            c = gemv_config(n, k, batch, sms)
            cfg = f"bn{c.block_n} bk{c.block_k} split{c.splits}"
            print(f"{name:<12} {batch:>3} {cublas / 1e12:>12.2f} {triton / 1e12:>12.2f} {triton / cublas:>6.2f}  {cfg}")


if __name__ == "__main__":
    main()
