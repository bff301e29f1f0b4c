"""launchprobe from Python (docs/api.md): the functions the command line calls, with paths as ``str`` or
``pathlib.Path`` and keyword options named like the CLI's.

    import launchprobe
    run = launchprobe.analyze("trace.json.gz", ranges="ProfilerStep#.*")
    run.windows_frame()                       # pandas, integer ns columns, names as in the JSON

Each function returns the typed run (launchprobe/run/schema.py) that ``launchprobe report`` renders and
``launchprobe compare`` compares; errors are launchprobe.errors.LaunchprobeError with the CLI's message and exit
code. Nothing heavy is imported until a function runs (torch only for ``classify``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchprobe.errors import MissingToolError, UsageError

if TYPE_CHECKING:
    from launchprobe.analysis.windows import AnalysisOptions
    from launchprobe.run.schema import AnalyzeRun, ClassifyRun, Run
    from launchprobe.timeline import Timeline

PathLike = str | os.PathLike[str]
DEFAULT_SHORT_GAP_NS = 2_000  # launchprobe.analysis.idle.DEFAULT_SHORT_GAP_NS (checked by a test)
DEFAULT_QUIET_NS = 50_000_000  # launchprobe.analysis.no_work.DEFAULT_QUIET_NS (checked by a test)

__all__ = [
    "TraceAnalysis",
    "analysis_options",
    "analyze",
    "analyze_timeline",
    "analyze_trace",
    "classify",
    "load_run",
    "read_trace",
    "require",
    "save_run",
    "write_trace",
]


def require(module: str, extra: str, needed_for: str) -> None:
    """A MissingToolError (exit 5) naming the extra to install when ``module`` cannot be imported."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingToolError(f"{needed_for} needs {module}: pip install 'launchprobe[{extra}]'")


# ---------------------------------------------------------------------------------------------------------------
# Run files


def load_run(path: PathLike) -> Run:
    """Read a run file (``.json`` or ``.json.gz``) written by any launchprobe command."""
    from launchprobe.run.files import load_run as _load

    return _load(Path(path))


def save_run(run: Run, path: PathLike, *, force: bool = False) -> None:
    """Write ``run`` as a run file (JSON), atomically; an existing file is replaced only with ``force``."""
    from launchprobe.run.files import save_run as _save

    _save(run, Path(path), force=force)


def write_trace(run: Run, path: PathLike, *, timeline: Timeline | None = None, force: bool = False) -> None:
    """Write what launchprobe saw as a Perfetto / Chrome-trace JSON file (launchprobe/render/perfetto.py). An
    analyze run needs the Timeline it was made from (``analyze_trace(...).timeline``)."""
    from launchprobe.render.perfetto import trace_events
    from launchprobe.render.perfetto import write_trace as _write

    _write(trace_events(run, timeline), Path(path), force=force)


# ---------------------------------------------------------------------------------------------------------------
# analyze


@dataclass
class TraceAnalysis:
    """A trace's run and the Timeline it was made from (for a Perfetto file, or your own analysis)."""

    run: AnalyzeRun
    timeline: Timeline


def _strings(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _ints(value: int | Sequence[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int) else tuple(int(v) for v in value)


def check_regex(text: str) -> str | None:
    """Why ``text`` is not a valid regular expression, or None."""
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:
        return f"{text!r} is not a valid regular expression: {exc}"
    return None


STEP_MODES = ("auto", "annotations", "off")


def analysis_options(
    *,
    ranges: str | Sequence[str] | None = None,
    devices: int | Sequence[int] | None = None,
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS,
    any_thread: bool = False,
    same_thread: bool = False,
    quiet_ns: int = DEFAULT_QUIET_NS,
) -> AnalysisOptions:
    """The analysis of ``launchprobe analyze``'s options (attribution: the range's thread with ``same_thread``,
    its whole process with ``any_thread``, else the default: whole process for ``ProfilerStep#N``)."""
    from launchprobe.analysis.windows import AnalysisOptions

    patterns = _strings(ranges)
    for text in patterns:
        problem = check_regex(text)
        if problem:
            raise UsageError(f"--range: {problem}")
    for name, value in (("short_gap_ns", short_gap_ns), ("quiet_ns", quiet_ns)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"{name} must be a non-negative integer, not {value!r}")
    if any_thread and same_thread:
        raise UsageError("choose one of --any-thread and --same-thread")
    return AnalysisOptions(
        ranges=patterns,
        devices=_ints(devices),
        short_gap_ns=short_gap_ns,
        same_thread=False if any_thread else True if same_thread else None,
        quiet_ns=quiet_ns,
    )


def _check_steps(steps: str | None) -> None:
    if steps is not None and steps not in STEP_MODES:
        raise UsageError(f"steps={steps!r}: choose one of {', '.join(STEP_MODES)} (None: the default)")


def read_trace(path: PathLike, *, nsys: str | None = None, keep_sqlite: bool = True, force: bool = False) -> Timeline:
    """Read a trace (``.nsys-rep`` through ``nsys export``, an nsys SQLite export, plain or ``.gz``, or a Kineto
    JSON trace, plain or ``.gz``) into the Timeline every analysis reads (launchprobe/timeline.py)."""
    from launchprobe.collect import load_trace

    return load_trace(Path(path), nsys=nsys, keep_sqlite=keep_sqlite, force=force)


def run_of(
    timeline: Timeline,
    options: AnalysisOptions,
    steps: str | None,
    notices: Sequence[str] = (),
    source: dict[str, Any] | None = None,
) -> AnalyzeRun:
    """The analyze run of a Timeline with options already checked: its windows and summaries, then the steps found
    in it (``steps``: auto | annotations | off; None: the default) — what ``analyze`` and ``nsys`` both do."""
    from launchprobe.analysis.step_run import add_steps, resolve_mode
    from launchprobe.analysis.trace_run import build_run
    from launchprobe.analysis.windows import prepare

    prep = prepare(timeline, options)  # once, for the windows and the steps
    run = build_run(timeline, options, extra_notices=list(notices), extra_source=source, prep=prep)
    add_steps(run, timeline, options, resolve_mode(steps, timeline, options.ranges), prep)
    return run


def analyze_timeline(
    timeline: Timeline,
    *,
    ranges: str | Sequence[str] | None = None,
    steps: str | None = None,
    devices: int | Sequence[int] | None = None,
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS,
    any_thread: bool = False,
    same_thread: bool = False,
    quiet_ns: int = DEFAULT_QUIET_NS,
    notices: Sequence[str] = (),
    source: dict[str, Any] | None = None,
) -> AnalyzeRun:
    """The run of a Timeline already in hand (read by ``read_trace`` or built in code). ``steps``: ``auto``,
    ``annotations`` or ``off``; None: off with ``ranges``, else the engine's step markers when the trace has them,
    else found from the trace's structure (docs/analysis.md, "Steps")."""
    _check_steps(steps)
    options = analysis_options(
        ranges=ranges, devices=devices, short_gap_ns=short_gap_ns, any_thread=any_thread, same_thread=same_thread,
        quiet_ns=quiet_ns,
    )  # fmt: skip
    return run_of(timeline, options, steps, notices, source)


def analyze_trace(
    trace: PathLike,
    *,
    ranges: str | Sequence[str] | None = None,
    steps: str | None = None,
    devices: int | Sequence[int] | None = None,
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS,
    any_thread: bool = False,
    same_thread: bool = False,
    quiet_ns: int = DEFAULT_QUIET_NS,
    nsys: str | None = None,
    keep_sqlite: bool = True,
    force: bool = False,
) -> TraceAnalysis:
    """``analyze``, keeping the Timeline too (what ``launchprobe analyze --trace-out`` draws)."""
    _check_steps(steps)
    options = analysis_options(
        ranges=ranges, devices=devices, short_gap_ns=short_gap_ns, any_thread=any_thread, same_thread=same_thread,
        quiet_ns=quiet_ns,
    )  # checked before a long export  # fmt: skip
    timeline = read_trace(trace, nsys=nsys, keep_sqlite=keep_sqlite, force=force)
    return TraceAnalysis(run=run_of(timeline, options, steps), timeline=timeline)


def analyze(
    trace: PathLike,
    *,
    ranges: str | Sequence[str] | None = None,
    steps: str | None = None,
    devices: int | Sequence[int] | None = None,
    short_gap_ns: int = DEFAULT_SHORT_GAP_NS,
    any_thread: bool = False,
    same_thread: bool = False,
    quiet_ns: int = DEFAULT_QUIET_NS,
    nsys: str | None = None,
    keep_sqlite: bool = True,
    force: bool = False,
    trace_out: PathLike | None = None,
) -> AnalyzeRun:
    """Analyse a trace as ``launchprobe analyze TRACE`` does: per window (each instance of the NVTX ranges or
    profiler annotations whose whole name matches one of ``ranges``; default the whole trace, plus the steps found
    in it) and device, busy and idle time, where the idle went, launches, gaps and a verdict. ``trace_out`` also
    writes a Perfetto file."""
    result = analyze_trace(
        trace,
        ranges=ranges,
        steps=steps,
        devices=devices,
        short_gap_ns=short_gap_ns,
        any_thread=any_thread,
        same_thread=same_thread,
        quiet_ns=quiet_ns,
        nsys=nsys,
        keep_sqlite=keep_sqlite,
        force=force,
    )
    if trace_out is not None:
        write_trace(result.run, trace_out, timeline=result.timeline, force=force)
    return result.run


# ---------------------------------------------------------------------------------------------------------------
# classify


def classify(
    *,
    shape: str | None = None,
    overrides: dict[str, Any] | None = None,
    batches: Sequence[int] | int | None = None,
    context: int = 1024,
    modes: Sequence[str] | str | None = None,
    dtype: str = "bf16",
    warmup: int = 10,
    steps: int = 50,
    device: str = "auto",
    capture_sizes: Sequence[int] | None = None,
    ceilings: str = "measured",
    remeasure_ceilings: bool = False,
    kernels: bool | str = False,
    kernel_seconds: float = 5.0,
    nvtx: str = "steps",
    projections: str = "cublas",
    pdl: bool = True,
    plan: bool = False,
    progress: bool = False,
    trace_out: PathLike | None = None,
    force: bool = False,
) -> ClassifyRun:
    """Run the synthetic decode loop as ``launchprobe classify`` does and return its run. Defaults follow the
    device: llama-3-8b, batches 1, 8, 64, 256 and every mode on a GPU; the tiny shape, batches 1, 8, eager on the
    CPU. ``shape`` is a preset name or a TOML file; ``overrides`` sets shape fields (``{"layers": 2}``); ``plan``
    returns the cost model and floors without running anything; ``kernels``: True or ``"sampled"`` for the per-kernel
    pass (sampled and stitched), ``"dense"`` for events after every op (perturbing); ``kernel_seconds``: device time
    for the sampled cycles of each (mode, batch), more on a host that moves (the budget NOT DECIDED). Needs torch
    (``launchprobe[classify]``). Ctrl-C raises launchprobe.classify.ClassifyInterrupted carrying the rows finished."""
    from launchprobe.workload.modes import MODES

    require("torch", "classify", "launchprobe classify")
    from launchprobe import classify as job

    if trace_out is not None:
        from launchprobe.run.files import check_writable

        check_writable(Path(trace_out), force)
    mode_list = None if modes is None else [m.strip() for text in _strings(modes) for m in text.split(",") if m.strip()]
    unknown = [m for m in mode_list or () if m not in MODES]
    if unknown:
        raise UsageError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    resolved = job.device_for_plan(device) if plan else job.resolve_device(device)
    config = job.build_config(
        shape_spec=None if shape is None else str(shape),
        overrides=dict(overrides or {}),
        batches=None if batches is None else list(_ints(batches)),
        context=context,
        modes=list(dict.fromkeys(mode_list)) if mode_list else None,
        dtype=dtype,
        device=resolved,
        capture_sizes=None if capture_sizes is None else list(_ints(capture_sizes)),
        ceilings_source=ceilings,
        warmup=warmup,
        steps=steps,
        plan=plan,
        kernels=bool(kernels),
        kernel_density=kernels if isinstance(kernels, str) else "sampled",
        kernel_seconds=kernel_seconds,
        nvtx=nvtx,
        projections=projections,
        pdl=pdl,
    )
    run = job.plan(config, resolved) if plan else job.classify(config, remeasure=remeasure_ceilings, progress=progress)
    if trace_out is not None:
        write_trace(run, trace_out, force=force)
    return run
