"""`launchprobe nsys -- CMD...`: profile a command under nsys, export, analyse, render. The work is in
launchprobe.pipeline (which runs launchprobe.collect.nsys_run and launchprobe.analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from launchprobe.cli.analyze import analysis_options, make_options
from launchprobe.cli.output import check_outputs, emit_run
from launchprobe.errors import EXIT_COMMAND_NOT_FOUND, EXIT_INTERRUPTED, EXIT_MISSING_TOOL
from launchprobe.run.schema import AnalyzeRun

if TYPE_CHECKING:
    from launchprobe.timeline import Timeline

EPILOG = f"""\b
Examples:
  launchprobe nsys -- python serve.py --model my-model
  launchprobe nsys python bench.py --output x      # --output is bench.py's: options end at the command
  launchprobe nsys --dir prof --range 'decode_step.*' -- python bench.py
  launchprobe nsys --capture-cuda-profiler-api --gpu-metrics-devices all -- python bench.py
  launchprobe nsys --nsys-arg=--duration=30 -- python serve.py
  launchprobe nsys --trace-out seen.json -- python bench.py   # open in ui.perfetto.dev

\b
Exit codes: the command's own when it fails; {EXIT_COMMAND_NOT_FOUND} when it is not found (nothing is run);
{EXIT_MISSING_TOOL} when nsys is not found; 128+N when nsys itself is killed by signal N; {EXIT_INTERRUPTED} on Ctrl-C
(what was collected is analysed).
"""


# Options end at the command's name: everything from there on is the command's, `--` or not, so
# `launchprobe nsys python bench.py --output x` passes --output to bench.py instead of taking it as ours.
@click.command(epilog=EPILOG, context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for the report, its SQLite export and the run file (default: launchprobe-nsys-<time>).",
)
@click.option("--name", default="report", show_default=True, help="Base name of the report files.")
@click.option("--capture-nvtx", metavar="RANGE", help="Collect only inside this NVTX range (nsys --nvtx-capture).")
@click.option(
    "--capture-cuda-profiler-api",
    is_flag=True,
    help="Collect only between cudaProfilerStart and cudaProfilerStop.",
)
@click.option(
    "--gpu-metrics-devices",
    metavar="all|N[,N]",
    help="Sample GPU metrics (DRAM throughput, SM and tensor activity) so GPU-bound windows resolve into memory- "
    "or compute-bound.",
)
@click.option(
    "--nsys-arg", "extra_args", multiple=True, metavar="ARG", help="Extra argument for nsys profile (repeatable)."
)
@click.option("--remove-files", is_flag=True, help="Delete the report and its SQLite export after the analysis.")
@click.option(
    "--thread-state/--no-thread-state",
    default=True,
    show_default=True,
    help="Record OS thread scheduling (nsys --cpuctxsw=process-tree), which tells idle with no work issued from "
    "a late host; --no-thread-state records --cpuctxsw=none (cheaper: +22%% vs +31%% step time measured on a server "
    "workload) and falls back to the --quiet-ns heuristic.",
)
@analysis_options
def nsys(
    command: tuple[str, ...],
    directory: Path | None,
    name: str,
    capture_nvtx: str | None,
    capture_cuda_profiler_api: bool,
    gpu_metrics_devices: str | None,
    extra_args: tuple[str, ...],
    remove_files: bool,
    thread_state: bool,
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
    """Run COMMAND under Nsight Systems (CUDA and NVTX tracing, graph nodes traced, no CPU sampling), export the
    report to SQLite and analyse it like `launchprobe analyze`. launchprobe's options come before COMMAND;
    everything from COMMAND on passes through untouched (a `--` before it is optional). A failing command's exit
    code is launchprobe's; Ctrl-C stops the command and nsys cleanly and analyses what was collected."""
    from launchprobe.collect.nsys_run import ProfileOptions, default_directory
    from launchprobe.pipeline import profile_and_analyze

    if capture_nvtx and capture_cuda_profiler_api:
        raise click.UsageError("choose one of --capture-nvtx and --capture-cuda-profiler-api")
    check_outputs(output, force, fmt=fmt, table=table, trace_out=trace_out, plot_dir=plot_dir)
    options = ProfileOptions(
        directory=directory or default_directory(),
        name=name,
        capture_nvtx=capture_nvtx,
        capture_profiler_api=capture_cuda_profiler_api,
        gpu_metrics_devices=gpu_metrics_devices,
        extra_args=extra_args,
        force=force,
        nsys=nsys_path,
        thread_state=thread_state,
    )
    analysis = make_options(ranges, devices, short_gap_ns, any_thread, same_thread, quiet_ns)

    def render(run: AnalyzeRun, timeline: Timeline) -> None:
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

    profile_and_analyze(options, list(command), analysis, render=render, remove_files=remove_files)
