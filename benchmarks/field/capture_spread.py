"""How far captures of the same clean graphs differ, and where the sampled pass's stitched gap total sits among them.

Lab tool (issue 12): in piecewise the stitched gap total's distance from the clean one followed the step shift of
a second capture of the clean graphs (docs/performance.md, session of 2026-12-04 02:39). Per cell this captures
the clean step's graphed segments ``--captures`` more times with no event (``kernel_pass.recapture``, into a pool
of their own as the pass's variants are), then:

  - times every capture's step interleaved with the others, in shuffled rounds of ``--block`` back-to-back steps
    (events at the block's ends, after two untimed steps), so that a host or clock that drifts moves all alike;
  - takes each capture's clean steps under CUPTI (``kernel_pass.clean_reference``) grouped into ops: busy, op
    durations summed, and per op class the median gap;
  - runs the pass ``classify --kernels`` runs against the first capture (``classify.run_kernel_pass``);
  - times the captures again, interleaved, after the pass (did anything drift);
  - with ``--crowd N`` (first run on 2026-12-04 07:08, docs/performance.md), before the pass: N more
    captures held alive, then ``--captures`` late ones, timed interleaved with the early ones (is a capture made
    after many others, as the pass's second capture is made after its variants, slower).

Each capture's gap total is its step (interleaved, no CUPTI) less its CUPTI op durations summed; the pass's
stitched total is set against the first capture's (what the pass checks against) and against the median over all.
Writes one JSON record per cell. On the GPU machine, from the project root:

    source .gpu/setup.sh; python3 benchmarks/field/capture_spread.py --out $OUT/spread.json \
        --cells llama-3-8b:8,llama-3-8b:64 --modes piecewise
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default="llama-3-8b:8", help="shape:batch,...")
    parser.add_argument("--modes", default="piecewise")
    parser.add_argument("--captures", type=int, default=6, help="captures beyond the clean runner's own")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--block", type=int, default=4, help="steps timed back to back per capture per round")
    parser.add_argument("--kernel-seconds", type=float, default=5.0)
    parser.add_argument("--no-pass", action="store_true", help="only the captures, not the sampled pass")
    parser.add_argument(
        "--crowd", type=int, default=0,
        help="then this many more captures, kept alive, and --captures more after them, timed with the first ones",
    )  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=500.0, help="skip cells that would start after this")
    return parser.parse_args()


def interleaved(runs: list[Any], rounds: int, block: int, seed: int) -> list[list[float]]:
    """Per run, its block means (ms per step) over ``rounds`` shuffled rounds."""
    import torch

    rng = random.Random(seed)
    out: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        order = list(range(len(runs)))
        rng.shuffle(order)
        spans = []
        for k in order:
            runs[k]()
            runs[k]()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(block):
                runs[k]()
            end.record()
            spans.append((k, start, end))
        torch.cuda.synchronize()
        for k, start, end in spans:
            out[k].append(start.elapsed_time(end) / block)
    return out


def summary(times: list[float]) -> dict[str, float]:
    from launchprobe.analysis import sampled

    return {"median_us": statistics.median(times) * 1e3, "error_us": sampled.median_error(times) * 1e3}


def cupti_of(runner: Any, counts: list[int], names: list[str]) -> dict[str, Any]:
    """The capture's clean steps under CUPTI, grouped into ops: busy, durations summed, gaps per op class."""
    from launchprobe.measure import kernel_pass as kp

    seen = kp.clean_reference(runner)
    if seen is None:
        return {"note": "no CUPTI"}
    ref = kp._cupti_reference(seen, (counts, seen.names[0]))
    if ref.op_gap_ns is None or ref.op_duration_ns is None:
        return {"note": ref.grouping}
    classes: dict[str, float] = {}
    durations: dict[str, float] = {}
    for name, gap, duration in zip(names, ref.op_gap_ns, ref.op_duration_ns, strict=True):
        classes[name] = classes.get(name, 0.0) + gap
        durations[name] = durations.get(name, 0.0) + duration
    return {
        "step_us": ref.step_ns / 1e3,
        "busy_us": (ref.op_busy_ns or ref.busy_ns) / 1e3,
        "durations_us": sum(ref.op_duration_ns) / 1e3,
        "gaps_us": sum(ref.op_gap_ns[1:]) / 1e3,  # op 0's gap is from the step before
        "class_gaps_us": {k: v / 1e3 for k, v in classes.items()},
        "class_durations_us": {k: v / 1e3 for k, v in durations.items()},
    }


def run_cell(shape: str, batch: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    import bench_sampled_gaps as bench
    import torch

    from launchprobe.classify import run_kernel_pass
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.markers import Markers

    t0 = time.perf_counter()
    ops, counts, clean, _ = bench.lab_cell(shape, batch, mode)
    names = [op.name for op in ops]
    markers = Markers("steps")
    pool = torch.cuda.graph_pool_handle()
    captures = [clean]
    for _ in range(args.captures):
        again = kp.recapture(clean, pool, markers)
        again.run()  # a captured graph's first replays upload it
        captures.append(again)
    torch.cuda.synchronize()
    runs = [c.run for c in captures]
    before = interleaved(runs, args.rounds, args.block, seed=1)
    cupti = [cupti_of(c, counts, names) for c in captures]
    record: dict[str, Any] = {
        "shape": shape, "mode": mode, "batch": batch, "captures": len(captures),
        "before": [summary(t) for t in before], "cupti": cupti,
    }  # fmt: skip
    step0 = record["before"][0]["median_us"]
    print(
        f"{shape} {mode} b{batch}: steps (us, interleaved) "
        + " ".join(f"{s['median_us'] - step0:+.1f}" for s in record["before"])
        + f" around {step0:.1f}",
        flush=True,
    )
    if args.crowd:  # captures made after many others, as the pass's second capture is made after its variants
        record["crowd"] = crowded(clean, pool, markers, runs, args)
    if not args.no_pass:
        from launchprobe.classify import ClassifyConfig
        from launchprobe.workload.shape import load_shape

        config = ClassifyConfig(
            shape=load_shape(shape), batches=[batch], context=1024, kernels=True, kernel_density="sampled",
            capture_sizes=[batch], kernel_seconds=args.kernel_seconds,
        )  # fmt: skip
        record["pass"] = pass_record(run_kernel_pass, clean, mode, batch, step0 / 1e3, config, ops)
        after = interleaved(runs, args.rounds, args.block, seed=2)
        record["after"] = [summary(t) for t in after]
    record["seconds"] = round(time.perf_counter() - t0, 1)
    return record


def crowded(clean: Any, pool: Any, markers: Any, runs: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """``args.crowd`` more captures held alive, then ``args.captures`` late ones; the early runs and the late ones
    timed interleaved, each against the first."""
    import torch

    from launchprobe.measure import kernel_pass as kp

    crowd = [kp.recapture(clean, pool, markers) for _ in range(args.crowd)]
    late = [kp.recapture(clean, pool, markers) for _ in range(args.captures)]
    for again in late:
        again.run()  # upload
    torch.cuda.synchronize()
    timed = [summary(t) for t in interleaved(runs + [c.run for c in late], args.rounds, args.block, seed=3)]
    first = timed[0]["median_us"]
    print(
        f"  after {len(crowd)} more captures: early "
        + " ".join(f"{x['median_us'] - first:+.1f}" for x in timed[1 : len(runs)])
        + "; late "
        + " ".join(f"{x['median_us'] - first:+.1f}" for x in timed[len(runs) :]),
        flush=True,
    )
    return {"captures": len(crowd), "early": timed[: len(runs)], "late": timed[len(runs) :]}


def pass_record(run_kernel_pass: Any, clean: Any, mode: str, batch: int, step_ms: float, config: Any, ops: Any) -> Any:
    """The pass against ``clean``; the model is the one ``lab_cell`` built (held by the ops' closures)."""
    import msgspec

    class _Model:  # run_kernel_pass asks the model only for the step's ops
        def step(self, bucket: int) -> Any:
            return ops

    result = run_kernel_pass(_Model(), mode, batch, step_ms, config, {}, clean)
    record = msgspec.to_builtins(result)
    check = record.get("cupti_check") or {}
    return {
        "clean_step_ms": record.get("clean_step_ms"),
        "events_total_gap_us": (check.get("events_total_gap_ns") or 0) / 1e3,
        "clean_gap_total_us": (check.get("clean_gap_total_ns") or 0) / 1e3,
        "total_gap_diff_us": (check.get("total_gap_diff_ns") or 0) / 1e3,
        "total_gap_noise_us": (check.get("total_gap_noise_ns") or 0) / 1e3,
        "total_gap_agrees": check.get("total_gap_agrees"),
        "capture_check": record.get("cupti_capture_check"),
        "fresh_captures": record.get("cupti_fresh_captures"),
        "ops": check.get("ops"),
        "slowest": record.get("variant_overhead_max_fraction"),
        "checks_verdict": record.get("checks_verdict"),
    }


def main() -> None:
    import bench_sampled_gaps as bench
    import torch

    args = parse()
    start = time.perf_counter()
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cells": []}
    for shape, batch in bench.lab_cells(args.cells):
        for mode in [m for m in args.modes.split(",") if m]:
            if time.perf_counter() - start > args.budget_s:
                out["cells"].append({"shape": shape, "mode": mode, "batch": batch, "status": "skipped: budget"})
                continue
            try:
                cell = run_cell(shape, batch, mode, args)
            except Exception as error:  # a lab tool: record and go on
                cell = {"shape": shape, "mode": mode, "batch": batch, "status": f"failed: {error!r}"}
            out["cells"].append(cell)
            print(line(cell), flush=True)
            args.out.write_text(json.dumps(out, indent=1, default=str))
            gc.collect()
            torch.cuda.empty_cache()
    out["total_s"] = round(time.perf_counter() - start, 1)
    args.out.write_text(json.dumps(out, indent=1, default=str))


def line(cell: dict[str, Any]) -> str:
    """The cell's gap totals: each capture's (step less its CUPTI durations), and the pass's stitched one."""
    if "before" not in cell:
        return f"{cell['shape']} {cell['mode']} b{cell['batch']}: {cell.get('status')}"
    totals = [
        s["median_us"] - c["durations_us"] if "durations_us" in c else float("nan")
        for s, c in zip(cell["before"], cell["cupti"], strict=True)
    ]
    text = f"  capture gap totals (us): {' '.join(f'{t:.1f}' for t in totals)}; median {statistics.median(totals):.1f}"
    p = cell.get("pass")
    if p:
        text += (
            f"; pass: stitched {p['events_total_gap_us']:.1f} vs clean {p['clean_gap_total_us']:.1f} "
            f"({p['total_gap_diff_us']:+.1f} +/- {p['total_gap_noise_us']:.1f}), "
            f"second capture step {(p['capture_check'] or {}).get('step_shift_ns', float('nan')) / 1e3:+.1f}"
        )
    if "after" in cell:
        step0 = cell["after"][0]["median_us"]
        text += "; after: " + " ".join(f"{s['median_us'] - step0:+.1f}" for s in cell["after"])
    return text


if __name__ == "__main__":
    main()
