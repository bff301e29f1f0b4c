"""The validation matrix of the sampled per-kernel pass (issue 12), on a GPU.

For each shape (llama-3.2-1b, llama-3-8b), mode (eager, piecewise, full) and batch (1, 8, 64): the clean step
timed with boundary events, then ``launchprobe.classify.run_kernel_pass`` (the pass ``classify --kernels`` runs),
and the issue's bars, each with its numbers:
  - instrumented step within 2% of clean (the slowest variant's median step);
  - stitched gap total within 10% or 50 us (the larger) of the clean idle: clean step minus CUPTI busy;
  - per op class median gap within 1 us or 15% of CUPTI's, where CUPTI's own step is within 5% of clean;
  - CUPTI's step time against clean (how far CUPTI's timestamps can be trusted).
A failing cell is reported and the matrix goes on; cells past ``--budget-s`` are skipped, not run.

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_sampled_gaps.py --out $OUT/sampled.json
(about 3-5 minutes on an H200; ``--shapes``, ``--modes``, ``--batches`` narrow it; ``--no-pdl`` turns programmatic
dependent launch off, which the durations pass breaks anyway).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHAPES = ("llama-3.2-1b", "llama-3-8b")
MODES = ("eager", "piecewise", "full")
BATCHES = (1, 8, 64)
GIB = 1 << 30


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30, help="clean steps timed per cell")
    parser.add_argument("--density", choices=("sampled", "dense"), default="sampled")
    parser.add_argument("--budget-s", type=float, default=280.0, help="skip cells that would start after this")
    parser.add_argument("--reach", default="", help="pair reaches per cell, e.g. 2,3 (default: the pass's)")
    parser.add_argument(
        "--orders", default="", help="lab: variant orders per cell, e.g. rotate,shuffle (default: the pass's)"
    )
    parser.add_argument(
        "--kernel-seconds", type=float, default=5.0, help="device time for the sampled cycles of each cell"
    )
    parser.add_argument(
        "--pdl", action=argparse.BooleanOptionalAction, default=True, help="programmatic dependent launch (default on)"
    )
    return parser.parse_args()


def main() -> None:
    import torch

    from launchprobe.measure import kernel_pass

    args = parse()
    start = time.perf_counter()
    shapes = [s for s in args.shapes.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    batches = [int(b) for b in args.batches.split(",") if b]
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "context": args.context,
        "density": args.density,
        "pdl": args.pdl,
        "kernel_seconds": args.kernel_seconds,
        "cells": [],
    }
    print(
        f"{out['device']}, torch {out['torch']}: {shapes} x {modes} x batches {batches}, "
        f"PDL {'on' if args.pdl else 'off'}",
        flush=True,
    )
    costs = kernel_pass.measure_event_costs()
    out["event_costs"] = vars(costs)
    print(
        f"event record {costs.host_record_ns / 1e3:.2f} us host, event node {costs.node_ns / 1e3:.2f} us GPU, "
        f"pair offset {costs.pair_offset_ns / 1e3:.2f} us ({time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    for shape_name in shapes:
        try:
            model, config = build(shape_name, batches, args)
        except Exception as error:  # a shape that cannot be built: every one of its cells says why
            for mode in modes:
                for batch in batches:
                    out["cells"].append(failed(shape_name, mode, batch, error))
            continue
        state: dict[str, Any] = {"costs": costs}
        for mode in modes:
            for batch in batches:
                elapsed = time.perf_counter() - start
                if elapsed > args.budget_s:
                    cells = [{"shape": shape_name, "mode": mode, "batch": batch, "status": "skipped: time budget"}]
                else:
                    cells = run_cell(model, config, state, mode, batch, args)
                for cell in cells:
                    cell["elapsed_s"] = round(time.perf_counter() - start, 1)
                    out["cells"].append(cell)
                    print(line(cell), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(out, indent=1, default=str))  # after every cell: a crash loses none
            gc.collect()
        del model, state
        gc.collect()
        torch.cuda.empty_cache()
    out["total_s"] = round(time.perf_counter() - start, 1)
    print()
    print(table(out["cells"]))
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"\nwrote {args.out} ({out['total_s']} s)")


def build(shape_name: str, batches: list[int], args: argparse.Namespace) -> tuple[Any, Any]:
    import torch

    from launchprobe.classify import ClassifyConfig
    from launchprobe.kernels import KernelSettings
    from launchprobe.workload.model import DecodeModel, plan_memory
    from launchprobe.workload.shape import load_shape

    shape = load_shape(shape_name)
    largest = max(batches)
    free, _ = torch.cuda.mem_get_info()
    plan = plan_memory(shape, largest, args.context, "bf16", free, 60 << 20, max(2 * GIB, free // 50))
    t0 = time.perf_counter()
    model = DecodeModel(
        shape, context=args.context, dtype="bf16", device="cuda", max_bucket=largest, plan=plan,
        kernel_settings=KernelSettings(pdl=args.pdl),
    )  # fmt: skip
    torch.cuda.synchronize()
    print(f"{shape_name}: model built in {time.perf_counter() - t0:.1f} s ({plan.weight_bytes / GIB:.1f} GiB)")
    config = ClassifyConfig(
        shape=shape, batches=list(batches), context=args.context, kernels=True, kernel_density=args.density,
        capture_sizes=sorted(batches), kernel_seconds=args.kernel_seconds,
    )  # fmt: skip
    return model, config


def lab_cells(spec: str) -> list[tuple[str, int]]:
    """For the lab tools: ``shape:batch,shape:batch,...`` as (shape, batch) pairs."""
    out = []
    for item in spec.split(","):
        shape, _, batch = item.partition(":")
        if not shape or not batch.isdigit():
            raise SystemExit(f"a cell is shape:batch, not {item!r}")
        out.append((shape, int(batch)))
    return out


def lab_cell(shape: str, batch: int, mode: str, pdl: bool = True) -> tuple[list[Any], list[int], Any, Any]:
    """For the lab tools (benchmarks/field/): one bucket's ops, their kernels per op (``kernel_counts``), the clean
    runner of ``mode`` warmed up, and its graph pool."""
    import torch

    from launchprobe.measure.markers import Markers
    from launchprobe.measure.timing import warm_up
    from launchprobe.workload.modes import prepare

    build_args = argparse.Namespace(context=1024, pdl=pdl, density="sampled", kernel_seconds=None)
    model, _ = build(shape, [batch], build_args)
    pool = torch.cuda.graph_pool_handle()
    ops = model.step(batch)
    counts = kernel_counts(ops)
    clean = prepare(mode, batch, ops, pool, Markers("steps"))
    warm_up(clean.run, 10, True)
    return ops, counts, clean, pool


def shift_from_clean(
    f: Any, steps: list[list[tuple[int, int]]], clean_steps: list[list[tuple[int, int]]], targets: list[int]
) -> float:
    """For the lab tools: per op in ``targets``, the median of ``f(step, op)`` over ``steps`` less over
    ``clean_steps``; the median over the ops."""
    import statistics

    base = {i: statistics.median([f(s, i) for s in clean_steps]) for i in targets}
    return float(statistics.median([statistics.median([f(s, i) for s in steps]) - base[i] for i in targets]))


def kernel_counts(ops: Any, attempts: int = 3) -> list[int]:
    """The counting pass's kernels per op (``kernel_pass.kernel_counts``), tried again where its clustering split an
    op (a noisy host); for the lab tools that group CUPTI's kernels themselves."""
    from launchprobe.analysis import sampled
    from launchprobe.measure import kernel_pass

    for attempt in range(attempts):
        try:
            return kernel_pass.kernel_counts(ops)[0]
        except sampled.StitchRefused:
            if attempt == attempts - 1:
                raise
    raise ValueError("attempts must be at least 1")


def run_cell(
    model: Any, config: Any, state: dict[str, Any], mode: str, batch: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One (mode, batch): the clean step, then the pass once per reach asked for (one cell each)."""
    import torch

    from launchprobe.classify import run_kernel_pass
    from launchprobe.measure.markers import Markers
    from launchprobe.measure.samples import Samples
    from launchprobe.measure.timing import time_steps_cuda, warm_up
    from launchprobe.workload.modes import prepare

    shape = config.shape.name
    t0 = time.perf_counter()
    runner = None
    try:
        markers = Markers("steps")
        pool = torch.cuda.graph_pool_handle() if mode != "eager" else None
        runner = prepare(mode, batch, model.step(batch), pool, markers)
        warm_up(runner.run, 10, True)
        clean = Samples.of(time_steps_cuda(runner.run, args.steps))
        cells = []
        reaches: list[int | None] = [int(r) for r in args.reach.split(",") if r] or [None]
        orders: list[str | None] = [o for o in args.orders.split(",") if o] or [None]
        for reach, order in itertools.product(reaches, orders):
            t0 = time.perf_counter()
            with variant_order(order):
                kp = run_kernel_pass(model, mode, batch, clean.median, config, state, runner, markers, reach=reach)
            seconds = time.perf_counter() - t0
            cells.append(summarise(shape, mode, batch, clean.median, clean.relative_noise, kp, seconds))
            if order is not None:
                cells[-1]["order"] = order
        return cells
    except Exception as error:
        return [failed(shape, mode, batch, error)]
    finally:
        del runner
        gc.collect()


@contextlib.contextmanager
def variant_order(order: str | None) -> Iterator[None]:
    """Lab: the pass's cycles in ``order`` (``sampled.variant_order``'s ``order_kind``) while the block runs, in
    place of ``sampled.default_order``'s choice."""
    from launchprobe.analysis import sampled

    if order is None:
        yield
        return
    if order not in sampled.ORDERS:
        raise SystemExit(f"--orders takes {', '.join(sampled.ORDERS)}, not {order!r}")
    original = sampled.default_order
    sampled.default_order = lambda ops: order
    try:
        yield
    finally:
        sampled.default_order = original


def failed(shape: str, mode: str, batch: int, error: BaseException) -> dict[str, Any]:
    tail = traceback.format_exception(type(error), error, error.__traceback__)[-3:]
    return {"shape": shape, "mode": mode, "batch": batch, "status": f"failed: {type(error).__name__}: {error}",
            "traceback": "".join(tail)}  # fmt: skip


def summarise(
    shape: str, mode: str, batch: int, clean_ms: float, noise: float, kp: Any, seconds: float
) -> dict[str, Any]:
    import msgspec

    from launchprobe.run.schema import GAP_AGREE_ACROSS_CAPTURES, GAP_AGREE_LIKE_FOR_LIKE, GAP_DISAGREE

    check = kp.cupti_check
    record = msgspec.to_builtins(kp)
    if not (shape == "llama-3.2-1b" and mode == "eager" and batch == 1):
        record.pop("kernels", None)  # the per-op rows of the launch-bound case are kept; elsewhere the op table
    cell: dict[str, Any] = {
        "shape": shape, "mode": mode, "batch": batch, "status": "ok", "seconds": round(seconds, 1),
        "clean_ms": clean_ms, "clean_noise": noise, "stride": kp.stride, "variants": kp.variants,
        "sampled_steps": kp.sampled_steps, "stitched": kp.stitched, "refusal": kp.refusal,
        "instrumented_ms": kp.instrumented_step_ms, "overhead": kp.overhead_fraction,
        "overhead_max_variant": kp.variant_overhead_max_fraction, "within_2pct": kp.overhead_within_budget,
        "variant_noise": kp.variant_overhead_max_error_fraction, "clean_spread": kp.clean_step_spread_fraction,
        "overhead_basis": kp.overhead_basis, "standout_p": kp.variant_standout_p,
        "shuffled_q95": kp.variant_overhead_shuffled_q95_fraction,
        "host_steady": kp.host_steady, "cycles": kp.cycles, "checks_verdict": kp.checks_verdict,
        "pairing": kp.pairing, "reach": kp.reach, "kernel_pass": record,
        "stitched_step_vs_clean": kp.step_ns / 1e6 / kp.clean_step_ms - 1 if kp.step_ns and kp.clean_step_ms else None,
        "event_lags": {lag.kinds: lag.lag_ns_median for lag in kp.event_lags or []},
        "anchor_effects": {e.op: e.effect_ns for e in kp.cupti_anchor_effects or []},
        "start_shifts": {e.op: e.shift_ns for e in kp.cupti_start_shifts or [] if abs(e.shift_ns) >= 200},
        "capture_shifts": capture_shifts(kp),
        "fresh_captures": fresh_captures(kp),
        "gap_total_parts": gap_total_parts(kp),
        **timer_summary(kp),
    }  # fmt: skip
    if check is not None and check.available:
        failing = [
            o for o in check.ops if o.gap_verdict == GAP_DISAGREE or (o.gap_verdict is None and not o.gap_agrees)
        ]
        like_for_like = [o.op for o in check.ops if o.gap_verdict == GAP_AGREE_LIKE_FOR_LIKE]
        across = [o.op for o in check.ops if o.gap_verdict == GAP_AGREE_ACROSS_CAPTURES]
        worst = max(check.ops, key=lambda o: abs(o.gap_diff_ns), default=None)
        cell.update(
            cupti_step_vs_clean=check.cupti_overhead_fraction,
            cupti_trusted=check.cupti_trusted,
            stitched_gap_total_us=check.events_total_gap_ns / 1e3 if check.events_total_gap_ns is not None else None,
            clean_idle_us=check.clean_idle_ns / 1e3 if check.clean_idle_ns is not None else None,
            clean_gap_total_us=check.clean_gap_total_ns / 1e3 if check.clean_gap_total_ns is not None else None,
            cupti_gap_total_us=check.cupti_total_gap_ns / 1e3 if check.cupti_total_gap_ns is not None else None,
            stitched_idle_us=check.events_idle_ns / 1e3 if check.events_idle_ns is not None else None,
            gap_total_diff_us=check.total_gap_diff_ns / 1e3 if check.total_gap_diff_ns is not None else None,
            gap_total_tolerance_us=check.total_gap_tolerance_ns / 1e3 if check.total_gap_tolerance_ns else None,
            gap_total_noise_us=check.total_gap_noise_ns / 1e3 if check.total_gap_noise_ns is not None else None,
            gap_total_scatter_us=check.total_gap_scatter_ns / 1e3 if check.total_gap_scatter_ns is not None else None,
            gap_total_agrees=check.total_gap_agrees,
            busy_rel_diff=check.busy_rel_diff,
            busy_agrees=check.busy_agrees,
            op_classes=len(check.ops),
            op_classes_agree=len(check.ops) - len(failing),
            op_classes_within_bar=sum(o.gap_agrees for o in check.ops),
            op_classes_like_for_like=like_for_like,
            op_classes_across_captures=across,
            cupti_moves=[
                f"{o.op} {(o.cupti_effect_ns or 0) / 1e3:+.2f}" for o in check.ops if o.cupti_trusted_here is False
            ],
            op_gaps_agree=check.ops_agree,
            op_classes_agree_under_cupti=sum(bool(o.gap_under_cupti_agrees) for o in check.ops),
            op_gaps_agree_under_cupti=check.ops_under_cupti_agree,
            worst_op=f"{worst.op} {worst.gap_diff_ns / 1e3:+.2f} us" if worst else None,
            misses=[
                f"{o.op} {o.gap_diff_ns / 1e3:+.2f}"
                + (f" (start bias {o.start_bias_ns / 1e3:+.2f})" if o.start_bias_ns is not None else "")
                + (f" (boundary lag {o.boundary_lag_ns / 1e3:+.2f})" if o.boundary_lag_ns is not None else "")
                + (
                    f" (CUPTI {o.cupti_effect_ns / 1e3:+.2f}+/-{(o.cupti_effect_noise_ns or 0) / 1e3:.2f},"
                    f" like for like {(o.gap_under_cupti_diff_ns or 0) / 1e3:+.2f})"
                    if o.cupti_effect_ns is not None
                    and o.cupti_trusted_here
                    and abs(o.cupti_effect_ns) > 2 * (o.cupti_effect_noise_ns or 0.0)
                    else ""
                )
                for o in failing
            ],
            grouping=check.grouping,
            agrees=check.agrees,
        )
    return cell


def timer_summary(kp: Any) -> dict[str, Any]:
    """The timer pairs' per-class check: classes that agree (+ like for like), of those checked, the misses, and
    the verdict over every class with the events' for those the timers do not read."""
    from launchprobe.run.schema import CUPTI_EFFECT_TIMERS

    timers = kp.timer_pairs
    if timers is None or not timers.measured:
        return {}
    checked = [c for c in timers.classes or [] if c.gap_agrees is not None]
    agree = [c for c in checked if (c.gap_verdict or ("agree" if c.gap_agrees else "disagree")) != "disagree"]
    taken = set(timers.classes_from_events or [])
    every_event = kp.cupti_check.ops if kp.cupti_check is not None else []
    events = [o for o in every_event if o.op in taken]
    hosted = {r.op for r in kp.kernels or [] if r.host_launched}
    by_events = {o.op: o.gap_diff_ns for o in every_event}
    return {
        # host-launched classes the timers read (piecewise kv_write): their miss and the events' side by side, us
        "host_classes_timers_events": [
            f"{c.op} {(c.gap_diff_ns or 0.0) / 1e3:+.2f}/{by_events[c.op] / 1e3:+.2f}"
            for c in checked
            if c.op in hosted and by_events.get(c.op) is not None
        ],
        "timer_behind": [f"{kp.kernels[i].op} (op {i})" for i in timers.after_piece_behind or []],
        "timer_classes": len(checked),
        "timer_classes_within_bar": sum(bool(c.gap_agrees) for c in checked),
        "timer_classes_like_for_like": sum(c.gap_verdict == "agree like for like" for c in checked),
        "timer_ops_agree": timers.ops_agree,
        "timer_excess_us": (timers.mean_excess_ns or 0.0) / 1e3,
        "timer_overhead": timers.overhead_fraction,
        "timer_misses": [
            f"{c.op} {(c.gap_diff_ns or 0.0) / 1e3:+.2f}"
            + (
                f" (timer steps {c.timer_steps_shift_ns / 1e3:+.2f}{' moved' if c.timer_steps_moved else ''}"
                + (
                    f", {c.gap_timer_steps_diff_ns / 1e3:+.2f} against them"
                    if c.gap_timer_steps_diff_ns is not None
                    else ""
                )
                + ")"
                if c.timer_steps_shift_ns is not None
                else ""
            )
            for c in checked
            if c not in agree
        ],
        # the same, less the classes the every-class verdict takes from the events (timer_steps_moved)
        "timer_misses_every_class": [
            f"{c.op} {(c.gap_diff_ns or 0.0) / 1e3:+.2f}" for c in checked if c not in agree and c.op not in taken
        ],
        # classes CUPTI saw the timer steps run apart from its clean reference (us, beyond the typical op's)
        "timer_steps_moved": [
            f"{c.op} {(c.timer_steps_shift_ns or 0.0) / 1e3:+.2f}" for c in timers.classes or [] if c.timer_steps_moved
        ],
        # CUPTI's effect on each class by the same pairs read under CUPTI, where beyond its noise (us): effect, noise,
        # the timers' gap plus it less CUPTI's
        "timer_cupti_effects": [
            f"{c.op} {(c.cupti_effect_ns or 0.0) / 1e3:+.2f}+/-{(c.cupti_effect_noise_ns or 0.0) / 1e3:.2f}"
            f" ({(c.gap_under_cupti_diff_ns or 0.0) / 1e3:+.2f})"
            for c in checked
            if c.cupti_effect_source == CUPTI_EFFECT_TIMERS and c.gap_under_cupti_diff_ns is not None
        ],
        "with_events_ops_agree": timers.with_events_ops_agree,
        "with_events_misses": [f"{o.op} {o.gap_diff_ns / 1e3:+.2f}" for o in events if o.gap_verdict == "disagree"],
    }


def capture_shifts(kp: Any) -> dict[str, float]:
    """The pass's capture check as ns per class beyond the bar, and the step's shift ("step")."""
    check = kp.cupti_capture_check
    if check is None:
        return {}
    out = {c.op: c.shift_ns for c in check.classes if c.beyond_bar}
    if check.step_shift_ns is not None:
        out["step"] = check.step_shift_ns
    return out


def fresh_captures(kp: Any) -> dict[str, float]:
    """CUPTI's gaps in the variants' own captures less the clean capture's (``cupti_fresh_captures``), as ns per
    class moved 0.2 us or more, and their sum over the positions read ("sum")."""
    fresh = kp.cupti_fresh_captures
    if fresh is None:
        return {}
    out = {c.op: c.shift_ns for c in fresh.classes if abs(c.shift_ns) >= 200}
    out["sum"] = fresh.gap_sum_ns
    return out


def gap_total_parts(kp: Any) -> dict[str, float]:
    """The gap total's difference from clean in its parts (``CuptiCheck.gap_total_by_class``), ns: each class's
    stitched gaps less CUPTI's, moved 5 us or more, the other classes together ("rest"), a kept tail ("tail") and
    CUPTI's gaps less the clean step's ("CUPTI")."""
    check = kp.cupti_check
    if check is None or not check.gap_total_by_class or check.cupti_gap_part_ns is None:
        return {}
    diffs = {c.op: c.diff_ns for c in check.gap_total_by_class if c.diff_ns is not None}
    if len(diffs) < len(check.gap_total_by_class):  # files before the field
        return {}
    out = {op: d for op, d in sorted(diffs.items(), key=lambda x: -abs(x[1])) if abs(d) >= 5_000}
    out["rest"] = sum(d for op, d in diffs.items() if op not in out)
    if check.gap_total_tail_ns:
        out["tail"] = float(check.gap_total_tail_ns)
    out["CUPTI"] = check.cupti_gap_part_ns
    return out


def yes(value: Any) -> str:
    return "-" if value is None else "yes" if value else "NO"


def decided(cell: dict[str, Any], key: str) -> str:
    """A three-way verdict: "-" where the cell has none, "n/d" where it was not decided."""
    if key not in cell:
        return "-"
    return "n/d" if cell[key] is None else yes(cell[key])


def pct(value: Any) -> str:
    return "-" if value is None else f"{value:+.1%}"


def num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def line(cell: dict[str, Any]) -> str:
    reach = cell.get("kernel_pass", {}).get("reach")
    head = (
        f"[{cell.get('elapsed_s', 0):6.1f} s] {cell['shape']:<13} {cell['mode']:<9} b={cell['batch']:<3}"
        + (f" r={reach}" if reach else "")
        + (f" {cell['order']}" if cell.get("order") else "")
    )
    if cell["status"] != "ok":
        return f"{head} {cell['status']}"
    return (
        f"{head} clean {clean_step_ms(cell):.3f} ms{clean_before(cell)}, m={cell['stride']}, "
        f"overhead {pct(cell['overhead'])} "
        f"(max variant {pct(cell['overhead_max_variant'])}), gap total {num(cell.get('stitched_gap_total_us'))} vs "
        f"clean {num(cell.get('clean_gap_total_us'))} us (CUPTI's steps {num(cell.get('cupti_gap_total_us'))}): "
        f"{decided(cell, 'gap_total_agrees')}, op gaps "
        f"{cell.get('op_classes_agree', '-')}/{cell.get('op_classes', '-')}, CUPTI step "
        f"{pct(cell.get('cupti_step_vs_clean'))} ({cell['seconds']} s)"
        + ("" if cell["stitched"] else f" REFUSED: {cell['refusal']}")
    )


def clean_step_ms(cell: dict[str, Any]) -> float:
    """The clean step the pass's checks use (the pass's ``clean_step_ms``: the median of its clean references), or,
    where a record has no pass, the bench's own timing of the clean step before it."""
    return float((cell.get("kernel_pass") or {}).get("clean_step_ms") or cell["clean_ms"])


def clean_before(cell: dict[str, Any]) -> str:
    """The bench's timing of the clean step before the pass, where the host moved it more than 5% by the pass."""
    before, during = cell["clean_ms"], clean_step_ms(cell)
    return f" (timed at {before:.3f} before the pass)" if abs(during / before - 1) > 0.05 else ""


def table(cells: list[dict[str, Any]]) -> str:
    from launchprobe.run.schema import OVERHEAD_BASIS_POOLED

    header = (
        f"{'shape':<13} {'mode':<9} {'b':>3} {'clean ms':>9} {'spread':>6} {'m':>4} {'r':>2} {'cyc':>3} "
        f"{'pooled':>7} {'slowest':>8} {'+/-':>5} {'<=2%':>5} "
        f"{'st. step':>8} {'gap tot us':>10} {'clean us':>9} {'diff us':>8} {'+/-':>6} {'tol us':>7} {'ok':>3} "
        f"{'idle us':>8} {'clean':>7} "
        f"{'busy':>6} {'CUPTI':>7} "
        f"{'trust':>5} {'op gaps':>7} {'u.CUPTI':>7} {'worst op':>22} {'verdict':>8}"
    )
    rows = [header, "-" * len(header)]
    for c in cells:
        if c["status"] != "ok":
            rows.append(f"{c['shape']:<13} {c['mode']:<9} {c['batch']:>3} {c['status'][:100]}")
            continue
        ops = f"{c.get('op_classes_agree', '-')}/{c.get('op_classes', '-')}" if c.get("op_classes") else "n/a"
        like, across = c.get("op_classes_like_for_like") or [], c.get("op_classes_across_captures") or []
        if like or across:  # within the bar, plus like for like, plus against a second capture (x)
            ops = (
                f"{c['op_classes_within_bar']}" + (f"+{len(like)}" if like else "")
                + (f"+{len(across)}x" if across else "") + f"/{c['op_classes']}"
            )  # fmt: skip
        like = (
            f"{c['op_classes_agree_under_cupti']}/{c['op_classes']}"
            if c.get("op_gaps_agree_under_cupti") is not None
            else "n/a"
        )
        verdict = (
            "REFUSED"
            if not c["stitched"]
            else {True: "AGREE", False: "DISAGREE", None: "UNDECIDED"}[c["agrees"]]
            if "agrees" in c
            else "-"
        )
        rows.append(
            f"{c['shape']:<13} {c['mode']:<9} {c['batch']:>3} {clean_step_ms(c):>9.3f} "
            f"{num(100 * c['clean_spread'] if c.get('clean_spread') is not None else None):>5}% "
            f"{c['stride'] or '-':>4} {c.get('reach') or '-':>2} {c.get('cycles') or '-':>3} {pct(c['overhead']):>7} "
            f"{pct(c['overhead_max_variant']):>8} {num(100 * (c.get('variant_noise') or 0)):>4}% "
            f"{yes(c['within_2pct']) + ('*' if c.get('overhead_basis') == OVERHEAD_BASIS_POOLED else ''):>5} "
            f"{pct(c.get('stitched_step_vs_clean')):>8} "
            f"{num(c.get('stitched_gap_total_us')):>10} {num(c.get('clean_gap_total_us')):>9} "
            f"{num(c.get('gap_total_diff_us')):>8} {num(c.get('gap_total_noise_us')):>6} "
            f"{num(c.get('gap_total_tolerance_us'), 0):>7} {decided(c, 'gap_total_agrees'):>3} "
            f"{num(c.get('stitched_idle_us')):>8} {num(c.get('clean_idle_us')):>7} "
            f"{pct(c.get('busy_rel_diff')):>6} "
            f"{pct(c.get('cupti_step_vs_clean')):>7} {yes(c.get('cupti_trusted')):>5} {ops:>7} {like:>7} "
            f"{c.get('worst_op') or '-':>22} {verdict:>8}"
        )
    rows.append(
        "clean ms: the pass's clean step, the median of the clean steps timed among the sampled ones (what the "
        "checks set the picture against); spread: their p10-p90 spread over it (host steady within 5%); cyc: "
        "cycles; pooled: every sampled step against the clean steps timed around its group, median; slowest: the "
        "slowest variant's median of that, +/- its sampling error; <=2%: the budget, by the slowest variant at two "
        "errors, * by the pooled where no variant stands out (a permutation test on ranks, p over 0.05); r: the "
        "pairs' reach; st. step: the stitched "
        "step against clean; gap tot: the stitched gaps summed (signed); clean: the clean step less CUPTI's op "
        "durations (its gaps, signed); +/-: the stitched total's standard error (its medians' and its positions' "
        "scatter, sampled.position_scatter_ns); ok: yes within tol (and two errors "
        "no more than tol), NO beyond it by more than two errors, n/d otherwise (sampled.gap_total_verdict); "
        "idle us / clean: the stitched step less the union of its "
        "ops, and the clean "
        "step less CUPTI's busy (reported, not in the verdict); tol: 10% of the clean idle or 50 us; busy: stitched vs "
        "CUPTI; CUPTI: its step against clean (trusted "
        "within 5%); op gaps: op classes whose median gap is within 1 us or 15% of CUPTI's (n/a: CUPTI not trusted), "
        "a+b/n: a within it, b more like for like where CUPTI moves the class beyond the bar; +cx: c more "
        "within the bar of a second capture's CUPTI value, where that capture moves the class beyond it; "
        "u.CUPTI: the same, the events read while CUPTI ran (the pass's cycle run again under CUPTI: like for like)"
    )
    moved = [f"{c['shape']} {c['mode']} b{c['batch']}: {', '.join(c['cupti_moves'])}" for c in cells
             if c.get("cupti_moves")]  # fmt: skip
    if moved:
        rows.append("CUPTI moves (us, the events' reading under CUPTI less theirs without): " + "; ".join(moved))

    def per_cell(key: str) -> str:
        """Each cell's ``key`` (a mapping to ns) as "shape mode bB: name +x.xx, ...", the cells joined by "; "."""
        return "; ".join(
            f"{c['shape']} {c['mode']} b{c['batch']}: " + ", ".join(f"{k} {ns / 1e3:+.2f}" for k, ns in c[key].items())
            for c in cells
            if c.get(key)
        )

    if lags := per_cell("event_lags"):
        rows.append(f"event lags (us, two events of one step less CUPTI's op ends, by kind): {lags}")
    if captures := per_cell("capture_shifts"):
        rows.append(
            "CUPTI across two captures of the clean graphs (us, the second's gap less the first's, classes beyond the "
            f"bar; 'step': the second's step less the first's without CUPTI): {captures}"
        )
    if fresh := per_cell("fresh_captures"):
        rows.append(
            "CUPTI in the variants' own captures (us, the gap at a position with no event near it in a freshly "
            "captured piece less the clean capture's, classes moved 0.2 us or more; 'sum': over all positions): "
            + fresh
        )
    if parts := per_cell("gap_total_parts"):
        rows.append(
            "the gap total's difference from clean in parts (us: by class the stitched gaps less CUPTI's clean ones, "
            "classes 5 us or more; 'rest': the other classes; 'tail': a kept tail; 'CUPTI': CUPTI's gaps less the "
            f"clean step's): {parts}"
        )
    if anchors := per_cell("anchor_effects"):
        rows.append(
            "CUPTI anchor effects (us, the idle after a far pair's anchor less a near pair's under CUPTI, by the class "
            f"measured; out of u.CUPTI): {anchors}"
        )
    if starts := per_cell("start_shifts"):
        rows.append(
            "start shifts (us, under CUPTI an op's start in the steps that time its end less in the clean steps, "
            f"classes moved 0.2 us or more; reported, not corrected): {starts}"
        )
    timers = [
        f"{c['shape']} {c['mode']} b{c['batch']}: {c['timer_classes_within_bar']}"
        + (f"+{c['timer_classes_like_for_like']}" if c.get("timer_classes_like_for_like") else "")
        + f"/{c['timer_classes']}"
        + (" (CUPTI not trusted)" if c.get("timer_ops_agree") is None else "")
        + f", excess {c['timer_excess_us']:+.2f} us, steps {pct(c.get('timer_overhead'))}"
        + (f" [{', '.join(c['timer_misses'])}]" if c.get("timer_misses") else "")
        + (f"; CUPTI moves {', '.join(c['timer_cupti_effects'])}" if c.get("timer_cupti_effects") else "")
        + (
            f"; host-launched, timers/events: {', '.join(c['host_classes_timers_events'])}"
            if c.get("host_classes_timers_events")
            else ""
        )
        + (f"; not read, host behind: {', '.join(c['timer_behind'])}" if c.get("timer_behind") else "")
        + (f"; timer steps ran apart: {', '.join(c['timer_steps_moved'])}" if c.get("timer_steps_moved") else "")
        for c in cells
        if c.get("timer_classes")
    ]
    if timers:
        rows.append(
            "timer pairs (classes within 1 us or 15% of CUPTI's clean gap, of those read; their mean excess over the "
            "stitched gaps, taken out; the pair steps against clean; misses, us): " + "; ".join(timers)
        )
        every = {True: "AGREE", False: "DISAGREE", None: "n/a"}
        both = [
            f"{c['shape']} {c['mode']} b{c['batch']}: {every[c.get('with_events_ops_agree')]}"
            + (
                f" [{', '.join(c['with_events_misses'] + c.get('timer_misses_every_class', c['timer_misses']))}]"
                if c.get("with_events_ops_agree") is False
                else ""
            )
            for c in cells
            if c.get("timer_classes")
        ]
        rows.append(
            "every op class, the timer pairs' verdict where they read it and the events' elsewhere (misses, us, "
            "events' then timers'): " + "; ".join(both)
        )
    verdicts = [
        f"{c['shape']} {c['mode']} b{c['batch']}: {c['checks_verdict']}" for c in cells if c.get("checks_verdict")
    ]
    if verdicts:
        rows.append(
            "the pass's verdict over its checks against the clean step (budget, gap total, busy, every class by the "
            "better reading where CUPTI is trusted op for op): " + "; ".join(verdicts)
        )
    misses = [f"{c['shape']} {c['mode']} b{c['batch']}: {', '.join(c['misses'])}" for c in cells if c.get("misses")]
    if misses:
        rows.append(
            "classes that disagree (us, the events' gap less CUPTI's; the start bias: the class's start shift less "
            "its predecessor's, which the events' reading carries): " + "; ".join(misses)
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
