"""Lab tool: does a timer kernel in the PDL chain see an op's end without moving its start, where an event cannot?

An event node after a PDL-launched op makes the op start sooner (docs/gaps.md, the start shifts), and the event sees
only the end. Here, per op class, full-graph captures time the class's ops in every ``--every``-th layer from
layer 1, with one of:

    inline     the pass's way: an event node right after the op
    probe_wt   a one-program Triton kernel launched with PDL right after the op: it waits for the op, reads
               %globaltimer, stores it, then lets the next kernel launch (benchmarks/field/timer_probe.py)
    probe_tw   the same kernel letting the next one launch first, then waiting
    pair_event events after the op and after the op before it
    pair_wt    probes (wait first) after the op and after the op before it
    pair_tw    probes (trigger first) the same

CUPTI's kernels of ``--reps`` steps of each (interleaved with clean steps; the probe kernels and copies left out of
the ops) give, per variant against the clean steps: the timed op's gap and duration, its end against the op
before's end, the next op's gap and duration. The pairs give each timed op's gap directly, the two marks'
difference less CUPTI's clean duration, set against CUPTI's clean gap: read under CUPTI and, in more steps, without
it. The timer's resolution from back-to-back reads, with and without CUPTI. Without CUPTI, each variant's step
against clean (``kernel_pass.alternating``). On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/probe_kernels.py --out $OUT/probe.json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for timer_probe

CELLS = "llama-3.2-1b:1,llama-3.2-1b:64,llama-3-8b:1,llama-3-8b:8,llama-3-8b:64"
CLASSES = ("attn_norm", "qkv", "rotary", "kv_write", "attention", "o_proj", "mlp_norm", "gate_up", "silu_mul", "down")
# placement_instrument: far (marks after i - REACH and i), near (after i - REACH and i - 1), pair (after i - 1
# and i), single (after i); event (an event node), wt / tw (a probe kernel waiting first / letting the next launch
# first).
KINDS = "far_event,near_event,far_tw,near_tw,pair_tw"
REACH = 4


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _iqr(values: Sequence[float]) -> float:
    if len(values) < 4:
        return float("nan")
    q = statistics.quantiles(values, n=4)
    return float(q[2] - q[0])


class Marks:
    """One variant's marks: an event or a probe after each op in ``after``; ``read()`` gives op -> ns."""

    def __init__(self, kind: str, after: Sequence[int], n_ops: int) -> None:
        import torch

        self.kind = kind
        self.after = sorted(after)
        self.probe = kind.endswith(("_wt", "_tw"))
        self.trigger_first = kind.endswith("_tw")
        self.buf = torch.zeros(n_ops, dtype=torch.int64, device="cuda")
        self.events: dict[int, Any] = {}
        if not self.probe:
            stream = torch.cuda.current_stream()
            self.events = {i: torch.cuda.Event(enable_timing=True, external=True) for i in self.after}
            for e in self.events.values():
                e.record(stream)
            torch.cuda.synchronize()

    def mark(self, i: int) -> None:
        if self.probe:
            from timer_probe import probe_kernel

            probe_kernel[(1,)](self.buf, i, TRIGGER_FIRST=self.trigger_first, num_warps=1, launch_pdl=True)
        else:
            self.events[i].record()

    def read(self, start: Any) -> dict[int, float]:
        if self.probe:
            values = self.buf.tolist()
            return {i: float(values[i]) for i in self.after}
        return {i: start.elapsed_time(e) * 1e6 for i, e in self.events.items()}


def capture(ops: Sequence[Any], marks: Marks, pool: Any) -> Any:
    import torch

    graph = torch.cuda.CUDAGraph()
    marked = set(marks.after)
    with torch.cuda.graph(graph, pool=pool):
        for i, op in enumerate(ops):
            op.run()
            if i in marked:
                marks.mark(i)
    torch.cuda.synchronize()
    return graph


def timer_resolution() -> dict[str, Any]:
    """Back-to-back reads of %globaltimer in one kernel: the distinct differences, without and with CUPTI."""
    import torch
    from timer_probe import timer_loop_kernel

    from launchprobe.measure.cupti import cuda_intervals

    out: dict[str, Any] = {}

    def once() -> list[int]:
        buf = torch.zeros(512, dtype=torch.int64, device="cuda")
        timer_loop_kernel[(1,)](buf, N=512, num_warps=1)
        torch.cuda.synchronize()
        v = buf.tolist()
        return [b - a for a, b in zip(v, v[1:])]

    once()
    for label in ("plain", "cupti"):
        diffs: list[int] = []

        def four(diffs: list[int] = diffs) -> None:
            for _ in range(4):
                diffs.extend(once())

        if label == "plain":
            four()
        else:
            cuda_intervals(four)
        nonzero = sorted(d for d in diffs if d > 0)
        out[label] = {
            "reads": len(diffs) + 4,
            "zero_diffs": sum(1 for d in diffs if d == 0),
            "min_nonzero_ns": nonzero[0] if nonzero else None,
            "median_nonzero_ns": _median(nonzero),
            "distinct_nonzero": sorted(set(nonzero))[:12],
        }
    return out


def placements(kind: str, i: int) -> list[int]:
    placement = kind.split("_")[0]
    return {
        "far": [i - REACH, i],
        "near": [i - REACH, i - 1],
        "pair": [i - 1, i],
        "single": [i],
    }[placement]


def farnear_gap(far: Sequence[dict[int, float]], near: Sequence[dict[int, float]], i: int, duration: float) -> float:
    """The pass's reading of the gap before op i: the far steps' anchor-to-op-i time less the near steps'
    anchor-to-op-(i - 1) time (medians over their steps), less op i's duration."""
    j = i - REACH
    return _median([r[i] - r[j] for r in far]) - _median([r[i - 1] - r[j] for r in near]) - duration


def end_shifts(clean_dur: dict[int, float], far_dur: float, near_dur: float, i: int) -> float:
    """What the pass's end shifts add to the gap before op i: op i's clean less its far-step duration, less the
    same for op i - 1 in the near steps (sampled.end_shifts)."""
    return (clean_dur[i] - far_dur) - (clean_dur[i - 1] - near_dur)


def pair_gap(reads: Sequence[dict[int, float]], i: int, duration: float) -> float:
    """The gap before op i from marks after op i - 1 and op i of the same steps: the median difference less op
    i's duration."""
    return _median([r[i] - r[i - 1] for r in reads]) - duration


def tile_windows(n_ops: int, tile: int) -> list[list[int]]:
    """Ops 1 .. n_ops - 1 in consecutive windows of ``tile`` (the last shorter); op 0's gap lies between steps."""
    return [list(range(max(1, a), min(n_ops, a + tile))) for a in range(0, n_ops, tile) if min(n_ops, a + tile) > 1]


def cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import bench_sampled_gaps as bench
    import torch
    from timer_probe import probe_kernel

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.cupti import cuda_intervals
    from launchprobe.measure.timing import pinned_host

    kinds = args.kinds.split(",")
    ops, counts, clean, pool = bench.lab_cell(shape, batch, "full", pdl=True)
    names = [o.name for o in ops]
    scratch = torch.zeros(4, dtype=torch.int64, device="cuda")
    for tf in (False, True):  # compile both before any capture
        probe_kernel[(1,)](scratch, 0, TRIGGER_FIRST=tf, num_warps=1, launch_pdl=True)
    torch.cuda.synchronize()
    layers = list(range(1, (len(ops) - 3) // 10, args.every))
    variants: dict[str, tuple[Any, Marks, list[int]]] = {}
    for name in args.classes.split(","):
        targets = [i for i in range(len(ops)) if names[i] == name and ops[i].layer in layers]
        for kind in kinds:
            after = sorted({k for i in targets for k in placements(kind, i)})
            marks = Marks(kind, after, len(ops))
            graph = capture(ops, marks, pool)
            for _ in range(3):
                graph.replay()
            variants[f"{name} {kind}"] = (graph, marks, targets)
    torch.cuda.synchronize()
    order = list(variants)
    per_step = sum(counts)
    ran: list[str] = []
    read: list[dict[int, float]] = []

    def step(label: str) -> None:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        if label == "clean":
            clean.run()
            torch.cuda.synchronize()
            ran.append(label)
            read.append({})
            return
        graph, marks, _ = variants[label]
        graph.replay()
        torch.cuda.synchronize()
        ran.append(label)
        read.append(marks.read(start))

    def work() -> None:
        for _ in range(args.reps):
            for label in ["clean", *order]:
                step(label)

    with pinned_host():
        rows = cuda_intervals(work)
    ops_rows = [r for r in rows if "probe_kernel" not in r[0] and "DtoH" not in r[0]]  # less the probes' reads
    if len(ops_rows) != per_step * len(ran):
        raise SystemExit(f"{len(ops_rows)} kernels under CUPTI for {len(ran)} steps of {per_step}")
    steps: dict[str, list[list[tuple[int, int]]]] = {}
    readings: dict[str, dict[str, list[dict[int, float]]]] = {"cupti": {}, "plain": {}}
    for k, label in enumerate(ran):
        chunk = ops_rows[k * per_step : (k + 1) * per_step]
        steps.setdefault(label, []).append(sampled.group_ops([(s, e) for _, s, e in chunk], counts))
        readings["cupti"].setdefault(label, []).append(read[k])

    # The same variants again without CUPTI: their readings only.
    ran.clear()
    read.clear()
    with pinned_host():
        for _ in range(args.plain_reps):
            for label in order:
                step(label)
    for label, values in zip(ran, read):
        readings["plain"].setdefault(label, []).append(values)

    def gap(s: list[tuple[int, int]], i: int) -> int:
        return s[i][0] - max(end for _, end in s[:i])

    def dur(s: list[tuple[int, int]], i: int) -> int:
        return s[i][1] - s[i][0]

    clean_steps = steps["clean"]
    clean_gap = {i: _median([gap(s, i) for s in clean_steps]) for i in range(1, len(ops))}
    clean_dur = {i: _median([dur(s, i) for s in clean_steps]) for i in range(len(ops))}

    def var_dur(label: str, i: int) -> float:
        return _median([dur(s, i) for s in steps[label]])

    out: dict[str, Any] = {"shape": shape, "batch": batch, "layers": layers, "classes": {}}
    for name in args.classes.split(","):
        row: dict[str, Any] = {}
        targets = variants[f"{name} {kinds[0]}"][2]
        row["clean_gap"] = _median([clean_gap[i] for i in targets])
        for kind in kinds:
            label = f"{name} {kind}"
            mine = steps[label]

            delta = functools.partial(bench.shift_from_clean, steps=mine, clean_steps=clean_steps, targets=targets)

            row[kind] = {
                "gap": delta(gap),
                "duration": delta(dur),
                "end_vs_prev_end": delta(lambda s, i: s[i][1] - s[i - 1][1]),
                "next_gap": delta(lambda s, i: gap(s, i + 1)),
            }
            if kind.startswith("far"):
                with pinned_host():
                    _, overhead, error = kp.alternating(variants[label][0].replay, clean.run, 1.0)
                row[kind]["step_vs_clean"] = overhead
                row[kind]["step_vs_clean_error"] = error
        # Readings of each timed op's gap, less CUPTI's clean gap: the median over ops.
        for where, by_label in readings.items():
            for inst in ("event", "wt", "tw"):
                far, near, pair = (f"{name} {p}_{inst}" for p in ("far", "near", "pair"))
                if far in by_label and near in by_label:
                    raw, shifted = [], []
                    for i in targets:
                        g = farnear_gap(by_label[far], by_label[near], i, clean_dur[i])
                        raw.append(g - clean_gap[i])
                        shift = end_shifts(clean_dur, var_dur(far, i), var_dur(near, i - 1), i)
                        shifted.append(g + shift - clean_gap[i])
                    row[f"{inst}_farnear_raw_{where}"] = _median(raw)
                    row[f"{inst}_farnear_shifted_{where}"] = _median(shifted)
                if pair in by_label:
                    direct = [pair_gap(by_label[pair], i, clean_dur[i]) - clean_gap[i] for i in targets]
                    row[f"{inst}_pair_{where}"] = _median(direct)
        out["classes"][name] = row
    return out


def tile_cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """The whole step in windows of ``--tile`` consecutive ops, one variant per window, a probe (trigger first)
    after the op before the window and after each op in it. Each op's gap is the two probes' difference less
    CUPTI's clean duration, less the window's cost per probe (its step against clean, without CUPTI, over its
    probes); set against CUPTI's clean gaps per class and in total."""
    import bench_sampled_gaps as bench
    import torch
    from timer_probe import probe_kernel

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.cupti import cuda_intervals
    from launchprobe.measure.timing import pinned_host

    ops, counts, clean, pool = bench.lab_cell(shape, batch, "full", pdl=True)
    names = [o.name for o in ops]
    n = len(ops)
    scratch = torch.zeros(4, dtype=torch.int64, device="cuda")
    probe_kernel[(1,)](scratch, 0, TRIGGER_FIRST=True, num_warps=1, launch_pdl=True)
    torch.cuda.synchronize()
    windows = tile_windows(n, args.tile)
    variants = []
    for window in windows:
        marks = Marks("window_tw", [window[0] - 1, *window], n)
        graph = capture(ops, marks, pool)
        for _ in range(3):
            graph.replay()
        variants.append((graph, marks))

    def clean_steps_work() -> None:
        for _ in range(args.reps):
            clean.run()
            torch.cuda.synchronize()

    with pinned_host():
        rows = cuda_intervals(clean_steps_work)
    per_step = sum(counts)
    if len(rows) != per_step * args.reps:
        raise SystemExit(f"{len(rows)} kernels under CUPTI for {args.reps} steps of {per_step}")
    steps = [
        sampled.group_ops([(s, e) for _, s, e in rows[k * per_step : (k + 1) * per_step]], counts)
        for k in range(args.reps)
    ]
    clean_gap = {i: _median([s[i][0] - max(e for _, e in s[:i]) for s in steps]) for i in range(1, n)}
    clean_dur = {i: _median([s[i][1] - s[i][0] for s in steps]) for i in range(n)}
    reads: list[list[dict[int, float]]] = [[] for _ in variants]
    costs: list[tuple[float, float, float]] = []
    with pinned_host():
        for _ in range(args.plain_reps):
            for k, (graph, marks) in enumerate(variants):
                graph.replay()
                torch.cuda.synchronize()
                reads[k].append(marks.read(None))
        for graph, _ in variants:
            step_ms, overhead, error = kp.alternating(graph.replay, clean.run, 1.0)
            costs.append((step_ms, overhead, error))
    raw: dict[int, float] = {}
    corrected: dict[int, float] = {}
    for window, values, (step_ms, overhead, _) in zip(windows, reads, costs):
        per_probe = overhead * step_ms * 1e6 / (len(window) + 1)
        for i in window:
            raw[i] = pair_gap(values, i, clean_dur[i])
            corrected[i] = raw[i] - per_probe
    classes: dict[str, Any] = {}
    for name in dict.fromkeys(names[1:]):
        mine = [i for i in range(1, n) if names[i] == name]
        cupti = _median([clean_gap[i] for i in mine])
        classes[name] = {
            "ops": len(mine),
            "cupti_ns": cupti,
            "raw_ns": _median([raw[i] for i in mine]),
            "corrected_ns": _median([corrected[i] for i in mine]),
        }
    return {
        "shape": shape,
        "batch": batch,
        "tile": args.tile,
        "windows": len(windows),
        "clean_gap_total_ns": sum(clean_gap.values()),
        "raw_total_ns": sum(raw.values()),
        "corrected_total_ns": sum(corrected.values()),
        "window_overheads": [c[1] for c in costs],
        "window_overhead_errors": [c[2] for c in costs],
        "classes": classes,
    }


def show_tile(result: dict[str, Any]) -> str:
    over = result["window_overheads"]
    lines = [
        f"{result['shape']} full b{result['batch']}: {result['windows']} windows of {result['tile']} ops; "
        f"window step vs clean {min(over):+.2%} to {max(over):+.2%}; gap total CUPTI "
        f"{result['clean_gap_total_ns'] / 1e3:.1f} us, probes raw {result['raw_total_ns'] / 1e3:.1f}, "
        f"less each window's cost {result['corrected_total_ns'] / 1e3:.1f}",
        f"  {'class':10s} {'ops':>4s} {'CUPTI':>6s} {'raw':>6s} {'less cost':>9s}  (us; * beyond 1 us or 15%)",
    ]
    for name, c in result["classes"].items():
        cupti, corr = c["cupti_ns"], c["corrected_ns"]
        miss = "*" if abs(corr - cupti) > max(1000, 0.15 * abs(cupti)) else ""
        lines.append(
            f"  {name:10s} {c['ops']:4d} {cupti / 1e3:+6.2f} {c['raw_ns'] / 1e3:+6.2f} {corr / 1e3:+9.2f}{miss}"
        )
    return "\n".join(lines)


READINGS = ("event_farnear_raw", "event_farnear_shifted", "tw_farnear_raw", "tw_farnear_shifted", "tw_pair")


def show(result: dict[str, Any]) -> str:
    lines = [
        f"{result['shape']} full b{result['batch']} (layers {result['layers']}): readings less CUPTI's clean gap, "
        "us, without CUPTI (under CUPTI); then per kind the CUPTI gap / end-prev-end / next gap against clean"
    ]

    def us(value: Any) -> str:
        return f"{value / 1e3:+5.2f}" if isinstance(value, (int, float)) and value == value else "    -"

    lines.append("  " + f"{'class':10s} {'clean':>5s} " + " ".join(f"{r:>24s}" for r in READINGS))
    for name, row in result["classes"].items():
        cells = " ".join(f"{us(row.get(r + '_plain'))} ({us(row.get(r + '_cupti'))}){'':11s}" for r in READINGS)
        lines.append(f"  {name:10s} {us(row['clean_gap'])} {cells}")
    for name, row in result["classes"].items():
        parts = []
        for kind, v in row.items():
            if isinstance(v, dict):
                step = f" step {v['step_vs_clean']:+.2%}" if "step_vs_clean" in v else ""
                parts.append(f"{kind} {us(v['gap'])}/{us(v['end_vs_prev_end'])}/{us(v['next_gap'])}{step}")
        lines.append(f"    {name:10s} " + "; ".join(parts))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default=CELLS, help="shape:batch,...")
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--kinds", default=KINDS)
    parser.add_argument("--every", type=int, default=4, help="time every N-th layer from layer 1")
    parser.add_argument("--reps", type=int, default=16, help="steps of each variant under CUPTI")
    parser.add_argument("--plain-reps", type=int, default=48, help="steps of each variant without CUPTI")
    parser.add_argument("--budget-s", type=float, default=480, help="start no cell after this many seconds")
    parser.add_argument("--tile", type=int, default=0, help="instead: the whole step in windows of this many ops")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = [{"timer": timer_resolution()}]
    print(json.dumps(results[0]), flush=True)
    for item in args.cells.split(","):
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget spent: {item} not run", flush=True)
            continue
        shape, batch = item.split(":")
        result = (tile_cell if args.tile else cell)(shape, int(batch), args)
        gc.collect()
        results.append(result)
        print((show_tile if args.tile else show)(result), f"({time.perf_counter() - t0:.0f} s)", flush=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
