"""Real nsys exports made on an H200 (benchmarks/gpu_session.sh), checked against numbers recomputed here with plain
sqlite3 and Python loops.

- classify_tiny_nvtx: `launchprobe classify --shape tiny --batch 1,4 --steps 5 --warmup 2 --nvtx ops` under
  `launchprobe nsys` (--cuda-graph-trace=node): launchprobe's decode loop with its NVTX ranges
  (launchprobe/measure/markers.py), eager, piecewise and full graphs, buckets 1 and 4.
- plain_torch: benchmarks/plain_torch_loop.py, 40 steps, an NVTX range `step N` each, one host sync per step.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import shutil
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launchprobe.analysis.trace_run import build_run
from launchprobe.analysis.windows import AnalysisOptions, prepare, range_windows
from launchprobe.cli import main
from launchprobe.collect import load_trace
from launchprobe.run.files import from_builtins
from launchprobe.run.schema import AnalyzeRun, Window

FIXTURES = Path(__file__).parent / "fixtures"
MODES = ("eager", "piecewise", "full")
BUCKETS = (1, 4)
LAYER_OPS = ("attn_norm", "qkv", "rotary", "kv_write", "attention", "o_proj", "mlp_norm", "gate_up", "silu_mul", "down")
LAUNCH_APIS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}
SHORT_GAP_NS = 2_000
QUIET_NS = 50_000_000  # the no-work heuristic (docs/analysis.md)


def _gunzip(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name.removesuffix(".gz")
    with gzip.open(FIXTURES / name, "rb") as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gunzip("classify_tiny_nvtx.sqlite.gz", tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gunzip("plain_torch.sqlite.gz", tmp_path_factory.mktemp("plain"))


# --- an independent model of the trace: rows straight from sqlite3 ----------------------------------------------


@dataclass(frozen=True)
class Op:
    start: int
    end: int
    device: int
    pid: int
    corr: int | None
    kernel: bool
    graph_node: int | None


@dataclass(frozen=True)
class Call:
    start: int
    end: int
    tid: int
    name: str


@dataclass(frozen=True)
class Range:
    start: int
    end: int
    pid: int
    tid: int
    name: str
    domain: int


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def _measure(merged: list[tuple[int, int]], a: int, b: int) -> int:
    """How much of the merged intervals lies inside [a, b)."""
    i = max(bisect.bisect_right(merged, (a, 2**62)) - 1, 0)
    total = 0
    while i < len(merged) and merged[i][0] < b:
        total += max(0, min(b, merged[i][1]) - max(a, merged[i][0]))
        i += 1
    return total


class Trace:
    def __init__(self, path: Path) -> None:
        conn = sqlite3.connect(path)
        strings = dict(conn.execute("SELECT id, value FROM StringIds"))
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.ops: list[Op] = []
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table not in tables:
                continue
            node = "graphNodeId" if table.endswith("KERNEL") else "NULL"
            query = f"SELECT start, end, deviceId, globalPid, correlationId, {node} FROM {table}"
            for start, end, dev, gpid, corr, graph_node in conn.execute(query):
                self.ops.append(
                    Op(start, end, dev, (gpid >> 24) & 0xFFFFFF, corr, table.endswith("KERNEL"), graph_node)
                )
        self.calls: dict[tuple[int, int], Call] = {}
        query = "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start"
        for start, end, gtid, corr, name_id in conn.execute(query):
            name = re.sub(r"_v\d+$", "", strings[name_id])
            self.calls.setdefault(((gtid >> 24) & 0xFFFFFF, corr), Call(start, end, gtid & 0xFFFFFF, name))
        self.all_calls: list[tuple[int, int, int]] = []  # (start, end, pid) of every runtime and driver call
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
            if table in tables:
                for start, end, gtid in conn.execute(f"SELECT start, end, globalTid FROM {table}"):
                    self.all_calls.append((start, max(start, end), (gtid >> 24) & 0xFFFFFF))
        self.ranges = [
            Range(s, e, (g >> 24) & 0xFFFFFF, g & 0xFFFFFF, t if t is not None else strings[tid], dom or 0)
            for s, e, g, t, tid, dom in conn.execute(
                "SELECT start, end, globalTid, text, textId, domainId FROM NVTX_EVENTS WHERE eventType = 59"
            )
        ]
        self.domains = dict(conn.execute("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75"))
        conn.close()
        self.parents = self._parents()

    def call_of(self, op: Op) -> Call | None:
        return self.calls.get((op.pid, op.corr)) if op.corr is not None else None

    def _parents(self) -> dict[int, Range | None]:
        """For each range (by index), the innermost range of its thread enclosing it: a stack walk in start order."""
        parents: dict[int, Range | None] = {}
        by_tid: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(self.ranges):
            by_tid[r.tid].append(i)
        for indices in by_tid.values():
            stack: list[Range] = []
            for i in sorted(indices, key=lambda i: (self.ranges[i].start, -self.ranges[i].end)):
                r = self.ranges[i]
                while stack and not (stack[-1].start <= r.start and r.end <= stack[-1].end):
                    stack.pop()
                parents[i] = stack[-1] if stack else None
                stack.append(r)
        return parents

    def children(self, parent: Range) -> list[Range]:
        kids = [r for i, r in enumerate(self.ranges) if self.parents[i] is parent]
        return sorted(kids, key=lambda r: r.start)

    def attributed(self, rng: Range) -> list[Op]:
        """Ops whose launch call starts inside the range on its thread (nsys's NVTX projection)."""
        out = []
        for op in self.ops:
            call = self.call_of(op)
            if call is not None and op.pid == rng.pid and call.tid == rng.tid and rng.start <= call.start <= rng.end:
                out.append(op)
        return out

    def quiet(self, pid: int) -> list[tuple[int, int]]:
        """Stretches of at least QUIET_NS with no API call of the process in flight (the no-work heuristic)."""
        merged = _merge([(s, e) for s, e, p in self.all_calls if p == pid])
        return [(a, b) for (_, a), (b, _) in zip(merged, merged[1:]) if b - a >= QUIET_NS]

    def window(self, rng: Range, device: int) -> dict[str, Any]:
        """The GPU projection of the range's own work (issue 11): from its first op's start to its last op's end,
        busy the union of its own ops, the gaps between them classified; where other ops ran in a gap it is
        ``other``, and the part of a host-wait gap inside a quiet stretch of the process is no work."""
        mine = sorted((op for op in self.attributed(rng) if op.device == device), key=lambda op: (op.start, op.end))
        lo, hi = mine[0].start, max(op.end for op in mine)
        device_busy = _merge([(op.start, op.end) for op in self.ops if op.device == device])
        busy = _measure(_merge([(op.start, op.end) for op in mine]), lo, hi)
        quiet = self.quiet(rng.pid)
        split = {"host_wait": 0, "short_gap": 0, "other": 0, "no_work": 0}
        gaps = []
        latest = mine[0].end
        for op in mine[1:]:
            if op.start > latest:
                a, b = latest, op.start
                call = self.call_of(op)
                if call is not None and call.end > latest:
                    kind = "host_wait"
                else:
                    kind = "short_gap" if b - a < SHORT_GAP_NS else "other"
                covered = _measure(device_busy, a, b)  # other windows' work ran here
                split["other"] += covered
                free = b - a - covered
                if kind == "host_wait":
                    no_work = sum(max(0, min(b, q1) - max(a, q0)) - _measure(device_busy, max(a, q0), min(b, q1))
                                  for q0, q1 in quiet if q0 < b and q1 > a)  # fmt: skip
                    split["no_work"] += no_work
                    free -= no_work
                split[kind] += free
                gaps.append(b - a)
            latest = max(latest, op.end)
        launches = Counter(
            call.name for call in {self.call_of(op) for op in mine} if call is not None and call.name in LAUNCH_APIS
        )
        span = hi - lo
        active = span - split["no_work"]
        idle = active - busy
        if idle / active >= 0.5:
            verdict = "launch-bound" if split["host_wait"] / idle > 0.5 else "undetermined"
        else:
            verdict = "gpu-bound"
        gaps.sort()
        return {
            "start_ns": lo,
            "end_ns": hi,
            "span_ns": span,
            "busy_ns": busy,
            "kernels": sum(op.kernel for op in mine),
            "gpu_ops": len(mine),
            "launches": dict(launches),
            "idle_host_wait_ns": split["host_wait"],
            "idle_short_gap_ns": split["short_gap"],
            "idle_other_ns": split["other"],
            "idle_no_work_ns": split["no_work"],
            "gap_p50_ns": gaps[(len(gaps) + 1) // 2 - 1] if gaps else None,
            "verdict": verdict,
        }


@pytest.fixture(scope="module")
def tiny_trace(tiny: Path) -> Trace:
    return Trace(tiny)


@pytest.fixture(scope="module")
def plain_trace(plain: Path) -> Trace:
    return Trace(plain)


# --- (a) the NVTX structure of launchprobe's own decode loop ----------------------------------------------------


def _steps(trace: Trace, mode: str | None = None) -> list[Range]:
    prefix = "decode_step" if mode is None else f"decode_step mode={mode} "
    return [r for r in trace.ranges if r.name.startswith(prefix)]


def test_ranges_are_in_the_launchprobe_domain(tiny_trace: Trace) -> None:
    assert set(tiny_trace.domains.values()) == {"launchprobe"}
    (domain,) = tiny_trace.domains
    assert {r.domain for r in tiny_trace.ranges} == {domain}


def test_a_decode_step_range_per_mode_and_bucket(tiny_trace: Trace) -> None:
    names = {r.name for r in _steps(tiny_trace)}
    assert names == {f"decode_step mode={m} bucket={b}" for m in MODES for b in BUCKETS}
    counts = Counter(r.name for r in _steps(tiny_trace))
    assert len(set(counts.values())) == 1 and min(counts.values()) >= 5 + 2  # timed steps and warmup, each mode
    assert all(tiny_trace.parents[i] is None for i, r in enumerate(tiny_trace.ranges) if r.name.startswith("decode"))


def test_eager_layers_nest_in_steps_and_ops_in_layers(tiny_trace: Trace) -> None:
    layer_names = sorted({r.name for r in tiny_trace.ranges if r.name.startswith("layer ")})
    assert layer_names == ["layer 0", "layer 1"]  # tiny has 2 layers
    for step in _steps(tiny_trace, "eager"):
        children = tiny_trace.children(step)
        assert [c.name for c in children] == ["embed", *layer_names, "final_norm", "lm_head"]
        for layer in children[1:-2]:
            assert [c.name for c in tiny_trace.children(layer)] == list(LAYER_OPS)
    for i, r in enumerate(tiny_trace.ranges):
        if r.name in LAYER_OPS:
            parent = tiny_trace.parents[i]
            assert parent is not None and parent.name.startswith("layer ")


def test_graph_pieces_per_step(tiny_trace: Trace) -> None:
    layers = len({r.name for r in tiny_trace.ranges if r.name.startswith("layer ")})
    for mode, pieces in (("piecewise", layers + 1), ("full", 1)):
        for step in _steps(tiny_trace, mode):
            graphs = [c.name for c in tiny_trace.children(step) if c.name.startswith("graph ")]
            assert [g.split()[1] for g in graphs] == [f"{k}/{pieces}" for k in range(1, pieces + 1)]
    for step in _steps(tiny_trace, "piecewise"):  # attention stays eager between the pieces
        layer_children = [c for c in tiny_trace.children(step) if c.name.startswith("layer ")]
        assert [[g.name for g in tiny_trace.children(c)] for c in layer_children] == [["kv_write", "attention"]] * 2
    assert not [r for s in _steps(tiny_trace, "eager") for r in tiny_trace.children(s) if r.name.startswith("graph")]


# --- (b) the analysis against the independent numbers ------------------------------------------------------------

CHECKED = (
    "start_ns", "end_ns", "span_ns", "busy_ns", "kernels", "gpu_ops", "launches", "idle_host_wait_ns",
    "idle_short_gap_ns", "idle_other_ns", "idle_no_work_ns", "gap_p50_ns", "verdict",
)  # fmt: skip


def _check_windows(run: AnalyzeRun, trace: Trace, ranges: list[Range]) -> list[Window]:
    windows = run.windows
    assert len(windows) == len(ranges)  # one device
    ordered = sorted(ranges, key=lambda r: (r.start, r.end))
    for w, rng in zip(windows, ordered, strict=True):
        assert w.name == rng.name
        ref = trace.window(rng, w.device)
        assert {k: getattr(w, k) for k in CHECKED} == ref, rng.name
        assert w.idle_host_wait_ns + w.idle_short_gap_ns + w.idle_other_ns + w.idle_no_work_ns == w.idle_ns
        assert w.range_start_ns == rng.start and w.range_end_ns == rng.end
        assert w.ops_without_launch == 0
    return list(windows)


def test_tiny_decode_steps_match_independent_numbers(tiny: Path, tiny_trace: Trace) -> None:
    run = build_run(load_trace(tiny), AnalysisOptions(ranges=("decode_step.*",)))
    windows = _check_windows(run, tiny_trace, _steps(tiny_trace))
    by_mode: dict[str, list[Window]] = defaultdict(list)
    for w in windows:
        by_mode[w.name.split()[1].removeprefix("mode=")].append(w)
    assert all(w.verdict == "launch-bound" for w in by_mode["eager"])
    assert all(w.kernels == by_mode["eager"][0].kernels for w in windows)  # same kernels, every mode
    full = by_mode["full"]
    assert all(w.launches == {"cudaGraphLaunch": 1} for w in full)
    assert Counter(w.verdict for w in full).most_common(1)[0][0] == "gpu-bound"
    # the graphs shrink the step: the median full step is several times shorter than the median eager step
    med = {m: sorted(w.span_ns for w in ws)[len(ws) // 2] for m, ws in by_mode.items()}
    assert med["full"] * 3 < med["eager"] and med["piecewise"] < med["eager"]
    summaries = {s.name: s for s in run.summaries}
    for name, s in summaries.items():
        assert s.verdict != "launch-bound" if "mode=full" in name else s.verdict == "launch-bound"


def test_graph_replayed_kernels_belong_to_their_steps(tiny: Path, tiny_trace: Trace) -> None:
    timeline = load_trace(tiny)
    options = AnalysisOptions(ranges=("decode_step mode=full.*",))
    prep = prepare(timeline, options)
    ops = timeline.gpu_ops
    for window in range_windows(timeline, prep, options):
        rng = next(r for r in tiny_trace.ranges if r.name == window.name and r.start == window.range_start)
        graph_calls = [
            corr
            for (pid, corr), call in tiny_trace.calls.items()
            if call.name == "cudaGraphLaunch" and call.tid == rng.tid and rng.start <= call.start <= rng.end
        ]
        assert len(graph_calls) == 1
        expected = sorted(
            (op.start, op.end) for op in tiny_trace.ops if op.corr == graph_calls[0] and op.graph_node is not None
        )
        rows = ops.iloc[window.rows]
        assert sorted(zip(rows["start_ns"], rows["end_ns"], strict=True)) == expected
        assert (rows["graph_node_id"] >= 0).all() and set(rows["correlation_id"]) == set(graph_calls)


def test_plain_torch_steps_match_independent_numbers(plain: Path, plain_trace: Trace) -> None:
    run = build_run(load_trace(plain), AnalysisOptions(ranges=("step.*",)))
    steps = [r for r in plain_trace.ranges if r.name.startswith("step ")]
    assert len(steps) == 40
    windows = _check_windows(run, plain_trace, steps)
    for w in windows:
        assert w.memcpys == 1  # the token copied to the host
        assert w.idle_host_wait_ns > w.idle_short_gap_ns + w.idle_other_ns  # host wait dominates
        assert w.verdict == "launch-bound"


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> AnalyzeRun:
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code
    run = from_builtins(json.loads(capsys.readouterr().out))
    assert isinstance(run, AnalyzeRun)
    return run


@pytest.mark.parametrize("fixture,pattern", [("tiny", "decode_step.*"), ("plain", "step.*")])
def test_cli_gives_the_library_numbers(
    fixture: str, pattern: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    path: Path = request.getfixturevalue(fixture)
    trace: Trace = request.getfixturevalue(f"{fixture}_trace")
    run = _cli_json(["analyze", str(path), "--range", pattern, "--format", "json"], capsys)
    steps = [r for r in trace.ranges if re.fullmatch(pattern, r.name)]
    _check_windows(run, trace, steps)
    library = build_run(load_trace(path), AnalysisOptions(ranges=(pattern,)))
    assert run.windows == library.windows
