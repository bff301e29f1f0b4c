"""Lab tool: what CUPTI saw of the variant steps of each pass's CUPTI cycle, from capture_sampled_raw.py's files.

Reads OUTDIR/raw.json.gz and OUTDIR/cycle_MODE.json.gz (graph modes) and prints, per pass:
- the idle after an event node less the same gap in the cycle's clean steps, by L, the number of kernels before
  the next event of the step (3, 4, or 12 and more);
- per op class, the far and near pairs' arithmetic done on CUPTI's op ends instead of the events, against CUPTI's
  gap in the cycle's clean steps, and the part of that difference the anchors' idle makes (far steps' idle after
  the anchor less near steps').
docs/performance.md (2026-12-01, 18:36 UTC) has what it showed. Here, after a capture:

    python3 benchmarks/field/cycle_ops.py OUTDIR
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _gap(step: list[int], i: int) -> int:
    return step[2 * i] - step[2 * i - 1]


def report(record: dict[str, Any], steps: list[list[Any]]) -> list[str]:
    names, hosted, reach = record["names"], record["host_launched"], record["reach"]
    roles, variants = record["plan"]["roles"], record["plan"]["variants"]
    shifts = [x or 0 for x in record["stitch_args"][1] or [0] * len(names)]
    durations, n = record["durations"], len(names)
    clean = [flat for v, _, flat in steps if v < 0]
    clean_gap = [0.0] + [_median([_gap(s, i) for s in clean]) for i in range(1, n)]
    by_distance: dict[int, list[float]] = defaultdict(list)
    far: dict[int, list[list[int]]] = defaultdict(list)
    near: dict[int, list[list[int]]] = defaultdict(list)
    for v, _, flat in steps:
        if v < 0 or roles[v] == "dense":
            continue
        marks = sorted(variants[v])
        for q, e in enumerate(marks):
            if e + 1 < n and not hosted[e] and not hosted[e + 1]:  # an event node between two graphed ops
                distance = min(marks[q + 1] - e, 12) if q + 1 < len(marks) else 12
                by_distance[distance].append(_gap(flat, e + 1) - clean_gap[e + 1])
        if roles[v] in ("far", "near"):
            for j in variants[v][0::2]:
                (far if roles[v] == "far" else near)[j].append(flat)
    out = [
        "  idle after an event node less clean, by kernels to the next event: "
        + ", ".join(
            f"L={d}{'+' if d == 12 else ''} {_median(v) / 1e3:+.2f} us ({len(v)})"
            for d, v in sorted(by_distance.items())
        )  # fmt: skip
    ]
    error: dict[str, list[float]] = defaultdict(list)
    anchor: dict[str, list[float]] = defaultdict(list)
    for i in range(reach, n):
        a = i - reach
        if not far[a] or not near[a]:
            continue
        d_far = _median([s[2 * i + 1] - s[2 * a + 1] for s in far[a]])
        d_near = _median([s[2 * i - 1] - s[2 * a + 1] for s in near[a]])
        estimate = d_far - d_near - durations[i] + shifts[i] - shifts[i - 1]
        error[names[i]].append(estimate - clean_gap[i])
        if not hosted[a] and not hosted[a + 1]:
            anchor[names[i]].append(
                _median([_gap(s, a + 1) for s in far[a]]) - _median([_gap(s, a + 1) for s in near[a]])
            )
    out.append(
        "  per class: CUPTI's far-near arithmetic less CUPTI's clean gap; of which the anchors' idle, far less near"
    )
    for c, values in error.items():
        idle = f"{_median(anchor[c]) / 1e3:+6.2f} us" if anchor[c] else "     - (host-launched anchor)"
        out.append(f"    {c:12s} {_median(values) / 1e3:+6.2f} us   {idle}")
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    with gzip.open(folder / "raw.json.gz", "rt") as f:
        records = [r for r in json.load(f) if "steps" in r]
    cycles: dict[str, list[Any]] = {}
    for mode in ("piecewise", "full"):
        path = folder / f"cycle_{mode}.json.gz"
        if path.exists():
            with gzip.open(path, "rt") as f:
                cycles[mode] = json.load(f)
    seen: dict[str, int] = defaultdict(int)
    for record in records:
        mode = record["mode"]
        k = seen[mode]
        seen[mode] += 1
        if mode not in cycles:
            continue
        bucket, n_ops, steps = cycles[mode][k]
        if (bucket, n_ops) != (record["bucket"], len(record["names"])):
            raise SystemExit(f"cycle_{mode}.json.gz pass {k} is not the raw record's ({bucket}, {n_ops} ops)")
        print(f"{mode} b{bucket}, {n_ops} ops:")
        print("\n".join(report(record, steps)))


if __name__ == "__main__":
    main()
