"""Lab tool: each op class's reading against CUPTI with and without the pass's end shifts, offline, for the passes
of recorded matrices (``capture_sampled_raw.py`` OUTDIRs) whose CUPTI check has op classes. Every pass is stitched
again from its own steps (``sampled.stitch``, the clean speed and, or not, the end shifts it used); CUPTI's class
gap is the pass's reading less its reported difference. docs/performance.md ("Open: the end shifts in eager") has
what it printed for 8B eager b64 on 2026-12-02; no GPU:

    python3 benchmarks/field/end_shift_eval.py OUTDIR [OUTDIR ...] [--modes eager]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from fixture_cut import recorded_passes, restitch

BAR_NS, BAR_REL = 1_000.0, 0.15  # the op bar


def within(miss: float, cupti: float) -> bool:
    """A class's miss against CUPTI's value within the bar."""
    return abs(miss) <= max(BAR_NS, BAR_REL * abs(cupti))


def _class_medians(record: dict[str, Any], reach: int, shifts: list[int | None] | None) -> dict[str, float]:
    stitched, _ = restitch(record, reach, shifts)
    by_class: dict[str, list[int]] = {}
    for row in stitched.rows:
        by_class.setdefault(row["op"], []).append(row["gap_before_ns"])
    return {op: statistics.median(gaps) for op, gaps in by_class.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dirs", type=Path, nargs="+")
    parser.add_argument("--modes", default="eager,piecewise,full")
    args = parser.parse_args()
    modes = tuple(args.modes.split(","))
    for out_dir in args.out_dirs:
        for record, cell in recorded_passes(out_dir, modes):
            kp = cell["kernel_pass"]
            check = kp.get("cupti_check") or {}
            if not check.get("ops"):
                continue
            reach = record["reach"] or kp["reach"]
            shifted = _class_medians(record, reach, record["stitch_args"][1])
            plain = _class_medians(record, reach, None)
            rows = []
            for op in check["ops"]:
                name = op["op"]
                cupti = shifted[name] - op["gap_diff_ns"]
                rows.append((name, cupti, shifted[name] - cupti, plain[name] - cupti))

            with_shifts = sum(within(r[2], r[1]) for r in rows)
            without = sum(within(r[3], r[1]) for r in rows)
            print(
                f"{out_dir.name} {cell['shape']} {record['mode']} b{record['bucket']} reach {reach} "
                f"(CUPTI trusted: {check.get('cupti_trusted')}): within the bar {with_shifts} of {len(rows)} with the "
                f"end shifts, {without} without"
            )
            print(
                "   class: miss with, without (us): "
                + ", ".join(f"{n} {a / 1e3:+.2f} {b / 1e3:+.2f}" for n, _, a, b in rows)
            )


if __name__ == "__main__":
    main()
