"""Lab tool: the gap between steps as the pass reads it (the events) and as the timer bridge reads it, in one process.

CUPTI's gap between piecewise steps takes one of two values about 1.1 us apart from process to process; the
events' reading of it (op 0's class, ``embed``) agrees with the low one and misses the high one (docs/gaps.md). The
timer bridge of ``step_pair.py`` (a timer before the last op, one after op 0 of the next step, no timer at the
boundary) read the high value without CUPTI in 13 of 14 piecewise passes, even where CUPTI's reference in its
process took the low one. Which process a value belongs to is what decides it, so here each cell runs the pass
(``bench_sampled_gaps.run_cell``, as the bench does) and then the bridge (``step_pair.cell``) in the same process,
one after the other, and gives op 0's class from the pass (the events' reading, CUPTI's reference, the boundary
lag) beside the bridge's table. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/pass_and_bridge.py --out $OUT/pass_and_bridge.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for step_pair

CELLS = "llama-3.2-1b:piecewise:1,llama-3.2-1b:piecewise:8,llama-3.2-1b:piecewise:64,llama-3-8b:piecewise:1"
OP0_FIELDS = (
    "events_gap_ns_median",
    "cupti_gap_ns_median",
    "gap_diff_ns",
    "gap_agrees",
    "events_gap_under_cupti_ns_median",
    "boundary_lag_ns",
    "cupti_cycle_gap_ns_median",
    "gap_verdict",
)


def op0_class(cell: dict[str, Any]) -> dict[str, Any]:
    """Op 0's class (``embed``) from the bench cell's cupti_check, the fields this tool compares."""
    check = (cell.get("kernel_pass") or {}).get("cupti_check") or {}
    for row in check.get("ops") or []:
        if row.get("op") == "embed":
            return {k: row.get(k) for k in OP0_FIELDS}
    return {}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=CELLS, help="shape:mode:batch,... (graph modes)")
    parser.add_argument("--kernel-seconds", type=float, default=5.0, help="the pass's sampled cycles, per cell")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import bench_sampled_gaps as bench
    import step_pair
    import torch

    from launchprobe.measure import kernel_pass

    bench_args = argparse.Namespace(
        context=1024, steps=30, density="sampled", reach="", orders="", kernel_seconds=args.kernel_seconds, pdl=True
    )
    costs = kernel_pass.measure_event_costs()
    out: list[dict[str, Any]] = []
    for item in args.cells.split(","):
        shape, mode, batch = item.split(":")
        model, config = bench.build(shape, [int(batch)], bench_args)
        state: dict[str, Any] = {"costs": costs}  # per model, as the bench keeps it per shape (kernel counts)
        cell = bench.run_cell(model, config, state, mode, int(batch), bench_args)[0]
        del model
        gc.collect()
        torch.cuda.empty_cache()
        bridge = step_pair.cell(shape, mode, int(batch), 96, 32)
        gc.collect()
        torch.cuda.empty_cache()
        record = {"cell": item, "pass": {"line": bench.line(cell), "op0": op0_class(cell)}, "bridge": bridge}
        out.append(record)
        op0 = record["pass"]["op0"]
        print(
            f"{item:26} events {(op0.get('events_gap_ns_median') or 0) / 1e3:6.2f}"
            f"  CUPTI {(op0.get('cupti_gap_ns_median') or 0) / 1e3:6.2f}"
            f"  lag {(op0.get('boundary_lag_ns') or 0) / 1e3:+5.2f}  verdict {op0.get('gap_verdict')}"
            f" | bridge {bridge['bridge_gap_ns'] / 1e3:6.2f}  its CUPTI {bridge['cupti_clean_gap_ns'] / 1e3:6.2f}",
            flush=True,
        )
        args.out.write_text(json.dumps({"tool": "benchmarks/field/pass_and_bridge.py", "cells": out}))


if __name__ == "__main__":
    main()
