"""The one error type the CLI turns into a one-line message and an exit code.

Exit codes (documented in docs/analysis.md and docs/reports.md):

====  =====================================================================
0     success (compare: no regression)
1     a wrapped command failed (``launchprobe nsys``): its own code is used when it is non-zero
2     bad usage or bad input (option values, a shape that cannot run, an unreadable run file)
3     compare found a regression
4     compare inputs cannot be compared (different shapes, GPUs or schema versions)
5     a needed tool is missing (nsys, CUDA for a GPU-only option)
6     a trace file that is not a trace, or is truncated or corrupt
7     a trace with no GPU work in it, or an NVTX range that never occurs
127   the command to wrap was not found (``launchprobe nsys``); nothing was run
130   interrupted (Ctrl-C); partial results are kept
====  =====================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_COMMAND_FAILED = 1
EXIT_USAGE = 2
EXIT_REGRESSION = 3
EXIT_INCOMPARABLE = 4
EXIT_MISSING_TOOL = 5
EXIT_BAD_TRACE = 6
EXIT_NO_DATA = 7
EXIT_COMMAND_NOT_FOUND = 127  # shell convention
EXIT_INTERRUPTED = 130


class LaunchprobeError(Exception):
    """An expected failure: printed as one line, exits with ``exit_code``."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(LaunchprobeError):
    exit_code = EXIT_USAGE


class MissingToolError(LaunchprobeError):
    exit_code = EXIT_MISSING_TOOL


class BadTraceError(LaunchprobeError):
    exit_code = EXIT_BAD_TRACE


class NoDataError(LaunchprobeError):
    exit_code = EXIT_NO_DATA


class CommandNotFoundError(LaunchprobeError):
    exit_code = EXIT_COMMAND_NOT_FOUND
