"""Lab tool: cut tests/fixtures/field/lm_head_timers_h200.json.gz from recorded matrices (``capture_sampled_raw.py``
OUTDIRs of a pass that reads its timer pairs under CUPTI too, ``timer_cupti_steps``).

Per graph-mode pass, for the step's last two ops (final_norm, lm_head): each timer step of a variant timing one of
them, without CUPTI and under it, as [variant, reading of the op before final_norm, of final_norm, of lm_head]
(GPU clock, ns; null where the variant put no timer there), the two ops' durations (CUPTI's, clean steps and timer
steps), the names of the clean step's last three GPU activities and their [start, end] in each of CUPTI's clean
reference steps, and what the pass recorded for the two classes (``timer_pairs.classes``) and the mean excess it
took out. tests/test_lm_head_timers_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/lm_head_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--provenance TEXT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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
                "recorded": {"mean_excess_ns": timers["mean_excess_ns"], "classes": classes},
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], cells)


if __name__ == "__main__":
    main()
