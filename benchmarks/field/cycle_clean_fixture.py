"""Lab tool: cut tests/fixtures/field/cycle_clean_h200.json.gz from recorded graph-mode passes
(``capture_sampled_raw.py`` OUTDIRs that hold a ``cycle_MODE.json.gz``).

Per pass: the op names and kernels per op, CUPTI's reference steps (every kernel's [start, end] from the step's
first start, and the step times), ``--clean-steps`` of the CUPTI cycle's clean steps taken evenly through the cycle
(each op's [start, end] from the step's first start, as the cycle file holds them), how many there were, and what
the pass reported per op class (its op check: CUPTI's reference gap, the cycle's clean steps' gap and the share
of them beyond the bar, the verdict). tests/test_cycle_clean_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/cycle_clean_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--clean-steps 128]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, int_option, recorded_passes  # noqa: E402

CLEAN_STEPS = 128
AS_RUN = ("cupti_gap_ns_median", "cupti_cycle_gap_ns_median", "cupti_cycle_off_bar_fraction", "gap_verdict")


def _from_first(kernels: list[list[int]]) -> list[list[int]]:
    """One step's kernels as [start, end] from its first kernel's start."""
    return [[start - kernels[0][0], end - kernels[0][0]] for start, end in kernels]


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    cycles: dict[str, list[Any]] = {}
    for mode in ("piecewise", "full"):
        path = out_dir / f"cycle_{mode}.json.gz"
        if path.exists():
            cycles[mode] = json.loads(gzip.decompress(path.read_bytes()))
    taken = dict.fromkeys(cycles, 0)
    for record, cell in recorded_passes(out_dir):
        mode = record["mode"]
        if mode not in cycles or record["kernel_counts"] is None:
            continue
        bucket, _, steps = cycles[mode][taken[mode]]
        taken[mode] += 1
        if bucket != record["bucket"]:
            raise SystemExit(f"{out_dir}: the cycle file's passes and the raw passes are not in one order")
        clean = [ops for variant, _, ops in steps if variant < 0]
        every = max(1, len(clean) // CLEAN_STEPS)
        check = cell["kernel_pass"]["cupti_check"]
        out.append(
            {
                "shape": cell["shape"],
                "mode": mode,
                "bucket": bucket,
                "names": record["names"],
                "counts": record["kernel_counts"],
                "cupti_kernels": [_from_first(step) for step in record["cupti"]["kernels"]],
                "cupti_step_ns": record["cupti"]["step_ns"],
                "cycle_clean": clean[::every][:CLEAN_STEPS],
                "cycle_clean_count": len(clean),
                "as_run": {o["op"]: {key: o.get(key) for key in AS_RUN} for o in check["ops"]},
                "cupti_step_vs_clean": cell["cupti_step_vs_clean"],
            }
        )
    return out


def main() -> None:
    global CLEAN_STEPS
    CLEAN_STEPS = int_option(sys.argv, "--clean-steps", CLEAN_STEPS)
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
