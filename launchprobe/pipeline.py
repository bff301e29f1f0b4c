"""`launchprobe nsys`'s pipeline: profile (collect), export and read (collect), analyse, save the run, render.

launchprobe.collect.nsys_run only runs nsys and reads what it wrote; this module, used by the command, decides
what a failed or interrupted profile means for the analysis and for the exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launchprobe.collect.nsys_run import (
    ProfileOptions,
    ProfileResult,
    read_profile,
    remove_profile_files,
    run_profile,
)
from launchprobe.errors import EXIT_INTERRUPTED, LaunchprobeError
from launchprobe.run.schema import AnalyzeRun

if TYPE_CHECKING:
    from launchprobe.api import TraceAnalysis
    from launchprobe.timeline import Timeline


def profile_and_analyze(
    options: ProfileOptions,
    command: list[str],
    analysis: Any,
    *,
    render: Callable[[AnalyzeRun, Timeline], None],
    remove_files: bool = False,
) -> AnalyzeRun | None:
    """Profile, export, analyse, save the run next to the report, render (the run and the Timeline it was made
    from). A failed or interrupted command still
    has what was collected analysed, then its exit code (or 130) is raised as the error's."""
    result = run_profile(options, command)
    if result.report is None:
        raise _no_report(result)
    run = None
    try:
        analysed = analyse(result, options, analysis)
        run = analysed.run
        render(run, analysed.timeline)
    except LaunchprobeError as exc:
        if result.failure is None and not result.interrupted:
            raise
        print(f"launchprobe: analysis skipped: {exc}", file=sys.stderr)
    finally:
        if remove_files:
            remove_profile_files(options)
    kept = "" if remove_files else f"; report kept in {options.directory}"
    if result.interrupted:
        raise LaunchprobeError(f"interrupted{kept}", exit_code=EXIT_INTERRUPTED)
    if result.signal is not None:
        raise LaunchprobeError(f"{result.failure}{kept}", exit_code=result.returncode)
    if result.failure is not None:
        code = result.returncode
        raise LaunchprobeError(f"the command failed with exit code {code}{kept}", exit_code=code)
    return run


def analyse(result: ProfileResult, options: ProfileOptions, analysis: Any) -> TraceAnalysis:
    """The run of what nsys collected, analysed as ``launchprobe analyze`` would (steps found where no --range is
    given) and saved next to the report, with its Timeline."""
    from launchprobe.api import TraceAnalysis, run_of
    from launchprobe.run.files import save_run

    notices = []
    if result.interrupted:
        notices.append("interrupted: this is what nsys collected before Ctrl-C")
    elif result.failure is not None:
        notices.append(f"{result.failure}: this is what was collected")
    timeline = read_profile(result, options)
    run = run_of(timeline, analysis, None, notices, {"nsys_command": result.argv})
    save_run(run, options.run_file, force=options.force)
    return TraceAnalysis(run=run, timeline=timeline)


def _no_report(result: ProfileResult) -> LaunchprobeError:
    if result.interrupted:
        return LaunchprobeError("interrupted before nsys wrote a report", exit_code=EXIT_INTERRUPTED)
    if result.signal is not None:
        return LaunchprobeError(f"{result.failure} and wrote no report", exit_code=result.returncode)
    return LaunchprobeError(
        f"nsys exited with code {result.returncode} and wrote no report", exit_code=result.returncode or 1
    )
