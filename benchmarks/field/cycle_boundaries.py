"""Lab tool: CUPTI's gap into every step of the kernel pass's CUPTI cycle, by the variants on either side.

Wraps ``kernel_pass.run_cycles`` (for the run order of the CUPTI cycle) and ``kernel_pass.cuda_intervals`` (for its
kernels), then runs benchmarks/bench_sampled_gaps.py unchanged. After each pass it prints the median gap from the
last kernel of the step before to the first kernel of the step, grouped by (role before, role); clean steps are
"clean", the solo variant of op 0 "solo0". docs/performance.md (2026-12-01, 17:20 UTC) has what it showed. On the
GPU machine, from the project root:

    source .gpu/setup.sh; python3 benchmarks/field/cycle_boundaries.py --out $OUT/cb.json --modes piecewise,full
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

SHOWN = ("clean", "head", "wrap_head", "solo0", "plain")


def main() -> None:
    import bench_sampled_gaps

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp

    state: dict[str, Any] = {}
    run_cycles: Callable[..., Any] = kp.run_cycles
    cuda_intervals: Callable[..., Any] = kp.cuda_intervals
    kernel_pass: Callable[..., Any] = kp.kernel_pass

    def cycles(*args: Any, **kwargs: Any) -> Any:
        out = run_cycles(*args, **kwargs)
        if kwargs.get("ran") is not None:  # the CUPTI cycle (variant_kernels passes its run order)
            state["ran"] = kwargs["ran"]
        return out

    def intervals(work: Any) -> Any:
        rows = cuda_intervals(work)
        if "ran" in state and "rows" not in state:
            state["rows"] = rows
        return rows

    def one_pass(mode: str, bucket: int, ops: Any, **kwargs: Any) -> Any:
        state.clear()
        result = kernel_pass(mode, bucket, ops, **kwargs)
        ran, rows = state.get("ran"), state.get("rows")
        if not ran or not rows or len(rows) % len(ran):
            return result
        per = len(rows) // len(ran)
        layout = kp.op_layout(mode, ops)[0]
        head = sampled.head_op(layout)
        plan = sampled.pair_plan(len(ops), result.stride, result.reach, head, sampled.piece_boundaries(layout))

        def role(v: int) -> str:
            if v < 0:
                return "clean"
            return "solo0" if plan.variants[v] == [0] and plan.roles[v] == "solo" else plan.roles[v]

        gaps: dict[tuple[str, str], list[int]] = defaultdict(list)
        for j in range(1, len(ran)):
            gaps[(role(ran[j - 1]), role(ran[j]))].append(rows[j * per][1] - rows[j * per - 1][2])
        print(f"CUPTI gap into a step, {mode} b{bucket} ({len(ops)} ops, {per} kernels a step):", flush=True)
        for key in sorted(gaps, key=lambda k: -len(gaps[k])):
            if key[1] in SHOWN or key[0] in ("plain", "wrap_far"):
                values = gaps[key]
                print(f"  {key[0]:>10} -> {key[1]:<10} {statistics.median(values) / 1e3:6.2f} us  (n={len(values)})")
        return result

    for name, wrapper in (("run_cycles", cycles), ("cuda_intervals", intervals), ("kernel_pass", one_pass)):
        setattr(kp, name, wrapper)
    sys.argv = ["bench_sampled_gaps.py", *sys.argv[1:]]
    bench_sampled_gaps.main()


if __name__ == "__main__":
    main()
