"""`launchprobe analyze FILE`: read a trace, analyse its windows, render the run. The work is in
launchprobe.collect and launchprobe.analysis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from launchprobe.api import DEFAULT_QUIET_NS, DEFAULT_SHORT_GAP_NS  # numpy-free: `analyze --help` stays light
from launchprobe.cli.output import check_outputs, emit_run, output_options
from launchprobe.names import DEFAULT_NAME_WIDTH

EPILOG = """\b
Examples:
  launchprobe analyze report.nsys-rep                       # whole trace, per device
  launchprobe analyze report.sqlite --range 'decode_step.*' # each decode-step NVTX range
  launchprobe analyze trace.json.gz --range 'ProfilerStep#.*' --format json
  launchprobe analyze report.sqlite --steps auto            # find the steps from the trace's structure
  launchprobe analyze trace.json.gz --trace-out seen.json   # open in ui.perfetto.dev
  launchprobe analyze report.sqlite --range 'step.*' --table idle_stretches > idle.csv
"""


def check_ranges(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Each --range must compile before anything runs (nsys would otherwise profile for nothing)."""
    from launchprobe.api import check_regex

    for text in values:
        problem = check_regex(text)
        if problem:
            raise click.BadParameter(problem)
    return values


def analysis_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by `analyze` and `nsys`."""
    options = [
        click.option(
            "--range",
            "-r",
            "ranges",
            multiple=True,
            metavar="REGEX",
            callback=check_ranges,
            help="Analyse each instance of the NVTX ranges / annotations whose whole name matches (repeatable). "
            "Default: the whole trace.",
        ),
        click.option("--device", "devices", type=int, multiple=True, metavar="N", help="Only this GPU (repeatable)."),
        click.option(
            "--short-gap-ns",
            type=click.IntRange(min=0),
            default=DEFAULT_SHORT_GAP_NS,
            show_default=True,
            help="Idle stretches shorter than this (with work queued) count as short gaps.",
        ),
        click.option(
            "--quiet-ns",
            type=click.IntRange(min=0),
            default=DEFAULT_QUIET_NS,
            show_default=True,
            help="Without thread-state data: idle during which the process made no CUDA API call for this long "
            "counts as no work issued (a heuristic; 0 turns it off).",
        ),
        click.option(
            "--any-thread",
            is_flag=True,
            help="Attribute GPU work launched from any thread of the range's process, not only its own thread "
            "(the default for whole-process steps, ProfilerStep#N).",
        ),
        click.option(
            "--same-thread",
            is_flag=True,
            help="Attribute only GPU work launched from the range's own thread, ProfilerStep#N included.",
        ),
        click.option(
            "--name-width",
            type=click.IntRange(min=8),
            default=DEFAULT_NAME_WIDTH,
            show_default=True,
            help="Kernel names in tables are shortened to this many characters (JSON and CSV keep them whole).",
        ),
        click.option("--nsys", "nsys_path", metavar="PATH", help="nsys binary (default: $LAUNCHPROBE_NSYS, PATH)."),
    ]
    for option in reversed(options):
        func = option(func)
    return output_options("Overwrite existing output files (and stale exports).", kind="analyze")(func)


def make_options(
    ranges: tuple[str, ...],
    devices: tuple[int, ...],
    short_gap_ns: int,
    any_thread: bool,
    same_thread: bool = False,
    quiet_ns: int = DEFAULT_QUIET_NS,
) -> Any:
    from launchprobe.api import analysis_options

    return analysis_options(
        ranges=ranges, devices=devices, short_gap_ns=short_gap_ns, any_thread=any_thread, same_thread=same_thread,
        quiet_ns=quiet_ns,
    )  # fmt: skip


@click.command(epilog=EPILOG)
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--remove-sqlite",
    is_flag=True,
    help="Delete the SQLite export of an .nsys-rep after analysing it (default: keep it for next time).",
)
@click.option(
    "--steps",
    "steps",
    type=click.Choice(["auto", "annotations", "off"]),
    default=None,
    help="Per-step windows and one summary per step kind: `annotations` (engines' step markers: vLLM, SGLang, "
    "TensorRT-LLM, ProfilerStep#N), `auto` (found from the trace's structure, markers ignored), `off`. Default: "
    "off with --range, else annotations when the trace has engine markers, else auto.",
)
@analysis_options
def analyze(
    traces: tuple[Path, ...],
    remove_sqlite: bool,
    steps: str | None,
    ranges: tuple[str, ...],
    devices: tuple[int, ...],
    short_gap_ns: int,
    quiet_ns: int,
    any_thread: bool,
    same_thread: bool,
    name_width: int,
    nsys_path: str | None,
    fmt: str | None,
    output: Path | None,
    table: str | None,
    trace_out: Path | None,
    force: bool,
    plot_dir: Path | None,
) -> None:
    """Analyse an Nsight Systems report (.nsys-rep, through nsys export), its SQLite export, or a PyTorch
    profiler (Kineto) trace (.json, .json.gz): per window and device, GPU busy and idle time, where the idle went
    (host wait, short gaps, other), launches, gaps, and a verdict with its numbers. Several files (one per rank):
    each analysed in its own process, merged into one run with each window's rank and the skew across ranks."""
    from launchprobe.api import analysis_options as check_options
    from launchprobe.api import analyze_trace
    from launchprobe.errors import UsageError

    check_outputs(output, force, fmt=fmt, table=table, trace_out=trace_out, plot_dir=plot_dir)
    options: dict[str, Any] = {
        "ranges": ranges,
        "steps": steps,
        "devices": devices,
        "short_gap_ns": short_gap_ns,
        "any_thread": any_thread,
        "same_thread": same_thread,
        "quiet_ns": quiet_ns,
        "nsys": nsys_path,
        "keep_sqlite": not remove_sqlite,
        "force": force,
    }
    if len(traces) > 1:
        from launchprobe.analysis.ranks import analyze_files

        if trace_out is not None:
            raise UsageError("--trace-out takes one trace file (it draws that file's timeline)")
        check_options(
            ranges=ranges, devices=devices, short_gap_ns=short_gap_ns, any_thread=any_thread,
            same_thread=same_thread, quiet_ns=quiet_ns,
        )  # fmt: skip
        run = analyze_files(traces, options)
        timeline = None
    else:
        result = analyze_trace(traces[0], **options)
        run, timeline = result.run, result.timeline
    emit_run(
        run,
        fmt=fmt,
        output=output,
        force=force,
        plot_dir=plot_dir,
        table=table,
        trace_out=trace_out,
        timeline=timeline,
        name_width=name_width,
    )
