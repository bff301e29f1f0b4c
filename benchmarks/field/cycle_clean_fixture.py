"""Lab tool: cut tests/fixtures/field/cycle_clean_h200.json.gz from recorded passes (``capture_sampled_raw.py``
OUTDIRs that hold a ``cycle_MODE.json.gz``).

Per pass whose op count and batch are asked for (``--cells OPS:BATCH[:N],...``, all where not given) and whose op
check was made (CUPTI trusted): the op names and kernels per op, CUPTI's reference steps (every kernel's [start,
end] from the step's first start, and the step times), ``--clean-steps`` of the CUPTI cycle's clean steps taken
evenly through the cycle (each op's [start, end] from the step's first start, as the cycle file holds them), how
many there were, and what the pass reported per op class (its op check: CUPTI's reference gap, the cycle's clean
steps' gap and the share of them beyond the bar, the verdict). tests/test_cycle_clean_field.py reads it. From the
project root, no GPU:

    python3 benchmarks/field/cycle_clean_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--cells 163:1] [--clean-steps 128]
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
WANTED: dict[tuple[int, int], set[int] | None] = {}  # (ops, batch) -> which such passes (1-based), None: all
MODES = ("eager", "piecewise", "full")
AS_RUN = ("cupti_gap_ns_median", "cupti_cycle_gap_ns_median", "cupti_cycle_off_bar_fraction", "gap_verdict")


def _from_first(kernels: list[list[int]]) -> list[list[int]]:
    """One step's kernels as [start, end] from its first kernel's start."""
    return [[start - kernels[0][0], end - kernels[0][0]] for start, end in kernels]


def _cells(out_dir: Path, clean_steps: int = CLEAN_STEPS) -> list[dict[str, Any]]:
    out = []
    cycles: dict[str, list[Any]] = {}
    for mode in MODES:
        path = out_dir / f"cycle_{mode}.json.gz"
        if path.exists():
            cycles[mode] = json.loads(gzip.decompress(path.read_bytes()))
    passes = recorded_passes(out_dir, MODES)
    for mode, entries in cycles.items():
        if len(entries) != sum(record["mode"] == mode for record, _ in passes):
            raise SystemExit(f"{out_dir}: cycle_{mode}.json.gz does not hold one entry per {mode} pass")
    taken = dict.fromkeys(cycles, 0)
    seen: dict[tuple[int, int], int] = {}
    for record, cell in passes:
        mode = record["mode"]
        if mode not in cycles:
            continue
        bucket, _, steps = cycles[mode][taken[mode]]
        taken[mode] += 1
        if bucket != record["bucket"]:
            raise SystemExit(f"{out_dir}: the cycle file's passes and the raw passes are not in one order")
        key = (len(record["names"]), int(bucket))
        seen[key] = seen.get(key, 0) + 1
        nth = WANTED.get(key, set())
        check = cell["kernel_pass"].get("cupti_check") or {}
        if WANTED and (key not in WANTED or (nth is not None and seen[key] not in nth)):
            continue
        if record["kernel_counts"] is None or not check.get("ops"):
            continue
        clean = [ops for variant, _, ops in steps if variant < 0]
        every = max(1, len(clean) // clean_steps)
        out.append(
            {
                "shape": cell["shape"],
                "mode": mode,
                "bucket": bucket,
                "names": record["names"],
                "counts": record["kernel_counts"],
                "cupti_kernels": [_from_first(step) for step in record["cupti"]["kernels"]],
                "cupti_step_ns": record["cupti"]["step_ns"],
                "cycle_clean": clean[::every][:clean_steps],
                "cycle_clean_count": len(clean),
                "as_run": {o["op"]: {key: o.get(key) for key in AS_RUN} for o in check["ops"]},
                "cupti_step_vs_clean": cell["cupti_step_vs_clean"],
            }
        )
    return out


def main() -> None:
    clean_steps = int_option(sys.argv, "--clean-steps", CLEAN_STEPS)
    cut(__doc__.splitlines()[0], lambda out_dir: _cells(out_dir, clean_steps), WANTED)


if __name__ == "__main__":
    main()
