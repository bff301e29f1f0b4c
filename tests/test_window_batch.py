"""window_batch.window_records gives the records window_record gives, one window at a time: step windows and range
windows of real traces (one stream, several streams, NCCL), and the fallbacks (GPU metrics, other work in a
window's gaps)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from launchprobe.analysis.steps import detect_steps
from launchprobe.analysis.window_batch import window_records
from launchprobe.analysis.windows import AnalysisOptions, Window, prepare, range_windows, window_record
from launchprobe.collect import load_trace
from launchprobe.collect.nsys_sqlite import read_nsys_sqlite
from launchprobe.timeline import Timeline
from tests.fixtures import nsys_synth as synth
from tests.test_field_traces import FIELD, gunzip
from tests.test_steps_field import SHARED


def same(timeline: Timeline, windows: list[Window], options: AnalysisOptions) -> None:
    prep = prepare(timeline, options)
    one = [msgspec.to_builtins(window_record(w, prep, timeline, options)) for w in windows]
    batch = [msgspec.to_builtins(r) for r in window_records(windows, prep, timeline, options)]
    assert batch == one


def step_windows(timeline: Timeline, mode: str = "auto") -> list[Window]:
    result = detect_steps(timeline, mode)
    assert result.steps
    return [Window("s", s.device, s.start_ns, s.end_ns, s.rows, s.index, s.pid, s.tid) for s in result.steps]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("window_batch")


@pytest.mark.parametrize("name", ["A_graph_loop.sqlite.gz", "C_hf_eager.sqlite.gz", "E_classify_nsys.sqlite.gz"])
def test_field_steps_and_ranges(name: str, tmp: Path) -> None:
    timeline = load_trace(gunzip(name, tmp))
    same(timeline, step_windows(timeline), AnalysisOptions())
    options = AnalysisOptions(ranges=(".*step.*", "truth_forward.*"))
    same(timeline, range_windows(timeline, prepare(timeline, options), options), options)


def test_kineto_steps() -> None:
    timeline = load_trace(FIELD / "F_train_kineto.json.gz")  # backward on autograd's thread, copies
    same(timeline, step_windows(timeline), AnalysisOptions())
    same(timeline, step_windows(timeline, "annotations"), AnalysisOptions())


@pytest.mark.parametrize("name", ["rank0.json.gz", "nccl_data.json.gz"])
def test_shared_several_streams(name: str) -> None:
    path = SHARED / "kineto" / name
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    timeline = load_trace(path)
    same(timeline, step_windows(timeline), AnalysisOptions())
    same(timeline, step_windows(timeline, "annotations"), AnalysisOptions())


def test_with_metrics_one_at_a_time(tmp_path: Path) -> None:
    data = synth.decode_loop(synth.Loop(steps=6))
    t0, t1 = int(data["k_start"].min()), int(data["k_end"].max())
    samples = [(t, "DRAM Read Bandwidth [Throughput %]", 40.0) for t in range(t0, t1, 20_000)]
    timeline = read_nsys_sqlite(synth.write_nsys_sqlite(tmp_path / "m.sqlite", data, metrics=samples))
    same(timeline, step_windows(timeline), AnalysisOptions())
