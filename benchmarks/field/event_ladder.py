"""Lab tool: what one CUDA event costs the ops after it in an eager step, by distance, on the host and on the GPU.

The sampled pass's gap before op j + r is d_far - d_near - duration: the far pair's reading (anchor j to op j + r)
less the near pair's (to op j + r - 1). It is right only if the anchor's effect on op j + r's end equals its effect
on op j + r - 1's. In host-bound eager steps (llama-3.2-1b on the H200) the stitched step read 1-9% long and the far
pair carried more than the near one (docs/gaps.md, "The order of a pair's two steps"). This tool measures that
effect directly, as a function of the distance d, in plain loops over the clean eager ops:

- "single" steps: one event after op k alone, for every op k used below; its end from the step's boundary event
  is the clean step's (no event before it but the boundary, which every step has): F(k).
- "ladder" steps: an anchor event after op j and one after op j + d. A(j, d) = (e_{j+d} - e_j) - (F(j + d) - F(j)):
  what the anchor added to the span, on the GPU. A(d) is its mean over the anchors; the pass's pairs read right
  where A(r) = A(r - 1).
- "plain" steps: no event. Every step records the host's clock before each op's launch (``perf_counter_ns``); per
  ladder, H(j, d') = (t_{j+d'} - t_j) less the plain steps' = how much later the host launches op j + d' after the
  anchor: the host's share of A.

Steps run back to back in rotated order (each cycle runs every variant once), the events read after each cycle's
sync; each ladder runs right after the same anchor's one op shorter (the near-first order of docs/gaps.md). The
2026-12-02 23:53 run kept every launch time of every step (24 MB, too large to come back from the GPU machine); a
step now keeps only those its summary reads. Printed per cell: A(d) and H(d) against d, and A(d) - A(d - 1) where
both were measured. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/event_ladder.py --out $OUT/ladder.json.gz \
        [--cells llama-3.2-1b:1,llama-3.2-1b:8,llama-3-8b:1] [--distances 1,2,...,22,31,32] \
        [--anchors 8] [--seconds 30]

``--summarize LADDER_JSON[.gz]`` prints the tables again from a saved file, no GPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

DISTANCES = ",".join(str(d) for d in [*range(1, 23), 31, 32])  # two layers of 1B eager, and a third
CELLS = "llama-3.2-1b:1,llama-3.2-1b:8,llama-3-8b:1"


def variants(n: int, anchors: int, distances: list[int]) -> list[tuple[str, int, int]]:
    """(kind, anchor, distance) per variant: plain, a single event after every op used, a ladder per anchor and
    distance. Anchors are spread over the step, after its first layer, so that the farthest end is in the step."""
    reach = max(distances)
    first, last = min(12, n - reach - 1), n - reach - 1
    if last < first:
        raise SystemExit(f"a step of {n} ops is too short for a distance of {reach}")
    step = max((last - first) // max(anchors - 1, 1), 1)
    chosen = sorted({min(first + i * step, last) for i in range(anchors)})
    out: list[tuple[str, int, int]] = [("plain", -1, 0)]
    used = sorted(set(chosen) | {j + d for j in chosen for d in distances})
    out += [("single", k, 0) for k in used]
    out += [("ladder", j, d) for j in chosen for d in distances]
    return out


def run_cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from bench_sampled_gaps import lab_cell

    ops, _counts, clean, _pool = lab_cell(shape, batch, "eager", pdl=args.pdl)
    n = len(ops)
    runs = [op.run for op in ops]
    plan = variants(n, args.anchors, [int(d) for d in args.distances.split(",")])
    kept = sorted({p[1] for p in plan if p[0] == "single"})  # the ops whose launch times are kept
    stream = torch.cuda.current_stream()  # bound once, as the pass records its events
    steps: list[list[Any]] = []  # [variant, {op: host ns from the first launch}, {op: GPU ns from boundary}]

    def event() -> Any:  # as the pass's: created and valid before the step runs (no creation inside the step)
        made = torch.cuda.Event(enable_timing=True, external=True)
        made.record()
        return made

    deadline = time.monotonic() + args.seconds
    cycle = 0
    while time.monotonic() < deadline or cycle < 3:
        order = [(cycle + i) % len(plan) for i in range(len(plan))]
        boundaries = [event() for _ in order]
        marks: list[dict[int, Any]] = []  # per slot, op -> its event
        for v in order:
            kind, j, d = plan[v]
            at = {j} if kind == "single" else ({j, j + d} if kind == "ladder" else set())
            marks.append({k: event() for k in at})
        torch.cuda.synchronize()
        hosts: list[list[int]] = []
        for slot, events in enumerate(marks):
            clock = [0] * n
            boundaries[slot].record()
            for i, run in enumerate(runs):
                clock[i] = time.perf_counter_ns()
                run()
                if i in events:
                    events[i].record(stream)
            hosts.append(clock)
        torch.cuda.synchronize()
        for slot, v in enumerate(order):
            ends = {k: round(boundaries[slot].elapsed_time(e) * 1e6) for k, e in marks[slot].items()}
            clock = hosts[slot]
            kind, j, d = plan[v]  # the launch times a variant's summary reads: all for plain, two for a ladder
            wanted = kept if kind == "plain" else ([j, j + d] if kind == "ladder" else [])
            steps.append([v, {k: clock[k] - clock[0] for k in wanted}, ends])
        cycle += 1
    clean.run()
    torch.cuda.synchronize()
    return {
        "shape": shape,
        "batch": batch,
        "names": [op.name for op in ops],
        "variants": [list(p) for p in plan],
        "cycles": cycle,
        "steps": steps,
    }


def summarize(cell: dict[str, Any]) -> dict[str, Any]:
    """A(d), H(d) and A(d) - A(d - 1), means over the anchors (module docstring), in ns."""
    plan = [tuple(p) for p in cell["variants"]]
    by_variant: dict[int, list[Any]] = {}
    for v, clock, ends in cell["steps"]:
        launched = {int(k): t for k, t in clock.items()}
        by_variant.setdefault(v, []).append((launched, {int(k): t for k, t in ends.items()}))
    plain = next(v for v, p in enumerate(plan) if p[0] == "plain")
    plain_clock = {k: statistics.median(c[k] for c, _ in by_variant[plain]) for k in by_variant[plain][0][0]}
    first_end = {
        p[1]: statistics.median(e[p[1]] for _, e in by_variant[v]) for v, p in enumerate(plan) if p[0] == "single"
    }
    gpu: dict[int, list[float]] = {}
    host: dict[int, list[float]] = {}
    for v, (kind, j, d) in enumerate(plan):
        if kind != "ladder" or v not in by_variant:
            continue
        span = statistics.median(e[j + d] - e[j] for _, e in by_variant[v])
        gpu.setdefault(d, []).append(span - (first_end[j + d] - first_end[j]))
        launched = statistics.median(c[j + d] - c[j] for c, _ in by_variant[v])
        host.setdefault(d, []).append(launched - (plain_clock[j + d] - plain_clock[j]))
    a = {d: statistics.mean(x) for d, x in sorted(gpu.items())}
    h = {d: statistics.mean(x) for d, x in sorted(host.items())}
    return {
        "gpu_ns": a,
        "host_ns": h,
        "gpu_step_ns": {d: a[d] - a[d - 1] for d in a if d - 1 in a},
        "anchors": len(next(iter(gpu.values()), [])),
        "steps_per_variant": min((len(x) for x in by_variant.values()), default=0),
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return dict(json.loads(gzip.decompress(data) if path.suffix == ".gz" else data))


def print_cell(cell: dict[str, Any]) -> None:
    s = summarize(cell)
    print(
        f"{cell['shape']} eager b{cell['batch']}: {cell['cycles']} cycles, {s['anchors']} anchors, "
        f"{s['steps_per_variant']} steps a variant"
    )
    print("   d:        " + " ".join(f"{d:>6}" for d in s["gpu_ns"]))
    print("   A(d) us:  " + " ".join(f"{x / 1e3:+6.2f}" for x in s["gpu_ns"].values()))
    print("   H(d) us:  " + " ".join(f"{s['host_ns'].get(d, float('nan')) / 1e3:+6.2f}" for d in s["gpu_ns"]))
    print("   A(d)-A(d-1) us: " + ", ".join(f"d={d} {x / 1e3:+.2f}" for d, x in s["gpu_step_ns"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cells", default=CELLS)
    parser.add_argument("--distances", default=DISTANCES)
    parser.add_argument("--anchors", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pdl", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--summarize", type=Path, help="print the tables of a saved LADDER_JSON, no GPU")
    args = parser.parse_args()
    if args.summarize is not None:
        for cell in read(args.summarize)["cells"]:
            print_cell(cell)
        return
    if args.out is None:
        parser.error("--out is required to measure")
    from bench_sampled_gaps import lab_cells

    measured: list[dict[str, Any]] = []
    for shape, batch in lab_cells(args.cells):
        measured.append(run_cell(shape, batch, args))
        print_cell(measured[-1])
        write(args.out, {"cells": measured})  # after each cell: a timeout keeps what ran
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
