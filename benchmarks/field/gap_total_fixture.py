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

from fixture_cut import cut, recorded_passes  # noqa: E402

WANTED: dict[tuple[int, int], set[int] | None] = {}  # (ops, batch) -> which such passes (1-based), None: all


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    seen: dict[tuple[int, int], int] = {}
    for record, cell in recorded_passes(out_dir, ("eager",)):
        key = (len(record["names"]), int(record["bucket"]))
        seen[key] = seen.get(key, 0) + 1
        nth = WANTED.get(key, set())
        if key not in WANTED or (nth is not None and seen[key] not in nth):
            continue
        out.append(
            {
                "shape": cell["shape"],
                "mode": record["mode"],
                "bucket": record["bucket"],
                # raw files recorded before the capture kept the pass's own reach hold the requested one (None)
                "reach": record["reach"] or cell["kernel_pass"]["reach"],
                "names": record["names"],
                "layers": record["layers"],
                "host_launched": record["host_launched"],
                "plan": record["plan"],
                "durations": record["durations"],
                "end_shifts": record["stitch_args"][1],
                "steps": record["steps"],
                "clean_in_cycles": record["clean_in_cycles"],
                "as_run": {
                    "stitched_gap_total_us": cell["stitched_gap_total_us"],
                    "clean_gap_total_us": cell["clean_gap_total_us"],
                    "gap_total_tolerance_us": cell["gap_total_tolerance_us"],
                    "gap_total_agrees": cell["gap_total_agrees"],
                    "clean_spread": cell["clean_spread"],
                },
            }
        )
    return out


def main() -> None:
    if "--cells" in sys.argv:
        at = sys.argv.index("--cells")
        for item in sys.argv[at + 1].split(","):
            ops, batch, *nth = item.split(":")
            chosen = WANTED.setdefault((int(ops), int(batch)), set() if nth else None)
            if nth and chosen is not None:
                chosen.add(int(nth[0]))
        del sys.argv[at : at + 2]
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
