"""Field workload G: a decode-shaped step with a host callback in the middle of its stream, eager and as a CUDA graph.

A server can put host work into the stream itself (``cuLaunchHostFunc``: a callback that hands results to the
scheduler, say). While the callback runs the GPU idles with the next kernels already queued, and capturing the step
in a CUDA graph does not remove that idle: the callback becomes a host node of the graph. Each step here runs part A
(``--layers`` layers of small ops), a host callback that sleeps ``--callback-us`` (libc ``usleep`` called by the
driver, no Python), then part B (as many layers), and syncs once. The same step is then captured as one CUDA graph
and replayed. No launchprobe code.

Truth: each eager step in NVTX ``decode_step mode=eager <i>`` and each graph step in ``decode_step mode=graph <i>``
(default domain, as a server marks its steps), the callback's sleep (known), and the step times without a profiler
by CUDA events (``SUMMARY`` line). On the GPU machine, under nsys as record_all.sh does:

    nsys profile -s none --cuda-graph-trace=node -t cuda,nvtx --cpuctxsw=none -o G python3 host_callback_step.py
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from collections.abc import Callable
from typing import Any

import torch


def nvtx_range() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    try:
        import nvtx
    except ImportError:
        return (lambda name: None), (lambda: None)
    domain = nvtx.get_domain(None)

    def push(name: str) -> Any:
        return domain.push_range(domain.get_event_attributes(message=name))

    return push, domain.pop_range


def host_callback(sleep_us: int) -> Callable[[], None]:
    """Enqueue, on the current stream, a host function that sleeps ``sleep_us``: libc's usleep called by the driver
    with the microseconds as its argument (the callback's user data), so no Python runs in the driver's thread."""
    driver = ctypes.CDLL("libcuda.so.1")
    launch = driver.cuLaunchHostFunc
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    usleep = ctypes.cast(ctypes.CDLL(None).usleep, ctypes.c_void_p).value

    def enqueue() -> None:
        status = launch(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), usleep, ctypes.c_void_p(sleep_us))
        if status != 0:
            raise RuntimeError(f"cuLaunchHostFunc returned {status}")

    return enqueue


def build(hidden: int, ffn: int, layers: int, batch: int, callback_us: int) -> Callable[[], torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.bfloat16

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) * 0.02).to(device="cuda", dtype=dtype)

    params = [(weight(hidden, 2 * ffn), weight(ffn, hidden)) for _ in range(2 * layers)]
    x = torch.randn(batch, hidden, generator=gen).to(device="cuda", dtype=dtype)
    callback = host_callback(callback_us)

    def block(h: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        hf = h.float()
        n = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
        g, u = (n @ gate_up).chunk(2, dim=-1)
        return h + (torch.nn.functional.silu(g) * u) @ down

    def step() -> torch.Tensor:
        h = x
        for gate_up, down in params[:layers]:
            h = block(h, gate_up, down)
        callback()
        for gate_up, down in params[layers:]:
            h = block(h, gate_up, down)
        return h

    return step


def timed(run: Callable[[], Any], steps: int) -> list[float]:
    """Each step between two CUDA events, synced after each (ms)."""
    out = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--ffn", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=6, help="layers before the callback, and as many after")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--callback-us", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--label", default="clean")
    args = parser.parse_args()
    step = build(args.hidden, args.ffn, args.layers, args.batch, args.callback_us)
    push, pop = nvtx_range()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    eager_ms = timed(step, args.steps)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm on the side stream before capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        step()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    graph_ms = timed(graph.replay, args.steps)
    for mode, run in (("eager", step), ("graph", graph.replay)):  # the marked steps, synced as a server does
        for i in range(args.steps):
            push(f"decode_step mode={mode} {i}")
            run()
            torch.cuda.synchronize()
            pop()
    print(
        f"SUMMARY workload=G label={args.label} callback_us={args.callback_us} layers={2 * args.layers} "
        f"eager_ms_p50={statistics.median(eager_ms):.4f} graph_ms_p50={statistics.median(graph_ms):.4f} "
        f"gpu={torch.cuda.get_device_name()} torch={torch.__version__}",
        flush=True,
    )


if __name__ == "__main__":
    main()
