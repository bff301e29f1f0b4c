"""Lab tool: where an eager pass's stitched step gains on the clean one, offline, for recorded matrices
(``capture_sampled_raw.py`` OUTDIRs). No GPU.

Per eager pass: the stitched step and the sampled steps against the clean step (the pass stitched again from its
own steps, ``sampled.stitch``), and each pair's anchor effect: the pair's median reading (scaled to the clean
step, as the stitch scales it) less the same span of CUPTI's clean steps (op ends, scaled by the clean step over
CUPTI's), for the far pair (A_far) and the near pair (A_near) of every anchor. The stitched gap before op j + r is
d_far - d_near - duration: it is right where A_far = A_near, and reads long by their difference. The difference is
summed over the step and given by the class of the far pair's last op. CUPTI's step runs slower than clean in eager
(+7 to +15% for llama-3.2-1b on the H200); its spans scaled to the clean step are a reference per span, not a
measurement of the clean step. The second reference needs no CUPTI: each sampled step's first timed end, from its
boundary (no event before it but the boundary, which the clean steps have too), median per op ("first ends"); the
same A_far and A_near against its spans, and the stitched chain's end of each op less that first end, whose slope
along the step (past the first layer) says how fast the chain drifts. docs/performance.md ("The host-bound step
reads long") has what it printed:

    python3 benchmarks/field/anchor_effect_eval.py OUTDIR [OUTDIR ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from fixture_cut import recorded_passes, restitch


def _pair_medians(record: dict[str, Any], clean: float) -> dict[tuple[str, int], float]:
    """Each far and near pair's median reading, every step scaled by the clean step over its reference."""
    roles, variants = record["plan"]["roles"], record["plan"]["variants"]
    readings: dict[tuple[str, int], list[float]] = {}
    for variant, _length, ends, reference in record["steps"]:
        role = roles[variant]
        if role not in ("far", "near"):
            continue
        at = {int(op): t for op, t in ends}
        scale = clean / reference if reference else 1.0
        timed = variants[variant]
        for anchor, end in zip(timed[0::2], timed[1::2]):
            readings.setdefault((role, anchor), []).append((at[end] - at[anchor]) * scale)
    return {key: statistics.median(values) for key, values in readings.items()}


def _first_ends(record: dict[str, Any], clean: float) -> dict[int, float]:
    """Per op, the median end from the boundary in the steps where it is the first op timed (solo, far, near)."""
    roles = record["plan"]["roles"]
    ends: dict[int, list[float]] = {}
    for variant, _length, timed, reference in record["steps"]:
        if roles[variant] not in ("solo", "far", "near") or not timed:
            continue
        op, at = min((int(o), t) for o, t in timed)
        ends.setdefault(op, []).append(at * (clean / reference if reference else 1.0))
    return {op: statistics.median(values) for op, values in ends.items()}


def _anchor_effects(
    names: list[str], reach: int, pairs: dict[tuple[str, int], float], span: Any
) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """A_far and A_near per anchor against ``span(first, last)`` (None where it has no value), and their
    difference by the far end's op."""
    far: list[float] = []
    near: list[float] = []
    by_class: dict[str, list[float]] = {}
    for anchor in range(len(names) - reach):
        if ("far", anchor) not in pairs or ("near", anchor) not in pairs:
            continue
        far_span, near_span = span(anchor, anchor + reach), span(anchor, anchor + reach - 1)
        if far_span is None or near_span is None:
            continue
        far.append(pairs[("far", anchor)] - far_span)
        near.append(pairs[("near", anchor)] - near_span)
        by_class.setdefault(names[anchor + reach], []).append(far[-1] - near[-1])
    return far, near, by_class


def evaluate(record: dict[str, Any], counts: list[int]) -> dict[str, Any]:
    """One pass: its stitched and sampled steps against clean, and its pairs' anchor effects (module docstring)."""
    names, reach = record["names"], record["reach"]
    stitched, clean = restitch(record, reach, record["stitch_args"][1])
    kernels = np.asarray(record["cupti"]["kernels"], dtype=np.int64)  # steps x kernels x [start, end]
    op_ends = kernels[:, np.cumsum(counts) - 1, 1]
    to_clean = clean / float(np.median(record["cupti"]["step_ns"]))
    pairs = _pair_medians(record, clean)

    def span(first: int, last: int) -> float:
        """CUPTI's clean steps from op first's end to op last's, at the clean step's speed."""
        return float(np.median(op_ends[:, last] - op_ends[:, first])) * to_clean

    far, near, by_class = _anchor_effects(names, reach, pairs, span)
    first = _first_ends(record, clean)

    def first_span(a: int, b: int) -> float | None:
        return first[b] - first[a] if a in first and b in first else None

    first_far, first_near, _ = _anchor_effects(names, reach, pairs, first_span)
    layer = max(sum(1 for layer_ in record["layers"] if layer_ == 0), 1)
    past = sorted(op for op in first if op > layer)
    chain = [stitched.rows[op]["end_ns"] for op in past]
    drift = float(np.polyfit(past, np.subtract([first[op] for op in past], chain), 1)[0]) if len(past) > 2 else None
    return {
        "ops": len(names),
        "batch": record["bucket"],
        "reach": reach,
        "stitched_pct": 100 * (stitched.step_ns / clean - 1),
        "sampled_pct": 100 * (stitched.instrumented_step_ns / clean - 1),
        "a_far_us": float(np.mean(far)) / 1e3,
        "a_near_us": float(np.mean(near)) / 1e3,
        "difference_sum_us": float(np.sum(np.subtract(far, near))) / 1e3,
        "stitched_less_clean_us": (stitched.step_ns - clean) / 1e3,
        "by_class_us": {op: float(np.mean(v)) / 1e3 for op, v in by_class.items()},
        "first_a_far_us": float(np.mean(first_far)) / 1e3 if first_far else None,
        "first_a_near_us": float(np.mean(first_near)) / 1e3 if first_near else None,
        "first_anchors": len(first_far),
        "first_ops": len(first),
        "drift_ns_per_op": drift,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dirs", type=Path, nargs="+")
    args = parser.parse_args()
    for out_dir in args.out_dirs:
        for record, cell in recorded_passes(out_dir, ("eager",)):
            if record["kernel_counts"] is None:
                raise SystemExit(f"{out_dir}: no kernel counts for a pass of {len(record['names'])} ops")
            row = evaluate(record, record["kernel_counts"])
            print(
                f"{out_dir.name} {cell['shape']} eager b{row['batch']} reach {row['reach']}: stitched "
                f"{row['stitched_pct']:+.1f}% ({row['stitched_less_clean_us']:+.0f} us), sampled steps "
                f"{row['sampled_pct']:+.1f}%; A_far {row['a_far_us']:+.2f} us, A_near {row['a_near_us']:+.2f} us, "
                f"summed difference {row['difference_sum_us']:+.0f} us"
            )
            print("   by the far end's op (us): " + ", ".join(f"{k} {v:+.1f}" for k, v in row["by_class_us"].items()))
            if row["first_a_far_us"] is not None and row["drift_ns_per_op"] is not None:
                print(
                    f"   against the first ends ({row['first_ops']} ops, {row['first_anchors']} anchors): A_far "
                    f"{row['first_a_far_us']:+.2f} us, A_near {row['first_a_near_us']:+.2f} us; the first ends less "
                    f"the stitched chain's drift {row['drift_ns_per_op']:+.0f} ns an op past the first layer"
                )


if __name__ == "__main__":
    main()
