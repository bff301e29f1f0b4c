"""Lab tool: cut tests/fixtures/field/lm_head_timers_h200.json.gz from recorded matrices (``capture_sampled_raw.py``
OUTDIRs of a pass that reads its timer pairs under CUPTI too, ``timer_cupti_steps``).

Per graph-mode pass, for the step's last two ops (final_norm, lm_head): each timer step of a variant timing one of
them, without CUPTI and under it, as [variant, reading of the op before final_norm, of final_norm, of lm_head]
(GPU clock, ns; null where the variant put no timer there), the two ops' durations (CUPTI's, clean steps and timer
steps), the names of the clean step's last three GPU activities and their [start, end] in each of CUPTI's clean
reference steps, every pair's median without CUPTI and under it, and what the pass recorded for the two classes
(``timer_pairs.classes``) and the mean excess it took out. tests/test_lm_head_timers_field.py reads it. From the
project root, no GPU:

    python3 benchmarks/field/lm_head_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--provenance TEXT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes  # noqa: E402

TAIL_KERNELS = 3  # final_norm's kernel, then lm_head's one or two (a memset and the GEMM at small batch)


def _readings(steps: list[list[Any]], ops: list[int]) -> list[list[Any]]:
    out = []
    for step in steps:
        ends = {int(op): int(value) for op, value in step[2]}
        if any(op in ends for op in ops[1:]):
            out.append([step[0], *[ends.get(op) for op in ops]])
    return out


def _pair_medians(record: dict[str, Any]) -> list[list[float]]:
    """Every pair's median without CUPTI and under it, [op, clean, under CUPTI], numpy over the recorded readings,
    for the pairs' typical CUPTI effect (host-launched targets the pass did not read included)."""
    spans: dict[str, dict[int, list[int]]] = {"timer_steps": {}, "timer_cupti_steps": {}}
    for key, by_op in spans.items():
        for step in record[key]:
            ends = {int(op): int(value) for op, value in step[2]}
            for op, value in ends.items():
                if op - 1 in ends:  # a target: the variants time op i - 1 and op i, targets 20 ops apart
                    by_op.setdefault(op, []).append(value - ends[op - 1])
    clean, under = spans["timer_steps"], spans["timer_cupti_steps"]
    return [[op, float(np.median(clean[op])), float(np.median(under[op]))] for op in sorted(clean) if op in under]


def cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record, cell in recorded_passes(out_dir):
        if "timer_cupti_steps" not in record:
            raise SystemExit(f"{out_dir}: no timer readings under CUPTI (a pass before they were read)")
        n = len(record["names"])
        ops = [n - 3, n - 2, n - 1]
        timers = cell["kernel_pass"]["timer_pairs"]
        classes = [c for c in timers["classes"] if c["op"] in ("final_norm", "lm_head")]
        in_timer_steps = dict((int(i), d) for i, d in record["timer_durations"])
        out.append(
            {
                "source": out_dir.name,
                "shape": cell["shape"],
                "mode": record["mode"],
                "batch": cell["batch"],
                "ops": ops,
                "names": [record["names"][i] for i in ops],
                "timer_steps": _readings(record["timer_steps"], ops),
                "timer_cupti_steps": _readings(record["timer_cupti_steps"], ops),
                "durations": [record["durations"][i] for i in ops[1:]],
                "timer_step_durations": [in_timer_steps.get(i) for i in ops[1:]],
                "cupti_tail_names": record["cupti"]["names0"][-TAIL_KERNELS:],
                "cupti_tail": [step[-TAIL_KERNELS:] for step in record["cupti"]["kernels"]],
                "pair_medians": _pair_medians(record),
                "recorded": {"mean_excess_ns": timers["mean_excess_ns"], "classes": classes},
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], cells)


if __name__ == "__main__":
    main()
