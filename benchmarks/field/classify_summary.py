"""Field workload E's summary line: step times of `launchprobe classify` run files, clean vs under nsys.

python benchmarks/field/classify_summary.py CLEAN.json NSYS.json
"""

from __future__ import annotations

import json
import sys


def steps(path: str) -> dict[tuple[str, int], float]:
    with open(path) as handle:
        run = json.load(handle)
    return {(r["mode"], int(r["batch"])): float(r["step_ms_median"]) for r in run.get("results", [])}


def main() -> None:
    clean, nsys = steps(sys.argv[1]), steps(sys.argv[2])
    parts = [f"{m}/b{b}={clean[(m, b)]:.4f}->{nsys.get((m, b), float('nan')):.4f}" for m, b in sorted(clean)]
    print(f"SUMMARY workload=E step_ms_clean->nsys {' '.join(parts)}")


if __name__ == "__main__":
    main()
