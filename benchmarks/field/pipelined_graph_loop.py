"""Field workload A: a CUDA graph of a small decoder-ish stack, replayed with no host sync until the end.

The host queues every replay long before the GPU runs it, so the NVTX range around each replay's host call
(`decode_step <i>`, default domain) closes long before its kernels run (issue 11). Truth: each replay's kernels
carry the correlationId of its `cudaGraphLaunch`; a range `truth_step <i>` in NVTX domain `truth` encloses each
step's host call. No launchprobe code. Prints one line: `SUMMARY workload=A ...`.

    python benchmarks/field/pipelined_graph_loop.py --steps 60            # under nsys or clean
    python benchmarks/field/pipelined_graph_loop.py --device cpu --dry     # CPU smoke test: no graph
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch


def truth_domain() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    """push(name) / pop() in NVTX domain `truth`; no-ops without the nvtx package."""
    try:
        import nvtx
    except ImportError:
        return (lambda name: None), (lambda: None)
    domain = nvtx.get_domain("truth")

    def push(name: str) -> Any:
        return domain.push_range(domain.get_event_attributes(message=name))

    return push, domain.pop_range


def build(
    hidden: int, ffn: int, layers: int, batch: int, device: str
) -> tuple[Callable[[], torch.Tensor], torch.Tensor]:
    dtype = torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(0)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) * 0.02).to(device=device, dtype=dtype)

    params = [
        (torch.ones(hidden, device=device, dtype=dtype), weight(hidden, 2 * ffn), weight(ffn, hidden))
        for _ in range(layers)
    ]
    x = torch.randn(batch, hidden, generator=gen).to(device=device, dtype=dtype)

    def step() -> torch.Tensor:
        h = x
        for norm_w, gate_up, down in params:
            hf = h.float()
            r = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)  # rmsnorm-ish: pow, mean, add, rsqrt
            n = (hf * r).to(dtype) * norm_w
            g, u = (n @ gate_up).chunk(2, dim=-1)
            h = h + (torch.nn.functional.silu(g) * u) @ down
        return h

    return step, x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry", action="store_true", help="CPU smoke test: tiny sizes, eager, no graph")
    parser.add_argument("--label", default="run", help="clean / nsys: only printed")
    args = parser.parse_args()
    if args.dry:
        args.hidden, args.ffn, args.steps = 64, 128, 5
    push, pop = truth_domain()
    step, _ = build(args.hidden, args.ffn, args.layers, args.batch, args.device)
    cuda = args.device.startswith("cuda") and not args.dry
    with torch.no_grad():
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            run: Callable[[], Any] = graph.replay
        else:
            run = step
        host_ends: list[float] = []
        t0 = time.perf_counter()
        for i in range(args.steps):
            push(f"truth_step {i}")
            torch.cuda.nvtx.range_push(f"decode_step {i}") if cuda else None
            run()
            torch.cuda.nvtx.range_pop() if cuda else None
            pop()
            host_ends.append(time.perf_counter())
        if cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
    step_ms = (t1 - t0) * 1e3 / args.steps
    host_ms = (host_ends[-1] - t0) * 1e3 / args.steps
    print(
        f"SUMMARY workload=A label={args.label} steps={args.steps} step_ms={step_ms:.4f} "
        f"host_enqueue_ms_per_step={host_ms:.4f} host_ahead_ms_at_end={(t1 - host_ends[-1]) * 1e3:.3f} "
        f"layers={args.layers} hidden={args.hidden} ffn={args.ffn} batch={args.batch}"
    )


if __name__ == "__main__":
    main()
