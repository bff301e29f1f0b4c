"""Ceilings the verdicts are measured against: HBM read bandwidth, matmul rate, host cost of a launch, graph node cost.

Measured on the machine at the start of a run and cached per GPU, torch version and dtype; ``datasheet`` swaps
bandwidth and matmul rate for vendor figures (host launch and graph node costs have no datasheet value and are
always measured).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from launchprobe.errors import UsageError
from launchprobe.measure.timing import time_call

# Vendor datasheet figures: HBM bandwidth (bytes/s) and dense bf16/fp16 tensor rate (FLOP/s, no sparsity).
DATASHEET: dict[str, tuple[float, float, str]] = {
    "NVIDIA H200": (4.8e12, 989e12, "NVIDIA H200 datasheet (SXM): 4.8 TB/s, 989 TFLOPS dense bf16"),
    "NVIDIA H100 80GB HBM3": (3.35e12, 989e12, "NVIDIA H100 datasheet (SXM): 3.35 TB/s, 989 TFLOPS dense bf16"),
    "NVIDIA H100 PCIe": (2.0e12, 756e12, "NVIDIA H100 datasheet (PCIe): 2.0 TB/s, 756 TFLOPS dense bf16"),
    "NVIDIA A100-SXM4-80GB": (2.039e12, 312e12, "NVIDIA A100 datasheet (SXM 80GB): 2.039 TB/s, 312 TFLOPS bf16"),
    "NVIDIA A100-SXM4-40GB": (1.555e12, 312e12, "NVIDIA A100 datasheet (SXM 40GB): 1.555 TB/s, 312 TFLOPS bf16"),
}

CEILINGS_VERSION = 3  # bump when the measurement method changes, so old cache entries are ignored


@dataclass
class Ceilings:
    source: str  # "measured", "cached" (measured earlier on this GPU) or "datasheet"
    hbm_read_bytes_per_s: float
    matmul_flops_per_s: float
    launch_host_ns: float | None  # host time of one eager launch of a tiny kernel (None: not measured)
    graph_node_ns: float | None  # device time per node replaying a graph of tiny kernels (None: no graphs)
    measured_at: str
    details: dict[str, Any] = field(default_factory=dict)
    # idle between consecutive nodes of that graph, by CUPTI (None: no graphs, or CUPTI held by another profiler)
    graph_node_gap_ns: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "launchprobe" / "ceilings.json"


def cache_key(device_name: str, torch_version: str, dtype: str) -> str:
    return f"v{CEILINGS_VERSION}|{device_name}|torch {torch_version}|{dtype}"


class CorruptCache(ValueError):
    """The cache file, or its entry for this key, is not what store_cached writes."""


def _positive(entry: dict[str, Any], name: str, *, optional: bool) -> None:
    value = entry.get(name)
    if value is None and optional:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise CorruptCache(f"{name} is {value!r}, not a positive finite number")


def ceilings_from_entry(entry: Any) -> Ceilings:
    """A cached entry back into Ceilings, refusing anything store_cached would not have written."""
    if not isinstance(entry, dict):
        raise CorruptCache(f"the entry is a {type(entry).__name__}, not an object")
    known = {f.name for f in fields(Ceilings)}
    required = known - {"source", "details", "graph_node_gap_ns"}
    if set(entry) - known or required - set(entry):
        raise CorruptCache(f"the entry's fields are {', '.join(sorted(entry))}")
    _positive(entry, "hbm_read_bytes_per_s", optional=False)
    _positive(entry, "matmul_flops_per_s", optional=False)
    _positive(entry, "launch_host_ns", optional=True)
    _positive(entry, "graph_node_ns", optional=True)
    _positive(entry, "graph_node_gap_ns", optional=True)
    if not isinstance(entry["measured_at"], str) or not isinstance(entry.get("details", {}), dict):
        raise CorruptCache("measured_at or details has the wrong type")
    return Ceilings(**{**entry, "source": "cached"})


def _read_entries(path: Path) -> dict[str, Any]:
    """The cache file's entries ({} when there is none yet); CorruptCache when it is not a JSON object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CorruptCache(f"cannot read it: {exc.strerror}") from None
    try:
        entries = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptCache("it is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise CorruptCache(f"it is not valid JSON ({exc})") from None
    if not isinstance(entries, dict):
        raise CorruptCache(f"it holds a JSON {type(entries).__name__}, not an object")
    return entries


def cache_notice(path: Path, reason: str) -> str:
    return f"ceilings cache {path} ignored ({reason}): measuring again, the new measurement replaces it"


def cached_for_gpu(device_name: str) -> Ceilings | None:
    """The most recent cached ceilings of a GPU, whatever torch and dtype they were measured with (its host costs
    and graph node gap, for predictions on a trace from this GPU); None when there are none or the cache is bad."""
    try:
        entries = _read_entries(cache_path())
    except CorruptCache:
        return None
    found = []
    for key, entry in entries.items():
        if isinstance(key, str) and key.startswith(f"v{CEILINGS_VERSION}|{device_name}|"):
            try:
                found.append(ceilings_from_entry(entry))
            except CorruptCache:
                continue
    return max(found, key=lambda c: c.measured_at, default=None)


def load_cached(key: str, notices: list[str] | None = None) -> Ceilings | None:
    """The cached ceilings for ``key``, or None. A corrupt file or entry is ignored (None) with a notice on stderr
    (and in ``notices`` when given), so that the ceilings are measured again; never an exception."""
    path = cache_path()
    try:
        entries = _read_entries(path)
        if key not in entries:
            return None
        return ceilings_from_entry(entries[key])
    except CorruptCache as exc:
        notice = cache_notice(path, str(exc))
        print(f"launchprobe: notice: {notice}", file=sys.stderr)
        if notices is not None:
            notices.append(notice)
        return None


def store_cached(key: str, ceilings: Ceilings) -> None:
    """Add ``key`` to the cache; a corrupt cache file is replaced by one that holds the valid entries only."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            entries = _read_entries(path)
        except CorruptCache:
            entries = {}
        kept = {}
        for other, entry in entries.items():
            try:
                ceilings_from_entry(entry)
            except CorruptCache:
                continue
            kept[other] = entry
        kept[key] = ceilings.to_dict()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(kept, indent=1, allow_nan=False))
        tmp.replace(path)
    except (OSError, ValueError):
        pass  # a read-only home, a full disk, a folder in the way: it only costs a re-measure next time


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def measure_hbm_read(device: str, *, buffer_bytes: int, buffers: int = 4, repeats: int = 20) -> float:
    """Bytes/s of ``x.sum()`` over rotating buffers, each far larger than the last-level cache."""
    import torch

    # bf16 on a GPU (what decode reads); fp32 on CPU, whose bf16 reductions are compute-limited.
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    n = buffer_bytes // (2 if dtype == torch.bfloat16 else 4)
    xs = [torch.empty(n, dtype=dtype, device=device).normal_() for _ in range(buffers)]
    for x in xs:  # warm-up
        x.sum()
    rates = []
    for i in range(repeats):
        x = xs[i % buffers]
        seconds = time_call(device, x.sum, lead_in=xs[(i - 1) % buffers].sum)
        rates.append(x.numel() * x.element_size() / seconds)
    return float(statistics.median(rates))


def measure_matmul(device: str, dtype: str, *, size: int, repeats: int = 10) -> float:
    import torch

    from launchprobe.workload.model import TORCH_DTYPES

    tdtype = TORCH_DTYPES[dtype]
    a = torch.empty(size, size, dtype=tdtype, device=device).normal_()
    b = torch.empty(size, size, dtype=tdtype, device=device).normal_()
    c = torch.empty(size, size, dtype=tdtype, device=device)

    def mm() -> None:
        torch.mm(a, b, out=c)

    mm()
    times = [time_call(device, mm, lead_in=mm) for _ in range(repeats)]
    return 2 * size**3 / statistics.median(times)


def measure_launch_host_ns(device: str, *, launches: int = 2000) -> float:
    """Host time per eager launch of a tiny in-place op, the GPU being faster than the launches."""
    import torch

    x = torch.zeros(1, device=device)
    for _ in range(100):
        x.add_(1)
    _sync(device)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(launches):
            x.add_(1)
        samples.append((time.perf_counter_ns() - t0) / launches)
        _sync(device)
    return float(statistics.median(samples))


def measure_graph_node_ns(*, nodes: int = 800, replays: int = 20) -> tuple[float, float | None]:
    """Device time per node when replaying a CUDA graph of ``nodes`` tiny kernels, and the idle between its
    consecutive nodes as CUPTI sees it (None when CUPTI is held by another profiler)."""
    import torch

    x = torch.zeros(1, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(nodes):
            x.add_(1)
    graph.replay()
    times = [time_call("cuda", graph.replay, lead_in=graph.replay) for _ in range(replays)]
    return statistics.median(times) * 1e9 / nodes, _node_gap_ns(graph.replay, nodes)


def _node_gap_ns(replay: Any, nodes: int, samples: int = 5) -> float | None:
    """Median over replays of the idle time between a graph's consecutive kernels (span less busy, per gap)."""
    from launchprobe.analysis.intervals import interval_stats
    from launchprobe.measure.cupti import cuda_intervals

    gaps = []
    for _ in range(samples):
        rows = cuda_intervals(replay)
        if len(rows) < nodes:  # CUPTI held elsewhere, or the nodes were not traced one by one
            return None
        stats = interval_stats([r[1] for r in rows], [r[2] for r in rows])
        gaps.append(stats.idle_ns / (len(rows) - 1))
    return float(statistics.median(gaps))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def measure_ceilings(device: str, dtype: str, l2_bytes: int) -> Ceilings:
    cuda = device.startswith("cuda")
    # Buffers far larger than the last-level cache; on CPU capped to keep the CPU path quick.
    buffer_bytes = max(2 << 30, 32 * l2_bytes) if cuda else min(512 << 20, max(64 << 20, 2 * l2_bytes))
    buffers, repeats = (4, 20) if cuda else (2, 6)
    matmul_size = 8192 if cuda else 512
    details: dict[str, Any] = {
        "hbm_method": f"torch.sum over {buffers} rotating {'bf16' if cuda else 'fp32'} buffers "
        f"of {buffer_bytes >> 20} MiB, "
        f"median of {repeats}",
        "matmul_method": f"{dtype} {matmul_size}^3 torch.mm, median of 10",
        "launch_method": "host time per eager x.add_(1), median of 5 x 2000 launches",
    }
    node_ns, node_gap_ns = measure_graph_node_ns() if cuda else (None, None)
    ceilings = Ceilings(
        source="measured",
        hbm_read_bytes_per_s=measure_hbm_read(device, buffer_bytes=buffer_bytes, buffers=buffers, repeats=repeats),
        matmul_flops_per_s=measure_matmul(device, dtype, size=matmul_size),
        launch_host_ns=measure_launch_host_ns(device),
        graph_node_ns=node_ns,
        measured_at=_now(),
        details=details,
        graph_node_gap_ns=node_gap_ns,
    )
    details["graph_node_method"] = (
        "device time per node replaying a graph of 800 x.add_(1), median of 20; the gap between its nodes: span "
        "less busy over 799, by CUPTI (torch.profiler), median of 5 replays"
        if cuda
        else "no CUDA graphs on CPU"
    )
    return ceilings


def get_ceilings(
    *, device: str, device_name: str, torch_version: str, dtype: str, l2_bytes: int, source: str, remeasure: bool
) -> Ceilings:
    """Ceilings for this run: cached measurement, fresh measurement, or datasheet (with measured host costs)."""
    key = cache_key(device_name, torch_version, dtype)
    notices: list[str] = []
    measured = None if remeasure else load_cached(key, notices)
    if measured is None:
        measured = measure_ceilings(device, dtype, l2_bytes)
        if notices:
            measured.details["cache_notice"] = notices[0]  # the run file says why it measured again
        store_cached(key, measured)
    if source == "measured":
        return measured
    if source != "datasheet":
        raise UsageError(f"--ceilings {source!r}: expected measured or datasheet")
    return datasheet_ceilings(device_name, measured)


def datasheet_ceilings(device_name: str, measured: Ceilings | None) -> Ceilings:
    """Vendor bandwidth and matmul rate; host costs from ``measured`` (None when nothing was measured)."""
    if device_name not in DATASHEET:
        raise UsageError(
            f"no datasheet figures for {device_name!r} (known: {', '.join(DATASHEET)}); use --ceilings measured"
        )
    bandwidth, flops, citation = DATASHEET[device_name]
    return Ceilings(
        source="datasheet",
        hbm_read_bytes_per_s=bandwidth,
        matmul_flops_per_s=flops,
        launch_host_ns=measured.launch_host_ns if measured else None,
        graph_node_ns=measured.graph_node_ns if measured else None,
        measured_at=measured.measured_at if measured else "",
        details={
            "datasheet": citation,
            "host_costs": f"launch and graph node costs {measured.source}" if measured else "not measured",
        },
        graph_node_gap_ns=measured.graph_node_gap_ns if measured else None,
    )
