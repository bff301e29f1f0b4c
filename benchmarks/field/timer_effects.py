"""Lab tool: the timer classes' verdicts judged again, offline, with CUPTI's effect on the pairs as
``timer_pairs.span_effects`` gives it now, from a matrix recorded by ``capture_sampled_raw.py`` with the timers read
under CUPTI (``timer_cupti_steps``). Prints per graph pass and class: the plain reading less CUPTI's, the effect with
its noise, the like-for-like reading less CUPTI's and the verdict, as recorded and as judged now. No GPU:

    python3 benchmarks/field/timer_effects.py OUTDIR [OUTDIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import recorded_passes  # noqa: E402

from launchprobe.analysis import timer_pairs  # noqa: E402
from launchprobe.analysis.sampled import SampledStep  # noqa: E402

DROPPED = ("cupti_effect_ns", "cupti_effect_noise_ns", "cupti_effect_source", "gap_under_cupti_diff_ns", "gap_verdict")


def _steps(rows: list[list[Any]]) -> list[SampledStep]:
    return [SampledStep(int(r[0]), int(r[1]), {int(op): int(t) for op, t in r[2]}) for r in rows]


def main() -> None:
    for out_dir in map(Path, sys.argv[1:]):
        for record, cell in recorded_passes(out_dir):
            graphed = [not h for h in record["host_launched"]]
            targets = timer_pairs.pair_targets(graphed)
            timers = cell["kernel_pass"]["timer_pairs"]
            behind = set(timers.get("after_piece_behind") or [])
            clean = {i: r for i, r in timer_pairs.pair_readings(_steps(record["timer_steps"]), targets).items()}
            under = timer_pairs.pair_readings(_steps(record["timer_cupti_steps"]), targets)
            effects = timer_pairs.span_effects(
                record["names"],
                {i: r for i, r in clean.items() if i not in behind},
                {i: r for i, r in under.items() if i not in behind},
            )
            rows = [{k: v for k, v in c.items() if k not in DROPPED} for c in timers["classes"]]
            event_ops = cell["kernel_pass"]["cupti_check"]["ops"]
            judged = timer_pairs.judge(rows, event_ops, effects.classes)
            print(f"{out_dir.name} {cell['shape']} {cell['mode']} b{cell['batch']}: typical pair's effect "
                  f"{effects.typical_ns / 1e3:+.2f} us")  # fmt: skip
            for before, now in zip(timers["classes"], judged):
                like = now.get("gap_under_cupti_diff_ns")
                print(
                    f"  {now['op']:<10} plain {now['gap_diff_ns'] / 1e3:+.2f} effect "
                    f"{now['cupti_effect_ns'] / 1e3:+.2f} +/- {now['cupti_effect_noise_ns'] / 1e3:.2f} like "
                    + (f"{like / 1e3:+.2f}" if like is not None else "  -  ")
                    + f" | recorded {before['gap_verdict']}, now {now['gap_verdict']}"
                )


if __name__ == "__main__":
    main()
