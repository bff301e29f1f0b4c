"""Lab tool (issue 12): would pairing a far step with the near step of its own cycle decide more eager gap totals?

The stitch reads the gap before op i = j + r as median(d_far) - median(d_near) - duration_i, the two medians over
different steps. In a cycle the far and near steps of one anchor run one after the other, so on a host that moves
(an eager H200 host switching speeds every 0.1-1 s) they mostly share its speed; the median of each cycle's
d_far - d_near would then shed that common motion. This reads the recorded eager passes of the field fixtures
(``gap_total_fixture.py``'s cut: every sampled step with its clean reference, in run order), stitches each as the pass
did (launchprobe's ``sampled.stitch``), and sets beside it the same total with each far-near term taken paired:

  - the far and near steps' distance in the run (1: adjacent);
  - the stitched total less the clean step's gaps (the clean steps timed in the cycles, less the durations), as
    run and paired (the far-near terms' sum changed, nothing else), each with the error the error model gives it
    (each position's ``sampled.median_error``, combined as independent), its verdict by that error, and the error
    the pass's own halves show (random splits of its cycles, each half stitched alone).

On the seven passes of the fixtures (docs/performance.md, session of 2026-12-04 from 06:57 UTC) the model's error
fell by up to 35% when paired, but the halves disagreed as much as before: pairing moves the total, not its noise.

Not the pass's reading: a lab comparison. From the project root, no GPU:

    python3 benchmarks/field/paired_cycles.py [FIXTURE.json.gz ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from launchprobe.analysis import sampled

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path.insert(0, str(TESTS))  # the field tests' helpers: the recorded pass stitched again, its random halves

from pass_halves import random_halves, stitch_recorded  # noqa: E402

FIELD = TESTS / "fixtures" / "field"
FIXTURES = (
    "gap_total_eager_h200.json.gz",
    "gap_total_reach_h200.json.gz",
    "gap_total_hostbound_h200.json.gz",
    "variant_order_h200.json.gz",
)


def pair_terms(cell: dict[str, Any], clean_ns: float) -> dict[int, tuple[dict[int, float], dict[int, float]]]:
    """Per anchor j, its far and near local differences by cycle (the k-th step of a variant is its k-th cycle),
    each read at the clean step's host speed as the stitch reads it."""
    roles, variants = cell["plan"]["roles"], cell["plan"]["variants"]
    seen: dict[int, int] = {}
    terms: dict[int, tuple[dict[int, float], dict[int, float]]] = {}
    for variant, _length, ends, reference in cell["steps"]:
        cycle = seen.get(variant, 0)
        seen[variant] = cycle + 1
        role = roles[variant]
        if role not in ("far", "near"):
            continue
        at = {int(op): int(t) for op, t in ends}
        scale = clean_ns / reference if reference else 1.0
        marks = variants[variant]
        for anchor, target in zip(marks[0::2], marks[1::2]):
            far, near = terms.setdefault(anchor, ({}, {}))
            (far if role == "far" else near)[cycle] = (at[target] - at[anchor]) * scale
    return terms


def run_distance(cell: dict[str, Any]) -> list[int]:
    """For every anchor and cycle, how many steps apart its far and near steps ran."""
    roles, variants = cell["plan"]["roles"], cell["plan"]["variants"]
    seen: dict[int, int] = {}
    where: dict[tuple[int, int], int] = {}
    for index, (variant, *_rest) in enumerate(cell["steps"]):
        where[(variant, seen.get(variant, 0))] = index
        seen[variant] = seen.get(variant, 0) + 1
    first = {role: {variants[v][0]: v for v in range(len(roles)) if roles[v] == role} for role in ("far", "near")}
    out = []
    for anchor, far in first["far"].items():
        near = first["near"].get(anchor)
        if near is not None:
            out += [abs(where[(far, k)] - where[(near, k)]) for k in range(min(seen[far], seen[near]))]
    return out


def paired_shift(cell: dict[str, Any], steps: list[Any], clean_ns: float) -> tuple[float, float, float]:
    """For ``steps`` of the pass: what pairing changes in the total (the paired far-near terms less the unpaired,
    summed), and the far-near terms' error unpaired and paired (each position's ``sampled.median_error``, combined
    as if independent, as the stitch combines them)."""
    unpaired_sq = paired_sq = shift = 0.0
    for far, near in pair_terms({**cell, "steps": steps}, clean_ns).values():
        paired = [far[k] - near[k] for k in sorted(set(far) & set(near))]
        unpaired_sq += sampled.median_error(list(far.values())) ** 2 + sampled.median_error(list(near.values())) ** 2
        paired_sq += sampled.median_error(paired) ** 2
        shift += statistics.median(paired) - (statistics.median(far.values()) - statistics.median(near.values()))
    return shift, math.sqrt(unpaired_sq), math.sqrt(paired_sq)


def study(cell: dict[str, Any], halvings: int = 20) -> dict[str, Any]:
    """The pass stitched as run and with its far-near terms paired within their cycles: each total less the clean
    step's gaps, the error the error model gives it, and the error its own halves show (``halvings`` random
    splits of the cycles, each half stitched alone: the rms of the two halves' difference over 2 is the error of
    the whole)."""
    clean_ns = statistics.median(cell["clean_in_cycles"])
    clean_gaps = clean_ns - sum(cell["durations"])
    tolerance = max(sampled.GAP_TOTAL_ABS_NS, sampled.GAP_TOTAL_REL * abs(clean_gaps))
    stitched = stitch_recorded(cell, cell["steps"])
    shift, unpaired_terms, paired_terms = paired_shift(cell, cell["steps"], clean_ns)
    diff = stitched.gap_total_ns - clean_gaps
    error = math.hypot(stitched.gap_total_noise_ns, stitched.gap_total_scatter_ns)
    # the far-near terms' part of the model's error taken out and the paired one put in
    paired_error = math.sqrt(max(0.0, error**2 - unpaired_terms**2 + paired_terms**2))
    split: dict[str, list[float]] = {"unpaired": [], "paired": []}
    for parts in random_halves(cell["steps"], halvings):
        totals = []
        for part in parts:
            total = stitch_recorded(cell, part).gap_total_ns
            totals.append((total, total + paired_shift(cell, part, clean_ns)[0]))
        split["unpaired"].append(totals[0][0] - totals[1][0])
        split["paired"].append(totals[0][1] - totals[1][1])
    halves = {key: math.sqrt(statistics.fmean(d * d for d in values)) / 2 for key, values in split.items()}
    return {
        "cell": f"{cell['shape']} eager b{cell['bucket']}",
        "distance_median": statistics.median(run_distance(cell)),
        "unpaired": (diff, error, halves["unpaired"], sampled.gap_total_verdict(diff, tolerance, error)),
        "paired": (
            diff + shift,
            paired_error,
            halves["paired"],
            sampled.gap_total_verdict(diff + shift, tolerance, paired_error),
        ),
        "tolerance_ns": tolerance,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fixtures", nargs="*", type=Path, default=[FIELD / name for name in FIXTURES])
    args = parser.parse_args()
    word = {True: "yes", False: "NO", None: "n/d"}
    for path in args.fixtures:
        for cell in json.loads(gzip.decompress(path.read_bytes()))["cells"]:
            r = study(cell)
            text = [
                f"{label} {d / 1e3:+.1f} +/- {e / 1e3:.1f} ({word[v]}; halves {h / 1e3:.1f})"
                for label, (d, e, h, v) in (("as run", r["unpaired"]), ("paired", r["paired"]))
            ]
            print(
                f"{r['cell']:<24} far/near {r['distance_median']:g} apart, tol {r['tolerance_ns'] / 1e3:.0f} us: "
                + "; ".join(text)
            )


if __name__ == "__main__":
    main()
