"""Draw a Report as GitHub-flavoured markdown (a CI job summary, a pull-request comment)."""

from __future__ import annotations

import re

from launchprobe.console import printable
from launchprobe.render.model import Lines, Report, Strips, Table

STRIP_WIDTH = 100
TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def _escape(value: str) -> str:
    """Table pipes and tag openers (``step <n>`` would be read as HTML) escaped, newlines joined, other control
    characters shown escaped (launchprobe.console.printable)."""
    return printable(TAG_OPEN.sub("&lt;", value.replace("|", "\\|").replace("\n", " ")))


def report_markdown(report: Report, level: int = 2) -> str:
    hashes = "#" * level
    out = [f"{hashes} {printable(report.title)}", ""]
    for name, value in report.fields:
        out.append(f"- **{name}**: {_escape(value)}")
    if report.fields:
        out.append("")
    for notice in report.notices:
        out.append(f"> **Note**: {_escape(notice)}")
        out.append("")
    for block in report.blocks:
        out.append(f"{hashes}# {printable(block.title)}" if block.title else "")
        out.append("")
        if isinstance(block, Table):
            out.extend(_table(block))
            if block.note:
                out.extend(["", f"_{_escape(block.note)}_"])
        elif isinstance(block, Lines):
            out.extend(f"- {_escape(line)}" for line in block.lines)
        elif isinstance(block, Strips):
            out.append("```")
            label_width = max((len(s.label) for s in block.strips), default=0)
            for strip in block.strips:
                cells = "".join("█" if busy else "·" for busy in strip.cells(STRIP_WIDTH))
                pad = " " * (STRIP_WIDTH - len(cells))
                out.append(printable(f"{strip.label:<{label_width}} |{cells}|{pad} {strip.caption}"))
            out.append("```")
            if block.note:
                out.extend(["", f"_{_escape(block.note)}_"])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _table(block: Table) -> list[str]:
    header = [_escape(c.replace("\n/", "/").replace("\n", " ")) for c in block.columns]
    align = [":---" if a == "l" else "---:" for a in block.alignments()]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines.extend("| " + " | ".join(_escape(v) for v in row) + " |" for row in block.rows)
    return lines
