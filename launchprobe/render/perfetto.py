"""What launchprobe saw, as a Chrome-trace / Perfetto JSON file (Trace Event Format): open it in ui.perfetto.dev
or chrome://tracing.

analyze and nsys (a run and its Timeline): one process per GPU, with its windows as spans named with their
verdict, its idle stretches as slices named by their cause (launchprobe.analysis.idle.CLASS_NAMES) and its GPU ops
as slices, one thread per stream. classify (the run alone): one process per batch, one measured step of each mode
side by side from the per-kernel pass (its ops as slices, the idle between them), under a span with the verdict.

Times are microseconds (floats, to the nanosecond) from the trace's first timestamp, or from each step's start
for classify; ``otherData.time_origin_ns`` keeps the trace's own clock value of zero. Slices on one thread never
overlap: ops that overlap on a stream, or windows that overlap, go to extra lanes ("stream 7 (2)").
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchprobe.run.schema import AnalyzeRun, ClassifyResult, ClassifyRun, Run

if TYPE_CHECKING:
    from launchprobe.timeline import Timeline

Event = dict[str, Any]


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def cause_label(name: str) -> str:
    """``host_wait`` -> ``host wait``: the slice name of an idle stretch."""
    return name.replace("_", " ")


class _Process:
    """One process of the trace: hands out thread ids, names them, and keeps each thread's slices disjoint."""

    def __init__(self, events: list[Event], pid: int, name: str, sort_index: int) -> None:
        self.events, self.pid = events, pid
        self._next_tid = 1
        events.append(_meta("process_name", pid, 0, {"name": name}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": sort_index}))

    def thread(self, name: str) -> int:
        tid = self._next_tid
        self._next_tid += 1
        self.events.append(_meta("thread_name", self.pid, tid, {"name": name}))
        self.events.append(_meta("thread_sort_index", self.pid, tid, {"sort_index": tid}))
        return tid

    def lanes(self, name: str) -> _Lanes:
        return _Lanes(self, name)

    def slice(self, tid: int, name: str, cat: str, start_us: float, dur_us: float, args: dict[str, Any]) -> None:
        event: Event = {"ph": "X", "pid": self.pid, "tid": tid, "name": name, "cat": cat, "ts": start_us}
        event["dur"] = dur_us
        if args:
            event["args"] = args
        self.events.append(event)


class _Lanes:
    """Threads named ``name``, ``name (2)``, ...: a slice goes to the first whose last slice has ended."""

    def __init__(self, process: _Process, name: str) -> None:
        self.process, self.name = process, name
        self.tids: list[int] = []
        self.ends: list[float] = []

    def add(self, name: str, cat: str, start_us: float, end_us: float, args: dict[str, Any]) -> None:
        for i, end in enumerate(self.ends):
            if end <= start_us:
                lane = i
                break
        else:
            label = self.name if not self.tids else f"{self.name} ({len(self.tids) + 1})"
            self.tids.append(self.process.thread(label))
            self.ends.append(start_us)
            lane = len(self.tids) - 1
        self.ends[lane] = max(self.ends[lane], end_us)
        self.process.slice(self.tids[lane], name, cat, start_us, round(end_us - start_us, 3), args)


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> Event:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args}


def _document(run: Run, events: list[Event], origin_ns: int | None) -> dict[str, Any]:
    other: dict[str, Any] = {"tool": "launchprobe", "version": run.tool.version, "kind": run.kind}
    if origin_ns is not None:
        other["time_origin_ns"] = origin_ns
    if isinstance(run, AnalyzeRun) and run.source.path:
        other["source"] = run.source.path
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


# ---------------------------------------------------------------------------------------------------------------
# analyze / nsys


def _bounds(timeline: Timeline) -> tuple[int, int]:
    """The first and last timestamp of any op, API call or range."""
    starts, ends = [], []
    for frame in (timeline.gpu_ops, timeline.api_calls, timeline.ranges):
        if len(frame):
            starts.append(int(frame["start_ns"].min()))
            ends.append(int(frame["end_ns"].max()))
    return (min(starts), max(ends)) if starts else (0, 0)


def _window_args(w: Any) -> dict[str, Any]:
    return {
        "verdict": w.verdict,
        "verdict_reason": w.verdict_reason,
        "instance": w.instance,
        "span_ns": w.span_ns,
        "busy_ns": w.busy_ns,
        "idle_host_wait_ns": w.idle_host_wait_ns,
        "idle_short_gap_ns": w.idle_short_gap_ns,
        "idle_other_ns": w.idle_other_ns,
        "kernels": w.kernels,
    }


def analyze_events(run: AnalyzeRun, timeline: Timeline) -> dict[str, Any]:
    """The Trace Event document of an analyze run and the Timeline it was made from."""
    import numpy as np

    from launchprobe.analysis.idle import CLASS_NAMES, DEFAULT_SHORT_GAP_NS
    from launchprobe.analysis.windows import AnalysisOptions, prepare

    config = run.config
    options = AnalysisOptions(
        devices=tuple(config.devices or ()),
        short_gap_ns=DEFAULT_SHORT_GAP_NS if config.short_gap_ns is None else config.short_gap_ns,
        same_thread=True if config.same_thread is None else config.same_thread,
    )
    prep = prepare(timeline, options)
    origin, last = _bounds(timeline)
    events: list[Event] = []
    ops = timeline.gpu_ops
    names = ops["name"].to_numpy(dtype=object)
    kinds = ops["kind"].to_numpy(dtype=object)
    streams = ops["stream"].to_numpy(dtype=np.int64)
    op_bytes = ops["bytes"].to_numpy(dtype=np.int64)
    gpus = run.environment.gpus or {}
    for dev in sorted(prep.devices):
        dev_ops = prep.devices[dev]
        gpu = gpus.get(str(dev))
        process = _Process(events, dev + 1, f"GPU {dev}" + (f": {gpu}" if gpu else ""), dev)
        windows = process.lanes("windows (verdict)")
        for w in sorted((w for w in run.windows if w.device == dev), key=lambda w: (w.start_ns, -w.end_ns)):
            start, end = _us(w.start_ns - origin), _us(w.end_ns - origin)
            windows.add(f"{w.name}: {w.verdict}", "window", start, end, _window_args(w))
        idle_tid = process.thread("GPU idle (cause)")
        lo = np.maximum(dev_ops.idle_start, origin)
        hi = np.minimum(dev_ops.idle_end, last)
        for a, b, cls, nxt in zip(lo.tolist(), hi.tolist(), dev_ops.idle_class.tolist(), dev_ops.idle_next.tolist()):
            if b <= a:
                continue
            cause = CLASS_NAMES[cls]
            args: dict[str, Any] = {"cause": cause, "duration_ns": b - a}
            if nxt >= 0:
                args["next_op"] = str(names[int(dev_ops.index[nxt])])
            process.slice(idle_tid, cause_label(cause), "idle", _us(a - origin), _us(b - a), args)
        lanes: dict[int, _Lanes] = {}
        for row, start, end in zip(dev_ops.index.tolist(), dev_ops.starts.tolist(), dev_ops.ends.tolist()):
            stream = int(streams[row])
            if stream not in lanes:
                lanes[stream] = process.lanes(f"stream {stream}")
            kind = str(kinds[row])
            extra = {"bytes": int(op_bytes[row])} if kind != "kernel" else {}
            lanes[stream].add(str(names[row]), kind, _us(start - origin), _us(end - origin), extra)
    return _document(run, events, origin)


# ---------------------------------------------------------------------------------------------------------------
# classify


def _step_args(r: ClassifyResult) -> dict[str, Any]:
    args = {
        "verdict": r.verdict,
        "verdict_reason": r.verdict_reason,
        "step_ms_median": r.step_ms_median,
        "idle_fraction": r.idle_fraction,
        "bucket": r.bucket,
    }
    if r.kernel_pass is not None:
        args["instrumented_step_ms"] = r.kernel_pass.instrumented_step_ms
    return {k: val for k, val in args.items() if val is not None}


def _gaps(busy: Iterable[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    out, at = [], 0
    for a, b in busy:
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if end > at:
        out.append((at, end))
    return out


def classify_events(run: ClassifyRun) -> dict[str, Any]:
    """The Trace Event document of a classify run: one measured step per (mode, batch), from its start."""
    events: list[Event] = []
    results = [r for r in run.sorted_results() if r.measured]
    batches = sorted({r.batch for r in results})
    for i, batch in enumerate(batches):
        process = _Process(events, i + 1, f"batch {batch}", i)
        for r in (r for r in results if r.batch == batch):
            kp = r.kernel_pass
            step_tid = process.thread(f"{r.mode}: step (verdict)")
            span_ns = kp.step_span_ns if kp is not None and kp.kernels else round((r.step_ms_median or 0) * 1e6)
            process.slice(step_tid, f"{r.mode} b={batch}: {r.verdict}", "step", 0.0, _us(span_ns), _step_args(r))
            if kp is None or not kp.kernels:
                continue
            idle_tid = process.thread(f"{r.mode}: GPU idle")
            for a, b in _gaps(kp.busy_intervals, span_ns):
                process.slice(idle_tid, "idle", "idle", _us(a), _us(b - a), {"duration_ns": b - a})
            ops = process.lanes(f"{r.mode}: ops")
            for k in sorted(kp.kernels, key=lambda k: (k.start_ns, k.index)):
                args = {"index": k.index, "layer": k.layer, "gap_before_ns": k.gap_before_ns}
                if k.host_launched is not None:
                    args["host_launched"] = k.host_launched
                ops.add(k.op, "kernel", _us(k.start_ns), _us(k.end_ns), args)
    return _document(run, events, None)


# ---------------------------------------------------------------------------------------------------------------


def trace_events(run: Run, timeline: Timeline | None = None) -> dict[str, Any]:
    """The Trace Event document of ``run``: an analyze run needs the Timeline it was made from."""
    if isinstance(run, ClassifyRun):
        return classify_events(run)
    if timeline is None:
        raise ValueError("the Perfetto trace of an analyze run needs its Timeline")
    return analyze_events(run, timeline)


def write_trace(document: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write a Trace Event document (compact JSON), atomically; an existing file only with ``force``."""
    from launchprobe.errors import UsageError
    from launchprobe.run.files import check_writable

    path = Path(path)
    check_writable(path, force)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, separators=(",", ":"), allow_nan=False)
            handle.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
