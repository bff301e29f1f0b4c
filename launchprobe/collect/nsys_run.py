"""Run a command under ``nsys profile`` with the tracing the analysis needs, survive Ctrl-C, and read the report.

This module only collects: it runs nsys and returns what it did (``ProfileResult``), and reads the report it wrote
into a timeline (``read_profile``). Analysing, saving and rendering are the command's (launchprobe.pipeline).

nsys runs in its own process group, so a Ctrl-C reaches it once, from us: the first SIGINT is forwarded to nsys
(which stops the command and writes what it collected), a second sends SIGTERM, a third SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from launchprobe.collect.nsys_rep import find_nsys
from launchprobe.errors import CommandNotFoundError, MissingToolError, UsageError

if TYPE_CHECKING:
    from launchprobe.timeline import Timeline

# Thread scheduling (--cpuctxsw=process-tree, SCHED_EVENTS) is on by default: it is what tells idle with no work
# from the host being late (docs/analysis.md); measured cost on a server-shaped workload +31% step time under nsys
# against +22% without it (docs/performance.md). ProfileOptions.thread_state=False records --cpuctxsw=none.
THREAD_STATE_ARG = "--cpuctxsw=process-tree"
NO_THREAD_STATE_ARG = "--cpuctxsw=none"
BASE_ARGS = ("-t", "cuda,nvtx", "-s", "none", THREAD_STATE_ARG, "--cuda-graph-trace=node")


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
    thread_state: bool = True  # --cpuctxsw=process-tree (False: --cpuctxsw=none)

    def __post_init__(self) -> None:
        check_name(self.name)

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
    returncode: int  # nsys's exit status (the command's, when it failed); 128+N when nsys was killed by signal N
    interrupted: bool
    argv: list[str] = field(default_factory=list)
    signal: int | None = None  # the signal that killed nsys itself (not the command), if one did

    @property
    def failure(self) -> str | None:
        """What went wrong, in words, when nsys or the command failed (None when it succeeded or was interrupted)."""
        if self.interrupted or self.returncode == 0:
            return None
        if self.signal is not None:
            return f"nsys was killed by signal {self.signal} ({signal_name(self.signal)})"
        return f"the command (or nsys) failed with exit code {self.returncode}"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def check_name(name: str) -> None:
    """A report base name stays inside --dir: no path separators, no ``..``, nothing empty."""
    separators = {"/", os.sep, *([os.altsep] if os.altsep else [])}
    if not name or name in (".", "..") or ".." in name or any(sep in name for sep in separators) or "\0" in name:
        raise UsageError(f"--name {name!r}: give a plain file name (no '/', no '..'); put folders in --dir")


def default_directory() -> Path:
    return Path(time.strftime("launchprobe-nsys-%Y%m%d-%H%M%S"))


def check_command(command: list[str]) -> None:
    if not command:
        raise UsageError("give the command to profile after --, e.g. launchprobe nsys -- python serve.py")
    exe = command[0]
    if shutil.which(exe) is None:
        raise CommandNotFoundError(f"command not found: {exe}")


def profile_argv(nsys: str, options: ProfileOptions, command: list[str]) -> list[str]:
    base = [a if options.thread_state or a != THREAD_STATE_ARG else NO_THREAD_STATE_ARG for a in BASE_ARGS]
    argv = [nsys, "profile", *base, "-o", str(options.directory / options.name)]
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
    killed_by = -returncode if returncode < 0 else None
    if killed_by is not None:
        returncode = 128 + killed_by  # the shell's convention
    report = options.report if options.report.exists() else None
    return ProfileResult(
        report=report, returncode=returncode, interrupted=signals_seen > 0, argv=argv, signal=killed_by
    )


def read_profile(result: ProfileResult, options: ProfileOptions) -> Timeline:
    """Export the report nsys wrote to SQLite and read it into a timeline."""
    from launchprobe.collect.nsys_rep import export_sqlite
    from launchprobe.collect.nsys_sqlite import read_nsys_sqlite

    if result.report is None:
        raise UsageError("nsys wrote no report")
    sqlite, _ = export_sqlite(result.report, nsys=options.nsys, force=options.force, atomic=True)
    timeline = read_nsys_sqlite(sqlite)
    timeline.meta.update(format="nsys-rep", path=str(result.report), sqlite=str(sqlite))
    return timeline


def remove_profile_files(options: ProfileOptions) -> None:
    for path in (options.report, options.sqlite):
        path.unlink(missing_ok=True)
