"""Lab tool: the piecewise piece boundaries as the per-kernel pass's pairs read them, against CUPTI's truth.

kv_write (op k) is host-launched right after a graph piece; o_proj (op j) opens a piece after host-launched
attention. The pass times the gap before each with a far and a near variant around an anchor r = 4 ops before.
Here those variants and three more run over the same layers of a piecewise step (every ``--every``-th layer from
layer 1), in the pass's own cycles (``kernel_pass.run_cycles``), once without CUPTI and once under it, and CUPTI's
kernels of the second run give the truth of each variant's steps:

    F   node after k - 4, host event after k              the pass's far pair for kv_write
    N   node after k - 4, node after k - 1 (piece end)     the pass's near pair for kv_write
    NH  node after k - 4, host event right before k (after the piece's replay)
    FD  node after k - 4, host event right before k (a dummy), host event after k
    D   host event right before k only
    OF  node after j - 4, node after j                     the pass's far pair for o_proj
    ON  node after j - 4, host event after j - 1           the pass's near pair for o_proj
    R   no event: o_proj's piece captured afresh (R1, R2, ... with --recaptures: each its own capture)

Printed per cell: the pairs' readings (far span less near span less the op's CUPTI duration) without and with
CUPTI; each variant's step length less the clean steps around it (no CUPTI needed), per layer; CUPTI's view of each
variant's steps (the op's gap, the idle after the anchor's event); CUPTI's clean references taken at five moments.
docs/performance.md (2026-12-01, session of 19:52 UTC) has what it showed. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/piece_boundary.py --out $OUT/pb.json [--every 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

CELLS = "llama-3-8b:8,llama-3-8b:1,llama-3-8b:64,llama-3.2-1b:8"
Spec = dict[int, list[str]]  # op index -> "node" / "host" event after it, "before" it on the host, "recapture"


def specs(kv: Sequence[int], op: Sequence[int], recaptures: int = 1) -> dict[str, Spec]:
    def merge(*parts: Spec) -> Spec:
        out: Spec = {}
        for part in parts:
            for i, kinds in part.items():
                out.setdefault(i, []).extend(kinds)
        return out

    anchor = {k - 4: ["node"] for k in kv}
    return {
        "F": merge(anchor, {k: ["host"] for k in kv}),
        "N": merge(anchor, {k - 1: ["node"] for k in kv}),
        "NH": merge(anchor, {k: ["before"] for k in kv}),
        "FD": merge(anchor, {k: ["before", "host"] for k in kv}),
        "D": {k: ["before"] for k in kv},
        "OF": merge({j - 4: ["node"] for j in op}, {j: ["node"] for j in op}),
        "ON": merge({j - 4: ["node"] for j in op}, {j - 1: ["host"] for j in op}),
        **{f"R{c + 1}" if recaptures > 1 else "R": {j: ["recapture"] for j in op} for c in range(recaptures)},
    }


class LabVariants:
    """What ``kernel_pass.run_cycles`` needs of ``kernel_pass.Variants`` (runners, len, read), for event specs
    with host events before an op as well as after. A graphed piece with an event in it is captured afresh
    (``kernel_pass._marked_runner``)."""

    def __init__(self, clean: Any, ops: Sequence[Any], plan: Sequence[Spec], pool: Any) -> None:
        import torch

        from launchprobe.measure import kernel_pass
        from launchprobe.workload.model import Op

        stream = torch.cuda.current_stream()
        self.events: list[dict[tuple[str, int], Any]] = []
        self.runners: list[Any] = []
        for spec in plan:
            events = {}
            for i, kinds in spec.items():
                for kind in kinds:
                    event = torch.cuda.Event(enable_timing=True, external=True)
                    event.record(stream)
                    events[(kind, i)] = event
            self.events.append(events)
        torch.cuda.synchronize()
        for spec, events in zip(plan, self.events):

            def mark(op: Any, i: int, graphed: bool, events: dict[tuple[str, int], Any] = events) -> Any:
                return self._wrap(Op, op, events, i, graphed, stream)

            self.runners.append(kernel_pass._marked_runner(clean, ops, set(spec), mark, pool, None))

    @staticmethod
    def _wrap(op_type: Any, op: Any, events: dict[tuple[str, int], Any], i: int, graphed: bool, stream: Any) -> Any:
        before = events.get(("before", i))
        after = events.get(("node", i)) if graphed else events.get(("host", i))

        def run() -> None:
            if before is not None:
                before.record(stream)
            op.run()
            if after is not None:
                after.record() if graphed else after.record(stream)  # inside a capture: a node

        return op_type(op.name, op.layer, run)

    def __len__(self) -> int:
        return len(self.runners)

    def read(self, variant: int, boundary: Any) -> dict[tuple[str, int], int]:
        return {key: round(boundary.elapsed_time(e) * 1e6) for key, e in self.events[variant].items()}


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def readings(
    order: Sequence[str], steps: Sequence[Any], kv: Sequence[int], op: Sequence[int], durations: Sequence[float]
) -> dict[str, Any]:
    """The pairs' readings (us) and each variant's step length less its clean references, per layer (us)."""
    spans: dict[str, list[int]] = {name: [] for name in ("F", "N", "NH", "FD", "OF", "ON")}
    longer: dict[str, list[float]] = {}
    for step in steps:
        name, e = order[step.variant], step.ends
        longer.setdefault(name, []).append(step.step_ns - step.reference_ns)
        for k, j in zip(kv, op):
            if name in ("F", "FD"):
                spans[name].append(e[("host", k)] - e[("node", k - 4)])
            elif name == "N":
                spans[name].append(e[("node", k - 1)] - e[("node", k - 4)])
            elif name == "NH":
                spans[name].append(e[("before", k)] - e[("node", k - 4)])
            elif name == "OF":
                spans[name].append(e[("node", j)] - e[("node", j - 4)])
            elif name == "ON":
                spans[name].append(e[("host", j - 1)] - e[("node", j - 4)])
    m = {name: _median(values) for name, values in spans.items()}
    d_kv, d_o = _median([durations[k] for k in kv]), _median([durations[j] for j in op])
    per_layer = {name: _median(values) / len(kv) / 1e3 for name, values in longer.items()}
    return {
        "kv_write F-N": (m["F"] - m["N"] - d_kv) / 1e3,
        "kv_write F-NH": (m["F"] - m["NH"] - d_kv) / 1e3,
        "kv_write FD-NH": (m["FD"] - m["NH"] - d_kv) / 1e3,
        "o_proj OF-ON": (m["OF"] - m["ON"] - d_o) / 1e3,
        "longer_per_layer_us": per_layer,
    }


def truth(
    order: Sequence[str], ran: Sequence[int], rows: Sequence[tuple[str, int, int]], per_step: int, counts: list[int],
    kv: Sequence[int], op: Sequence[int],
) -> dict[str, dict[str, float]]:  # fmt: skip
    """CUPTI's view of the steps of the run under it, per variant ("clean" for the clean steps), us."""
    from launchprobe.analysis import sampled

    keys = ("kv_write gap", "kv_write anchor idle", "o_proj gap", "o_proj anchor idle")
    seen: dict[str, dict[str, list[int]]] = {}
    for number, variant in enumerate(ran):
        chunk = rows[number * per_step : (number + 1) * per_step]
        ops = sampled.group_ops([(start, end) for _, start, end in chunk], counts)
        mine = seen.setdefault(order[variant] if variant >= 0 else "clean", {key: [] for key in keys})
        for k, j in zip(kv, op):
            mine["kv_write gap"].append(ops[k][0] - ops[k - 1][1])
            mine["kv_write anchor idle"].append(ops[k - 3][0] - ops[k - 4][1])
            mine["o_proj gap"].append(ops[j][0] - ops[j - 1][1])
            mine["o_proj anchor idle"].append(ops[j - 3][0] - ops[j - 4][1])
    return {name: {key: _median(values) / 1e3 for key, values in d.items()} for name, d in seen.items()}


def cell(shape: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import bench_sampled_gaps as bench
    import torch

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass as kp
    from launchprobe.measure.timing import pinned_host, warm_up

    ops, counts, clean, pool = bench.lab_cell(shape, batch, "piecewise", pdl=not args.no_pdl)
    names = [o.name for o in ops]
    n = len(ops)
    layers = range(1, (n - 3) // 10, args.every)
    kv, op = [4 + 10 * layer for layer in layers], [6 + 10 * layer for layer in layers]
    if any(names[k] != "kv_write" for k in kv) or any(names[j] != "o_proj" for j in op):
        raise SystemExit(f"unexpected op layout: {names[:12]}")
    references: dict[str, dict[str, float]] = {}

    def reference(label: str) -> Any:
        with pinned_host():
            clean_steps = kp.clean_reference(clean)
        if clean_steps is None:
            raise SystemExit("CUPTI saw no kernels (held by another profiler?)")
        ref = sampled.cupti_reference(clean_steps.kernels, clean_steps.step_ns, counts)
        assert ref.op_gap_ns is not None
        references[label] = {
            "step_ms": ref.step_ns / 1e6,
            "kv_write gap": _median([ref.op_gap_ns[k] for k in kv]) / 1e3,
            "o_proj gap": _median([ref.op_gap_ns[j] for j in op]) / 1e3,
        }
        return ref

    reference("before variants")
    plan = specs(kv, op, args.recaptures)
    order = list(plan)
    variants = LabVariants(clean, ops, [plan[name] for name in order], pool)
    reference("after variants")
    extra = []
    for _ in range(args.copies):  # as many more graphs as a pass's variants hold
        for segment in clean.segments:
            if segment.graphed:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    for o in segment.ops:
                        o.run()
                extra.append(graph)
    torch.cuda.synchronize()
    reference(f"after {len(extra)} more graphs")
    for runner in variants.runners:
        warm_up(runner.run, 3, True)
    ref = reference("before the cycles")
    assert ref.op_duration_ns is not None
    durations = ref.op_duration_ns
    with pinned_host():
        steps, clean_ns = kp.run_cycles(variants, clean, args.cycles)  # type: ignore[arg-type]
    reference("after the cycles")
    ran: list[int] = []
    read: list[Any] = []

    def under_cupti() -> None:
        read.extend(kp.run_cycles(variants, clean, args.cupti_cycles, warm=False, ran=ran)[0])  # type: ignore[arg-type]

    with pinned_host():
        rows = kp.cuda_intervals(under_cupti)
    per_step = sum(counts)
    if len(rows) != per_step * len(ran):
        raise SystemExit(f"{len(rows)} kernels under CUPTI for {len(ran)} steps of {per_step}")
    out = {
        "shape": shape,
        "batch": batch,
        "pdl": not args.no_pdl,
        "layers": list(layers),
        "clean_ms": _median(clean_ns) / 1e6,
        "events": readings(order, steps, kv, op, durations),
        "events_under_cupti": readings(order, read, kv, op, durations),
        "cupti_truth": truth(order, ran, rows, per_step, counts, kv, op),
        "cupti_references": references,
    }
    return out


def release() -> None:
    """The last cell's model and graphs, once nothing refers to them."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()


def show(result: dict[str, Any]) -> str:
    lines = [f"{result['shape']} piecewise b{result['batch']} (PDL {result['pdl']}): clean {result['clean_ms']:.3f} ms"]
    for label in ("events", "events_under_cupti"):
        r = result[label]
        pairs = "  ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "longer_per_layer_us")
        longer = " ".join(f"{k} {v:+.2f}" for k, v in r["longer_per_layer_us"].items())
        lines.append(f"  {label:18s} {pairs} | step less clean, per layer: {longer}")
    for name, d in result["cupti_truth"].items():
        lines.append(f"  CUPTI {name:5s} " + "  ".join(f"{k} {v:.2f}" for k, v in d.items()))
    for label, d in result["cupti_references"].items():
        lines.append(f"  CUPTI clean steps, {label}: " + "  ".join(f"{k} {v:.2f}" for k, v in d.items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, run: Callable[..., dict[str, Any]] = cell) -> None:
    """Each cell in turn; the results so far written after each, so a failure loses none."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default=CELLS, help="shape:batch,...")
    parser.add_argument("--every", type=int, default=4, help="time every N-th layer from layer 1")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--cupti-cycles", type=int, default=40)
    parser.add_argument("--copies", type=int, default=8, help="copies of the clean graphs made before a reference")
    parser.add_argument("--recaptures", type=int, default=1, help="variants R1.. that capture o_proj's piece afresh")
    parser.add_argument("--no-pdl", action="store_true", help="kernels launched without programmatic dependent launch")
    args = parser.parse_args(argv)
    results = []
    for item in args.cells.split(","):
        shape, batch = item.split(":")
        result = run(shape, int(batch), args)
        release()
        results.append(result)
        print(show(result), flush=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
