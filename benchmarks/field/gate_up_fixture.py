"""Lab tool: cut tests/fixtures/field/gate_up_after_event_h200.json.gz from a recorded graph pass with its CUPTI cycle
(``capture_sampled_raw.py`` OUTDIR holding raw.json.gz, sampled.json and cycle_piecewise.json.gz of one pass).

Per pass: the op names and the plan (each variant's marks: the ops an event follows), and for every step of the pass's
CUPTI cycle its variant (-1: a clean step) and, for each op of ``OPS``, CUPTI's duration of that op at every layer (its
first kernel's start to its last kernel's end). tests/test_gate_up_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/gate_up_fixture.py OUT_JSON_GZ OUTDIR [--provenance T]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes  # noqa: E402

OPS = ("gate_up", "down")


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    passes = recorded_passes(out_dir, ("piecewise",))
    cycles = json.loads(gzip.decompress((out_dir / "cycle_piecewise.json.gz").read_bytes()))
    if len(cycles) != len(passes):
        raise SystemExit(f"{out_dir}: {len(passes)} piecewise passes, {len(cycles)} CUPTI cycles")
    for (record, cell), (bucket, n_ops, steps) in zip(passes, cycles):
        names = record["names"]
        if (bucket, n_ops) != (record["bucket"], len(names)):
            raise SystemExit(f"{out_dir}: the CUPTI cycles are not the raw passes' ({bucket}, {n_ops} ops)")
        ops = {name: [i for i, n in enumerate(names) if n == name] for name in OPS}
        out.append(
            {
                "shape": cell["shape"],
                "mode": record["mode"],
                "bucket": bucket,
                "names": names,
                "variants": record["plan"]["variants"],
                "ops": ops,
                # per cycle step: variant, then per op of OPS its durations at each layer (ns)
                "steps": [
                    [v, {name: [flat[2 * i + 1] - flat[2 * i] for i in idx] for name, idx in ops.items()}]
                    for v, _, flat in steps
                ],
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
