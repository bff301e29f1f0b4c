"""Lab tool: cut a field fixture of timer-pair cells out of a recorded matrix (``capture_sampled_raw.py``'s
OUTDIR/raw.json.gz and its bench JSON), in the form the timer field tests read (tests/fixtures/field/README.md):

    python3 benchmarks/field/timer_fixture.py RAW_JSON_GZ SAMPLED_JSON OUT_JSON_GZ --cells llama-3-8b:1,... \
        --provenance "..."

Per cell: op names, host_launched, kernels per op, the clean step (ms), CUPTI's clean durations, the timer-step
durations, every timer-pair step ([variant, clean reference ns, [[op, reading ns from the step's first], ...]]),
CUPTI's kernels of the clean reference steps ([start, end] ns from the step's first), the pass's timer_pairs record
and its events' op check.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any


def cut(raw: list[dict[str, Any]], bench: dict[str, Any], wanted: set[tuple[str, int]]) -> list[dict[str, Any]]:
    passes, counts, latest = [], [], None
    for r in raw:  # each pass after the counting pass of its bucket
        if "counts_for" in r:
            latest = r["counts"]
        elif "names" in r:
            if latest is None or len(latest) != len(r["names"]):
                raise SystemExit(f"no counting pass before the {r['mode']} b{r['bucket']} pass")
            passes.append(r)
            counts.append(latest)
    cells = [c for c in bench["cells"] if c.get("kernel_pass") is not None]
    if len(passes) != len(cells):
        raise SystemExit(f"{len(passes)} passes in the raw streams, {len(cells)} cells with a pass in the bench JSON")
    out = []
    for record, cell, per_op in zip(passes, cells, counts):
        if (cell["shape"], cell["batch"]) not in wanted or record["bucket"] != cell["batch"]:
            continue
        kp = cell["kernel_pass"]
        steps = []
        for variant, _, ends, reference in record["timer_steps"]:
            first = min(t for _, t in ends)
            steps.append([variant, reference, [[i, t - first] for i, t in ends]])
        kernels = [[[s - step[0][0], e - step[0][0]] for s, e in step] for step in record["cupti"]["kernels"]]
        out.append(
            {
                "shape": cell["shape"],
                "mode": record["mode"],
                "batch": record["bucket"],
                "names": record["names"],
                "host_launched": record["host_launched"],
                "counts": per_op,
                "clean_step_ms": record["result"]["clean_step_ms"],
                "durations": record["durations"],
                "timer_durations": record["timer_durations"],
                "timer_steps": steps,
                "cupti_kernels": kernels,
                "timer_pairs": kp["timer_pairs"],
                "event_ops": kp["cupti_check"]["ops"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("bench", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cells", required=True, help="shape:batch,...")
    parser.add_argument("--provenance", required=True)
    args = parser.parse_args()
    wanted = {(s, int(b)) for s, b in (c.rsplit(":", 1) for c in args.cells.split(","))}
    raw = json.loads(gzip.decompress(args.raw.read_bytes()))
    cells = cut(raw, json.loads(args.bench.read_text()), wanted)
    if len(cells) != len(wanted):
        raise SystemExit(f"found {len(cells)} of the {len(wanted)} cells asked for")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; not overwritten")
    doc = {"provenance": args.provenance, "cells": cells}
    args.out.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 9))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB, {len(cells)} cells)")


if __name__ == "__main__":
    main()
