"""Lab tool: what the pass's timer-pair steps run, as CUPTI sees them, against clean steps.

The timer pairs (``analysis.timer_pairs``) read each graphed op's gap as the difference of a timer after op i - 1
and one after op i, less op i's clean duration. In 8B piecewise b8 that read gate_up about 4 us long
(docs/performance.md, 2026-12-02 from 02:42 UTC). Here CUPTI records clean steps and every timer variant of the
pass (``kernel_pass.TimerVariants``, the pass's own targets) interleaved, one step at a time with a sync between,
and gives per op class, for the targets: the op's duration and gap in the timer steps less in the clean steps,
each timer's end less its op's end, the timers' readings less CUPTI's ends of the same steps, and the pairs'
reading (the timers' difference less the clean duration) less CUPTI's clean gap: where a miss comes from. It checks
that the timer steps launch the clean step's kernels, the timers aside. The same steps then run again without CUPTI
("no CUPTI": the readings there less under CUPTI). With ``--back-to-back`` a round's steps are queued behind each
other with no sync between, as the pass runs them, and read after the round. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/timer_cupti.py --out $OUT/timer_cupti.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

CELLS = "llama-3-8b:piecewise:8,llama-3-8b:full:8,llama-3-8b:piecewise:1,llama-3-8b:full:1"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _p(values: Sequence[float], q: int) -> float:
    return float(statistics.quantiles(values, n=10)[q - 1]) if len(values) >= 10 else float("nan")


def split_rows(
    rows: Sequence[tuple[str, int, int]], sizes: Sequence[int]
) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]], list[str]]]:
    """CUPTI's rows into steps of ``sizes`` kernels each: per step its op kernels, its timer kernels (start, end)
    and the op kernels' names."""
    if len(rows) != sum(sizes):
        raise SystemExit(f"CUPTI saw {len(rows)} kernels, the steps launch {sum(sizes)}")
    out, at = [], 0
    for size in sizes:
        mine = rows[at : at + size]
        at += size
        ops = [(s, e) for name, s, e in mine if "timer" not in name]
        timers = [(s, e) for name, s, e in mine if "timer" in name]
        out.append((ops, timers, [name for name, _, _ in mine if "timer" not in name]))
    return out


def cell(shape: str, mode: str, batch: int, rounds: int, back_to_back: bool = False) -> dict[str, Any]:
    import torch
    from bench_sampled_gaps import lab_cell

    from launchprobe.analysis import sampled, timer_pairs
    from launchprobe.measure import kernel_pass
    from launchprobe.measure.cupti import cuda_intervals

    ops, counts, clean, pool = lab_cell(shape, batch, mode)
    names = [op.name for op in ops]
    timings, _ = kernel_pass.op_layout(mode, ops)
    targets = timer_pairs.pair_targets([not t.host_launched for t in timings])
    timers = kernel_pass.TimerVariants(clean, ops, targets, pool, None, pdl=True)
    for runner in timers.runners:
        runner.run()
    torch.cuda.synchronize()
    order: list[int] = []  # -1: clean
    readings: list[dict[int, int]] = []

    def work(order: list[int], readings: list[dict[int, int]]) -> None:
        for _ in range(rounds):
            ran = [-1, *range(len(timers))]
            for v in ran:
                (clean if v < 0 else timers.runners[v]).run()
                if not back_to_back:
                    torch.cuda.synchronize()
                    readings.append(timers.read(v, None) if v >= 0 else {})
                order.append(v)
            if back_to_back:  # the round's steps queued behind each other, as the pass runs them; read after
                torch.cuda.synchronize()
                readings.extend(timers.read(v, None) if v >= 0 else {} for v in ran)

    rows = [row for row in cuda_intervals(lambda: work(order, readings)) if not row[0].startswith("Memcpy DtoH")]
    plain_readings: list[dict[int, int]] = []  # the same steps again without CUPTI: what CUPTI does to the readings
    work([], plain_readings)
    per_clean = sum(counts)
    steps = split_rows(rows, [per_clean + (len(timers.marks[v]) if v >= 0 else 0) for v in order])
    clean_names = steps[0][2]
    mismatched = sorted({v for v, (_, _, n) in zip(order, steps) if n != clean_names})
    clean_ops = [sampled.group_ops(k, counts) for v, (k, _, _) in zip(order, steps) if v < 0]
    clean_dur = [_median([s[i][1] - s[i][0] for s in clean_ops]) for i in range(len(ops))]
    clean_gap = [_median([s[i][0] - s[i - 1][1] for s in clean_ops]) if i else 0.0 for i in range(len(ops))]
    per_op: dict[int, dict[str, list[float]]] = {}
    plain: dict[int, list[float]] = {}
    without: dict[int, list[float]] = {}
    for v, read in zip(order, plain_readings):
        for i in targets[v] if v >= 0 else []:
            without.setdefault(i, []).append(read[i] - read[i - 1])
    for v, (kernels, timer_rows, _), read in zip(order, steps, readings):
        if v < 0:
            continue
        spans = sampled.group_ops(kernels, counts)
        timer_end = dict(zip(timers.marks[v], (e for _, e in timer_rows)))
        for i in targets[v]:
            d = per_op.setdefault(i, {})
            d.setdefault("d_dur", []).append(spans[i][1] - spans[i][0] - clean_dur[i])
            d.setdefault("d_gap", []).append(spans[i][0] - spans[i - 1][1] - clean_gap[i])
            d.setdefault("lag_before", []).append(timer_end[i - 1] - spans[i - 1][1])
            d.setdefault("lag_after", []).append(timer_end[i] - spans[i][1])
            reading = read[i] - read[i - 1]
            d.setdefault("reading_vs_cupti_ends", []).append(reading - (spans[i][1] - spans[i - 1][1]))
            plain.setdefault(i, []).append(reading)
    classes: dict[str, list[int]] = {}
    for i in per_op:
        classes.setdefault(names[i], []).append(i)
    out = []
    for name, members in classes.items():
        row: dict[str, Any] = {"op": name, "count": len(members)}
        for key in ("d_dur", "d_gap", "lag_before", "lag_after", "reading_vs_cupti_ends"):
            row[key + "_ns"] = _median([_median(per_op[i][key]) for i in members])
        row["pair_miss_ns"] = _median([_median(plain[i]) - clean_dur[i] - clean_gap[i] for i in members])
        row["without_cupti_ns"] = _median([_median(without[i]) - _median(plain[i]) for i in members])
        row["clean_dur_ns"] = _median([clean_dur[i] for i in members])
        row["clean_gap_ns"] = _median([clean_gap[i] for i in members])
        durs = [s[members[0]][1] - s[members[0]][0] for s in clean_ops]
        row["clean_dur_p10_p90_ns"] = [_p(durs, 1), _p(durs, 9)]
        out.append(row)
    return {
        "shape": shape,
        "mode": mode,
        "batch": batch,
        "rounds": rounds,
        "back_to_back": back_to_back,
        "variants": len(timers),
        "variants_with_other_kernels": mismatched,
        "classes": out,
    }


def show(result: dict[str, Any]) -> str:
    head = f"{result['shape']} {result['mode']} b{result['batch']}: {result['variants']} variants x {result['rounds']}"
    head += ", back to back" if result.get("back_to_back") else ", a sync after each step"
    if result["variants_with_other_kernels"]:
        head += f"; variants launching other kernels: {result['variants_with_other_kernels']}"
    columns = "  op           n  dur us  gap us  d_dur  d_gap  lag-1  lag  read-ends  pair miss  no CUPTI  dur p10-p90"
    lines = [head, columns]
    for r in result["classes"]:
        p10, p90 = r["clean_dur_p10_p90_ns"]
        lines.append(
            f"  {r['op']:<11}{r['count']:>3} {r['clean_dur_ns'] / 1e3:7.2f} {r['clean_gap_ns'] / 1e3:7.2f}"
            f" {r['d_dur_ns'] / 1e3:+6.2f} {r['d_gap_ns'] / 1e3:+6.2f} {r['lag_before_ns'] / 1e3:6.2f}"
            f" {r['lag_after_ns'] / 1e3:5.2f} {r['reading_vs_cupti_ends_ns'] / 1e3:+9.2f}"
            f" {r['pair_miss_ns'] / 1e3:+10.2f} {r['without_cupti_ns'] / 1e3:+9.2f}"
            f"  {p10 / 1e3:.1f}-{p90 / 1e3:.1f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default=CELLS, help="shape:mode:batch,...")
    parser.add_argument("--rounds", type=int, default=32, help="clean steps, and steps of each timer variant")
    parser.add_argument("--back-to-back", action="store_true", help="no sync between the steps of a round")
    args = parser.parse_args(argv)
    results = []
    for spec in args.cells.split(","):
        shape, mode, batch = spec.split(":")
        result = cell(shape, mode, int(batch), args.rounds, args.back_to_back)
        print(show(result), flush=True)
        results.append(result)
        args.out.write_text(json.dumps(results, indent=1))
        gc.collect()


if __name__ == "__main__":
    main()
