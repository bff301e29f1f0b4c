"""Lab tool: what CUPTI does to a memset node in a captured graph, and to the gaps around it, read by timer kernels.

At batch 1 and 8 lm_head is one cuBLAS call of two GPU activities, a memset and then the GEMM; CUPTI lengthens the
timer pair around it by 1.2-2.1 us more than the typical pair (docs/performance.md, 2026-12-02 from 11:00 UTC).
Whether that is inside the op (the memset-to-GEMM gap, which taken off a clean pair reads lm_head's gap short) or
in the gap before it (which CUPTI's clean reference then carries too) decides how far CUPTI's gap at lm_head can be
trusted. Here one graph per body repeats [a small kernel, timer, body, timer]; the bodies are nothing, a fill
kernel (torch's ``zero_``), a small kernel, a 4 KB memset node (the driver's), a memset node then a small kernel,
lm_head itself at batch 1 and 64 (memset + GEMM, and the GEMM alone), and the batch-64 GEMM after a memset node and
after a fill kernel. The timers' spans are read in replays without CUPTI and under it (torch.profiler), and CUPTI's own
rows of the same replays give, per body, the gap before its first activity, its internal gaps and the gap after.
With ``--no-cupti`` only the replays without torch.profiler run: under ``nsys profile`` (which holds CUPTI) their
spans are nsys's effect, set against a run without it. On the GPU machine, from the project root:

    source .gpu/setup.sh; python3 benchmarks/field/memset_cupti.py --out $OUT/memset_cupti.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch

from launchprobe.kernels.triton.timer import record_time
from launchprobe.measure.cupti import cuda_intervals

REPEATS = 16  # [kernel, timer, body, timer] per graph
HIDDEN, VOCAB = 2048, 128256  # llama-3.2-1b's lm_head


def _memset_node(buffer: torch.Tensor) -> None:
    """A memset on the current stream through the driver (``cuMemsetD8Async``): captured, a memset node. torch's
    ``zero_`` launches a fill kernel instead."""
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = ctypes.CDLL("libcuda.so.1")
        _DRIVER.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p]
    stream = torch.cuda.current_stream().cuda_stream
    status = _DRIVER.cuMemsetD8Async(buffer.data_ptr(), 0, buffer.numel() * buffer.element_size(), stream)
    if status != 0:
        raise SystemExit(f"cuMemsetD8Async failed ({status})")


_DRIVER: Any = None


def _then(*steps: Callable[[], Any]) -> None:
    for step in steps:
        step()


def _bodies(device: torch.device) -> dict[str, Callable[[], Any]]:
    small = torch.zeros(1024, device=device)
    zeros = torch.zeros(1024, device=device)
    weight = torch.randn(VOCAB, HIDDEN, device=device, dtype=torch.bfloat16)
    x1 = torch.randn(1, HIDDEN, device=device, dtype=torch.bfloat16)
    x64 = torch.randn(64, HIDDEN, device=device, dtype=torch.bfloat16)
    return {
        "none": lambda: None,
        "fill": lambda: zeros.zero_(),
        "kernel": lambda: small.add_(1.0),
        "memset": lambda: _memset_node(zeros),
        "memset+kernel": lambda: _then(lambda: _memset_node(zeros), lambda: small.add_(1.0)),
        "lm_head b1": lambda: torch.nn.functional.linear(x1, weight),
        "lm_head b64": lambda: torch.nn.functional.linear(x64, weight),
        "memset+b64": lambda: _then(lambda: _memset_node(zeros), lambda: torch.nn.functional.linear(x64, weight)),
        "fill+b64": lambda: (zeros.zero_(), torch.nn.functional.linear(x64, weight)),
    }


def _capture(body: Callable[[], Any], out: torch.Tensor, lead: torch.Tensor) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the capture (cuBLAS picks its kernels)
            body()
        with torch.cuda.graph(graph, stream=stream):
            for r in range(REPEATS):
                lead.mul_(1.0)
                record_time(out, 2 * r, pdl=True)
                body()
                record_time(out, 2 * r + 1, pdl=True)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph


def _spans(out: torch.Tensor) -> list[int]:
    values = out.tolist()
    return [values[2 * r + 1] - values[2 * r] for r in range(REPEATS)]


def _replays(graph: torch.cuda.CUDAGraph, out: torch.Tensor, n: int) -> list[int]:
    spans: list[int] = []
    for _ in range(n):
        graph.replay()
        torch.cuda.synchronize()
        spans += _spans(out)
    return spans


def _cupti_replays(graph: torch.cuda.CUDAGraph, out: torch.Tensor, n: int) -> tuple[list[int], list[Any]]:
    spans: list[int] = []
    rows: list[Any] = []
    for _ in range(n):
        rows.append(cuda_intervals(graph.replay))
        spans += _spans(out)
    return spans, rows


def _layout(rows: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Per repeat [lead kernel, timer, body activities..., timer]: the gaps timer -> body's first activity, between
    the body's activities, last -> timer, and the timer-to-timer span, by CUPTI."""
    per = len(rows) // REPEATS
    before, inside, after, span, lengths = [], [], [], [], []
    names = [name for name, _, _ in rows[:per]]
    for r in range(REPEATS):
        mine = rows[r * per : (r + 1) * per]
        body = mine[2:-1]
        t0, t1 = mine[1], mine[-1]
        span.append(t1[1] - t0[1])
        if body:
            before.append(body[0][1] - t0[2])
            after.append(t1[1] - body[-1][2])
            inside.append([b[1] - a[2] for a, b in zip(body, body[1:], strict=False)])
            lengths.append([end - start for _, start, end in body])
    med = statistics.median
    return {
        "names": [n[:60] for n in names],
        "before_ns": med(before) if before else None,
        "inside_ns": [med(col) for col in zip(*inside, strict=True)] if inside and inside[0] else [],
        "after_ns": med(after) if after else None,
        "timer_starts_span_ns": med(span),
        "durations_ns": [med(col) for col in zip(*lengths, strict=True)] if lengths else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--cupti-replays", type=int, default=40)
    parser.add_argument(
        "--no-cupti", action="store_true", help="clean replays only: for a run under nsys, which holds CUPTI itself"
    )
    args = parser.parse_args()
    device = torch.device("cuda")
    lead = torch.ones(4096, device=device)
    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bodies": {}}
    print(f"{'body':<14} {'clean us':>9} {'CUPTI us':>9} {'effect':>8} {'+/-':>6}  CUPTI: before, inside, after (us)")
    for name, body in _bodies(device).items():
        out = torch.zeros(2 * REPEATS, dtype=torch.int64, device=device)
        graph = _capture(body, out, lead)
        _replays(graph, out, 20)
        clean = _replays(graph, out, args.replays)
        if args.no_cupti:
            spans = _replays(graph, out, 2 * args.replays)
            results["bodies"][name] = {"clean_span_ns": statistics.median(spans)}
            print(f"{name:<14} {statistics.median(spans) / 1e3:9.2f}", flush=True)
            continue
        under, rows = _cupti_replays(graph, out, args.cupti_replays)
        clean_again = _replays(graph, out, args.replays)
        layout = _layout(rows[-1])
        layouts = [_layout(r) for r in rows]
        effect = statistics.median(under) - statistics.median(clean + clean_again)
        noise = 1.2533 * (statistics.pstdev(under) / len(under) ** 0.5)
        record = {
            "clean_span_ns": statistics.median(clean + clean_again),
            "clean_first_half_ns": statistics.median(clean),
            "clean_second_half_ns": statistics.median(clean_again),
            "cupti_span_ns": statistics.median(under),
            "effect_ns": effect,
            "effect_noise_ns": noise,
            "cupti_names": layout["names"],
            "cupti_before_ns": statistics.median(x["before_ns"] for x in layouts if x["before_ns"] is not None)
            if layout["before_ns"] is not None
            else None,
            "cupti_inside_ns": [
                statistics.median(x["inside_ns"][k] for x in layouts) for k in range(len(layout["inside_ns"]))
            ],
            "cupti_durations_ns": [
                statistics.median(x["durations_ns"][k] for x in layouts) for k in range(len(layout["durations_ns"]))
            ],
            "cupti_after_ns": statistics.median(x["after_ns"] for x in layouts if x["after_ns"] is not None)
            if layout["after_ns"] is not None
            else None,
        }
        results["bodies"][name] = record
        fmt = lambda v: "-" if v is None else f"{v / 1e3:.2f}"  # noqa: E731
        inside = ",".join(fmt(v) for v in record["cupti_inside_ns"]) or "-"
        lengths = ",".join(fmt(v) for v in record["cupti_durations_ns"]) or "-"
        print(
            f"{name:<14} {record['clean_span_ns'] / 1e3:9.2f} {record['cupti_span_ns'] / 1e3:9.2f} "
            f"{effect / 1e3:+8.2f} {noise / 1e3:6.2f}  {fmt(record['cupti_before_ns'])}, {inside}, "
            f"{fmt(record['cupti_after_ns'])}  durations {lengths}"
            f"  {' | '.join(n[:28] for n in record['cupti_names'][2:-1])}",
            flush=True,
        )
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
