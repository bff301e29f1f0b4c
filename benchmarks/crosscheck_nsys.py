"""Set the per-kernel CUDA-event pass beside CUPTI as torch.profiler and nsys saw the same steps.

Inputs: the classify run file of a `--kernels` run made under `launchprobe nsys`, and that nsys run's analysis
(with `--range 'kernel_pass.*'`). Prints, per mode, busy time and total gap per step, and the median gap, from:
the events (the run file's kernel pass: the step it shows) and nsys's CUPTI (median over the
`kernel_pass mode=<mode>` windows). Under nsys, torch.profiler's own cross-check has no CUPTI. See docs/gaps.md.
    python benchmarks/crosscheck_nsys.py CLASSIFY.json NSYS_ANALYSIS.json
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from launchprobe.run.files import load_run
from launchprobe.run.schema import AnalyzeRun, ClassifyRun, KernelPass


def event_totals(kp: KernelPass) -> tuple[float, float, float, int]:
    """Busy, total gap and median gap of the pass's one step, from its kernel rows."""
    rows = kp.kernels
    gaps = [r.gap_before_ns for r in rows[1:]]
    return sum(r.duration_ns or 0 for r in rows), float(sum(gaps)), float(statistics.median(gaps)), len(rows)


def main() -> None:
    classify, nsys = (load_run(Path(arg)) for arg in sys.argv[1:3])
    if not isinstance(classify, ClassifyRun) or not isinstance(nsys, AnalyzeRun):
        sys.exit("usage: crosscheck_nsys.py CLASSIFY_RUN.json NSYS_RUN.json")
    summaries = {s.name: s for s in nsys.summaries}
    print("| mode | batch | source | busy ms/step | total gap ms/step | median gap us | ops or kernels |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for record in classify.results:
        kp = record.kernel_pass
        if not kp:
            continue
        mode, batch = record.mode, record.batch
        rows: list[tuple[str, float, float, float, float]] = [("CUDA events", *event_totals(kp))]
        window = summaries.get(f"kernel_pass mode={mode} bucket={record.bucket}")
        if window and window.busy_p50_ns is not None and window.span_p50_ns is not None:
            busy = window.busy_p50_ns
            rows.append(
                (f"CUPTI (nsys, median of {window.instances} steps)", busy, window.span_p50_ns - busy,
                 window.gap_p50_ns or 0, window.kernels_per_instance or 0)
            )  # fmt: skip
        for source, busy_ns, gap, median_gap, count in rows:
            print(
                f"| {mode} | {batch} | {source} | {busy_ns / 1e6:.3f} | {gap / 1e6:.3f} | {median_gap / 1e3:.2f} "
                f"| {count:.0f} |"
            )


if __name__ == "__main__":
    main()
