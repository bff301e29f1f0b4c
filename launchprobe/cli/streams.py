"""stdout and stderr of the command line: a reader that goes away (``| head``) ends the output quietly and the
command still exits with its own status; a stream that cannot take the report (a full disk, an ASCII-only
encoding) is one error line, not a traceback. No rich here: ``launchprobe --help`` stays light."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TextIO, cast

from launchprobe.errors import UsageError


class GuardedStream:
    """A text stream whose failures are launchprobe's to report: a closed pipe drops the rest of the output (the
    command still ends with its own status), any other failure of stdout is a one-line UsageError."""

    def __init__(self, stream: TextIO, name: str, *, report_errors: bool) -> None:
        self._stream = stream
        self._name = name
        self._report_errors = report_errors  # stdout: say so; stderr: nowhere left to say it
        self.dropped = False

    def write(self, text: str) -> int:
        if self.dropped:
            return len(text)
        try:
            return self._guard(lambda: self._stream.write(text))
        except UnicodeEncodeError as exc:
            if self._report_errors:
                raise UsageError(
                    f"cannot write {exc.object[exc.start : exc.end]!r} to {self._name}: its encoding is "
                    f"{exc.encoding}; set PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or write a file with --output"
                ) from None
            # stderr: escape what its encoding lacks rather than lose the message
            escaped = text.encode(exc.encoding, "backslashreplace").decode(exc.encoding)
            return self._guard(lambda: self._stream.write(escaped))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.dropped:
            self._guard(self._stream.flush)

    def _guard(self, action: Callable[[], int | None]) -> int:
        try:
            return action() or 0
        except BrokenPipeError:
            self.drop()
            return 0
        except OSError as exc:
            self.drop()
            if not self._report_errors:
                return 0
            raise UsageError(f"cannot write to {self._name}: {exc.strerror or exc}") from None

    def drop(self) -> None:
        """Send the rest (and what is still buffered) to the null device, so that exiting cannot fail again."""
        self.dropped = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
        except (OSError, ValueError, AttributeError):
            pass  # not a real file descriptor (a test's capture): nothing is left to flush into it

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_streams() -> Callable[[], None]:
    """Wrap sys.stdout and sys.stderr in GuardedStream; returns the function that puts them back."""
    saved = sys.stdout, sys.stderr
    if sys.stdout is not None and not isinstance(sys.stdout, GuardedStream):
        sys.stdout = cast(TextIO, GuardedStream(sys.stdout, "stdout", report_errors=True))
    if sys.stderr is not None and not isinstance(sys.stderr, GuardedStream):
        sys.stderr = cast(TextIO, GuardedStream(sys.stderr, "stderr", report_errors=False))

    def restore() -> None:
        sys.stdout, sys.stderr = saved

    return restore
