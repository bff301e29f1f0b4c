"""Host cost of launching each op of the decode step, one op at a time, against a bare torch launch.

Each op is called 2000 times back to back on llama-3-8b layer-0 buffers at batch 1 (the GPU runs ahead of the
host for all of them), and the host wall time per call is reported: this is where an eager step's host time goes.
Projections twice: through torch.mm (cuBLAS, the default) and as launchprobe's Triton GEMV (``--projections gemv``).
Run on a GPU:  python benchmarks/bench_launch_cost.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from launchprobe.workload.model import DecodeModel, plan_memory
from launchprobe.workload.shape import load_shape


def host_us(fn: Callable[[], Any], calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - t0) / calls / 1e3)
        torch.cuda.synchronize()
    return statistics.median(samples)


PROJECTION_OPS = ("qkv", "o_proj", "gate_up", "down", "lm_head")


def main() -> None:
    shape = load_shape("llama-3-8b", {"layers": 2})
    plan = plan_memory(shape, 1, 1024, "bf16", 1 << 40, 60 << 20, 0)
    x = torch.zeros(1, device="cuda")
    print(f"{'op':<22} {'host us per call':>17}")
    print(f"{'x.add_(1)':<22} {host_us(lambda: x.add_(1)):>17.2f}   (bare torch launch)")
    for projections in ("cublas", "gemv"):  # the gemv model adds its projections only: the rest is the same
        model = DecodeModel(
            shape, context=1024, dtype="bf16", device="cuda", max_bucket=1, plan=plan, projections=projections
        )
        seen: set[str] = set()
        for op in model.step(1):
            if op.name in seen or (projections == "gemv" and op.name not in PROJECTION_OPS):
                continue
            seen.add(op.name)
            label = f"{op.name} ({projections})" if op.name in PROJECTION_OPS else op.name
            print(f"{label:<22} {host_us(op.run):>17.2f}")
        del model


if __name__ == "__main__":
    main()
