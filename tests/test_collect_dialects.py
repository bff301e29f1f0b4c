"""Kineto dialects (old and new category spellings) and ROCm/HIP API names, on small constructed traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("msgspec", reason="msgspec is not installed here")

from launchprobe.analysis.trace_run import build_run  # noqa: E402
from launchprobe.analysis.windows import AnalysisOptions  # noqa: E402
from launchprobe.collect import load_trace  # noqa: E402
from launchprobe.collect.api_names import (  # noqa: E402
    api_category,
    base_api_name,
    canonical_api_name,
    is_any_launch,
    is_copy,
    is_graph_launch,
    is_launch,
    is_sync,
)
from launchprobe.collect.kineto import read_kineto  # noqa: E402
from launchprobe.timeline import api_category as timeline_api_category  # noqa: E402


def _x(cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


# --- PyTorch 1.8's first Kineto traces: Kernel / Memcpy / Memset / Runtime / Driver / Operator ------------------


def _old_trace() -> list[dict[str, Any]]:
    return [
        _x("Operator", "ProfilerStep#1", 50, 400, 13721, "123"),
        _x("Operator", "aten::mm", 100, 300, 13721, "456"),
        _x("Runtime", "cudaMemcpyAsync", 360, 20, 13721, "456", correlation=334),
        _x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 405, 10, 0, "stream 7", stream=7, correlation=334),
        _x("Runtime", "cudaMemsetAsync", 390, 10, 13721, "456", correlation=335),
        _x("Memset", "Memset (Device)", 420, 5, 0, "stream 7", stream=7, correlation=335),
        _x("Runtime", "cudaLaunchKernel", 405, 5, 13721, "456", correlation=336),
        _x("Kernel", "void gemmSN_TN_kernel_64addr<float>", 430, 15, 0, "stream 7", correlation=336, device=0),
        _x("Driver", "cuLaunchKernel", 412, 3, 13721, "456", correlation=337),
        _x("KERNEL", "triton_poi_fused_0", 450, 2, 0, "stream 7", correlation=337, device=0),
        _x("Python", "model.py(12): forward", 60, 300, 13721, "456"),
    ]


def _new_trace() -> list[dict[str, Any]]:
    """The same work in today's spellings."""
    cats = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
            "Kernel": "kernel", "Driver": "cuda_driver", "KERNEL": "kernel", "Python": "python_function"}  # fmt: skip
    events = []
    for ev in _old_trace():
        new = dict(ev, cat=cats[ev["cat"]])
        if new["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            new["tid"] = 7
        events.append(new)
    return events


def test_old_categories_keep_launches_and_copies(tmp_path: Path) -> None:
    tl = read_kineto(_write(tmp_path, _old_trace()))
    ops = tl.gpu_ops.sort_values("start_ns")
    assert ops["kind"].tolist() == ["memcpy", "memset", "kernel", "kernel"]
    assert ops["stream"].tolist() == [7, 7, 7, 7]  # "stream 7" thread names read as stream 7
    assert ops["pid"].tolist() == [13721] * 4  # joined to their launch calls
    assert tl.api_calls["name"].tolist() == ["cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernel", "cuLaunchKernel"]
    assert tl.api_calls["category"].tolist() == ["memcpy", "memcpy", "launch", "launch"]
    assert tl.api_calls["tid"].tolist() == [456] * 4
    assert tl.ranges["name"].tolist() == ["ProfilerStep#1"]  # an Operator named ProfilerStep#N is a step
    run = build_run(tl, AnalysisOptions())
    [w] = run.windows
    assert (w.kernels, w.memcpys, w.memsets) == (2, 1, 1)
    assert w.launches == {"cudaLaunchKernel": 1, "cuLaunchKernel": 1}
    assert w.ops_without_launch == 0


def test_old_and_new_spellings_read_the_same(tmp_path: Path) -> None:
    old = read_kineto(_write(tmp_path, _old_trace(), "old.json"))
    new = read_kineto(_write(tmp_path, _new_trace(), "new.json"))
    for frame in ("gpu_ops", "api_calls", "ranges"):
        assert getattr(old, frame).equals(getattr(new, frame)), frame


def test_gpu_annotations_syncs_and_operators_are_not_work(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "decode_step 0", 0, 100, 1, 2),
        _x("gpu_user_annotation", "decode_step 0", 10, 80, 0, 7),  # the GPU-timeline copy of the range
        _x("cuda_sync", "Stream Sync", 20, 30, 0, 7, stream=7),
        _x("cpu_op", "aten::add", 5, 10, 1, 2),
        _x("cuda_runtime", "cudaLaunchKernel", 6, 3, 1, 2, correlation=1),
        _x("kernel", "k", 10, 2, 0, 7, correlation=1, device=0, stream=7),
    ]
    tl = read_kineto(_write(tmp_path, events))
    assert len(tl.gpu_ops) == 1
    assert tl.ranges["name"].tolist() == ["decode_step 0"] and tl.ranges["pid"].tolist() == [1]


# --- ROCm / HIP ---------------------------------------------------------------------------------------------------

HIP_KERNEL = (
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<"
    "at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<"
    "c10::BFloat16> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<"
    "c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})"
)


def _rocm_trace() -> list[dict[str, Any]]:
    host = {"pid": 4242, "tid": 4243}
    events = [
        _x("cuda_runtime", "hipMemcpyWithStream", 0, 20, **host, correlation=1),
        _x("gpu_memcpy", "Memcpy HtoD", 5, 10, 0, 1, device=0, stream=1, correlation=1, bytes=4096),
        _x("cuda_runtime", "hipLaunchKernel", 30, 6, **host, correlation=2),
        _x("kernel", HIP_KERNEL, 40, 3, 0, 1, device=0, stream=1, correlation=2),
        _x("cuda_runtime", "hipExtModuleLaunchKernel", 40, 6, **host, correlation=3),
        _x("kernel", "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1_SN", 50, 8, 0, 1, device=0, stream=1,
           correlation=3),
        _x("cuda_runtime", "hipModuleLaunchKernel", 50, 6, **host, correlation=4),
        _x("kernel", "triton_red_fused_1", 60, 2, 0, 1, device=0, stream=1, correlation=4),
        _x("cuda_runtime", "hipGraphLaunch", 70, 10, **host, correlation=5),
        _x("kernel", "graph_node_a", 85, 2, 0, 1, device=0, stream=1, correlation=5),
        _x("kernel", "graph_node_b", 88, 2, 0, 1, device=0, stream=1, correlation=5),
        _x("cuda_runtime", "hipMemsetAsync", 95, 2, **host, correlation=6),
        _x("gpu_memset", "Memset", 98, 1, 0, 1, device=0, stream=1, correlation=6, bytes=64),
        _x("cuda_runtime", "hipStreamSynchronize", 100, 30, **host, correlation=7),
        _x("cuda_runtime", "hipDeviceSynchronize", 131, 3, **host, correlation=8),
    ]  # fmt: skip
    return events


def test_rocm_trace_launches_copies_and_syncs(tmp_path: Path) -> None:
    tl = read_kineto(_write(tmp_path, _rocm_trace()))
    categories = dict(zip(tl.api_calls["name"], tl.api_calls["category"]))
    assert categories == {
        "hipMemcpyWithStream": "memcpy",
        "hipLaunchKernel": "launch",
        "hipExtModuleLaunchKernel": "launch",
        "hipModuleLaunchKernel": "launch",
        "hipGraphLaunch": "graph_launch",
        "hipMemsetAsync": "memcpy",
        "hipStreamSynchronize": "sync",
        "hipDeviceSynchronize": "sync",
    }
    assert set(tl.gpu_ops["pid"]) == {4242}
    run = build_run(tl, AnalysisOptions())
    [w] = run.windows
    assert w.launches == {"hipLaunchKernel": 1, "hipExtModuleLaunchKernel": 1, "hipModuleLaunchKernel": 1,
                             "hipGraphLaunch": 1}  # fmt: skip
    assert w.launch_calls == 4 and w.kernels == 5
    assert w.kernels_per_launch == pytest.approx(5 / 4)
    assert w.ops_without_launch == 0


def test_load_trace_reads_a_gzipped_rocm_trace(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "rocm.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _rocm_trace()}).encode()))
    assert len(load_trace(path).gpu_ops) == 7


# --- the name tables ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,category",
    [
        ("cudaLaunchKernel", "launch"),
        ("cudaLaunchKernel_v7000", "launch"),
        ("cudaLaunchKernel_ptsz_v7000", "launch"),
        ("cudaLaunchKernelExC_v11060", "launch"),
        ("cuLaunchKernel", "launch"),
        ("cuLaunchKernelEx", "launch"),
        ("cuLaunchKernel_ptsz", "launch"),
        ("cudaLaunchCooperativeKernel", "launch"),
        ("hipLaunchKernel", "launch"),
        ("hipLaunchKernel_spt", "launch"),
        ("hipExtLaunchKernel", "launch"),
        ("hipExtModuleLaunchKernel", "launch"),
        ("hipHccModuleLaunchKernel", "launch"),
        ("hipModuleLaunchKernel", "launch"),
        ("hipLaunchCooperativeKernel", "launch"),
        ("hipDrvLaunchKernelEx", "launch"),
        ("cudaGraphLaunch", "graph_launch"),
        ("cudaGraphLaunch_v10000", "graph_launch"),
        ("cuGraphLaunch", "graph_launch"),
        ("hipGraphLaunch", "graph_launch"),
        ("cudaDeviceSynchronize_v3020", "sync"),
        ("cudaStreamSynchronize", "sync"),
        ("cudaEventSynchronize", "sync"),
        ("cuCtxSynchronize", "sync"),
        ("cudaEventQuery", "sync"),
        ("cuEventQuery", "sync"),
        ("hipDeviceSynchronize", "sync"),
        ("hipStreamSynchronize", "sync"),
        ("hipEventSynchronize", "sync"),
        ("hipEventQuery", "sync"),
        ("cudaMemcpyAsync_v3020", "memcpy"),
        ("cuMemcpyHtoDAsync_v2", "memcpy"),
        ("cudaMemsetAsync", "memcpy"),
        ("hipMemcpy", "memcpy"),
        ("hipMemcpyAsync", "memcpy"),
        ("hipMemcpyDtoH", "memcpy"),
        ("hipMemcpy_spt", "memcpy"),
        ("hipMemsetD32Async", "memcpy"),
        ("cudaLaunchHostFunc", "other"),
        ("hipLaunchHostFunc", "other"),
        ("cudaStreamWaitEvent_v3020", "other"),
        ("cudaGetDeviceProperties_v2_v12000", "other"),
        ("hipGetDevice", "other"),
        ("", "other"),
    ],
)
def test_api_category(name: str, category: str) -> None:
    assert api_category(name) == category
    assert timeline_api_category(name) == category
    assert is_launch(name) == (category == "launch")
    assert is_graph_launch(name) == (category == "graph_launch")
    assert is_any_launch(name) == (category in ("launch", "graph_launch"))
    assert is_sync(name) == (category == "sync")
    assert is_copy(name) == (category == "memcpy")


def test_base_and_canonical_names() -> None:
    assert base_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert base_api_name("cudaLaunchKernel_ptsz_v7000") == "cudaLaunchKernel_ptsz"  # as analyses show it
    assert base_api_name("hipLaunchKernel") == "hipLaunchKernel"
    assert canonical_api_name("cudaLaunchKernel_ptsz_v7000") == "cudaLaunchKernel"
    assert canonical_api_name("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties"
    assert canonical_api_name("hipMemcpy_spt") == "hipMemcpy"


def test_api_names_module_is_torch_free() -> None:
    import subprocess
    import sys

    code = "import sys, launchprobe.collect.api_names; print('torch' in sys.modules, 'pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
