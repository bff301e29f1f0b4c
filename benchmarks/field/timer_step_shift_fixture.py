"""Lab tool: cut tests/fixtures/field/timer_step_shift_h200.json.gz from recorded matrices (``capture_sampled_raw.py``
OUTDIRs of a pass that keeps CUPTI's kernels of its timer steps, ``timer_cupti_rows``).

Per graph-mode pass: the op names, the kernels per op, each timer variant's target ops, CUPTI's kernels of the
timer steps (the first ``--steps-per-variant`` steps of each variant; 0, the default: all), each step as [variant,
[[is a timer, start less the previous kernel's start, duration], ...]] (ns, the first start 0), CUPTI's clean
reference steps coded the same way ([start less the previous kernel's start, duration]), and what the pass
recorded for every timer class (``timer_pairs.classes``) with the typical op's shift.
tests/test_timer_step_shift_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/timer_step_shift_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--steps-per-variant N]
        [--provenance TEXT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, int_option, recorded_passes  # noqa: E402

RECORDED = (
    "op",
    "count",
    "gap_ns_median",
    "cupti_gap_ns_median",
    "gap_diff_ns",
    "gap_verdict",
    "cupti_timer_steps_gap_ns_median",
    "timer_steps_shift_ns",
    "timer_steps_shift_noise_ns",
    "timer_steps_moved",
)


def _coded(kernels: list[list[int]]) -> list[list[int]]:
    """[start, end] per kernel as [start less the previous kernel's start, duration], the first start 0."""
    previous, out = kernels[0][0], []
    for start, end in kernels:
        out.append([int(start - previous), int(end - start)])
        previous = start
    return out


def _timer_steps(record: dict[str, Any], per_variant: int) -> list[list[Any]]:
    """The timer steps' CUPTI rows, split as the pass splits them (each step: the clean step's kernels and its
    timers), delta-coded; the clean steps the cycles ran between them left out."""
    per_step = sum(record["kernel_counts"])
    rows, at, out = record["timer_cupti_rows"], 0, []
    kept: dict[int, int] = {}
    for variant in record["timer_cupti_ran"]:
        step, kernels = [], 0
        while kernels < per_step:
            step.append(rows[at])
            kernels += not rows[at][0]
            at += 1
        while at < len(rows) and rows[at][0]:  # a timer after the step's last kernel
            step.append(rows[at])
            at += 1
        if variant < 0 or (per_variant and kept.get(variant, 0) >= per_variant):
            continue
        kept[variant] = kept.get(variant, 0) + 1
        out.append(
            [variant, [[int(is_timer), *pair] for (is_timer, _, _), pair in zip(step, _coded([r[1:] for r in step]))]]
        )
    if at != len(rows):
        raise SystemExit(f"the timer rows split into steps leave {len(rows) - at} rows over")
    return out


def cells(out_dir: Path, per_variant: int) -> list[dict[str, Any]]:
    out = []
    for record, cell in recorded_passes(out_dir):
        if "timer_cupti_rows" not in record or record["kernel_counts"] is None:
            continue  # a pass before the rows were kept, or without its counting pass
        timers = cell["kernel_pass"]["timer_pairs"]
        out.append(
            {
                "source": out_dir.name,
                "shape": cell["shape"],
                "mode": record["mode"],
                "batch": cell["batch"],
                "names": record["names"],
                "counts": record["kernel_counts"],
                "targets": record["timer_targets"],
                "steps_per_variant": per_variant or None,
                "timer_steps": _timer_steps(record, per_variant),
                "cupti_kernels": [_coded(step) for step in record["cupti"]["kernels"]],
                "recorded": {
                    "typical_shift_ns": timers.get("cupti_timer_steps_typical_shift_ns"),
                    "classes": [{k: c.get(k) for k in RECORDED} for c in timers["classes"]],
                },
            }
        )
    return out


def main() -> None:
    per_variant = int_option(sys.argv, "--steps-per-variant", 0)
    cut(__doc__.splitlines()[0], lambda out_dir: cells(out_dir, per_variant))


if __name__ == "__main__":
    main()
