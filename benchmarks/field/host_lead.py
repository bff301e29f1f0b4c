"""Lab tool: does the gap into a graph piece after attention (piecewise o_proj) follow how far the host runs ahead?

CUPTI's gap before o_proj takes one of two values about 1.1 us apart (docs/performance.md, 2026-12-02 07:00 UTC
session): low in the first steps after a sync, high in back-to-back steps. Here the clean piecewise runner, and the
same step with every graph piece captured afresh, run under CUPTI with the host's lead over the GPU bounded: before
launching step k the host waits for step k - L's end event (L = 1: every step on an idle GPU), and unbounded (the
back-to-back loop the pass's reference runs). Per (cell, runner, L), printed: the share of steps whose median gap
before o_proj (over the step's layers) is under ``--split`` us, the medians of both kinds, the idle between steps,
the host's ms per step launched and the GPU's. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/host_lead.py --out $OUT/lead.json [--cells llama-3.2-1b:8,...]

``--fixture OUT --inputs LEAD_JSON STAGES_JSON`` (no GPU) writes tests/fixtures/field/piece_mode_process_h200.json.gz
from this tool's output and piece_mode_stages.py's: per run, its cell, runner or stage, lead, the GPU's and the host's
ms per step, and per step the idle before it and the gap before each o_proj (ns).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

CELLS = "llama-3.2-1b:8,llama-3.2-1b:64,llama-3-8b:8"
LEADS = (1, 2, 3, 4, 6, 0)  # 0: unbounded


def bounded(run: Callable[[], Any], steps: int, lead: int) -> tuple[list[float], float]:
    """``steps`` steps, each launched only once step k - ``lead`` has ended (0: never wait); GPU ms per step from
    events between steps, and the host's mean ms per step launched."""
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    events[0].record()
    t0 = time.perf_counter_ns()
    for i in range(steps):
        if lead and i + 1 - lead >= 0:
            events[i + 1 - lead].synchronize()
        run()
        events[i + 1].record()
    host_ms = (time.perf_counter_ns() - t0) / 1e6 / steps
    events[-1].synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(steps)], host_ms


def per_step(rows: list[tuple[str, int, int]], counts: list[int], o_proj: list[int], steps: int) -> list[list[int]]:
    """Per step: the idle before it and the gap before each o_proj, ns, from CUPTI's kernels grouped by op."""
    from launchprobe.analysis.sampled import group_ops

    per = sum(counts)
    if len(rows) != per * steps:
        raise SystemExit(f"CUPTI saw {len(rows)} kernels, expected {per} x {steps}")
    out, last_end = [], None
    for s in range(steps):
        spans = group_ops([(start, end) for _, start, end in rows[s * per : (s + 1) * per]], counts)
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        idle = starts[0] - last_end if last_end is not None else -1
        out.append([idle, *[starts[i] - max(ends[:i]) for i in o_proj]])
        last_end = ends[-1]
    return out


def cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from bench_sampled_gaps import lab_cell

    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.cupti import cuda_intervals

    ops, counts, clean, pool = lab_cell(shape, batch, "piecewise")
    fresh = kp.recapture(clean, pool, None)
    for _ in range(5):
        fresh.run()
    torch.cuda.synchronize()
    o_proj = [i for i, op in enumerate(ops) if op.name == "o_proj"]
    result: dict[str, Any] = {"shape": shape, "batch": batch, "runs": []}
    for label, runner in (("clean", clean), ("recaptured", fresh)):
        for lead in LEADS:
            bounded(runner.run, 8, lead)  # the same lead before the recorded steps
            times: list[Any] = []

            def recorded(r: Any = runner, ld: int = lead, t: list[Any] = times) -> None:
                t.append(bounded(r.run, args.steps, ld))

            rows = cuda_intervals(recorded)
            gpu_ms, host_ms = times[0]
            steps = per_step(rows, counts, o_proj, args.steps)
            result["runs"].append({"runner": label, "lead": lead, "gpu_ms": gpu_ms, "host_ms": host_ms, "steps": steps})
            print(summary_line(shape, batch, label, lead, gpu_ms, host_ms, steps, args.split * 1e3), flush=True)
    return result


def summary_line(
    shape: str,
    batch: int,
    label: str,
    lead: int,
    gpu_ms: list[float],
    host_ms: float,
    steps: list[list[int]],
    split: float,
) -> str:
    gaps = [statistics.median(s[1:]) for s in steps]
    low = [g for g in gaps if g < split]
    high = [g for g in gaps if g >= split]
    letters = "".join("F" if g < split else "S" for g in gaps)
    idle = statistics.median([s[0] for s in steps[1:]]) / 1e3
    kinds = ", ".join(f"{k} {statistics.median(v) / 1e3:.2f}" for k, v in (("F", low), ("S", high)) if v)
    return (
        f"{shape:13s} b{batch:<3d} {label:10s} lead {lead or 'free':>4}: F {len(low) / len(gaps):4.0%} ({kinds} us)"
        f"  idle {idle:7.2f} us  gpu {statistics.median(gpu_ms):.3f} ms  host {host_ms:.3f} ms  {letters[:64]}"
    )


def write_fixture(path: Path, inputs: list[Path], provenance: str) -> None:
    """Both processes' runs in one gzipped file (the module docstring)."""
    import gzip

    lead, stages = (json.loads(p.read_text()) for p in inputs)
    runs = []
    for process, cells in (("host_lead", lead), ("stages", stages)):
        for c in cells:
            for run in c.get("runs", c.get("stages", [])):
                label = run.get("runner") or run.get("stage")
                runs.append(
                    {
                        "process": process,
                        "shape": c["shape"],
                        "batch": c["batch"],
                        "label": label,
                        "lead": run["lead"],
                        "gpu_ms": statistics.median(run["gpu_ms"]),
                        "host_ms": run["host_ms"],
                        "steps": run["steps"],
                    }
                )
    doc = {"provenance": provenance, "runs": runs}
    path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode()))
    print(f"wrote {len(runs)} runs to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fixture", type=Path, help="write the test fixture from --inputs instead of measuring")
    parser.add_argument("--inputs", type=Path, nargs=2, metavar=("LEAD_JSON", "STAGES_JSON"))
    parser.add_argument("--provenance", default="")
    parser.add_argument("--cells", default=CELLS)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--split", type=float, default=2.2, help="us: F below, S above")
    args = parser.parse_args()
    if args.fixture is not None:
        write_fixture(args.fixture, args.inputs, args.provenance)
        return
    if args.out is None:
        parser.error("--out is required to measure")
    import gc

    import torch

    out = []
    for spec in args.cells.split(","):
        shape, batch = spec.split(":")
        out.append(cell(shape, int(batch), args))
        gc.collect()
        torch.cuda.empty_cache()
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
