"""The Kineto reader: exact ns from float microseconds, launches joined by correlation, the real HTA traces."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

# A dependency (pyproject.toml); skipped only where a machine lacks it, like the GPU machine's image.
pytest.importorskip("msgspec", reason="msgspec is not installed here")

from launchprobe.collect import load_trace, sniff_format  # noqa: E402
from launchprobe.collect.kineto import read_kineto, us_to_ns  # noqa: E402
from launchprobe.errors import BadTraceError, NoDataError

KINETO = Path(__file__).parents[1].parent / "shared" / "traces" / "kineto"
LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}


def _trace(events: list[dict]) -> dict:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Fake GPU"}], "traceEvents": events}


def _kernel(ts: float, dur: float, corr: int, name: str = "k") -> dict:
    args = {"device": 0, "stream": 7, "correlation": corr}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict:
    args = {"correlation": corr}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 99, "tid": 100, "ts": ts, "dur": dur, "args": args}


def test_us_to_ns_is_exact() -> None:
    assert us_to_ns(3) == 3000
    assert us_to_ns("4458676983543.183") == 4458676983543183
    assert us_to_ns("1.0005") == 1000  # half to even
    assert us_to_ns("1.0015") == 1002


def test_reads_synthetic_trace(tmp_path: Path) -> None:
    events = [
        _launch(4458676983500.125, 5.5, 1),
        _kernel(4458676983543.183, 2.25, 1),
        _kernel(4458676983600, 1, 2),  # no launch event: pid falls back to the host process
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 99, "tid": 100, "ts": 4458676983000,
         "dur": 900},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 99, "tid": 100, "ts": 4458676983000, "dur": 5},
    ]  # fmt: skip
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(_trace(events), handle)
    assert sniff_format(path) == "kineto"
    tl = read_kineto(path)
    assert tl.gpu_ops["start_ns"].tolist() == [4458676983543183, 4458676983600000]
    assert tl.gpu_ops["end_ns"].tolist() == [4458676983545433, 4458676983601000]
    assert tl.gpu_ops["pid"].tolist() == [99, 99]
    assert tl.api_calls["category"].tolist() == ["launch"]
    assert tl.ranges["name"].tolist() == ["ProfilerStep#3"]
    assert tl.meta["gpus"] == {0: "Fake GPU"}


@pytest.mark.parametrize(
    "content,error",
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', BadTraceError),  # truncated
        (b'{"foo": 1}', BadTraceError),  # JSON, not a trace
        (json.dumps(_trace([_launch(1.0, 1.0, 1)])).encode(), NoDataError),  # no kernels
    ],
)
def test_bad_json(tmp_path: Path, content: bytes, error: type) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(error):
        load_trace(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_trace([_kernel(1, 1, 1)] * 200)).encode())[:60])
    with pytest.raises(BadTraceError):
        load_trace(path)


# --- the real traces, recomputed with json and loops ---------------------------------------------------------


def _reference(path: Path) -> dict:
    with gzip.open(path, "rt") as handle:
        d = json.load(handle, parse_float=Decimal)
    xs = [e for e in d["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    gpu = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    api = [e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")]

    def ns(x: object) -> int:
        return int((Decimal(str(x)) * 1000).to_integral_value())

    iv = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu)
    busy, cur_s, cur_e = 0, iv[0][0], iv[0][1]
    for s, e in iv[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    kcorr = {e["args"]["correlation"] for e in gpu if e["cat"] == "kernel"}
    launches = Counter(e["name"] for e in api if e["name"] in LAUNCH and e["args"].get("correlation") in kcorr)
    return {
        "kernels": sum(e["cat"] == "kernel" for e in gpu),
        "ops": len(gpu),
        "span": max(e for _, e in iv) - iv[0][0],
        "busy": busy,
        "launches": dict(launches),
    }


@pytest.mark.parametrize(
    "name",
    [
        "rank0.json.gz",
        "test.json.gz",
        "control.json.gz",
        "nccl_data.json.gz",
        "alexnet_syncs.json.gz",
        "triton_example.json.gz",
        "df_index_resolver.json.gz",
    ],
)
def test_real_traces_match_independent_numbers(name: str) -> None:
    path = KINETO / name
    if not path.exists():
        pytest.skip("shared traces not present")
    from launchprobe.analysis.trace_run import build_run
    from launchprobe.analysis.windows import AnalysisOptions

    run = build_run(load_trace(path), AnalysisOptions())
    [w] = run.windows
    ref = _reference(path)
    assert (w.kernels, w.gpu_ops, w.span_ns, w.busy_ns) == (
        ref["kernels"],
        ref["ops"],
        ref["span"],
        ref["busy"],
    )
    assert w.launches == ref["launches"]
    idle_split = w.idle_host_wait_ns + w.idle_short_gap_ns + w.idle_other_ns + w.idle_no_work_ns
    assert idle_split == w.span_ns - w.busy_ns
    # SOURCES.md facts
    if name == "rank0.json.gz":
        assert w.launches == {"cudaLaunchKernel": 5240, "cudaGraphLaunch": 70}
        assert w.ops_without_launch >= 705
    if name == "test.json.gz":
        assert w.launches["cudaGraphLaunch"] == 12
        assert w.kernels_per_launch == pytest.approx((9876 - 546) / (4866 + 12), abs=1e-3)
    if name == "nccl_data.json.gz":
        assert w.launches == {"cudaLaunchKernel": 2550, "cudaLaunchKernelExC": 150}
        assert w.verdict == "launch-bound"
    if name == "alexnet_syncs.json.gz":  # 41 cuda_sync records (stream syncs, event waits): not GPU work
        with gzip.open(path, "rt") as handle:
            cats = Counter(e.get("cat") for e in json.load(handle)["traceEvents"] if isinstance(e, dict))
        assert cats["cuda_sync"] == 41 and w.kernels == 79
        assert w.gpu_ops == cats["kernel"] + cats["gpu_memcpy"] + cats["gpu_memset"] == 98
    if name == "triton_example.json.gz":  # one Triton kernel launched through the driver API
        assert (w.kernels, w.launches, w.ops_without_launch) == (1, {"cuLaunchKernel": 1}, 0)
    if name == "df_index_resolver.json.gz":
        assert w.kernels == 19_370 and w.launches == {"cudaLaunchKernel": 19_370}


def test_ns_column_matches_us_to_ns_on_every_form() -> None:
    from launchprobe.collect.kineto import _ns_column

    values = [3, True, "4458676983543.183", "1.0005", "1.0015", "-2.500", "12.5", "1e3", " 7.250", ".125", 2.5]
    assert _ns_column(values) == [us_to_ns(v) for v in values]


def test_bare_event_list_and_odd_events_read_as_before(tmp_path: Path) -> None:
    # Not the usual {"traceEvents": [...]} of objects: decoded generically, read the same way.
    events = [_launch(10.5, 1.25, 1), "not an event", _kernel(12.001, 0.5, 1), {"ph": "X", "cat": "kernel"}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events))
    tl = read_kineto(path)
    assert tl.gpu_ops["start_ns"].tolist() == [12001]
    assert tl.gpu_ops["end_ns"].tolist() == [12501]
    assert tl.gpu_ops["pid"].tolist() == [99]
    assert tl.api_calls["start_ns"].tolist() == [10500]
