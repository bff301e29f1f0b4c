"""Issue 13's validation on a GPU: classify's eager rows predict its own full-graph rows of the same kernels, and
the fusion what-if of the cuBLAS step (split-K reduce kernels) predicts the step that launches one kernel per op
(--projections gemv). One process, the variants side by side; prints a table and writes JSON to --out.

    python benchmarks/bench_predictions.py --out out/predictions.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from launchprobe import classify as job
from launchprobe.run.files import to_builtins
from launchprobe.run.schema import ClassifyResult, ClassifyRun


def run(shape: str, batches: list[int], modes: list[str], projections: str = "cublas") -> ClassifyRun:
    config = job.build_config(
        shape_spec=shape, overrides={}, batches=batches, context=1024, modes=modes, dtype="bf16",
        device="cuda", capture_sizes=None, ceilings_source="measured", warmup=10, steps=30, projections=projections,
    )  # fmt: skip
    return job.classify(config, progress=False)


def row(run: ClassifyRun, mode: str, batch: int) -> ClassifyResult:
    return next(r for r in run.results if r.mode == mode and r.batch == batch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="llama-3.2-1b,llama-3-8b")
    args = parser.parse_args()
    graphs: list[dict[str, object]] = []
    out: dict[str, object] = {"graphs": graphs}
    print("| shape | batch | eager ms | predicted graph ms | full ms | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    runs = {}
    for shape in args.shapes.split(","):
        t0 = time.perf_counter()
        runs[shape] = run(shape, [1, 8, 64], ["eager", "full"])
        for batch in (1, 8, 64):
            eager, full = row(runs[shape], "eager", batch), row(runs[shape], "full", batch)
            predicted, measured = eager.predicted_graph_step_ms, full.step_ms_median
            error = predicted / measured - 1 if predicted and measured else None
            graphs.append(
                {"shape": shape, "batch": batch, "eager_ms": eager.step_ms_median, "predicted_ms": predicted,
                 "full_ms": measured, "error": error, "eager_busy_ms": eager.gpu_busy_ms,
                 "kernels_per_step": eager.kernels_per_step}
            )  # fmt: skip
            print(f"| {shape} | {batch} | {eager.step_ms_median:.3f} | {predicted or float('nan'):.3f} | "
                  f"{measured or float('nan'):.3f} | {(error or float('nan')):+.1%} |", flush=True)  # fmt: skip
        print(f"({shape}: {time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    shape = args.shapes.split(",")[-1]
    cublas = row(runs[shape], "eager", 1)
    gemv = row(run(shape, [1], ["eager"], projections="gemv"), "eager", 1)
    what_if = next((w for w in cublas.what_ifs if w.kind == "fusion" and "extra kernels" in w.title), None)
    predicted = what_if.predicted_step_ns / 1e6 if what_if and what_if.predicted_step_ns else None
    print("\n| shape | batch | cuBLAS kernels/step | cuBLAS ms | fusion predicted ms | gemv kernels/step | gemv ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    cells = [shape, "1", f"{cublas.kernels_per_step}", f"{cublas.step_ms_median:.3f}",
             f"{predicted or float('nan'):.3f}", f"{gemv.kernels_per_step}", f"{gemv.step_ms_median:.3f}"]  # fmt: skip
    print("| " + " | ".join(cells) + " |")
    out["fusion"] = {"shape": shape, "cublas": to_builtins_row(cublas), "gemv": to_builtins_row(gemv),
                     "predicted_ms": predicted, "what_if": None if what_if is None else what_if.to_dict()}  # fmt: skip
    out["runs"] = {name: to_builtins(r) for name, r in runs.items()}
    args.out.write_text(json.dumps(out, indent=1, default=str))


def to_builtins_row(r: ClassifyResult) -> dict[str, object]:
    keep = ("mode", "batch", "step_ms_median", "gpu_busy_ms", "kernels_per_step", "host_ms_per_step", "verdict")
    return {k: getattr(r, k) for k in keep}


if __name__ == "__main__":
    main()
