"""Lab tool: cut tests/fixtures/field/busy_eager_h200.json.gz from recorded eager matrices
(``capture_sampled_raw.py`` OUTDIRs).

Per eager pass whose op count and batch are asked for (``--cells OPS:BATCH[:N],...``, N: only the N-th such pass of
an OUTDIR): what the pass stitched (as ``gap_total_fixture.py`` keeps it) and CUPTI's clean steps (``--cupti-steps``
of them: every kernel's [start, end] from the step's first start, and the step times), with what the pass reported
of the busy check as run. tests/test_busy_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/busy_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] --cells 323:1,163:1 [--cupti-steps 32]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, eager_passes, int_option  # noqa: E402

WANTED: dict[tuple[int, int], set[int] | None] = {}  # (ops, batch) -> which such passes (1-based), None: all
CUPTI_STEPS = 32


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record, cell, stitched in eager_passes(out_dir, WANTED):
        cupti = record["cupti"]
        kernels = [
            [[start - step[0][0], end - step[0][0]] for start, end in step] for step in cupti["kernels"][:CUPTI_STEPS]
        ]
        check = cell["kernel_pass"]["cupti_check"]
        as_run = {key: check.get(key) for key in ("events_busy_ns", "cupti_busy_ns", "cupti_op_busy_ns")}
        as_run |= {key: check.get(key) for key in ("busy_rel_diff", "busy_agrees")}
        as_run |= {"clean_spread": cell["clean_spread"], "gap_total_noise_us": cell["gap_total_noise_us"]}
        out.append(
            stitched | {"cupti_kernels": kernels, "cupti_step_ns": cupti["step_ns"][:CUPTI_STEPS], "as_run": as_run}
        )
    return out


def main() -> None:
    global CUPTI_STEPS
    CUPTI_STEPS = int_option(sys.argv, "--cupti-steps", CUPTI_STEPS)
    cut(__doc__.splitlines()[0], _cells, WANTED)


if __name__ == "__main__":
    main()
