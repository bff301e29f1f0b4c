"""`launchprobe analyze FILE`: read a trace, analyse its windows, render the run. The work is in
launchprobe.collect and launchprobe.analysis."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from launchprobe.analysis.idle import DEFAULT_SHORT_GAP_NS
from launchprobe.cli.output import check_outputs, emit_run, output_options

EPILOG = """\b
Examples:
  launchprobe analyze report.nsys-rep                       # whole trace, per device
  launchprobe analyze report.sqlite --range 'decode_step.*' # each decode-step NVTX range
  launchprobe analyze trace.json.gz --range 'ProfilerStep#.*' --format json
"""


def check_ranges(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Each --range must compile before anything runs (nsys would otherwise profile for nothing)."""
    for text in values:
        try:
            re.compile(text)
        except (re.error, OverflowError, RecursionError) as exc:
            raise click.BadParameter(f"{text!r} is not a valid regular expression: {exc}") from None
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
            "--any-thread",
            is_flag=True,
            help="Attribute GPU work launched from any thread of the range's process, not only its own thread.",
        ),
        click.option("--nsys", "nsys_path", metavar="PATH", help="nsys binary (default: $LAUNCHPROBE_NSYS, PATH)."),
    ]
    for option in reversed(options):
        func = option(func)
    return output_options("Overwrite existing output files (and stale exports).")(func)


def make_options(ranges: tuple[str, ...], devices: tuple[int, ...], short_gap_ns: int, any_thread: bool) -> Any:
    from launchprobe.analysis.windows import AnalysisOptions

    return AnalysisOptions(
        ranges=tuple(ranges), devices=tuple(devices), short_gap_ns=short_gap_ns, same_thread=not any_thread
    )


@click.command(epilog=EPILOG)
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--remove-sqlite",
    is_flag=True,
    help="Delete the SQLite export of an .nsys-rep after analysing it (default: keep it for next time).",
)
@analysis_options
def analyze(
    trace: Path,
    remove_sqlite: bool,
    ranges: tuple[str, ...],
    devices: tuple[int, ...],
    short_gap_ns: int,
    any_thread: bool,
    nsys_path: str | None,
    fmt: str | None,
    output: Path | None,
    force: bool,
    plot_dir: Path | None,
) -> None:
    """Analyse an Nsight Systems report (.nsys-rep, through nsys export), its SQLite export, or a PyTorch
    profiler (Kineto) trace (.json, .json.gz): per window and device, GPU busy and idle time, where the idle went
    (host wait, short gaps, other), launches, gaps, and a verdict with its numbers."""
    from launchprobe.analysis.trace_run import build_run
    from launchprobe.collect import load_trace

    check_outputs(output, force, plot_dir)
    timeline = load_trace(trace, nsys=nsys_path, keep_sqlite=not remove_sqlite, force=force)
    run = build_run(timeline, make_options(ranges, devices, short_gap_ns, any_thread))
    emit_run(run, fmt=fmt, output=output, force=force, plot_dir=plot_dir)
