"""Lab tool: the gap between steps read by a timer pair across two steps, against CUPTI's clean gap.

No timer pair of the pass reads op 0's gap, the one between steps (docs/gaps.md, "Timer pairs"). Here a *tail*
variant puts a timer kernel after the step's last op (the last node of its last graph) and a *head* variant one
after op 0 (in its first graph); the tail step runs right before the head step, between clean blocks, as the
pass's wrap variants do (``kernel_pass.run_cycles`` with ``follows``). The head's timer less the tail's, less op
0's duration, reads the gap between the two steps, with whatever the trailing timer adds to that boundary. A
second tail variant puts two timers after the last op (``tail2``): where each trailing timer adds the same, twice
the one-timer reading less the two-timer one is the boundary without a timer (``extrapolated``).

The same cycles then run under CUPTI, for op 0's duration in the head steps, CUPTI's own gap at each timed
boundary, and how long after the last op's end the trailing timers end. Against CUPTI's clean reference
(back-to-back clean steps, ``kernel_pass.clean_reference``) per cell: the one-timer pair (``pair_less_clean_ns``),
CUPTI's gap at the one- and two-timer boundaries less its clean gap (what the trailing timers do to the boundary),
the extrapolation, and the pair less CUPTI's gap in the same steps under CUPTI (like for like).

A *bridge* leaves the boundary without a timer: its timer is after the step's second-last op, the next step's
after op 0, and the *span* variant's pair (timers after the second-last and the last op of one step) is taken off:
the bridge less the span less op 0's duration reads the gap between steps (``bridge_gap_ns``), the timer before
the last op costing it alike in both. A *lead* variant puts a timer right before op 0 and one after it, in the
same graph: its difference, without CUPTI and under it, says whether op 0 (with its start after the graph's first
node) runs as long without CUPTI as the duration taken off the readings above (``lead_*``). Every reading is kept
per step (``raw``) so that a test can recompute the table. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/step_pair.py --out $OUT/step_pair.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for bench_sampled_gaps

SHAPES, MODES, BATCHES = ("llama-3.2-1b", "llama-3-8b"), ("piecewise", "full"), (1, 8, 64)
CELLS = ",".join(f"{s}:{m}:{b}" for s in SHAPES for m in MODES for b in BATCHES)
TAIL, HEAD, TAIL2, HEAD2, BRIDGE, HEAD3, SPAN, LEAD = range(8)  # each tail or bridge runs right before its head
TIMERS = {TAIL: 1, HEAD: 1, TAIL2: 2, HEAD2: 1, BRIDGE: 1, HEAD3: 1, SPAN: 2, LEAD: 2}
FOLLOWS = {TAIL: HEAD, TAIL2: HEAD2, BRIDGE: HEAD3}


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


class _Pair:
    """The timer variants for ``run_cycles``, each with its own buffer: a tail with one timer after the last op
    (slot n - 1), a tail with two (slots n - 1, then n - 2), a bridge with one after the second-last op (slot
    n - 2), a head after each with one after op 0 (slot 0), the span with one after each of the last two ops, and
    the lead with one right before op 0 (slot n - 1) and one after it (slot 0)."""

    def __init__(self, clean: Any, ops: Sequence[Any], pool: Any) -> None:
        import torch

        from launchprobe.kernels.triton.timer import record_time
        from launchprobe.measure import kernel_pass

        n = len(ops)
        self.n = n
        self.buffers = [torch.zeros(n, dtype=torch.int64, device="cuda") for _ in TIMERS]
        record_time(self.buffers[0], 0, True)
        torch.cuda.synchronize()

        def timed(buffer: Any, twice: bool) -> Any:
            def mark(op: Any, slot: int, graphed: bool) -> Any:
                once = kernel_pass._then_time(op, slot, graphed, buffer=buffer, pdl=True)
                return kernel_pass._then_time(once, n - 2, graphed, buffer=buffer, pdl=True) if twice else once

            return mark

        def led(buffer: Any) -> Any:
            def mark(op: Any, slot: int, graphed: bool) -> Any:
                after = kernel_pass._then_time(op, slot, graphed, buffer=buffer, pdl=True)

                def run() -> None:
                    record_time(buffer, n - 1, True)
                    after.run()

                return type(op)(op.name, op.layer, run)

            return mark

        self.marks = {TAIL: [n - 1], TAIL2: [n - 1], BRIDGE: [n - 2], SPAN: [n - 2, n - 1]}
        self.slots = {**self.marks, TAIL2: [n - 1, n - 2], LEAD: [n - 1, 0]}
        self.runners = [
            kernel_pass._marked_runner(
                clean,
                ops,
                set(self.marks.get(v, [0])),
                led(self.buffers[v]) if v == LEAD else timed(self.buffers[v], v == TAIL2),
                pool,
                None,
            )
            for v in TIMERS
        ]

    def __len__(self) -> int:
        return len(TIMERS)

    def read(self, variant: int, boundary: Any) -> dict[int, int]:
        values = self.buffers[variant].tolist()
        return {slot: int(values[slot]) for slot in self.slots.get(variant, [0])}


def _pairs(steps: Sequence[Any], slot: int, tail: int) -> list[int]:
    """Per ``tail`` step followed by its head step: the head's timer less the tail's in ``slot`` (ns)."""
    return [int(b.ends[0] - a.ends[slot]) for a, b in zip(steps, steps[1:]) if a.variant == tail == b.variant - 1]


def _spans(steps: Sequence[Any], n: int) -> list[int]:
    """Per span step: its timer after the last op less the one after the second-last (ns)."""
    return [int(s.ends[n - 1] - s.ends[n - 2]) for s in steps if s.variant == SPAN]


def cell(shape: str, mode: str, batch: int, cycles: int, cupti_cycles: int) -> dict[str, Any]:
    from bench_sampled_gaps import lab_cell

    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass
    from launchprobe.measure.cupti import cuda_intervals

    ops, counts, clean, pool = lab_cell(shape, batch, mode)
    n = len(ops)
    reference = kernel_pass.clean_reference(clean)
    if reference is None:
        raise SystemExit("CUPTI is not available")
    clean_gaps = [
        sampled.group_ops(b, counts)[0][0] - max(e for _, e in a)
        for a, b in zip(reference.kernels, reference.kernels[1:])
    ]
    pair = _Pair(clean, ops, pool)
    steps, _ = kernel_pass.run_cycles(pair, clean, cycles, follows=FOLLOWS)
    ran: list[int] = []
    under: list[Any] = []

    def under_cupti() -> None:
        under.extend(kernel_pass.run_cycles(pair, clean, cupti_cycles, follows=FOLLOWS, warm=False, ran=ran)[0])

    rows = [row for row in cuda_intervals(under_cupti) if not row[0].lower().startswith("memcpy")]  # the reads
    clean_names = reference.names[0]
    sizes = [len(clean_names) + TIMERS.get(v, 0) for v in ran]
    if len(rows) != sum(sizes):
        raise SystemExit(f"CUPTI saw {len(rows)} kernels, the steps launch {sum(sizes)}")
    at, seen = 0, []
    for v, size in zip(ran, sizes):
        mine = rows[at : at + size]
        at += size
        names = [name for name, _, _ in mine if "_timer_kernel" not in name]
        if names != clean_names:
            raise SystemExit(f"variant {v} launched other kernels than the clean step")
        kernels = [(s, e) for name, s, e in mine if "_timer_kernel" not in name]
        timers = [e for name, _, e in mine if "_timer_kernel" in name]
        seen.append((v, sampled.group_ops(kernels, counts), timers))
    # per timed boundary under CUPTI: the last op's end, the trailing timers' ends, op 0's start and end after it
    kinds = {TAIL: "tail", TAIL2: "tail2", BRIDGE: "bridge"}
    leads = [[*t, *a[0]] for v, a, t in seen if v == LEAD]  # the timers' ends, op 0's start and end
    boundaries: dict[str, list[list[int]]] = {kind: [] for kind in kinds.values()}
    clean_cycle = []
    for (va, a, ta), (vb, b, _) in zip(seen, seen[1:]):
        if FOLLOWS.get(va) == vb:  # the bridge's timer ends before the last op: then its end goes first
            ends = [*ta, a[n - 1][1]] if va == BRIDGE else [a[n - 1][1], *ta]
            boundaries[kinds[va]].append([*ends, b[0][0], b[0][1]])
        elif va < 0 and vb < 0:
            clean_cycle.append(b[0][0] - max(e for _, e in a))
    raw = {
        "clean_gaps_ns": clean_gaps,
        "clean_cycle_gaps_ns": clean_cycle,
        "pairs_ns": _pairs(steps, n - 1, TAIL),
        "pairs2_ns": _pairs(steps, n - 1, TAIL2),
        "bridges_ns": _pairs(steps, n - 2, BRIDGE),
        "spans_ns": _spans(steps, n),
        "pairs_under_cupti_ns": _pairs(under, n - 1, TAIL),
        "pairs2_under_cupti_ns": _pairs(under, n - 1, TAIL2),
        "bridges_under_cupti_ns": _pairs(under, n - 2, BRIDGE),
        "spans_under_cupti_ns": _spans(under, n),
        "cupti_boundaries_ns": boundaries,
        "leads_ns": [int(s.ends[0] - s.ends[n - 1]) for s in steps if s.variant == LEAD],
        "leads_under_cupti_ns": [int(s.ends[0] - s.ends[n - 1]) for s in under if s.variant == LEAD],
        "cupti_leads_ns": leads,
    }
    return {"cell": f"{shape}:{mode}:{batch}", **summary(raw), "raw": raw}


def summary(raw: dict[str, Any]) -> dict[str, float]:
    """The table's figures from the raw readings (ns)."""
    one, two, bridge = (raw["cupti_boundaries_ns"][kind] for kind in ("tail", "tail2", "bridge"))
    duration = _median([b[-1] - b[-2] for b in one + two + bridge])  # op 0 in the head steps, under CUPTI
    clean = _median(raw["clean_gaps_ns"])
    pair = _median(raw["pairs_ns"]) - duration
    pair2 = _median(raw["pairs2_ns"]) - duration
    timed = _median([b[-2] - b[0] for b in one])
    timed2 = _median([b[-2] - b[0] for b in two])
    bridged = _median([b[-2] - b[1] for b in bridge])  # from the last op's end
    bridge_gap = _median(raw["bridges_ns"]) - _median(raw["spans_ns"]) - duration
    bridge_under = _median(raw["bridges_under_cupti_ns"]) - _median(raw["spans_under_cupti_ns"]) - duration
    out = {
        "cupti_clean_gap_ns": clean,
        "cupti_cycle_clean_gap_ns": _median(raw["clean_cycle_gaps_ns"]),
        "op0_duration_ns": duration,
        "pair_gap_ns": pair,
        "pair2_gap_ns": pair2,
        "extrapolated_gap_ns": 2 * pair - pair2,
        "pair_less_clean_ns": pair - clean,
        "extrapolated_less_clean_ns": 2 * pair - pair2 - clean,
        "cupti_timed_less_clean_ns": timed - clean,
        "cupti_timed2_less_clean_ns": timed2 - clean,
        "tail_timer_after_last_op_ns": _median([b[1] - b[0] for b in one]),
        "tail2_second_timer_after_first_ns": _median([b[2] - b[1] for b in two]),
        "like_for_like_ns": _median(raw["pairs_under_cupti_ns"]) - duration - timed,
        "bridge_gap_ns": bridge_gap,
        "bridge_less_clean_ns": bridge_gap - clean,
        "cupti_bridged_less_clean_ns": bridged - clean,
        "bridge_like_for_like_ns": bridge_under - bridged,
        "span_ns": _median(raw["spans_ns"]),
    }
    if "leads_ns" in raw:  # from the lead variant on (not in the first recordings)
        cupti = raw["cupti_leads_ns"]
        out.update(
            lead_ns=_median(raw["leads_ns"]),
            lead_under_cupti_ns=_median(raw["leads_under_cupti_ns"]),
            lead_op0_duration_ns=_median([r[3] - r[2] for r in cupti]),
            lead_op0_start_after_lead_ns=_median([r[2] - r[0] for r in cupti]),
        )
    return out


def show(results: Sequence[dict[str, Any]]) -> str:
    columns = {
        "cupti": "cupti_clean_gap_ns",
        "cycle": "cupti_cycle_clean_gap_ns",
        "pair": "pair_gap_ns",
        "pair2": "pair2_gap_ns",
        "pair-cl": "pair_less_clean_ns",
        "extr-cl": "extrapolated_less_clean_ns",
        "t1-cl": "cupti_timed_less_clean_ns",
        "t2-cl": "cupti_timed2_less_clean_ns",
        "tail": "tail_timer_after_last_op_ns",
        "tail2": "tail2_second_timer_after_first_ns",
        "l4l": "like_for_like_ns",
        "dur": "op0_duration_ns",
        "bridge": "bridge_gap_ns",
        "br-cl": "bridge_less_clean_ns",
        "tb-cl": "cupti_bridged_less_clean_ns",
        "br-l4l": "bridge_like_for_like_ns",
        "lead": "lead_ns",
        "lead/C": "lead_under_cupti_ns",
        "l-dur": "lead_op0_duration_ns",
    }
    lines = [f"{'cell (us)':26}" + "".join(f"{c:>8}" for c in columns)]
    for r in results:
        lines.append(f"{r['cell']:26}" + "".join(f"{r.get(k, float('nan')) / 1e3:8.2f}" for k in columns.values()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=CELLS, help="shape:mode:batch,... (default: both shapes, both graph modes)")
    parser.add_argument("--cycles", type=int, default=96)
    parser.add_argument("--cupti-cycles", type=int, default=32)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarize", action="store_true", help="print the table of a saved --out file, no GPU")
    args = parser.parse_args(argv)
    if args.summarize:
        print(show(json.loads(args.out.read_text())["cells"]))
        return
    import torch

    results: list[dict[str, Any]] = []
    for item in args.cells.split(","):
        shape, mode, batch = item.split(":")
        results.append(cell(shape, mode, int(batch), args.cycles, args.cupti_cycles))
        gc.collect()  # the cell's graphs and buffers, before the next cell's
        torch.cuda.empty_cache()
        print(show(results[-1:]).splitlines()[-1], flush=True)
        provenance = {
            "tool": "benchmarks/field/step_pair.py",
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cycles": args.cycles,
            "cupti_cycles": args.cupti_cycles,
        }
        args.out.write_text(json.dumps({"provenance": provenance, "cells": results}))
    print(show(results))


if __name__ == "__main__":
    main()
