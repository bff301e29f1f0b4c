"""Lab tool: CUPTI's gap into each graph piece after attention (piecewise o_proj), step by step, from a recorded
piecewise matrix (``capture_sampled_raw.py``'s OUTDIR: raw.json.gz and cycle_piecewise.json.gz).

Per cell it prints, in run order, one letter per clean step: "F" where the median over the step's layers of the gap
before o_proj is under ``--split`` us, else "S"; first for CUPTI's 64 reference steps, then for the clean steps of
the CUPTI cycle; and the median gap of each kind. With ``--fixture``, it writes the cells of ``--cells`` in the form
tests/test_piece_modes_field.py reads (per clean step: the idle before it and its gaps before o_proj, in ns):

    python3 benchmarks/field/piece_modes.py OUTDIR [--cells llama-3.2-1b:8,...] [--fixture OUT_JSON_GZ]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any


def _shape(n_ops: int) -> str:
    return "llama-3.2-1b" if n_ops < 200 else "llama-3-8b"


def cells(out_dir: Path) -> list[dict[str, Any]]:
    """Per piecewise pass: its reference clean steps and the CUPTI cycle's clean steps, each as (the idle before the
    step's first kernel since the step before's last, the gap before each o_proj), in ns."""
    raw = json.loads(gzip.decompress((out_dir / "raw.json.gz").read_bytes()))
    cycle = json.loads(gzip.decompress((out_dir / "cycle_piecewise.json.gz").read_bytes()))
    passes, counts, latest = [], [], None
    for record in raw:
        if "counts_for" in record:
            latest = record["counts"]
        elif "names" in record and record.get("mode") == "piecewise":
            passes.append(record)
            counts.append(latest)
    out = []
    for record, per_op, (bucket, n_ops, steps) in zip(passes, counts, cycle):
        names = record["names"]
        if per_op is None or len(per_op) != len(names) or record["bucket"] != bucket or len(names) != n_ops:
            raise SystemExit(f"the raw streams and the cycle file do not match at b{bucket}")
        o_proj = [i for i, name in enumerate(names) if name == "o_proj"]
        bounds = [sum(per_op[:i]) for i in range(len(per_op) + 1)]
        reference: list[list[Any]] = []
        last_end: int | None = None
        for step in record["cupti"]["kernels"]:
            starts = [min(k[0] for k in step[a:b]) for a, b in zip(bounds, bounds[1:])]
            ends = [max(k[1] for k in step[a:b]) for a, b in zip(bounds, bounds[1:])]
            idle = starts[0] - last_end if last_end is not None else None
            reference.append([idle, [starts[i] - max(ends[:i]) for i in o_proj]])
            last_end = ends[-1]
        clean: list[list[Any]] = []
        previous_end: int | None = None
        for variant, first, spans in steps:
            starts, ends = spans[0::2], spans[1::2]
            if len(starts) != n_ops:
                previous_end = None
                continue
            idle = first + starts[0] - previous_end if previous_end is not None else None
            previous_end = first + max(ends)
            if variant < 0:
                clean.append([idle, [starts[i] - max(ends[:i]) for i in o_proj]])
        out.append({"shape": _shape(n_ops), "batch": bucket, "reference": reference, "cycle_clean": clean})
    return out


def _letters(steps: list[list[Any]], split_ns: float) -> str:
    return "".join("F" if statistics.median(gaps) < split_ns else "S" for _, gaps in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--split", type=float, default=2.2, help="us: F below, S above")
    parser.add_argument("--cells", default="", help="shape:batch,... for the fixture (default: all)")
    parser.add_argument("--fixture", type=Path)
    parser.add_argument("--provenance", default="")
    args = parser.parse_args()
    found = cells(args.out_dir)
    split_ns = args.split * 1e3
    for cell in found:
        print(f"{cell['shape']} piecewise b{cell['batch']}")
        for kind in ("reference", "cycle_clean"):
            steps = cell[kind]
            per_step = [statistics.median(g) for _, g in steps]
            low = [x for x in per_step if x < split_ns]
            high = [x for x in per_step if x >= split_ns]
            medians = ", ".join(
                f"{label} {len(xs)} steps at {statistics.median(xs) / 1e3:.2f} us"
                for label, xs in (("F", low), ("S", high))
                if xs
            )
            print(f"  {kind:11s} {_letters(steps, split_ns)[:120]}  ({medians})")
    if args.fixture is not None:
        wanted = {tuple(c.split(":")) for c in args.cells.split(",") if c}
        kept = [c for c in found if not wanted or (c["shape"], str(c["batch"])) in wanted]
        doc = {"provenance": args.provenance, "cells": kept}
        args.fixture.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode()))
        print(f"wrote {len(kept)} cells to {args.fixture}")


if __name__ == "__main__":
    main()
