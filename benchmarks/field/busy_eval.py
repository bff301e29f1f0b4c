"""Lab tool: the busy check of recorded sampled passes (``capture_sampled_raw.py`` OUTDIRs) as run and as
``sampled.busy_verdict`` now judges it, with the overlap the gaps' noise makes (``sampled.noise_overlap_ns``).

Each pass is stitched again from its own steps (``fixture_cut.restitch``); a pass recorded in more than one OUTDIR
(the same steps) counts once. From the project root, no GPU:

    python3 benchmarks/field/busy_eval.py OUTDIR [OUTDIR ...]
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/field/, for fixture_cut

from fixture_cut import recorded_passes, restitch  # noqa: E402


def main() -> None:
    from launchprobe.analysis import sampled

    if len(sys.argv) < 2:
        sys.exit("usage: busy_eval.py OUTDIR [OUTDIR ...]")
    seen: set[str] = set()
    tally: Counter[tuple[object, object]] = Counter()
    print(
        f"{'outdir':24s} {'shape':12s} {'mode':9s} {'b':>3s} {'diff us':>8s} {'overlap':>8s} {'tol':>5s}  as run -> now"
    )
    for out_dir in sys.argv[1:]:
        for record, cell in recorded_passes(Path(out_dir), ("eager", "piecewise", "full")):
            key = hashlib.md5(json.dumps(record["steps"][:50]).encode()).hexdigest()
            check = cell["kernel_pass"].get("cupti_check") or {}
            if key in seen or not check.get("available"):
                continue
            seen.add(key)
            stitched, _ = restitch(record, record["reach"] or cell["kernel_pass"]["reach"], record["stitch_args"][1])
            reference = check.get("cupti_op_busy_ns") or check["cupti_busy_ns"]
            diff = stitched.busy_ns - reference
            overlap = sampled.noise_overlap_ns(stitched.rows)
            tolerance = sampled.BUSY_REL * reference
            now = sampled.busy_verdict(diff, tolerance, overlap)
            tally[(check.get("busy_agrees"), now)] += 1
            print(
                f"{out_dir[-24:]:24s} {cell['shape'][:12]:12s} {record['mode']:9s} {record['bucket']:>3} "
                f"{diff / 1e3:+8.1f} {overlap / 1e3:8.1f} {tolerance / 1e3:5.0f}  {check.get('busy_agrees')} -> {now}"
            )
    print(f"{len(seen)} passes; (as run, now): " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.items(), key=str)))


if __name__ == "__main__":
    main()
