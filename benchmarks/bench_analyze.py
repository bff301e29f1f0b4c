"""Time `launchprobe analyze` on a synthetic nsys-like SQLite export of N kernels.

The export has the real table and column names (CUPTI_ACTIVITY_KIND_KERNEL / _RUNTIME, NVTX_EVENTS, StringIds,
META_DATA_EXPORT): a decode loop of N kernels in steps of --kernels-per-step, one launch call per kernel and a
stream sync per step, one NVTX range per step (engine markers it is not: `analyze` finds the steps itself). Reports
the read time; what `analyze` does with the timeline, through the function it calls (`api.run_of`): the
whole-trace windows with the steps found from the structure (issue 17: at least 1M kernels/s, read included), and
without them (`--steps off`); the per-step-range analysis (`--range decode_step`); peak RSS.

    python benchmarks/bench_analyze.py --kernels 90000 1000000
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bench(n: int, per_step: int, folder: Path) -> dict[str, float]:
    from launchprobe.api import analysis_options, run_of
    from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
    from tests.fixtures import nsys_synth as synth

    path = folder / f"synthetic_{n}.sqlite"
    if not path.exists():
        data = synth.decode_loop(synth.Loop(steps=max(1, n // per_step), kernels_per_step=per_step))
        synth.write_nsys_sqlite(path, data)
    t0 = time.perf_counter()
    timeline = read_nsys_sqlite(path)
    t1 = time.perf_counter()
    whole = run_of(timeline, analysis_options(), "off")
    t2 = time.perf_counter()
    ranged = run_of(timeline, analysis_options(ranges="decode_step"), None)
    t3 = time.perf_counter()
    run = run_of(timeline, analysis_options(), None)  # `launchprobe analyze trace.sqlite`: windows, then steps
    t4 = time.perf_counter()
    kernels = len(timeline.gpu_ops)
    steps = sum(1 for w in run.windows if w.step_kind)
    assert len(whole.windows) == 1 and steps == len(run.windows) - 1
    return {
        "kernels": kernels,
        "mb": path.stat().st_size / 1e6,
        "read_s": t1 - t0,
        "whole_s": t2 - t1,
        "ranges_s": t3 - t2,
        "windows": len(ranged.windows),
        "kernels_per_s": kernels / (t2 - t0),
        "analyze_s": t4 - t3,
        "steps": steps,
        "kernels_per_s_steps": kernels / (t1 - t0 + t4 - t3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, nargs="+", default=[90_000, 1_000_000])
    parser.add_argument("--kernels-per-step", type=int, default=480)
    parser.add_argument("--folder", type=Path, help="keep the generated exports here (default: a temp folder)")
    args = parser.parse_args()
    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.processor() or platform.machine()} python {platform.python_version()}"
    )
    print(
        "| kernels | export MB | read s | analysis, --steps off s | per-step ranges s (windows) "
        "| kernels/s read+analysis, steps off | analysis with steps s (steps) | kernels/s read+analysis |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for n in args.kernels:
            r = bench(n, args.kernels_per_step, folder)
            print(
                f"| {r['kernels']:,} | {r['mb']:.1f} | {r['read_s']:.2f} | {r['whole_s']:.2f} | "
                f"{r['ranges_s']:.2f} ({r['windows']:,}) | {r['kernels_per_s'] / 1e6:.2f} M | "
                f"{r['analyze_s']:.2f} ({r['steps']:,}) | {r['kernels_per_s_steps'] / 1e6:.2f} M |",
                flush=True,
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
