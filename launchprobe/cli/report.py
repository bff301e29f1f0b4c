"""`launchprobe report RUN.json`: re-render a saved run without re-running anything."""

from __future__ import annotations

from pathlib import Path

import click

from launchprobe.cli.output import format_option, table_option
from launchprobe.names import DEFAULT_NAME_WIDTH


@click.command()
@click.argument("run_file", metavar="RUN.json", type=click.Path(path_type=Path, dir_okay=False))
@format_option("Default: by --output's extension (JSON when it has none of .json .csv .md .txt), else table.")
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), help="Write here (markdown appends to an existing file)."
)
@table_option()
@click.option("--force", is_flag=True, help="Overwrite an existing --output file or plots.")
@click.option("--plot", "plot_dir", type=click.Path(path_type=Path, file_okay=False), help="Write PNGs here.")
@click.option(
    "--name-width",
    type=click.IntRange(min=8),
    default=DEFAULT_NAME_WIDTH,
    show_default=True,
    help="Analyze runs: kernel names in tables shortened to this many characters.",
)
def report(
    run_file: Path,
    fmt: str | None,
    output: Path | None,
    table: str | None,
    force: bool,
    plot_dir: Path | None,
    name_width: int,
) -> None:
    """Re-render RUN.json (from classify or analyze) as a table, plain text, markdown, JSON or CSV.

    \b
    Examples:
      launchprobe report run.json
      launchprobe report run.json --format markdown --output "$GITHUB_STEP_SUMMARY"
      launchprobe report run.json --output run.csv
      launchprobe report run.json --table idle_stretches > idle.csv
      launchprobe report run.json --plot plots/
    """
    from launchprobe.render import check_format, emit
    from launchprobe.run.files import load_run

    check_format(fmt, output, table)
    if plot_dir is not None:
        from launchprobe.render.plots import require_matplotlib

        require_matplotlib()
    run = load_run(run_file)
    if table is not None:
        from launchprobe.render.flat import check_table

        check_table(run, table)
    emit(run, fmt=fmt, output=output, force=force, table=table, name_width=name_width)
    if plot_dir is not None:
        from launchprobe.console import printable
        from launchprobe.render.plots import write_plots

        for path in write_plots(run, plot_dir, force=force):
            click.echo(printable(f"wrote {path}"), err=True)  # one line each, however long the path
