"""What the field fixture cutters share (``tail_fixture.py``, ``lm_head_fixture.py``, ``gap_total_fixture.py``, ...): a
matrix's passes as ``capture_sampled_raw.py`` recorded them, each with the cell the bench reported for it, and the
command line that writes a fixture from one or more such OUTDIRs."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def recorded_passes(
    out_dir: Path, modes: tuple[str, ...] = ("piecewise", "full")
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The passes of ``modes`` in OUTDIR/raw.json.gz, each with its cell of OUTDIR/sampled.json, in run order. Each
    pass gets ``kernel_counts``: the kernels per op of the counting pass recorded before it (None where none matches
    its op count)."""
    raw = json.loads(gzip.decompress((out_dir / "raw.json.gz").read_bytes()))
    counts: list[int] | None = None
    for record in raw:
        if "counts" in record:
            counts = [int(c) for c in record["counts"]]
        elif "names" in record:
            record["kernel_counts"] = counts if counts is not None and len(counts) == len(record["names"]) else None
    passes = [r for r in raw if "names" in r and r["mode"] in modes]
    recorded = [c for c in json.loads((out_dir / "sampled.json").read_text())["cells"] if c.get("kernel_pass")]
    recorded = [c for c in recorded if c["mode"] in modes]
    if len(passes) != len(recorded):
        raise SystemExit(f"{out_dir}: {len(passes)} raw passes, {len(recorded)} recorded cells")
    for record, cell in zip(passes, recorded):
        if int(record["bucket"]) != cell["batch"] or record["mode"] != cell["mode"]:
            raise SystemExit(f"{out_dir}: the raw passes and the recorded cells are not in one order")
    return list(zip(passes, recorded))


def restitch(record: dict[str, Any], reach: int, end_shifts: list[int | None] | None) -> tuple[Any, float]:
    """A recorded pass stitched again from its own steps (``sampled.stitch``), at the clean steps' median speed, with
    the given reach and end shifts; with that clean step (ns)."""
    import statistics

    from launchprobe.analysis import sampled
    from launchprobe.analysis.kernel_gaps import OpTiming

    ops = [OpTiming(n, layer, h) for n, layer, h in zip(record["names"], record["layers"], record["host_launched"])]
    raw = record["plan"]
    plan = sampled.Plan(len(ops), raw["spacing"], raw["variants"], raw["roles"], reach)
    steps = [sampled.SampledStep(v, n, {int(o): t for o, t in e}, ref) for v, n, e, ref in record["steps"]]
    clean = float(statistics.median(record["clean_in_cycles"]))
    return sampled.stitch(ops, steps, plan, record["durations"], clean, end_shifts), clean


def wanted_cells(argv: list[str]) -> dict[tuple[int, int], set[int] | None]:
    """``--cells OPS:BATCH[:N],...`` taken out of ``argv``: per (op count, batch), which such passes of an OUTDIR
    (1-based), None for all."""
    wanted: dict[tuple[int, int], set[int] | None] = {}
    if "--cells" in argv:
        at = argv.index("--cells")
        for item in argv[at + 1].split(","):
            ops, batch, *nth = item.split(":")
            chosen = wanted.setdefault((int(ops), int(batch)), set() if nth else None)
            if nth and chosen is not None:
                chosen.add(int(nth[0]))
        del argv[at : at + 2]
    return wanted


def int_option(argv: list[str], name: str, default: int) -> int:
    """``name N`` taken out of ``argv``: N, or ``default`` where it is not given."""
    if name not in argv:
        return default
    at = argv.index(name)
    value = int(argv[at + 1])
    del argv[at : at + 2]
    return value


def eager_passes(
    out_dir: Path, wanted: dict[tuple[int, int], set[int] | None]
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """The eager passes of OUTDIR that ``wanted`` asks for, each with its cell and what it stitched: op names,
    layers, host-launched flags, the plan, the reach, CUPTI's op durations, the end shifts, every sampled step with
    its clean reference, the clean steps timed in the cycles."""
    out = []
    seen: dict[tuple[int, int], int] = {}
    for record, cell in recorded_passes(out_dir, ("eager",)):
        key = (len(record["names"]), int(record["bucket"]))
        seen[key] = seen.get(key, 0) + 1
        nth = wanted.get(key, set())
        if key not in wanted or (nth is not None and seen[key] not in nth):
            continue
        out.append((record, cell, stitch_inputs(record, cell)))
    return out


def stitch_inputs(record: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """What a recorded pass stitched: op names, layers, host-launched flags, the plan, the reach, CUPTI's op
    durations, the end shifts, every sampled step with its clean reference, the clean steps timed in the cycles."""
    return {
        "shape": cell["shape"],
        "mode": record["mode"],
        "bucket": record["bucket"],
        # raw files recorded before the capture kept the pass's own reach hold the requested one (None)
        "reach": record["reach"] or cell["kernel_pass"]["reach"],
        "names": record["names"],
        "layers": record["layers"],
        "host_launched": record["host_launched"],
        "plan": record["plan"],
        "durations": record["durations"],
        "end_shifts": record["stitch_args"][1],
        "steps": record["steps"],
        "clean_in_cycles": record["clean_in_cycles"],
    }


def cut(
    description: str,
    cells: Callable[[Path], list[dict[str, Any]]],
    wanted: dict[tuple[int, int], set[int] | None] | None = None,
) -> None:
    """The cutters' command line: FIXTURE OUTDIR [OUTDIR ...] [--provenance TEXT], and ``--cells`` into ``wanted``
    where given (``wanted_cells``); writes {provenance, cells}."""
    if wanted is not None:
        wanted.update(wanted_cells(sys.argv))
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("fixture", type=Path)
    parser.add_argument("out_dirs", type=Path, nargs="+")
    parser.add_argument("--provenance", default="")
    args = parser.parse_args()
    found = [c for d in args.out_dirs for c in cells(d)]
    doc = {"provenance": args.provenance, "cells": found}
    args.fixture.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode()))
    print(f"wrote {len(found)} cells to {args.fixture} ({args.fixture.stat().st_size // 1024} KB)")
