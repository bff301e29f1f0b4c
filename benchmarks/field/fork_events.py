"""Lab tool: does an end event recorded on a side branch of the graph leave the op's start where it is?

In full graph, an event node right after a PDL-launched op makes it start sooner and run longer (docs/gaps.md, the
start shifts; docs/performance.md, 2026-12-02). Here, per op class, two full-graph captures time the class's ops
in every ``--every``-th layer from layer 1:

    inline  the pass's way: an event node on the step's stream right after the op
    fork    the stream forks after the op, the event is recorded on the side stream, which joins at the graph's end

and CUPTI's kernels of ``--reps`` steps of each (interleaved with clean steps) give, per variant and against the
clean steps: the timed op's start (the gap before it) and duration, the next op's gap and duration, and the timed
op's end against the end of the op before it. The events of the same steps are set against CUPTI's ends of
their ops (two events of a step less CUPTI's two ends). Without CUPTI, each variant's step against clean
(``kernel_pass.alternating``). On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/fork_events.py --out $OUT/fork.json

docs/performance.md (2026-12-02, 01:35 UTC) has what it showed: the forked event moves the op's start as the inline
one does, and keeps the next op's.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

CELLS = "llama-3.2-1b:8,llama-3-8b:8,llama-3-8b:64"
CLASSES = ("attn_norm", "qkv", "attention", "mlp_norm", "silu_mul", "down")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def capture(ops: Sequence[Any], timed: dict[int, Any], fork: bool, pool: Any) -> Any:
    """The whole step as one graph, an end event after each op in ``timed``: inline, or on a forked side stream."""
    import torch

    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        main = torch.cuda.current_stream()
        for i, op in enumerate(ops):
            op.run()
            if i in timed:
                if fork:
                    side.wait_stream(main)
                    with torch.cuda.stream(side):
                        timed[i].record()
                else:
                    timed[i].record()
        if fork:
            main.wait_stream(side)
    torch.cuda.synchronize()
    return graph


def cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import bench_sampled_gaps as bench
    import torch

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.cupti import cuda_intervals
    from launchprobe.measure.timing import pinned_host

    ops, counts, clean, pool = bench.lab_cell(shape, batch, "full", pdl=True)
    names = [o.name for o in ops]
    layers = list(range(1, (len(ops) - 3) // 10, args.every))
    variants: dict[str, tuple[Any, dict[int, Any]]] = {}
    stream = torch.cuda.current_stream()
    for name in CLASSES:
        targets = [i for i in range(len(ops)) if names[i] == name and ops[i].layer in layers]
        for kind in ("inline", "fork"):
            events = {i: torch.cuda.Event(enable_timing=True, external=True) for i in targets}
            for e in events.values():
                e.record(stream)
            torch.cuda.synchronize()
            graph = capture(ops, events, kind == "fork", pool)
            for _ in range(3):
                graph.replay()
            variants[f"{name} {kind}"] = (graph, events)
    torch.cuda.synchronize()
    order = list(variants)
    per_step = sum(counts)
    ran: list[str] = []
    read: list[dict[int, float]] = []

    def work() -> None:
        for _ in range(args.reps):
            for label in ["clean", *order]:
                start = torch.cuda.Event(enable_timing=True)
                start.record()
                if label == "clean":
                    clean.run()
                    ran.append(label)
                    read.append({})
                    continue
                graph, events = variants[label]
                graph.replay()
                torch.cuda.synchronize()
                ran.append(label)
                read.append({i: start.elapsed_time(e) * 1e6 for i, e in events.items()})

    with pinned_host():
        rows = cuda_intervals(work)
    if len(rows) != per_step * len(ran):
        raise SystemExit(f"{len(rows)} kernels under CUPTI for {len(ran)} steps of {per_step}")
    steps: dict[str, list[list[tuple[int, int]]]] = {}
    lags: dict[str, list[float]] = {}
    for k, label in enumerate(ran):
        chunk = rows[k * per_step : (k + 1) * per_step]
        op_iv = sampled.group_ops([(s, e) for _, s, e in chunk], counts)
        steps.setdefault(label, []).append(op_iv)
        marked = sorted(read[k])
        for a, b in zip(marked, marked[1:]):  # the events' difference less CUPTI's ends' difference
            lags.setdefault(label, []).append((read[k][b] - read[k][a]) - (op_iv[b][1] - op_iv[a][1]))

    def gap(step: list[tuple[int, int]], i: int) -> int:
        return step[i][0] - max(end for _, end in step[:i])

    clean_steps = steps["clean"]
    out: dict[str, Any] = {"shape": shape, "batch": batch, "layers": layers, "classes": {}}
    for label in order:
        name, kind = label.split()
        targets = sorted(variants[label][1])
        mine = steps[label]

        delta = functools.partial(bench.shift_from_clean, steps=mine, clean_steps=clean_steps, targets=targets)

        row = {
            "gap": delta(gap),
            "duration": delta(lambda s, i: s[i][1] - s[i][0]),
            "end_vs_prev_end": delta(lambda s, i: s[i][1] - s[i - 1][1]),
            "next_gap": delta(lambda s, i: gap(s, i + 1)),
            "next_duration": delta(lambda s, i: s[i + 1][1] - s[i + 1][0]),
            "event_lag": _median(lags.get(label, [])),
        }
        graph = variants[label][0]
        with pinned_host():
            _, overhead, error = kp.alternating(graph.replay, clean.run, 1.0)
        row["step_vs_clean"] = overhead
        row["step_vs_clean_error"] = error
        out["classes"].setdefault(name, {})[kind] = row
    return out


def show(result: dict[str, Any]) -> str:
    lines = [f"{result['shape']} full b{result['batch']} (layers {result['layers']}): us against clean steps, CUPTI"]
    lines.append(f"  {'class':10s} {'kind':6s} {'gap':>6s} {'dur':>6s} {'end-prev':>8s} {'next gap':>8s} "
                 f"{'next dur':>8s} {'ev lag':>6s}  step vs clean (no CUPTI)")  # fmt: skip
    for name, kinds in result["classes"].items():
        for kind, r in kinds.items():
            lines.append(
                f"  {name:10s} {kind:6s} {r['gap'] / 1e3:+6.2f} {r['duration'] / 1e3:+6.2f} "
                f"{r['end_vs_prev_end'] / 1e3:+8.2f} {r['next_gap'] / 1e3:+8.2f} {r['next_duration'] / 1e3:+8.2f} "
                f"{r['event_lag'] / 1e3:+6.2f}  {r['step_vs_clean']:+.2%} +/- {r['step_vs_clean_error']:.2%}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default=CELLS, help="shape:batch,...")
    parser.add_argument("--every", type=int, default=4, help="time every N-th layer from layer 1")
    parser.add_argument("--reps", type=int, default=24)
    args = parser.parse_args(argv)
    results = []
    for item in args.cells.split(","):
        shape, batch = item.split(":")
        result = cell(shape, int(batch), args)
        gc.collect()
        results.append(result)
        print(show(result), flush=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
