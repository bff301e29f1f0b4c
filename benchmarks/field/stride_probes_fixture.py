"""Lab tool: cut tests/fixtures/field/stride_probes_h200.json.gz from recorded matrices (the JSON that
``bench_sampled_gaps.py`` or ``capture_sampled_raw.py`` writes).

Per eager pass with stride probes (a pass recorded in more than one file is kept once): the shape, batch, op
count and reach, the probes in the order they ran ([spacing, overhead, its standard error]), the spacing the pass
ran, and what its cycles then measured (pooled and slowest-variant overhead, the budget verdict, the clean steps'
p10-p90 spread). tests/test_stride_probes_field.py replays ``sampled.choose_stride`` on the probes. From the project
root, no GPU:

    python3 benchmarks/field/stride_probes_fixture.py OUT_JSON_GZ MATRIX_JSON [MATRIX_JSON ...] --provenance TEXT
"""

from __future__ import annotations

import argparse
import gzip
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def _passes(path: Path, seen: set[tuple[str, int, float]]) -> list[dict[str, Any]]:
    out = []
    when = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d %H:%M")
    for cell in json.loads(path.read_text()).get("cells") or []:
        kp = cell.get("kernel_pass") or {}
        if cell.get("mode") != "eager" or not kp.get("stride_probes"):
            continue
        key = (cell["shape"], int(cell["batch"]), float(kp["clean_step_ms"]))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "shape": cell["shape"],
                "batch": cell["batch"],
                "written_utc": when,
                "ops": sum(o["count"] for o in kp["ops"]),
                "reach": kp["reach"],
                "probes": [[p["stride"], p["overhead_fraction"], p["error_fraction"]] for p in kp["stride_probes"]],
                "stride": kp["stride"],
                "overhead_fraction": kp["overhead_fraction"],
                "variant_overhead_max_fraction": kp["variant_overhead_max_fraction"],
                "overhead_within_budget": kp["overhead_within_budget"],
                "clean_step_spread_fraction": kp["clean_step_spread_fraction"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("matrices", type=Path, nargs="+")
    parser.add_argument("--provenance", required=True)
    args = parser.parse_args()
    if args.fixture.exists():
        raise SystemExit(f"{args.fixture} exists; not replacing it")
    seen: set[tuple[str, int, float]] = set()
    passes = [p for path in args.matrices for p in _passes(path, seen)]
    args.fixture.write_bytes(gzip.compress(json.dumps({"provenance": args.provenance, "passes": passes}).encode()))
    print(f"{args.fixture}: {len(passes)} passes")


if __name__ == "__main__":
    main()
