"""What every command that makes a run shares: the output options and ``emit_run``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from launchprobe.run.schema import Run

OUTPUT_FORMATS = ("table", "plain", "markdown", "json", "csv")


def output_options(force_help: str = "Overwrite --output and plots if they exist.") -> Callable[..., Any]:
    """--format, --output, --force and --plot, as `classify`, `analyze` and `nsys` take them."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option(
                "--format",
                "-f",
                "fmt",
                type=click.Choice(OUTPUT_FORMATS),
                help="Report format on stdout (default: table on a terminal, plain when piped).",
            ),
            click.option("--output", "-o", type=click.Path(path_type=Path), help="Save the run file (JSON) here."),
            click.option("--force", is_flag=True, help=force_help),
            click.option(
                "--plot", "plot_dir", type=click.Path(path_type=Path), help="Write PNG plots into this folder."
            ),
        ]
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def check_outputs(output: Path | None, force: bool, plot_dir: Path | None = None) -> None:
    """Refuse an output that cannot be written (the run file, the plot folder) before any long work starts."""
    from launchprobe.run.files import check_writable

    if output is not None:
        check_writable(output, force)
    if plot_dir is not None:
        from launchprobe.render.plots import check_plot_dir

        check_plot_dir(plot_dir, force=force)


def emit_run(
    run: Run, *, fmt: str | None, output: Path | None, force: bool, plot_dir: Path | None, name_width: int | None = None
) -> None:
    """Save the run (``--output``), write its plots (``--plot``) and print its report."""
    from launchprobe.render import emit

    if output is not None:
        emit(run, fmt="json", output=output, force=force)
    if plot_dir is not None:
        from launchprobe.render.plots import write_plots

        write_plots(run, plot_dir, force=force)
    emit(run, fmt=fmt, output=None, name_width=name_width)
