"""Lab tool: the piecewise head against CUPTI, offline. For every piecewise pass with a head variant in the raw
streams of ``capture_sampled_raw.py`` (OUTDIR/raw.json.gz): what CUPTI does to the step's start as the head variant
reads it (``sampled.head_cupti_effect``: its first piece's end under CUPTI less without), where the events under
CUPTI put that end against CUPTI's own in its clean steps (from the step before's last kernel end), and the head the
pass stitched against CUPTI's gap into the step, alone and with the effect added (op 0's row: no tail in it).
docs/performance.md has what it printed:

    python3 benchmarks/field/head_start.py OUTDIR [OUTDIR ...]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from launchprobe.analysis import sampled
from launchprobe.analysis.kernel_gaps import OpTiming


def records(path: Path) -> list[tuple[dict[str, Any], list[int]]]:
    """Each kernel pass with the counting pass's kernels per op recorded before it."""
    with gzip.open(path / "raw.json.gz", "rt") as f:
        data = json.load(f)
    out, counts = [], None
    for record in data:
        if "counts" in record:
            counts = record["counts"]
        elif "steps" in record and counts is not None:
            out.append((record, counts))
    return out


def steps_of(rows: list[list[Any]]) -> list[sampled.SampledStep]:
    return [sampled.SampledStep(v, n, {int(op): at for op, at in ends}, ref) for v, n, ends, ref in rows]


def main() -> None:
    print("| source | ops | b | effect us | events under CUPTI vs CUPTI's end | head vs CUPTI | + effect |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arg in sys.argv[1:]:
        for record, counts in records(Path(arg)):
            raw = record["plan"]
            plan = sampled.Plan(len(record["names"]), raw["spacing"], raw["variants"], raw["roles"], record["reach"])
            op = plan.head_op
            if record["mode"] != "piecewise" or op is None or "cupti_steps" not in record:
                continue
            clean, under = steps_of(record["steps"]), steps_of(record["cupti_steps"])
            effect = sampled.head_cupti_effect(plan, clean, under)
            if effect is None:
                continue
            kernels = np.asarray(record["cupti"]["kernels"], dtype=np.int64)
            bounds = np.cumsum([0, *counts])
            last_end = kernels[:, :, 1].max(axis=1)
            piece_end = kernels[:, bounds[op] : bounds[op + 1], 1].max(axis=1)
            cupti_gap = float(np.median(kernels[1:, 0, 0] - last_end[:-1]))
            cupti_end = float(np.median(piece_end[1:] - last_end[:-1]))
            head = plan.roles.index("head")
            under_end = float(np.median([s.ends[op] for s in under if s.variant == head]))
            ops = [OpTiming(n, la, h) for n, la, h in zip(record["names"], record["layers"], record["host_launched"])]
            clean_ns = record["result"]["clean_step_ms"] * 1e6  # the clean picture as the pass stitched it
            picture = sampled.stitch(ops, clean, plan, record["durations"], clean_ns, record["stitch_args"][1])
            miss = picture.rows[0]["gap_before_ns"] - cupti_gap  # op 0's row: the head alone (a kept tail apart)
            print(
                f"| {Path(arg).name} | {len(ops)} | {record['bucket']} | {effect.effect_ns / 1e3:+.2f} +/- "
                f"{effect.noise_ns / 1e3:.2f} | {(under_end - cupti_end) / 1e3:+.2f} | {miss / 1e3:+.2f} | "
                f"{(miss + effect.effect_ns) / 1e3:+.2f} |"
            )


if __name__ == "__main__":
    main()
