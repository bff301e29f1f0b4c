"""PNG pictures of a run: matplotlib (imported only here, only when plotting), drawn on the Agg canvas without
pyplot's global state. Every plot function returns a Plot holding the figure and the arrays it drew, so tests
check the data, not pixels.

classify: the one-step timeline per batch (eager vs piecewise vs full, the stitched clean step of ``kernel_pass``),
the regime map (tokens/s against batch per mode, the verdict marked at each point) and the gap histogram; without
a per-kernel pass, busy and idle time per step instead of the timeline. analyze: busy and idle split per window,
and with detected steps one typical step of each kind along time.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launchprobe.errors import UsageError
from launchprobe.render import values as v
from launchprobe.run.schema import MODE_ORDER, AnalyzeRun, ClassifyResult, ClassifyRun, KernelPass, Run

MODE_COLORS = {"eager": "#d62728", "piecewise": "#ff7f0e", "full": "#2ca02c"}
VERDICT_MARKERS = {"launch-bound": "o", "memory-bound": "s", "compute-bound": "^"}
IDLE_COLOR = "#e6e6e6"
BUSY_COLOR = "#1f77b4"
DPI = 110
MAX_ROWS = 40  # bars one plot draws at most (the slowest), so thousands of windows stay a readable, quick PNG


def require_matplotlib() -> None:
    """A one-line error (exit 5) naming the extra, not a traceback, when matplotlib is missing."""
    from launchprobe.api import require

    require("matplotlib", "plot", "--plot")


@dataclass
class Plot:
    name: str  # file stem
    figure: Any  # matplotlib.figure.Figure
    data: dict[str, Any] = field(default_factory=dict)


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _mode_order(mode: Any) -> int:
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def _passes(run: ClassifyRun) -> dict[int, list[tuple[ClassifyResult, KernelPass]]]:
    """Per batch, the results that carry a per-kernel pass, in mode order."""
    out: dict[int, list[tuple[ClassifyResult, KernelPass]]] = {}
    for r in run.sorted_results():
        kp = r.kernel_pass
        if kp is not None and kp.busy_intervals:
            out.setdefault(r.batch, []).append((r, kp))
    return out


def _picture(passes: list[tuple[ClassifyResult, KernelPass]]) -> str:
    """What the kernel passes picture: the stitched clean step (sampled), or the instrumented one (dense, old)."""
    pictures = {kp.picture for _, kp in passes}
    if pictures == {"stitched"}:
        return "stitched from sampled steps"
    if "stitched" in pictures:
        return "stitched where sampled, instrumented where dense"
    return "instrumented pass"


def plot_timeline(run: ClassifyRun, batch: int) -> Plot | None:
    """One step per mode on a shared time axis (the stitched clean step of a sampled pass, else the instrumented
    one): kernels as bars, idle as the grey between."""
    passes = _passes(run).get(batch)
    if not passes:
        return None
    rows: list[dict[str, Any]] = []
    for r, kp in passes:
        rows.append(
            {
                "mode": r.mode,
                "busy_ms": [(start / 1e6, (end - start) / 1e6) for start, end in kp.busy_intervals],
                "step_ms": kp.step_span_ns / 1e6,
                "busy_total_ms": kp.busy_total_ns / 1e6,
                "clean_step_ms": v.number(kp.clean_step_ms),
            }
        )
    fig = _figure(11, 1.1 + 0.75 * len(rows))
    ax = fig.add_subplot()
    longest = max(row["step_ms"] for row in rows)
    for y, row in enumerate(reversed(rows)):
        ax.broken_barh([(0, row["step_ms"])], (y - 0.35, 0.7), facecolors=IDLE_COLOR)
        ax.broken_barh(row["busy_ms"], (y - 0.35, 0.7), facecolors=MODE_COLORS.get(row["mode"], "#1f77b4"))
        text = f" {row['step_ms']:.2f} ms, {row['busy_total_ms'] / row['step_ms']:.0%} busy"
        if row["clean_step_ms"]:
            text += f" (clean {row['clean_step_ms']:.2f} ms)"
        ax.text(row["step_ms"], y, text, va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), [row["mode"] for row in reversed(rows)])
    ax.set_xlim(0, longest * 1.35)
    ax.set_xlabel("time from step start (ms)")
    ax.set_title(f"One decode step at batch {v.integer(batch)}: GPU busy (coloured) vs idle (grey), {_picture(passes)}")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color="#555555", label="kernel running (mode colour)"),
            Patch(color=IDLE_COLOR, label="GPU idle"),
        ],
        loc="lower right",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3)
    return Plot(f"timeline-b{v.integer(batch)}", fig, {"batch": batch, "rows": rows})


def _slowest(items: Sequence[Any], span: Any, limit: int = MAX_ROWS) -> list[int]:
    """Indexes of the ``limit`` items of largest ``span(item)``, in their own order."""
    if len(items) <= limit:
        return list(range(len(items)))
    return sorted(sorted(range(len(items)), key=lambda i: -span(items[i]))[:limit])


def _label(text: str) -> str:
    """A name as a plot shows it: control characters escaped (drawn with parse_math=False, so "$" is text)."""
    from launchprobe.console import printable

    return printable(text)


def _capped(title: str, shown: int, total: int, what: str, which: str = "slowest") -> str:
    return (
        title if shown == total else f"{title}\n(the {which} {shown} of {v.integer(total)} {what}; all in the JSON/CSV)"
    )


def plot_busy_idle(run: ClassifyRun) -> Plot | None:
    """Without a per-kernel pass: busy and idle ms per step for each (mode, batch) (the slowest MAX_ROWS)."""
    every = [r for r in run.sorted_results() if r.gpu_busy_ms is not None and r.step_ms_median]
    if not every:
        return None
    rows = [every[i] for i in _slowest(every, lambda r: r.step_ms_median)]
    labels = [f"{r.mode} b={v.integer(r.batch)}" for r in rows]
    busy = [r.gpu_busy_ms or 0.0 for r in rows]
    step = [r.step_ms_median or 0.0 for r in rows]
    idle = [max(0.0, s - b) for s, b in zip(step, busy, strict=True)]
    fig = _figure(9, 1.2 + 0.35 * len(rows))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, busy, color="#1f77b4", label="GPU busy")
    ax.barh(ys, idle, left=busy, color=IDLE_COLOR, edgecolor="#999999", label="GPU idle")
    ax.set_yticks(ys, labels)
    ax.set_xlabel("time per decode step (ms)")
    title = "Where each decode step goes: GPU busy vs idle (median step)"
    ax.set_title(_capped(title, len(rows), len(every), "(mode, batch) rows"))
    ax.legend(loc="lower right", fontsize=8)
    return Plot("busy-idle", fig, {"labels": labels, "busy_ms": busy, "idle_ms": idle, "total": len(every)})


def plot_regime(run: ClassifyRun) -> Plot | None:
    """Tokens/s against batch size per mode, the verdict marked at each point; the memory floor's tokens/s dashed."""
    by_mode: dict[str, list[tuple[float, float, str]]] = {}
    roof: dict[float, float] = {}
    for r in run.sorted_results():
        batch, tps, floor = float(r.batch), r.tokens_per_s, r.memory_floor_ms
        if floor:
            roof[batch] = batch / floor * 1e3
        if tps is not None:
            by_mode.setdefault(r.mode, []).append((batch, tps, r.verdict or "?"))
    if not by_mode:
        return None
    fig = _figure(8, 5)
    ax = fig.add_subplot()
    from matplotlib.lines import Line2D

    for mode in sorted(by_mode, key=_mode_order):
        points = sorted(by_mode[mode])
        color = MODE_COLORS.get(mode, "#1f77b4")
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, label=mode, lw=1.5)
        for batch, tps, verdict in points:
            ax.scatter(batch, tps, marker=VERDICT_MARKERS.get(verdict, "x"), s=60, color=color, zorder=3)
    if roof:
        xs = sorted(roof)
        ax.plot(xs, [roof[x] for x in xs], "k--", lw=1, label="memory floor: batch / (bytes / HBM ceiling)")
    handles, _ = ax.get_legend_handles_labels()
    verdicts = sorted({p[2] for pts in by_mode.values() for p in pts})
    handles += [
        Line2D([], [], marker=VERDICT_MARKERS.get(vd, "x"), color="grey", ls="", label=vd, markersize=8)
        for vd in verdicts
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences per step, log scale)")
    ax.set_ylabel("tokens/s (log scale)")
    shape = run.shape.name or run.config.shape or ""
    ax.set_title(f"Regime map {shape}: tokens/s by batch, marker = verdict".replace("  ", " "))
    ax.grid(alpha=0.3, which="both")
    data = {"series": {m: sorted(p) for m, p in by_mode.items()}, "memory_roof": roof}
    return Plot("regime", fig, data)


def plot_gaps(run: ClassifyRun, batch: int) -> Plot | None:
    """Histogram of the gap before each kernel, per mode, on log-spaced bins (us)."""
    passes = _passes(run).get(batch)
    if not passes:
        return None
    import numpy as np

    floor_us = 0.5  # CUDA event resolution: smaller gaps land in the first bin
    gaps = {r.mode: [max(floor_us, k.gap_before_ns / 1e3) for k in kp.kernels] for r, kp in passes}
    gaps = {m: g for m, g in gaps.items() if g}
    if not gaps:
        return None
    top = max(max(g) for g in gaps.values())
    bins = np.logspace(np.log10(floor_us), np.log10(max(top * 1.05, floor_us * 10)), 40)
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    counts = {}
    for mode in sorted(gaps, key=_mode_order):
        hist, _, _ = ax.hist(gaps[mode], bins=bins, histtype="step", lw=2, color=MODE_COLORS.get(mode), label=mode)
        counts[mode] = [int(c) for c in hist]
    ax.set_xscale("log")
    ax.set_xlabel(f"idle gap before a kernel (us, log scale; <= {floor_us} us in the first bin)")
    ax.set_ylabel("kernels per step")
    ax.set_title(f"Gaps between kernels at batch {v.integer(batch)} ({_picture(passes)})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return Plot(f"gaps-b{v.integer(batch)}", fig, {"batch": batch, "gaps_us": gaps, "bins_us": list(bins),
                                                  "counts": counts})  # fmt: skip


DWARF_RATIO = 10.0  # the longest window over the median one, past which shares replace milliseconds


def plot_windows(run: AnalyzeRun) -> Plot | None:
    """analyze: each window's span split into busy, host wait, short gaps and other idle; of thousands of windows
    the slowest MAX_ROWS (in time order, numbered as in the run), so the PNG stays small and quick to draw. When one
    window dwarfs the rest (a first step with warm-up in it: over ``DWARF_RATIO`` times the median span),
    milliseconds on one axis would leave the others as slivers: the spans go to a log-scale panel of their own and
    the split is drawn as shares of each window's span."""
    import statistics

    every = [w for w in run.windows if w.span_ns]
    if not every:
        return None
    chosen = _slowest(every, lambda w: w.span_ns)
    windows = [every[i] for i in chosen]
    parts = [
        ("busy_ns", "GPU busy", "#1f77b4"),
        ("idle_host_wait_ns", "idle: host wait", "#d62728"),
        ("idle_short_gap_ns", "idle: short gaps", "#ff7f0e"),
        ("idle_other_ns", "idle: other", "#bbbbbb"),
    ]
    labels = [_label(f"{w.name} #{i} (dev {w.device})") for i, w in zip(chosen, windows, strict=True)]
    values = {key: [getattr(w, key) / 1e6 for w in windows] for key, _, _ in parts}
    spans = [w.span_ns / 1e6 for w in windows]
    dwarfed = max(spans) > DWARF_RATIO * statistics.median(spans)
    ys = list(range(len(windows)))[::-1]
    fig = _figure(11 if dwarfed else 9, 1.3 + 0.35 * len(windows))
    data: dict[str, Any] = {"labels": labels, "ms": values, "scale": "shares" if dwarfed else "ms"}
    if dwarfed:
        span_ax, ax = fig.subplots(1, 2, sharey=True, width_ratios=(1, 2))
        span_ax.barh(ys, spans, color="#555555")
        span_ax.set_xscale("log")
        span_ax.set_xlabel("window span (ms, log scale)")
        span_ax.set_yticks(ys, labels, parse_math=False)
        span_ax.grid(axis="x", alpha=0.3, which="both")
        shown = {key: [part / span * 100 for part, span in zip(values[key], spans, strict=True)] for key in values}
        data["share_pct"] = shown
        ax.set_xlabel("share of the window's span (%)")
        ax.set_xlim(0, 100)
    else:
        ax = fig.add_subplot()
        shown = values
        ax.set_yticks(ys, labels, parse_math=False)
        ax.set_xlabel("time in window (ms)")
    left = [0.0] * len(windows)
    for key, label, color in parts:
        ax.barh(ys, shown[key], left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, shown[key], strict=True)]
    title = _capped("Where each window's time went: GPU busy and the idle split", len(windows), len(every), "windows")
    if dwarfed:
        fig.suptitle(title)
    else:
        ax.set_title(title)
    fig.legend(fontsize=8, loc="outside right upper")
    data["total"] = len(every)
    return Plot("windows", fig, data)


def plot_step_kinds(run: AnalyzeRun) -> Plot | None:
    """analyze with steps: one typical step of each step kind (its ``typical_step``, the first KINDS_PICTURED
    kinds), a row each on its own time axis, since kinds differ in length: GPU busy coloured, idle grey; the kind's
    label, step time, busy share and verdict above it."""
    from launchprobe.render.analyze import KINDS_PICTURED, kind_name, merged_text, pictured_kinds, step_caption

    every = pictured_kinds(run.summaries)
    if not every:
        return None
    devices = len({g.device for g in every})
    rows: list[dict[str, Any]] = []
    for g in every[:KINDS_PICTURED]:
        p = g.typical_step
        assert p is not None
        rows.append(
            {
                "label": _label(kind_name(g, devices)),
                "caption": step_caption(g) + (f"; {merged}" if (merged := merged_text(g)) else ""),
                "busy_ms": [(start / 1e6, (end - start) / 1e6) for start, end in p.busy_intervals],
                "step_ms": p.span_ns / 1e6,
                "busy_fraction": p.busy_fraction,
                "verdict": g.verdict,
                "instance": p.instance,
            }
        )
    fig = _figure(11, 0.9 + 0.9 * len(rows))
    axes = fig.subplots(len(rows), 1, squeeze=False)[:, 0]
    for ax, row in zip(axes, rows, strict=True):
        ax.broken_barh([(0, row["step_ms"])], (0, 1), facecolors=IDLE_COLOR)
        ax.broken_barh(row["busy_ms"], (0, 1), facecolors=BUSY_COLOR)
        ax.set_xlim(0, row["step_ms"])
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_title(f"{row['label']}: {row['caption']}", loc="left", fontsize=9, parse_math=False)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("time from the step's start, the end of the previous step's work (ms; each row its own scale)")
    title = "One typical step of each kind (step time nearest its p50): GPU busy (blue) vs idle (grey)"
    fig.suptitle(_capped(title, len(rows), len(every), "step kinds", "commonest"))
    return Plot("step-kinds", fig, {"rows": rows, "total": len(every)})


def make_plots(run: Run) -> list[Plot]:
    """Every picture the run has data for."""
    if isinstance(run, AnalyzeRun):
        plots = [plot_windows(run), plot_step_kinds(run)]
    else:
        batches = sorted(_passes(run))
        plots = [plot_timeline(run, b) for b in batches] or [plot_busy_idle(run)]
        plots.append(plot_regime(run))
        plots += [plot_gaps(run, b) for b in batches]
    return [p for p in plots if p is not None]


# The names make_plots may give its files. Which ones a run will write is known only once it is made, so the
# check before measuring refuses any of them (without --force).
PLOT_PATTERNS = ("timeline-b*.png", "gaps-b*.png", "regime.png", "busy-idle.png", "windows.png", "step-kinds.png")


def check_plot_dir(directory: Path, *, force: bool = False, names: Sequence[str] | None = None) -> None:
    """Refuse, before any long work, a --plot folder the plots cannot go into: a file, a folder under a file, an
    unwritable place, or (without ``force``) a folder that already holds PNGs of these ``names`` (default: any
    name a plot may have, PLOT_PATTERNS)."""
    from launchprobe.run.files import probe_folder

    directory = Path(directory)
    existing = directory
    try:
        while not existing.exists():  # the nearest folder that is there: the plots' folder is made in it
            if existing.parent == existing:
                break
            existing = existing.parent
        if not existing.is_dir():
            what = "not a folder" if existing == directory else f"{existing} is not a folder"
            raise UsageError(f"--plot {directory}: {what}")
        if existing == directory and not force:
            patterns = PLOT_PATTERNS if names is None else [f"{glob.escape(name)}.png" for name in names]
            found = sorted({p.name for pattern in patterns for p in directory.glob(pattern)})
            if found:
                shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
                raise UsageError(
                    f"--plot {directory} already holds plots ({shown}); choose another folder or pass --force"
                )
    except OSError as exc:
        raise UsageError(f"--plot {directory}: {exc.strerror}") from None
    probe_folder(directory, existing)


def write_plots(run: Run, directory: Path, *, force: bool = False) -> list[Path]:
    """Write every picture the run has data for into ``directory`` (created if missing); return the files.
    An existing PNG of the same name is replaced only with ``force``."""
    directory = Path(directory)
    require_matplotlib()
    plots = make_plots(run)
    check_plot_dir(directory, force=force, names=[p.name for p in plots])
    paths = [directory / f"{p.name}.png" for p in plots]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for plot, path in zip(plots, paths, strict=True):
            plot.figure.savefig(path, dpi=DPI)
    except OSError as exc:
        raise UsageError(f"cannot write plots to {directory}: {exc.strerror}") from None
    return paths
