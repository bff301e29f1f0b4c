"""`launchprobe compare BASE.json NEW.json`: a noise-aware gate for CI (exit 3 on a real regression)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from launchprobe.render import COMPARE_FORMATS


@click.command()
@click.argument("base_file", metavar="BASE.json", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("new_file", metavar="NEW.json", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--threshold", default="5%", show_default=True, help="Smallest change that counts, in percent.")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="Metric to compare and gate on (repeat or comma-separate). "
    "classify: step_ms, tokens_per_s, kernels_per_step, idle, capture_s, capture_mib "
    "[default: step_ms, tokens_per_s]; analyze: span_ms, busy_ms, idle, kernels, gap_p50_us [default: span_ms].",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(COMPARE_FORMATS),
    help="Default: by --output's extension (JSON when it has none of .json .md .txt), else table.",
)
@click.option("--output", "-o", type=click.Path(path_type=Path), help="Write here (markdown appends to it).")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
def compare(
    base_file: Path,
    new_file: Path,
    threshold: str,
    metrics: tuple[str, ...],
    fmt: str | None,
    output: Path | None,
    force: bool,
) -> None:
    """Compare NEW.json against BASE.json, row by row, and call each change improved, regressed, unchanged or
    inconclusive (inside the measured noise). Exit 0: no regression; 3: a regression; 4: the runs cannot be
    compared (different shapes, GPUs, kinds or schema versions); 2: a file cannot be read.

    \b
    Examples:
      launchprobe compare base.json new.json
      launchprobe compare base.json new.json --threshold 3% --metric step_ms
      launchprobe compare base.json new.json --format markdown --output "$GITHUB_STEP_SUMMARY"
    """
    from launchprobe.compare import compare_runs, metrics_for, parse_threshold
    from launchprobe.errors import UsageError
    from launchprobe.render import check_format, emit_comparison
    from launchprobe.run.files import load_run

    check_format(fmt, output)
    try:
        fraction = parse_threshold(threshold)
    except ValueError:
        raise UsageError(f"--threshold {threshold!r}: give a percentage such as 5%") from None
    base, new = load_run(base_file), load_run(new_file)
    chosen = [m.strip() for group in metrics for m in group.split(",") if m.strip()]
    known = metrics_for(base.kind)
    unknown = [m for m in chosen if m not in known]
    if unknown:
        raise UsageError(f"unknown --metric {', '.join(unknown)}; choose from {', '.join(known)}")
    comparison = compare_runs(base, new, threshold=fraction, metrics=chosen or None)
    emit_comparison(
        comparison, fmt=fmt, output=output, force=force, labels=(str(base_file), str(new_file)), runs=(base, new)
    )
    if comparison.exit_code:
        # SystemExit, not click's Exit: the code must survive every entry point (script, python -m, CliRunner)
        sys.exit(comparison.exit_code)
