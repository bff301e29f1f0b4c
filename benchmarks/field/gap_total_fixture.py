"""Lab tool: cut tests/fixtures/field/gap_total_eager_h200.json.gz from recorded eager matrices
(``capture_sampled_raw.py`` OUTDIRs).

Per eager pass whose op count and batch are asked for (``--cells OPS:BATCH[:N],...``, N: only the N-th such pass of
an OUTDIR): what the pass stitched (op names,
layers, host-launched flags, the plan, the reach, CUPTI's op durations, the end shifts, every sampled step with its
clean reference, the clean steps timed in the cycles) and what it reported of the gap total as run (the stitched
total, the clean one, the tolerance, the verdict). tests/test_gap_total_field.py reads it. From the project root,
no GPU:

    python3 benchmarks/field/gap_total_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] --cells 323:1,163:8:2 [--provenance T]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, eager_passes  # noqa: E402

WANTED: dict[tuple[int, int], set[int] | None] = {}  # (ops, batch) -> which such passes (1-based), None: all


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    return [
        stitched
        | {
            "as_run": {
                "stitched_gap_total_us": cell["stitched_gap_total_us"],
                "clean_gap_total_us": cell["clean_gap_total_us"],
                "gap_total_tolerance_us": cell["gap_total_tolerance_us"],
                "gap_total_agrees": cell["gap_total_agrees"],
                "clean_spread": cell["clean_spread"],
            }
        }
        for _, cell, stitched in eager_passes(out_dir, WANTED)
    ]


def main() -> None:
    cut(__doc__.splitlines()[0], _cells, WANTED)


if __name__ == "__main__":
    main()
