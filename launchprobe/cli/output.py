"""What every command that makes a run shares: the output options, ``check_outputs`` and ``emit_run``.

``--output FILE`` means the same in every command: the run, in the format of the file's extension (.json the run
file, .csv, .md, .txt), of ``--format`` for a name without one of these, the run file (JSON) when neither says.
classify, analyze and nsys also print the run in ``--format``; ``--table`` picks the CSV table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launchprobe.run.schema import Run

if TYPE_CHECKING:
    from launchprobe.timeline import Timeline

OUTPUT_FORMATS = ("table", "plain", "markdown", "json", "csv")
ALL_TABLES = ("windows", "summaries", "idle_stretches", "top_kernels", "results", "kernels", "ops")
KIND_TABLES = {
    "analyze": ("windows", "summaries", "idle_stretches", "top_kernels"),
    "classify": ("results", "kernels", "ops"),
}  # launchprobe.render.flat's tables (checked by a test), here so that --help imports nothing


def format_option(help_text: str) -> Callable[..., Any]:
    return click.option("--format", "-f", "fmt", type=click.Choice(OUTPUT_FORMATS), help=help_text)


def table_option(tables: tuple[str, ...] = ALL_TABLES) -> Callable[..., Any]:
    return click.option(
        "--table",
        type=click.Choice(tables),
        help="The CSV table: analyze runs have windows (default), summaries, idle_stretches, top_kernels; classify "
        "runs results (default), kernels, ops. Alone, prints that table as CSV.",
    )


def output_options(
    force_help: str = "Overwrite --output, --trace-out and plots if they exist.", kind: str | None = None
) -> Callable[..., Any]:
    """--format, --output, --table, --trace-out, --force and --plot, as `classify`, `analyze` and `nsys` take
    them."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            format_option(
                "Report format on stdout (default: table on a terminal, plain when piped), and of an --output "
                "whose extension does not say."
            ),
            click.option(
                "--output",
                "-o",
                type=click.Path(path_type=Path),
                help="Save the run here, in the format its extension names (.json: the run file for `launchprobe "
                "report` and `compare`; .csv, .md, .txt); otherwise --format's, or JSON.",
            ),
            table_option(KIND_TABLES[kind] if kind else ALL_TABLES),
            click.option(
                "--trace-out",
                type=click.Path(path_type=Path, dir_okay=False),
                metavar="FILE.json",
                help="Write what launchprobe saw as a Perfetto / chrome://tracing JSON trace.",
            ),
            click.option("--force", is_flag=True, help=force_help),
            click.option(
                "--plot", "plot_dir", type=click.Path(path_type=Path), help="Write PNG plots into this folder."
            ),
        ]
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def check_outputs(
    output: Path | None,
    force: bool,
    *,
    fmt: str | None = None,
    table: str | None = None,
    trace_out: Path | None = None,
    plot_dir: Path | None = None,
) -> None:
    """Refuse outputs that cannot be written, formats that contradict a file name, and plots without matplotlib,
    before any long work starts."""
    from launchprobe.render import check_format
    from launchprobe.run.files import check_writable

    check_format(fmt, output, table, prints=True)
    if output is not None:
        check_writable(output, force)
    if trace_out is not None:
        check_writable(trace_out, force)
        if output is not None and trace_out.resolve() == output.resolve():
            raise click.UsageError("--trace-out and --output name the same file")
    if plot_dir is not None:
        from launchprobe.render.plots import check_plot_dir, require_matplotlib

        require_matplotlib()
        check_plot_dir(plot_dir, force=force)


def emit_run(
    run: Run,
    *,
    fmt: str | None,
    output: Path | None,
    force: bool,
    plot_dir: Path | None,
    table: str | None = None,
    trace_out: Path | None = None,
    timeline: Timeline | None = None,
    name_width: int | None = None,
) -> None:
    """Save the run (``--output``), write its Perfetto trace (``--trace-out``) and plots (``--plot``), and print
    its report."""
    from launchprobe.render import emit, file_format, stdout_format

    if output is not None:
        saved = file_format(fmt, output, table)
        emit(run, fmt=saved, output=output, force=force, table=table if saved == "csv" else None)
    if trace_out is not None:
        from launchprobe.api import write_trace

        write_trace(run, trace_out, timeline=timeline, force=force)
    if plot_dir is not None:
        from launchprobe.render.plots import write_plots

        write_plots(run, plot_dir, force=force)
    shown = stdout_format(fmt, output, table)
    emit(run, fmt=shown, output=None, table=table if shown == "csv" else None, name_width=name_width)
