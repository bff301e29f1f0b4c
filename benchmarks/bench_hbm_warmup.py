"""How long the H200 takes to reach its HBM read rate after idling: the series behind the ceiling's warm-up.

After ``--idle`` seconds with no GPU work, times ``x.sum()`` over 4 rotating 2 GiB bf16 buffers (classify's HBM
ceiling) back to back for ``--seconds`` and prints the read rate per 100 ms bucket, twice (two idle periods), with
the GPU clocks nvidia-smi reports at the start and end.

    python benchmarks/bench_hbm_warmup.py [--idle 5] [--seconds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launchprobe.environment import nvidia_smi_query  # noqa: E402


def clocks() -> str:
    return nvidia_smi_query("clocks.sm,clocks.mem,power.draw,pstate") or "nvidia-smi unavailable"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    n = (2 << 30) // 2
    xs = [torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_() for _ in range(4)]
    torch.cuda.synchronize()
    for round_ in range(2):
        time.sleep(args.idle)
        print(f"round {round_ + 1}, after {args.idle:.0f} s idle; clocks (sm, mem, power, pstate): {clocks()}")
        t0 = time.perf_counter()
        buckets: dict[int, list[float]] = {}
        i = 0
        while time.perf_counter() - t0 < args.seconds:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            x = xs[i % 4]
            start.record()
            x.sum()
            end.record()
            end.synchronize()
            rate = x.numel() * 2 / (start.elapsed_time(end) / 1e3) / 1e12
            buckets.setdefault(int((time.perf_counter() - t0) * 10), []).append(rate)
            i += 1
        print(f"  clocks at the end: {clocks()}")
        for b in sorted(buckets):
            v = buckets[b]
            print(
                f"  {b * 100:5d}-{b * 100 + 100:<5d} ms  {len(v):3d} sums  median {statistics.median(v):.3f} TB/s"
                f"  min {min(v):.3f}  max {max(v):.3f}"
            )


if __name__ == "__main__":
    main()
