"""How output reaches the terminal: rich on a TTY, plain text when piped or NO_COLOR is set."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

PLAIN_WIDTH = 120  # stable width for logs when stdout is not a terminal


def wants_rich(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def make_console(stream: TextIO | None = None, *, plain: bool | None = None, width: int | None = None) -> Console:
    """A console for reports. ``plain`` forces plain text (no colour, no box-drawing styles)."""
    stream = stream if stream is not None else sys.stdout
    use_rich = wants_rich(stream) if plain is None else not plain
    if use_rich:
        return Console(file=stream, width=width)
    return Console(
        file=stream,
        width=width or PLAIN_WIDTH,
        no_color=True,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )


def stderr_console() -> Console:
    """Progress and notices go to stderr so stdout stays clean for --format json."""
    return Console(stderr=True, highlight=False)
