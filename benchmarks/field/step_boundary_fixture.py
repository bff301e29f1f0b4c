"""Lab tool: cut tests/fixtures/field/step_boundary_h200.json.gz from recorded piecewise passes with their CUPTI cycle
(``capture_sampled_raw.py`` OUTDIRs holding raw.json.gz, sampled.json and cycle_piecewise.json.gz).

Per pass: the head variant's op (h, whose end it times by a host event after the first piece), CUPTI's 64 reference
steps as [first kernel start, last kernel end] (ns, from the first step's first start), and every step of the CUPTI
cycle in run order as [variant (-1: clean), its first kernel's start from the cycle's first, op 0's start, op h's
end, its last end (these three from its own first start)], each head-variant step with the events' reading of op h's
end under CUPTI (from the step's boundary event), and what the pass reported for op 0's class. Read by
tests/test_step_boundary_field.py. From the project root, no GPU:

    python3 benchmarks/field/step_boundary_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--provenance T]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes  # noqa: E402


def _cells(out_dir: Path) -> list[dict[str, Any]]:
    passes = recorded_passes(out_dir, ("piecewise",))
    cycles = json.loads(gzip.decompress((out_dir / "cycle_piecewise.json.gz").read_bytes()))
    out = []
    for (record, cell), (bucket, n_ops, steps) in zip(passes, cycles, strict=True):
        if (bucket, n_ops) != (record["bucket"], len(record["names"])):
            raise SystemExit(f"{out_dir}: the CUPTI cycles are not the raw passes' ({bucket}, {n_ops} ops)")
        roles, variants = record["plan"]["roles"], record["plan"]["variants"]
        head = roles.index("head")
        h = variants[head][0]
        kernels = np.asarray(record["cupti"]["kernels"], dtype=np.int64)  # steps x kernels x 2
        origin = int(kernels[0, 0, 0])
        reference = [[int(k[:, 0].min()) - origin, int(k[:, 1].max()) - origin] for k in kernels]
        read = iter(record["cupti_steps"])  # the events of the cycle's variant steps, in run order
        cycle = []
        for v, start, flat in steps:
            row = [v, start, flat[0], flat[2 * h + 1], max(flat[1::2])]
            if v >= 0:
                variant, _, ends, _ = next(read)
                if variant != v:
                    raise SystemExit(f"{out_dir}: the events under CUPTI are not in the cycle's order")
                if v == head:
                    row.append(dict((int(op), t) for op, t in ends)[h])
            cycle.append(row)
        check = cell["kernel_pass"]["cupti_check"]
        op0 = next((o for o in check["ops"] if o["op"] == record["names"][0]), None)
        out.append(
            {
                "shape": cell["shape"],
                "bucket": bucket,
                "head_op": h,
                "head_variant": head,
                "cupti_step_vs_clean": cell.get("cupti_step_vs_clean"),
                "reference": reference,
                "cycle": cycle,
                "as_run": op0,
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], _cells)


if __name__ == "__main__":
    main()
