"""Progress on stderr: a live rich bar on a terminal, one line per step of work in a log."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from launchprobe.console import isatty, printable, stderr_console


class Progress:
    """``status`` says what is happening now; ``advance`` marks one unit of work done."""

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or stderr_console()
        self.enabled = enabled
        # A live bar only on a real terminal: FORCE_COLOR asks for styles, not for cursor movement in a log.
        self.live = enabled and self.console.is_terminal and (console is not None or isatty(self.console.file))
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        self._done = 0
        self._total = 0
        self._t0 = time.perf_counter()

    def __enter__(self) -> Progress:
        if self.live:
            self._bar = RichProgress(
                TextColumn("[bold]launchprobe[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}", markup=False),  # names are text, not markup
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("starting", total=None)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None

    def start(self, total: int) -> None:
        self._total = total
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=total, completed=0)

    def status(self, text: str) -> None:
        if not self.enabled:
            return
        text = printable(text)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=text)
        else:
            self._line(text)

    def advance(self, text: str) -> None:
        self._done += 1
        if not self.enabled:
            return
        text = printable(text)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, description=text)
            self._bar.console.print(Text(f"  {text}"), highlight=False)
        else:
            self._line(f"[{self._done}/{self._total}] {text}")

    def _line(self, text: str) -> None:
        print(f"launchprobe {time.perf_counter() - self._t0:6.1f}s  {text}", file=sys.stderr, flush=True)
