"""Lab tool: what puts the gap into a graph piece after attention (piecewise o_proj) into its high value?

``host_lead.py`` found CUPTI's gap before o_proj at its low value (about 1.6 us) in every step of a fresh process,
whatever the host's lead; inside the kernel pass it took a high one (about 2.8 us) in back-to-back steps. Here one
process takes the clean piecewise runner through the pass's stages, and after each runs 64 clean steps back to back
under CUPTI (and 64 with the host's lead bounded to 2 steps): fresh; the host thread pinned to its core; the pass's
variants built (graph pieces captured afresh with event nodes); three of the pass's cycles run; the whole kernel
pass run; the variants deleted. Printed per stage: the share of low steps, both values, the letters. On the GPU
machine:

    source .gpu/setup.sh; python3 benchmarks/field/piece_mode_stages.py --out $OUT/stages.json [--cells ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps
sys.path.insert(0, str(Path(__file__).resolve().parent))  # host_lead

CELLS = "llama-3.2-1b:8,llama-3-8b:8"


def cell(shape: str, batch: int, args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    import torch
    from bench_sampled_gaps import build, kernel_counts
    from host_lead import bounded, per_step, summary_line

    from launchprobe.analysis import sampled
    from launchprobe.classify import run_kernel_pass
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.cupti import cuda_intervals
    from launchprobe.measure.markers import Markers
    from launchprobe.measure.timing import pinned_host, time_steps_cuda, warm_up
    from launchprobe.workload.modes import prepare

    build_args = argparse.Namespace(context=1024, pdl=True, density="sampled", kernel_seconds=None)
    model, config = build(shape, [batch], build_args)
    markers = Markers("steps")
    pool = torch.cuda.graph_pool_handle()
    ops = model.step(batch)
    counts = kernel_counts(ops)
    clean = prepare("piecewise", batch, ops, pool, markers)
    warm_up(clean.run, 10, True)
    o_proj = [i for i, op in enumerate(ops) if op.name == "o_proj"]
    out: dict[str, Any] = {"shape": shape, "batch": batch, "stages": []}

    def probe(stage: str) -> None:
        for lead in (0, 2):
            bounded(clean.run, 8, lead)
            times: list[Any] = []

            def recorded(ld: int = lead, t: list[Any] = times) -> None:
                t.append(bounded(clean.run, args.steps, ld))

            rows = cuda_intervals(recorded)
            gpu_ms, host_ms = times[0]
            steps = per_step(rows, counts, o_proj, args.steps)
            out["stages"].append({"stage": stage, "lead": lead, "steps": steps, "gpu_ms": gpu_ms, "host_ms": host_ms})
            print(f"{stage:9s}", summary_line(shape, batch, "clean", lead, gpu_ms, host_ms, steps, 2200), flush=True)

    probe("fresh")
    with pinned_host():
        probe("pinned")
        timings, _ = kp.op_layout("piecewise", ops)
        plan = sampled.pair_plan(
            len(ops), args.spacing, sampled.DEFAULT_REACH, sampled.head_op(timings), sampled.piece_boundaries(timings)
        )
        variants = kp.Variants(clean, ops, plan.variants, pool, markers, after_replay=plan.after_replay)
        probe("variants")
        kp.run_cycles(variants, clean, 3, plan.follows)
        probe("cycles")
    clean_ms = sorted(time_steps_cuda(clean.run, 64))[32]
    run_kernel_pass(model, "piecewise", batch, clean_ms, config, state, clean, markers)
    probe("pass")
    del variants
    gc.collect()
    probe("deleted")
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default=CELLS)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--spacing", type=int, default=60)
    args = parser.parse_args()
    from launchprobe.measure import kernel_pass as kp

    state: dict[str, Any] = {"costs": kp.measure_event_costs()}
    out = []
    for spec in args.cells.split(","):
        shape, batch = spec.split(":")
        out.append(cell(shape, int(batch), args, {"costs": state["costs"]}))  # counts are per model: fresh state
        args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
