"""Field workload B: a server-shaped process. The parent spawns an engine child (multiprocessing, spawn); the child
builds a small model and a CUDA graph, then serves bursts of decode steps (graph replay + a small device-to-host
copy of the "sampled tokens", which syncs) and blocks on a queue between bursts while the parent sleeps.

Truth, in NVTX domain `truth` only (no other NVTX): `truth_burst <b>` around each burst and `truth_step <i>`
(i counts over all bursts) around each step, on the child's main thread. No launchprobe code. The parent prints
`SUMMARY workload=B ...` with the child's own per-step wall times.

    python benchmarks/field/server_bursts.py                    # 4 bursts x 25 steps, 1.5 s apart
    python benchmarks/field/server_bursts.py --device cpu --dry  # CPU smoke test: no graph, tiny sizes
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from typing import Any


def engine(args: argparse.Namespace, requests: Any, results: Any) -> None:
    import torch

    try:
        import nvtx

        domain = nvtx.get_domain("truth")

        def push(name: str) -> Any:
            return domain.push_range(domain.get_event_attributes(message=name))

        pop: Callable[[], Any] = domain.pop_range
    except ImportError:

        def push(name: str) -> Any:
            return None

        def pop() -> Any:
            return None

    cuda = args.device.startswith("cuda") and not args.dry
    dtype = torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(0)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) * 0.02).to(device=args.device, dtype=dtype)

    h, f = args.hidden, args.ffn
    layers = [(weight(h, 3 * h), weight(h, h), weight(h, 2 * f), weight(f, h)) for _ in range(args.layers)]
    head = weight(args.hidden, args.vocab)
    x = torch.randn(args.batch, args.hidden, generator=gen).to(device=args.device, dtype=dtype)
    tokens = torch.zeros(args.batch, dtype=torch.int64, device=args.device)

    def step() -> None:
        h = x
        for qkv, o, gate_up, down in layers:
            q, k, v = (torch.nn.functional.layer_norm(h, h.shape[-1:]) @ qkv).chunk(3, dim=-1)
            h = h + (q * torch.sigmoid(k) + v) @ o
            g, u = (torch.nn.functional.layer_norm(h, h.shape[-1:]) @ gate_up).chunk(2, dim=-1)
            h = h + (torch.nn.functional.silu(g) * u) @ down
        tokens.copy_((h @ head).argmax(dim=-1))

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
            graph.replay()
            torch.cuda.synchronize()
            run: Callable[[], Any] = graph.replay
        else:
            run = step
        results.put("ready")
        index = 0
        while True:
            request = requests.get()  # blocks: the engine has no work
            if request is None:
                break
            burst, steps = request
            times = []
            push(f"truth_burst {burst}")
            for _ in range(steps):
                t0 = time.perf_counter()
                push(f"truth_step {index}")
                run()
                sampled = tokens.cpu()  # the small D2H copy of the sampled tokens: syncs every step
                pop()
                times.append(time.perf_counter() - t0)
                index += 1
            pop()
            results.put((burst, times, int(sampled[0])))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=25, help="decode steps per burst")
    parser.add_argument("--wait", type=float, default=1.5, help="seconds between bursts")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--ffn", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry", action="store_true", help="CPU smoke test: tiny sizes, eager, short waits")
    parser.add_argument("--label", default="run", help="clean / nsys variant: only printed")
    args = parser.parse_args()
    if args.dry:
        args.hidden, args.ffn, args.vocab, args.wait, args.steps = 64, 128, 256, 0.1, 5
    ctx = mp.get_context("spawn")
    requests, results = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=engine, args=(args, requests, results), name="engine")
    child.start()
    assert results.get(timeout=300) == "ready"
    all_times: list[float] = []
    t_start = time.perf_counter()
    for burst in range(args.bursts):
        time.sleep(args.wait)  # no requests: the engine idles, blocked on its queue
        requests.put((burst, args.steps))
        _, times, _ = results.get(timeout=300)
        all_times += times
    t_end = time.perf_counter()
    requests.put(None)
    child.join(timeout=60)
    steady = all_times[1:]  # the first step after start-up carries one-time costs
    print(
        f"SUMMARY workload=B label={args.label} steps={len(all_times)} bursts={args.bursts} "
        f"step_ms={statistics.median(steady) * 1e3:.4f} step_ms_p90={sorted(steady)[int(0.9 * len(steady))] * 1e3:.4f} "
        f"step_ms_first_of_burst={statistics.median(all_times[:: args.steps]) * 1e3:.4f} "
        f"wall_s={t_end - t_start:.3f} exitcode={child.exitcode}"
    )


if __name__ == "__main__":
    main()
