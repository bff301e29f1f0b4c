"""How output reaches the terminal: rich on a TTY, plain text when piped or NO_COLOR is set.

The environment is read the same way for every console (reports on stdout, progress and notices on stderr):

- ``NO_COLOR`` (non-empty) removes every style code: reports are plain text, and the progress display on a
  terminal still moves but sends no colour or bold;
- ``FORCE_COLOR`` (non-empty, and no NO_COLOR) styles the output even when it is not a terminal;
- ``COLUMNS`` and ``LINES`` that are not positive integers count as unset (``COLUMNS=0`` would print nothing).

launchprobe.cli.streams guards stdout and stderr themselves (closed pipes, full disks, ASCII-only encodings).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console

PLAIN_WIDTH = 120  # stable width for logs when stdout is not a terminal
# C0 and C1 control characters, DEL, and the bidirectional overrides and isolates that reorder what follows
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Text from a trace or a run file (kernel and range names, paths) as it may reach a terminal: every control
    character shown as its escape (``\\x1b``, ``\\x0a``, ``\\u202e``), so no escape code, line break or bidi
    override of a name ever acts on the terminal."""
    return CONTROL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _set(name: str) -> bool:
    return os.environ.get(name, "") != ""


def no_color() -> bool:
    return _set("NO_COLOR")


def force_color() -> bool:
    return _set("FORCE_COLOR") and not no_color()


def _positive_int(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) > 0


def console_environ() -> Mapping[str, str]:
    """os.environ for rich, less a COLUMNS or LINES that is not a positive integer, and less FORCE_COLOR under
    NO_COLOR."""
    environ = dict(os.environ)
    for name in ("COLUMNS", "LINES"):
        if name in environ and not _positive_int(environ[name]):
            del environ[name]
    if no_color():
        environ.pop("FORCE_COLOR", None)
    return environ


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def wants_rich(stream: TextIO) -> bool:
    if no_color():
        return False
    return force_color() or isatty(stream)


def make_console(stream: TextIO | None = None, *, plain: bool | None = None, width: int | None = None) -> Console:
    """A console for reports. ``plain`` forces plain text (no colour, no box-drawing styles)."""
    stream = stream if stream is not None else sys.stdout
    use_rich = wants_rich(stream) if plain is None else not plain
    if use_rich:
        return Console(file=stream, width=width, _environ=console_environ())
    return Console(
        file=stream,
        width=width or PLAIN_WIDTH,
        no_color=True,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
        soft_wrap=False,
        _environ=console_environ(),
    )


def stderr_console() -> Console:
    """Progress and notices go to stderr so stdout stays clean for --format json. Under NO_COLOR no style codes
    at all (rich's own no_color drops colours but keeps bold and dim)."""
    if no_color():
        return Console(stderr=True, highlight=False, color_system=None, _environ=console_environ())
    return Console(stderr=True, highlight=False, _environ=console_environ())
