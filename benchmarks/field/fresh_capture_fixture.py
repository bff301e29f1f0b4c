"""Lab tool: cut tests/fixtures/field/fresh_capture_h200.json.gz from recorded graph passes with their CUPTI cycles
(``capture_sampled_raw.py`` OUTDIR holding raw.json.gz, sampled.json and cycle_MODE.json.gz).

Per pass: the op names, which ops the host launches, the plan (each variant's role and marks), and CUPTI's op
intervals of the CUPTI cycle's clean steps (at most ``--clean N``, default 96) and of at most ``--per-variant K``
steps of each variant (default 3), each step as [variant (-1: clean), [gap, duration, gap, duration, ...]] in ns
(op i's start less op i - 1's end, op 0's gap 0; then its duration), so that the intervals are the running sums.
tests/test_fresh_capture_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/fresh_capture_fixture.py OUT_JSON_GZ OUTDIR [--clean N] [--per-variant K] [--provenance T]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, int_option, recorded_passes  # noqa: E402

CLEAN = int_option(sys.argv, "--clean", 96)
PER_VARIANT = int_option(sys.argv, "--per-variant", 3)


def _coded(flat: list[int]) -> list[int]:
    """A step's [start, end, start, end, ...] (from its first start) as [gap, duration, ...]: small numbers."""
    out, last_end = [], flat[0]
    for start, end in zip(flat[0::2], flat[1::2]):
        out += [start - last_end, end - start]
        last_end = end
    return out


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for mode in ("piecewise", "full"):
        path = out_dir / f"cycle_{mode}.json.gz"
        if not path.exists():
            continue
        passes = recorded_passes(out_dir, (mode,))
        cycles = json.loads(gzip.decompress(path.read_bytes()))
        if len(cycles) != len(passes):
            raise SystemExit(f"{out_dir}: {len(passes)} {mode} passes, {len(cycles)} CUPTI cycles")
        for (record, cell), (bucket, n_ops, steps) in zip(passes, cycles):
            if (bucket, n_ops) != (record["bucket"], len(record["names"])):
                raise SystemExit(f"{out_dir}: the CUPTI cycles are not the raw passes' ({bucket}, {n_ops} ops)")
            kept: list[list[Any]] = []
            taken: dict[int, int] = {}
            for v, _, flat in steps:
                key = -1 if v < 0 else v
                limit = CLEAN if v < 0 else PER_VARIANT
                if taken.get(key, 0) < limit:
                    taken[key] = taken.get(key, 0) + 1
                    kept.append([key, _coded(flat)])
            out.append(
                {
                    "shape": cell["shape"],
                    "mode": mode,
                    "bucket": bucket,
                    "names": record["names"],
                    "host_launched": record["host_launched"],
                    "spacing": record["plan"]["spacing"],
                    "roles": record["plan"]["roles"],
                    "variants": record["plan"]["variants"],
                    "reported_gap_total_diff_us": cell.get("gap_total_diff_us"),
                    "steps": kept,
                }
            )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
