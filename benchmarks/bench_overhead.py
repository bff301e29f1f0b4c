"""What launchprobe's own measurement costs: step-boundary events, NVTX ranges, against no instrumentation.

For llama-3-8b at batch 1 in eager and full-graph modes, interleaved 11 times in one process (the median over
samples of the mean ms per step, and the samples' IQR over median as the noise):
  - block: N steps timed by one event pair around all of them (no per-step instrumentation);
  - boundary: the clean timing pass, one event recorded between consecutive steps;
  - nvtx-ops: boundary timing with NVTX ranges per step, layer, op and graph piece.
Run on a GPU:  python benchmarks/bench_overhead.py [--shape llama-3-8b] [--steps 50]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from launchprobe.measure.markers import Markers
from launchprobe.measure.samples import Samples
from launchprobe.measure.timing import time_block_cuda, time_steps_cuda, warm_up
from launchprobe.workload.model import DecodeModel, plan_memory
from launchprobe.workload.modes import StepRunner, prepare
from launchprobe.workload.shape import load_shape


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="llama-3-8b")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    shape = load_shape(args.shape)
    free, _ = torch.cuda.mem_get_info()
    plan = plan_memory(shape, args.batch, 1024, "bf16", free, 60 << 20, 2 << 30)
    model = DecodeModel(shape, context=1024, dtype="bf16", device="cuda", max_bucket=args.batch, plan=plan)
    print(f"{args.shape} batch {args.batch}, {args.steps} steps per sample, 11 interleaved samples")
    print(f"{'mode':<8} {'block ms':>9} {'noise':>6} {'boundary ms':>12} {'cost':>7} {'nvtx-ops ms':>12} {'cost':>7}")
    for mode in ("eager", "full"):
        pool = torch.cuda.graph_pool_handle() if mode == "full" else None
        runner = prepare(mode, args.batch, model.step(args.batch), pool)
        marked = StepRunner(mode, args.batch, runner.segments, markers=Markers("ops"))
        warm_up(runner.run, 10, True)
        warm_up(marked.run, 10, True)
        block, boundary, nvtx = [], [], []
        for _ in range(11):
            block.append(time_block_cuda(runner.run, args.steps) / args.steps)
            boundary.append(sum(time_steps_cuda(runner.run, args.steps)) / args.steps)
            nvtx.append(sum(time_steps_cuda(marked.run, args.steps)) / args.steps)
        b, e, n = (statistics.median(v) for v in (block, boundary, nvtx))
        noise = Samples.of(block).relative_noise
        print(f"{mode:<8} {b:>9.3f} {noise:>6.1%} {e:>12.3f} {e / b - 1:>+7.2%} {n:>12.3f} {n / b - 1:>+7.2%}")


if __name__ == "__main__":
    main()
