"""The HBM read ceiling timed two ways, interleaved in one process: with the host's launch of ``x.sum()`` inside
the timed region (the start event recorded first, as classify did before), and with an untimed lead-in sum
queued ahead so the start event fires with the timed sum already waiting (``measure/timing.time_call``).

    python benchmarks/bench_ceiling_timing.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launchprobe.measure.timing import time_call  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = (2 << 30) // 2
    xs = [torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_() for _ in range(4)]
    for x in xs:
        x.sum()
    results: dict[str, list[float]] = {"launch timed (old)": [], "lead-in (new)": []}
    for _ in range(args.rounds):
        for label in results:
            rates = []
            for i in range(20):
                x = xs[i % 4]
                lead = xs[(i - 1) % 4].sum if label.startswith("lead") else None
                rates.append(x.numel() * 2 / time_call("cuda", x.sum, lead_in=lead))
            results[label].append(statistics.median(rates) / 1e12)
    for label, values in results.items():
        print(f"{label:<20} median of 20, per round: {', '.join(f'{v:.3f}' for v in values)} TB/s")


if __name__ == "__main__":
    main()
