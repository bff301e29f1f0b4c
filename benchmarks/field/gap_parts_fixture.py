"""Lab tool: cut tests/fixtures/field/gap_parts_h200.json.gz from recorded graph passes (``capture_sampled_raw.py``
OUTDIR holding raw.json.gz and sampled.json).

Per pass: what the stitch takes (op names, layers, host-launched flags, the plan, the reach, CUPTI's op durations,
the end shifts, every sampled step, the clean steps timed in the cycles), the counting pass's kernels per op, and
CUPTI's 64 clean reference steps: every kernel as [gap, duration] in ns (its start less the kernel before's end,
across the steps, the first kernel's gap 0), with each step's time under CUPTI; and what the pass reported (its
stitched gap total and clean step). tests/test_gap_parts_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/gap_parts_fixture.py OUT_JSON_GZ OUTDIR [--provenance TEXT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes, stitch_inputs  # noqa: E402


def _coded(steps: list[list[list[int]]]) -> list[list[int]]:
    """CUPTI's kernels of consecutive steps ([start, end] each) as [gap, duration] from the kernel before's end."""
    out: list[list[int]] = []
    last_end = steps[0][0][0]
    for step in steps:
        coded: list[int] = []
        for start, end in step:
            coded += [start - last_end, end - start]
            last_end = end
        out.append(coded)
    return out


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record, cell in recorded_passes(out_dir):
        if record.get("kernel_counts") is None or not record.get("stitch_args"):
            raise SystemExit(f"{out_dir}: a {record['mode']} pass without its counting pass or stitch arguments")
        out.append(
            {
                **stitch_inputs(record, cell),
                "kernel_counts": record["kernel_counts"],
                "cupti_kernels": _coded(record["cupti"]["kernels"]),
                "cupti_step_ns": record["cupti"]["step_ns"],
                "reported_gap_total_ns": record["result"]["gap_total_ns"],
                "reported_clean_step_ms": record["result"]["clean_step_ms"],
                "reported_gap_total_diff_us": cell.get("gap_total_diff_us"),
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
