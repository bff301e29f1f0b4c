"""Lab tool: cut tests/fixtures/field/tail_h200.json.gz from recorded matrices (``capture_sampled_raw.py`` OUTDIRs).

Per graph-mode pass: the steps of the variants that measure the gap between steps (the solo variants, the head and
wrap_head variants, wrap_far, wrap_near; each as [variant, step_ns, [[op, end_ns], ...], reference_ns]), the roles
of those variants, which variant follows which, the clean step the pass scaled to, the op durations and end shifts
it stitched with, CUPTI's clean reference steps as [first kernel's start, last kernel's end] (ns), and what the pass
recorded: its op-0 gap, the tail as kept and as measured, its noise, CUPTI's op-0 gap and the head variant's effect.
tests/test_tail_field.py reads it. From the project root, no GPU:

    python3 benchmarks/field/tail_fixture.py OUT_JSON_GZ OUTDIR [OUTDIR ...] [--provenance TEXT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import cut, recorded_passes  # noqa: E402

KEPT_ROLES = ("solo", "head", "wrap_head", "wrap_far", "wrap_near")


def cells(out_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record, cell in recorded_passes(out_dir):
        roles = record["plan"]["roles"]
        kept = {v for v, role in enumerate(roles) if role in KEPT_ROLES}
        kp = cell["kernel_pass"]
        embed = next(o for o in kp["cupti_check"]["ops"] if o["op"] == record["names"][0])
        out.append(
            {
                "source": out_dir.name,
                "shape": cell["shape"],
                "mode": record["mode"],
                "batch": cell["batch"],
                "n_ops": len(record["names"]),
                "reach": int(record["reach"]),
                "host_launched": record["host_launched"],
                "roles": {str(v): roles[v] for v in sorted(kept)},
                "variants": {str(v): record["plan"]["variants"][v] for v in sorted(kept)},
                "steps": [s for s in record["steps"] if s[0] in kept],
                "clean_ns": kp["clean_step_ms"] * 1e6,
                "durations": record["durations"],
                "end_shifts": record["stitch_args"][1],
                "cupti_steps": [
                    [min(k[0] for k in step), max(k[1] for k in step)] for step in record["cupti"]["kernels"]
                ],
                "recorded": {
                    "op0_gap_ns": embed["events_gap_ns_median"],
                    "cupti_op0_gap_ns": embed["cupti_gap_ns_median"],
                    "head_effect_ns": embed.get("cupti_effect_ns")
                    if embed.get("cupti_effect_source") == "head variant"
                    else None,
                    "tail_ns": kp["tail_ns"],
                    "tail_measured_ns": kp["tail_measured_ns"],
                    "tail_noise_ns": kp["tail_noise_ns"],
                },
            }
        )
    return out


def main() -> None:
    cut(__doc__.splitlines()[0], cells)


if __name__ == "__main__":
    main()
