"""Renderers: every format draws the same typed run (launchprobe/run/); nothing here re-runs anything.

``emit`` is the one entry point for commands: it picks the format by name or by the output file's extension
and writes to the console or a file without clobbering what the user had.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from launchprobe.errors import UsageError
from launchprobe.run.schema import AnalyzeRun, Run

FORMATS = ("table", "plain", "markdown", "json", "csv")
EXTENSIONS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown", ".txt": "plain"}


def pick_format(fmt: str | None, output: Path | None) -> str:
    """The format of what ``report`` / ``compare`` write: ``fmt`` when given (``check_format`` has refused one
    that contradicts the file's extension); else, for a file, its extension's (``EXTENSIONS``), the run file
    (json) when the extension says nothing; else, on stdout, the table."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    if output is not None:
        return EXTENSIONS.get(output.suffix.lower(), "json")
    return "table"


def file_format(fmt: str | None, output: Path, table: str | None = None) -> str:
    """The format of ``--output FILE`` in every command: the extension's (.json the run file, .csv, .md, .txt);
    ``fmt`` for a name without one of these (CSV for a --table); the run file (json) when nothing says."""
    implied = EXTENSIONS.get(output.suffix.lower())
    if implied is not None:
        return implied
    return emitted_format(fmt, output, table)


def emitted_format(fmt: str | None, output: Path | None, table: str | None = None) -> str:
    """What ``emit`` writes: ``pick_format``'s, or CSV for a --table with no --format and no extension."""
    if table is not None and fmt is None and (output is None or output.suffix.lower() not in EXTENSIONS):
        return "csv"
    return pick_format(fmt, output)


def stdout_format(fmt: str | None, output: Path | None, table: str | None = None) -> str:
    """What a command that makes a run prints: ``fmt``, CSV for a --table alone, else the table."""
    if fmt is None and table is not None and output is None:
        return "csv"
    return pick_format(fmt, None)


def check_format(fmt: str | None, output: Path | None, table: str | None = None, *, prints: bool = False) -> None:
    """Before any work: for a command whose --format is only the file's (``prints`` False: report, compare), a
    --format that the file's extension contradicts (markdown into run.json); a --table when no CSV is written."""
    if not prints and fmt is not None and output is not None:
        implied = EXTENSIONS.get(output.suffix.lower())
        if implied is not None and implied != fmt and not (implied == "plain" and fmt == "table"):
            raise UsageError(
                f"--format {fmt} but {output.name} is named as {implied}: leave out --format (the extension "
                f"decides) or name the file for its format (.json, .csv, .md, .txt)"
            )
    if table is None:
        return
    if prints:
        written = [stdout_format(fmt, output, table), file_format(fmt, output, table) if output else None]
    else:
        written = [emitted_format(fmt, output, table)]
    if "csv" not in written:
        raise UsageError(f"--table {table} picks a CSV table: add --format csv or write to a .csv file")


def build_report(run: Run, *, name_width: int | None = None) -> Any:
    """The Report for a run of either kind; ``name_width``: kernel names in analyze tables (default 60)."""
    if isinstance(run, AnalyzeRun):
        from launchprobe.render import analyze

        return analyze.build(run, name_width=name_width)
    from launchprobe.render import classify

    return classify.build(run)


def render_table(run: Run, console: Console, *, name_width: int | None = None) -> None:
    """The terminal report; plain ASCII when the console is not a TTY or NO_COLOR is set."""
    from launchprobe.render.terminal import print_report

    print_report(build_report(run, name_width=name_width), console)


def render_text(
    run: Run, fmt: str, *, width: int | None = None, table: str | None = None, name_width: int | None = None
) -> str:
    """The run rendered as a string: plain/table (plain text), markdown, json or csv (``table``: which one,
    launchprobe.render.flat.table_names)."""
    if fmt == "json":
        from launchprobe.run.files import dumps_run

        return dumps_run(run) + "\n"
    if fmt == "csv":
        from launchprobe.render.flat import to_csv

        return to_csv(run, table)
    if fmt == "markdown":
        from launchprobe.render.markdown import report_markdown

        return report_markdown(build_report(run, name_width=name_width))
    return plain_text(lambda console: render_table(run, console, name_width=name_width), width=width)


def plain_text(draw: Any, *, width: int | None = None) -> str:
    """Run ``draw(console)`` on a plain console and return what it printed."""
    from launchprobe.console import PLAIN_WIDTH, make_console

    buffer = io.StringIO()
    draw(make_console(buffer, plain=True, width=width or PLAIN_WIDTH))
    return buffer.getvalue()


def emit(
    run: Run,
    *,
    fmt: str | None,
    output: Path | None,
    console: Console | None = None,
    force: bool = False,
    table: str | None = None,
    name_width: int | None = None,
) -> None:
    """Render ``run`` to the console or to ``output`` (json: save_run; markdown appends to a file). ``table``
    picks the CSV table (and means CSV when no format is given). JSON, CSV and markdown go to the stream as they
    are, not through rich."""
    fmt = emitted_format(fmt, output, table)
    if table is not None and fmt != "csv":
        raise UsageError(f"--table {table} picks a CSV table: add --format csv or write to a .csv file")
    if output is not None:
        write_output(run, fmt, output, force=force, table=table, name_width=name_width)
        return
    if fmt in ("table", "plain"):
        if console is None:
            from launchprobe.console import make_console

            console = make_console(plain=True if fmt == "plain" else None)
        if fmt == "plain" and not _is_plain(console):
            from launchprobe.console import make_console

            console = make_console(console.file, plain=True, width=console.width)  # type: ignore[arg-type]
        render_table(run, console, name_width=name_width)
        return
    text = render_text(run, fmt, table=table, name_width=name_width)
    stream = sys.stdout if console is None else console.file
    stream.write(text)
    stream.flush()


def _is_plain(console: Console) -> bool:
    from launchprobe.render.terminal import is_plain

    return is_plain(console)


def write_output(
    run: Run, fmt: str, output: Path, *, force: bool = False, table: str | None = None, name_width: int | None = None
) -> None:
    if fmt == "json":
        from launchprobe.run.files import save_run

        save_run(run, output, force=force)
        return
    write_text(render_text(run, fmt, table=table, name_width=name_width), output, append=fmt == "markdown", force=force)


def write_text(text: str, output: Path, *, append: bool = False, force: bool = False) -> None:
    """Write a rendering. ``append`` (markdown) adds to an existing regular file, e.g. $GITHUB_STEP_SUMMARY;
    anything else refuses to replace an existing file unless ``force``, and is written as a run file is
    (launchprobe.run.files.write_file: through links, straight to /dev/null or /dev/stdout, atomically to a file).
    A .json or .csv file is never appended to."""
    from launchprobe.run.files import write_file

    if append and not force and output.suffix.lower() not in (".json", ".csv") and _is_file(output):
        try:
            with output.open("a", encoding="utf-8") as handle:
                handle.write(("\n" if output.stat().st_size else "") + text)
        except OSError as exc:
            raise UsageError(f"cannot append to {output}: {exc.strerror}") from None
        return
    write_file(output, text, force=force)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False  # write_file says why


COMPARE_FORMATS = ("table", "plain", "markdown", "json")


def emit_comparison(
    comparison: Any,
    *,
    fmt: str | None,
    output: Path | None,
    console: Console | None = None,
    force: bool = False,
    labels: tuple[str, str] = ("base", "new"),
    runs: tuple[Run | None, Run | None] = (None, None),
) -> None:
    """Render a launchprobe.compare.Comparison like ``emit`` renders a run (no csv)."""
    from launchprobe.render import comparison as comparison_report
    from launchprobe.render.markdown import report_markdown
    from launchprobe.render.terminal import print_report

    fmt = pick_format(fmt, output)
    if fmt not in COMPARE_FORMATS:
        raise UsageError(f"compare cannot write {fmt}; choose one of {', '.join(COMPARE_FORMATS)}")
    report = comparison_report.build(comparison, *labels, *runs)
    if fmt == "json":
        text = comparison_report.to_json(comparison, *labels) + "\n"
    elif fmt == "markdown":
        text = report_markdown(report)
    elif output is not None:
        text = plain_text(lambda c: print_report(report, c))
    else:
        if console is None:
            from launchprobe.console import make_console

            console = make_console(plain=True if fmt == "plain" else None)
        if fmt == "plain" and not _is_plain(console):
            from launchprobe.console import make_console

            console = make_console(console.file, plain=True, width=console.width)  # type: ignore[arg-type]
        print_report(report, console)
        return
    if output is not None:
        write_text(text, output, append=fmt == "markdown", force=force)
    else:
        stream = sys.stdout if console is None else console.file
        stream.write(text)
        stream.flush()
