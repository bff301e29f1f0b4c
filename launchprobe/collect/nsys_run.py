"""Run a command under ``nsys profile`` with the tracing the analysis needs, and survive Ctrl-C.

nsys runs in its own process group, so a Ctrl-C reaches it once, from us: the first SIGINT is forwarded to nsys
(which stops the command and writes what it collected), a second sends SIGTERM, a third SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from launchprobe.collect.nsys_rep import find_nsys
from launchprobe.errors import (
    EXIT_INTERRUPTED,
    CommandNotFoundError,
    LaunchprobeError,
    MissingToolError,
    UsageError,
)

BASE_ARGS = ("-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "--cuda-graph-trace=node")


@dataclass(frozen=True)
class ProfileOptions:
    directory: Path
    name: str = "report"
    capture_nvtx: str | None = None  # nsys --capture-range=nvtx --nvtx-capture=NAME
    capture_profiler_api: bool = False  # nsys --capture-range=cudaProfilerApi
    gpu_metrics_devices: str | None = None
    extra_args: tuple[str, ...] = ()
    force: bool = False
    nsys: str | None = None

    @property
    def report(self) -> Path:
        return self.directory / f"{self.name}.nsys-rep"

    @property
    def sqlite(self) -> Path:
        return self.directory / f"{self.name}.sqlite"

    @property
    def run_file(self) -> Path:
        return self.directory / f"{self.name}.json"


@dataclass
class ProfileResult:
    report: Path | None  # None when nsys wrote no report
    returncode: int  # nsys's exit status (the command's, when it failed); 128+N when killed by signal N
    interrupted: bool
    argv: list[str] = field(default_factory=list)


def default_directory() -> Path:
    return Path(time.strftime("launchprobe-nsys-%Y%m%d-%H%M%S"))


def check_command(command: list[str]) -> None:
    if not command:
        raise UsageError("give the command to profile after --, e.g. launchprobe nsys -- python serve.py")
    exe = command[0]
    if shutil.which(exe) is None:
        raise CommandNotFoundError(f"command not found: {exe}")


def profile_argv(nsys: str, options: ProfileOptions, command: list[str]) -> list[str]:
    argv = [nsys, "profile", *BASE_ARGS, "-o", str(options.directory / options.name)]
    argv.append(f"--force-overwrite={'true' if options.force else 'false'}")
    if options.capture_nvtx:
        argv += ["--capture-range=nvtx", f"--nvtx-capture={options.capture_nvtx}"]
    elif options.capture_profiler_api:
        argv.append("--capture-range=cudaProfilerApi")
    if options.gpu_metrics_devices:
        argv.append(f"--gpu-metrics-devices={options.gpu_metrics_devices}")
    argv += list(options.extra_args)
    return argv + list(command)


def prepare_directory(options: ProfileOptions) -> None:
    """Create the output folder; refuse to replace an earlier report unless forced."""
    if options.directory.exists() and not options.directory.is_dir():
        raise UsageError(f"{options.directory} exists and is not a folder")
    for path in (options.report, options.sqlite, options.run_file):
        if path.exists() and not options.force:
            raise UsageError(f"{path} already exists; choose another --dir/--name or pass --force to overwrite it")
    options.directory.mkdir(parents=True, exist_ok=True)
    if options.force:
        options.sqlite.unlink(missing_ok=True)


def run_profile(options: ProfileOptions, command: list[str]) -> ProfileResult:
    nsys = find_nsys(options.nsys)
    check_command(command)
    prepare_directory(options)
    argv = profile_argv(nsys, options, command)
    env = dict(os.environ)
    if options.capture_nvtx:
        env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")  # match unregistered NVTX strings too
    try:
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
    except OSError as exc:
        raise MissingToolError(f"cannot run {nsys}: {exc.strerror}") from None
    signals_seen = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal signals_seen
        signals_seen += 1
        try:
            if signals_seen == 1:
                proc.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
            elif signals_seen == 2:
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if returncode < 0:
        returncode = 128 - returncode
    report = options.report if options.report.exists() else None
    return ProfileResult(report=report, returncode=returncode, interrupted=signals_seen > 0, argv=argv)


def profile_and_analyze(
    options: ProfileOptions,
    command: list[str],
    analysis: Any,
    *,
    render: Callable[[dict[str, Any]], None],
    remove_files: bool = False,
) -> dict[str, Any] | None:
    """Profile, export, analyse, save the run next to the report, render. A failed or interrupted command still
    has what was collected analysed, then its exit code (or 130) is raised as the error's."""
    from launchprobe.analysis.trace_run import build_run
    from launchprobe.collect.nsys_rep import export_sqlite
    from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
    from launchprobe.run.files import save_run

    result = run_profile(options, command)
    rc = result.returncode
    failed = rc != 0 and not result.interrupted
    if result.report is None:
        if result.interrupted:
            raise LaunchprobeError("interrupted before nsys wrote a report", exit_code=EXIT_INTERRUPTED)
        raise LaunchprobeError(f"nsys exited with code {rc} and wrote no report", exit_code=rc or 1)
    notices = []
    if result.interrupted:
        notices.append("interrupted: this is what nsys collected before Ctrl-C")
    elif failed:
        notices.append(f"the command (or nsys) failed with exit code {rc}: this is what was collected")
    run = None
    try:
        sqlite, _ = export_sqlite(result.report, nsys=options.nsys, force=options.force)
        timeline = read_nsys_sqlite(sqlite)
        timeline.meta.update(format="nsys-rep", path=str(result.report), sqlite=str(sqlite))
        run = build_run(timeline, analysis, extra_notices=notices, extra_source={"nsys_command": result.argv})
        save_run(run, options.run_file, force=options.force)
        render(run)
    except LaunchprobeError as exc:
        if not (failed or result.interrupted):
            raise
        print(f"launchprobe: analysis skipped: {exc}", file=sys.stderr)
    finally:
        if remove_files:
            for path in (options.report, options.sqlite):
                path.unlink(missing_ok=True)
    kept = "" if remove_files else f"; report kept in {options.directory}"
    if result.interrupted:
        raise LaunchprobeError(f"interrupted{kept}", exit_code=EXIT_INTERRUPTED)
    if failed:
        raise LaunchprobeError(f"the command failed with exit code {rc}{kept}", exit_code=rc)
    return run
