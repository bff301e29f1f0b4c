"""Lab tool: cut tests/fixtures/field/scatter_ladder_h200.json.gz from a recorded reach ladder
(``capture_sampled_raw.py`` OUTDIR of ``--modes piecewise --shapes llama-3-8b --batches 1 --reach 4,6,8,12,4``).

Per graph-mode pass: what it stitched (op names, layers, host-launched flags, the plan, the reach, CUPTI's op
durations, the end shifts, every sampled step with its clean reference, the clean steps timed in the cycles),
CUPTI's clean steps as op intervals (each op's first kernel start to last kernel end, from the step's first start;
the first ``CUPTI_STEPS`` steps) and what the pass reported of its gap total. tests/test_scatter_field.py reads it.
From the project root, no GPU:

    python3 benchmarks/field/scatter_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--provenance T]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes, stitch_inputs  # noqa: E402

CUPTI_STEPS = 16


def _cupti_ops(record: dict[str, Any]) -> list[list[list[int]]]:
    kernels = np.asarray(record["cupti"]["kernels"], dtype=np.int64)[:CUPTI_STEPS]  # steps x kernels x 2
    edges = np.cumsum([0, *record["kernel_counts"]])
    starts = np.stack([kernels[:, a:b, 0].min(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    ends = np.stack([kernels[:, a:b, 1].max(axis=1) for a, b in zip(edges, edges[1:])], axis=1)
    first = starts[:, :1]
    return np.stack([starts - first, ends - first], axis=2).tolist()


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record, cell in recorded_passes(out_dir):
        if record["kernel_counts"] is None:
            continue
        check = cell["kernel_pass"]["cupti_check"]
        out.append(
            stitch_inputs(record, cell)
            | {
                "cupti_ops": _cupti_ops(record),
                "as_run": {
                    "stitched_gap_total_ns": check["events_total_gap_ns"],
                    "clean_gap_total_ns": check["clean_gap_total_ns"],
                    "gap_total_noise_ns": check["total_gap_noise_ns"],
                    "gap_total_tolerance_ns": check["total_gap_tolerance_ns"],
                    "gap_total_agrees": check["total_gap_agrees"],
                },
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
