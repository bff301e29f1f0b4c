"""Lab tool: CUPTI's gap into a graph piece after attention (piecewise o_proj), with the host thread on each CPU.

``piece_mode_stages.py`` found that gap at its low value in every step of one process and at its high value in
another, whatever the host's lead or the pass's stage. Here one process pins its host thread to each CPU in turn
(``--rounds`` times over all of them) and runs 64 clean piecewise steps back to back under CUPTI, then 64 without it
(the GPU's step time from events): per CPU, the share of low steps and the step time. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/piece_mode_cores.py --out $OUT/cores.json [--cell llama-3.2-1b:8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps
sys.path.insert(0, str(Path(__file__).resolve().parent))  # host_lead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cell", default="llama-3.2-1b:8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    from bench_sampled_gaps import lab_cell
    from host_lead import bounded, per_step

    from launchprobe.measure.cupti import cuda_intervals

    shape, batch = args.cell.split(":")
    ops, counts, clean, _ = lab_cell(shape, int(batch), "piecewise")
    o_proj = [i for i, op in enumerate(ops) if op.name == "o_proj"]
    cpus = sorted(os.sched_getaffinity(0))
    out: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            bounded(clean.run, 8, 0)
            rows = cuda_intervals(lambda: bounded(clean.run, args.steps, 0))
            steps = per_step(rows, counts, o_proj, args.steps)
            gaps = [statistics.median(s[1:]) for s in steps]
            low = sum(g < 2200 for g in gaps) / len(gaps)
            gpu_ms, host_ms = bounded(clean.run, args.steps, 0)
            letters = "".join("F" if g < 2200 else "S" for g in gaps)
            out.append(
                {"round": round_, "cpu": cpu, "low": low, "gpu_ms": statistics.median(gpu_ms), "host_ms": host_ms}
            )
            print(
                f"round {round_} cpu {cpu:2d}: F {low:4.0%}  step {statistics.median(gpu_ms):.4f} ms"
                f"  host {host_ms:.3f} ms  {letters}",
                flush=True,
            )
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
