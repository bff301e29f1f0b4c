"""Draw a Report on a rich Console: tables with box-drawing on a terminal, ASCII on a plain console.

A console is plain when it has no colour system (not a TTY) or NO_COLOR is set (see launchprobe.console).
Plain tables are never squeezed to the console width: a log keeps one line per row.

Every string of a report is text, never rich markup or emoji codes (a kernel named ``[forward] layer`` or
``[/x]`` prints as itself), and its control characters are shown escaped (launchprobe.console.printable): each
string becomes a ``Text`` here, the one place a report meets the console.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from launchprobe.console import printable
from launchprobe.render.model import Lines, Report, Strips, Table
from launchprobe.render.values import MISSING, MISSING_PLAIN

ASCII_HEAD = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)
STRIP_MAX = 100  # cells in a timeline strip


def is_plain(console: Console) -> bool:
    return console.color_system is None or console.no_color


def print_report(report: Report, console: Console) -> None:
    plain = is_plain(console)
    console.print(Text(printable(report.title), style="bold"))
    if plain:
        name_width = max((len(name) for name, _ in report.fields), default=0)
        for name, value in report.fields:
            _print_line(console, Text(printable(f"{name:<{name_width}}  {_cell(value, plain)}")), plain)
    elif report.fields:
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()
        for name, value in report.fields:
            grid.add_row(_text(name, console, plain), _text(value, console, plain))
        console.print(grid)
    for notice in report.notices:
        _print_line(console, Text(f"! {_cell(notice, plain)}", style="" if plain else "yellow"), plain)
    for block in report.blocks:
        console.print()
        if isinstance(block, Table):
            _print_table(block, console, plain)
        elif isinstance(block, Lines):
            _print_lines(block, console, plain)
        elif isinstance(block, Strips):
            _print_strips(block, console, plain)


def _cell(value: str, plain: bool) -> str:
    """A value as it is shown: control characters escaped; the dash of a missing value in ASCII when plain."""
    value = printable(value)
    return value.replace(MISSING, MISSING_PLAIN) if plain else value


def _text(value: str, console: Console, plain: bool) -> Text:
    """A table cell: text as it is (no markup, no emoji codes), highlighted as rich highlights plain strings."""
    return console.render_str(_cell(value, plain), markup=False, emoji=False)


def _print_table(block: Table, console: Console, plain: bool) -> None:
    console.print(Text(printable(block.title), style="bold"))
    table = RichTable(
        box=ASCII_HEAD if plain else box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="" if plain else "bold",
    )
    for name, align in zip(block.columns, block.alignments(), strict=True):
        left = align == "l"
        header = Text(name)  # our own; a "\n" splits it over two lines
        table.add_column(header, justify="left" if left else "right", no_wrap=not left or plain)
    for row in block.rows:
        table.add_row(*(_text(value, console, plain) for value in row))
    needed = _natural_width(table, console)
    if needed > console.width:
        table.collapse_padding = True  # one space between columns instead of two
        needed = _natural_width(table, console)
    if plain or needed > console.width:
        # Never squeeze a table (rich would cut cells to "1,2…"): render it as wide as it needs, lines unwrapped.
        options = console.options.update(width=max(console.width, needed))
        for line in console.render_lines(table, options, pad=False):
            text = Text()
            for segment in line:
                text.append(segment.text, style=None if plain else segment.style)
            if plain:
                text.rstrip()
            _print_line(console, text, True)
    else:
        console.print(table)
    if block.note:
        console.print(Text(printable(block.note), style="dim"))


def _natural_width(table: RichTable, console: Console) -> int:
    return console.measure(table, options=console.options.update(width=10_000)).maximum


def _print_line(console: Console, line: Text, plain: bool) -> None:
    """One line; a plain console (a log) never wraps it."""
    if plain:
        console.print(line, crop=False, overflow="ignore", no_wrap=True)
    else:
        console.print(line)


def _print_lines(block: Lines, console: Console, plain: bool) -> None:
    if block.title:
        console.print(Text(printable(block.title), style="bold"))
    for line in block.lines:
        if plain:
            _print_line(console, Text(f"  {_cell(line, plain)}"), plain)
        else:
            console.print(Padding(_with_verdicts(Text(printable(line))), (0, 0, 0, 2)))  # wrapped lines keep the indent


# Verdict words in a report's lines, coloured on a terminal so a check's outcome stands out of its numbers.
_VERDICT_STYLES = (
    (r"\b(?:DISAGREE|OVER|NOT STITCHED|UNSTEADY|PERTURBING)\b", "bold red"),
    (r"\bAGREE\b", "green"),
    (r"\b(?:not decided|NOT DECIDED)\b", "yellow"),
)


def _with_verdicts(text: Text) -> Text:
    for pattern, style in _VERDICT_STYLES:
        text.highlight_regex(pattern, style)
    return text


def _print_strips(block: Strips, console: Console, plain: bool) -> None:
    busy_char, idle_char = ("#", ".") if plain else ("█", "·")
    console.print(Text(printable(f"{block.title} ({busy_char} busy, {idle_char} idle)"), style="bold"))
    labels = [printable(s.label) for s in block.strips]
    captions = [printable(s.caption) for s in block.strips]
    label_width = max((len(label) for label in labels), default=0)
    caption_width = max((len(caption) for caption in captions), default=0)
    width = max(20, min(STRIP_MAX, console.width - label_width - caption_width - 6))
    for strip, label, caption in zip(block.strips, labels, captions, strict=True):
        cells = "".join(busy_char if busy else idle_char for busy in strip.cells(width))
        line = Text(f"  {label:<{label_width}} |")
        line.append(cells, style="" if plain else "green")
        line.append(f"|{' ' * (width - len(cells))} {caption}")
        _print_line(console, line, True)
    if block.note:
        console.print(Text(printable(block.note), style="dim"))
