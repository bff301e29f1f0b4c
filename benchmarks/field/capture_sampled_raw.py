"""Run benchmarks/bench_sampled_gaps.py and keep, for every per-kernel pass, the raw material it stitched.

Lab tool behind tests/fixtures/field/sampled_h200.json.gz: it wraps four functions of the pass (the pass itself,
``run_cycles``, ``clean_reference``, ``stitch``, and the counting pass) to record their inputs and outputs, then
runs the bench's ``main()`` unchanged. OUTDIR/raw.json.gz gets one record per counting pass (``counts_for``,
``counts``) and one per kernel pass: mode, bucket, reach, op names, layers, host_launched, the plan, durations,
every sampled step in run order ([variant, step_ns, [[op, end_ns], ...], reference_ns]; ``probe_steps``: the same
for each round of the eager stride probes, variants numbered within the probe), every clean step timed in
the cycles, the same for the cycle the pass runs again under CUPTI (``cupti_steps``, ``cupti_clean_in_cycles``) and
for the timer pairs (``timer_steps``, ``timer_clean_in_cycles``; ``timer_durations``: each target op's duration in
the timer steps under CUPTI; ``timer_cupti_steps``: those steps' timer readings; ``timer_cupti_rows``: CUPTI's
kernels of those steps in run order, [is a timer, start, end], with ``timer_cupti_ran`` their variants and
``timer_targets`` each variant's target ops), CUPTI's clean steps (kernel
names of the first, [start, end] of every kernel, step times), the same for the capture check's second capture of
the clean graphs (``cupti_second``, graph modes) and what the pass reported. OUTDIR/cycle_MODE.json.gz holds, per
pass of that mode, [bucket, ops, steps]: every step of the CUPTI cycle in run order (clean ones as negative
variants), each as [variant, its first kernel's start from the cycle's first, [op start, op end, ...] from its own
first start] in CUPTI's ns. On the GPU machine, from the project root:

    source .gpu/setup.sh; python3 benchmarks/field/capture_sampled_raw.py $OUT --out $OUT/sampled.json [bench args]
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps


def main() -> None:
    import bench_sampled_gaps

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp

    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: capture_sampled_raw.py OUTDIR --out OUTDIR/sampled.json [bench_sampled_gaps.py args]")
    out_dir = Path(sys.argv[1])
    if not out_dir.is_dir():
        sys.exit(f"capture_sampled_raw.py: {out_dir} is not a folder")
    records: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    originals: dict[str, Callable[..., Any]] = {
        "kernel_pass": kp.kernel_pass,
        "run_cycles": kp.run_cycles,
        "clean_reference": kp.clean_reference,
        "kernel_counts": kp.kernel_counts,
        "variant_kernels": kp.variant_kernels,
        "stitch": sampled.stitch,
        "cuda_intervals": kp.cuda_intervals,
        "grouped_ops": kp._grouped_ops,
        "timer_step_durations": kp._timer_step_durations,
    }

    def kernel_pass(mode: str, bucket: int, ops: Any, **kwargs: Any) -> Any:
        current.clear()
        current.update(mode=mode, bucket=bucket)
        current.update(names=[op.name for op in ops], layers=[op.layer for op in ops])
        result = originals["kernel_pass"](mode, bucket, ops, **kwargs)
        current["reach"] = result.reach  # the pass's own, where it chose the default (``sampled.default_reach``)
        fields = ("stride", "variants", "cycles", "clean_step_ms", "host_cpu", "step_ns", "busy_ns", "gap_total_ns")
        current["result"] = {name: getattr(result, name) for name in fields}
        if getattr(result, "cupti_capture_check", None) is not None:
            import msgspec

            current["result"]["cupti_capture_check"] = msgspec.to_builtins(result.cupti_capture_check)
        records.append(dict(current))
        return result

    def run_cycles(*args: Any, **kwargs: Any) -> Any:
        steps, clean_ns = originals["run_cycles"](*args, **kwargs)
        timers = bool(args) and isinstance(args[0], kp.TimerVariants)
        if kwargs.get("ran") is not None:  # a CUPTI cycle: its run order, clean steps as negative variants
            current["timer_cupti_ran" if timers else "cupti_ran"] = list(kwargs["ran"])
            if timers:  # the timer steps under CUPTI (``timer_durations``, ``timer_cupti_steps``)
                return steps, clean_ns
        rows = [[s.variant, s.step_ns, sorted(s.ends.items()), s.reference_ns] for s in steps]
        if "first_cycle" in kwargs:  # an eager stride probe's round (``kp.cycled``): its steps, not the pass's
            current.setdefault("probe_steps", []).append(rows)
            return steps, clean_ns
        if timers:  # the timer pairs' steps: timer readings, GPU clock
            current["timer_steps"], current["timer_clean_in_cycles"] = rows, clean_ns
        elif "steps" in current:  # the second call: the cycle the pass runs again under CUPTI
            current["cupti_steps"], current["cupti_clean_in_cycles"] = rows, clean_ns
        else:
            current["steps"], current["clean_in_cycles"] = rows, clean_ns
        return steps, clean_ns

    def timer_step_durations(*args: Any, **kwargs: Any) -> Any:
        current["in_timer_cupti"] = True  # CUPTI's rows of the timer steps (``timer_cupti_rows``)
        try:
            seen = originals["timer_step_durations"](*args, **kwargs)
        finally:
            current.pop("in_timer_cupti", None)
        current["timer_targets"] = [list(t) for t in args[2]]  # (variants, clean, targets, solo, counts, names)
        current["timer_durations"] = sorted(seen.durations.items())  # per target op, in the timer steps under CUPTI
        # the same steps' timer readings, GPU clock, as ``timer_steps``
        current["timer_cupti_steps"] = [[s.variant, s.step_ns, sorted(s.ends.items())] for s in seen.steps]
        return seen

    def clean_reference(clean: Any) -> Any:
        reference = originals["clean_reference"](clean)
        if reference is not None:
            kernels, step_ns = reference.kernels, reference.step_ns
            key = "cupti_second" if "cupti" in current else "cupti"  # the second: the capture check's
            current[key] = {"names0": reference.names[0], "kernels": kernels, "step_ns": step_ns}
        return reference

    def kernel_counts(ops: Any) -> Any:
        counts = originals["kernel_counts"](ops)
        records.append({"counts_for": len(ops), "counts": counts[0]})
        return counts

    def variant_kernels(*args: Any, **kwargs: Any) -> Any:
        current["in_cycle"] = True  # only the CUPTI cycle's rows: the capture check's CUPTI steps come later
        try:
            return originals["variant_kernels"](*args, **kwargs)
        finally:
            current.pop("in_cycle", None)

    def cuda_intervals(work: Any) -> Any:
        rows = originals["cuda_intervals"](work)
        if current.get("in_cycle"):
            current["cupti_rows"] = rows
        if current.get("in_timer_cupti"):  # [is a timer, start, end] per kernel, the readings' copies set aside
            current["timer_cupti_rows"] = [
                [int(kp.timer_pairs.TIMER_KERNEL in name), start, end]
                for name, start, end in rows
                if not name.lower().startswith("memcpy")
            ]
        return rows

    def grouped_ops(seen: Any, counts: Any) -> Any:
        grouped = originals["grouped_ops"](seen, counts)
        rows, ran = current.pop("cupti_rows", None), current.get("cupti_ran")
        per_step = sum(counts[0]) if isinstance(counts, tuple) else 0
        if grouped is not None and rows and ran and len(rows) == per_step * len(ran):  # the cycle, clean steps too
            t0 = rows[0][1]
            cycle = []
            for j, v in enumerate(ran):
                step = [(start, end) for _, start, end in rows[j * per_step : (j + 1) * per_step]]
                intervals = sampled.group_ops(step, counts[0])
                first = intervals[0][0]
                cycle.append([v, first - t0, [x - first for pair in intervals for x in pair]])
            current["cupti_cycle"] = cycle  # [variant, step's first start from the cycle's, [op start, end, ...]]
        return grouped

    def stitch(ops: Any, steps: Any, plan: Any, durations: Any, *rest: Any, **kwargs: Any) -> Any:
        current["plan"] = {"spacing": plan.spacing, "variants": plan.variants, "roles": plan.roles}
        current["durations"] = list(durations)
        current["host_launched"] = [op.host_launched for op in ops]
        current["stitch_args"] = [*rest, *kwargs.values()]  # the clean step the measurements are scaled to
        return originals["stitch"](ops, steps, plan, durations, *rest, **kwargs)

    for module, name, wrapper in (
        (kp, "kernel_pass", kernel_pass),
        (kp, "run_cycles", run_cycles),
        (kp, "clean_reference", clean_reference),
        (kp, "kernel_counts", kernel_counts),
        (kp, "variant_kernels", variant_kernels),
        (kp, "cuda_intervals", cuda_intervals),
        (kp, "_grouped_ops", grouped_ops),
        (kp, "_timer_step_durations", timer_step_durations),
        (sampled, "stitch", stitch),
    ):
        setattr(module, name, wrapper)
    sys.argv = ["bench_sampled_gaps.py", *sys.argv[2:]]
    try:
        bench_sampled_gaps.main()
    finally:
        cycles: dict[str, list[Any]] = {}
        for record in records:
            if "cupti_cycle" in record:
                cycles.setdefault(record["mode"], []).append(
                    [record["bucket"], len(record["names"]), record.pop("cupti_cycle")]
                )
        with gzip.open(out_dir / "raw.json.gz", "wt") as f:
            json.dump(records, f)
        for mode, passes in cycles.items():  # one file per mode: each is a few MB
            with gzip.open(out_dir / f"cycle_{mode}.json.gz", "wt") as f:
                json.dump(passes, f)
        print(f"raw streams of {sum('steps' in r for r in records)} passes in {out_dir / 'raw.json.gz'}", flush=True)


if __name__ == "__main__":
    main()
