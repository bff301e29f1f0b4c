"""Time `launchprobe analyze` against Holistic Trace Analysis (HTA) on the same Kineto traces, side by side.

Both tools run as fresh subprocesses, interleaved (launchprobe, HTA, launchprobe, HTA, ...), --repeats times per
file; the table shows medians. Each subprocess pays interpreter start-up and its own imports, as a user does:

- launchprobe: the CLI, `launchprobe analyze FILE --format json` (through `launchprobe.cli.main`, which is what
  `python -m launchprobe` runs), in this interpreter's environment.
- HTA: `TraceAnalysis(trace_dir=DIR)` (parse + preprocessing) plus `get_temporal_breakdown()` and
  `get_idle_time_breakdown()` for every rank it loaded, `visualize=False`, in HTA's own virtual environment
  (--hta-python). DIR is a temp folder holding a symlink to the trace, since HTA takes a folder.

Inputs: the Kineto traces given (default: every *.json.gz under /work/shared/traces/kineto) plus a synthetic
decode-loop trace of --synthetic-kernels kernels (default 46,080), written gzipped to a temp folder.
HTA is a peer used only here; it is not a launchprobe dependency. Set it up apart from the project:

    python3 -m venv /tmp/htaenv && /tmp/htaenv/bin/pip install HolisticTraceAnalysis==0.5.0
    python benchmarks/bench_vs_hta.py --hta-python /tmp/htaenv/bin/python
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = Path("/work/shared/traces/kineto")
MARK = "BENCH_RESULT "

# Runs inside each subprocess; prints MARK + JSON phase times on stderr.
LAUNCHPROBE_DRIVER = f"""
import json, sys, time
t0 = time.perf_counter()
from launchprobe.cli import main
import launchprobe.cli.analyze
t1 = time.perf_counter()
# What `analyze` imports lazily when it runs (pandas, numpy, msgspec, rich): imported here, before the command,
# and timed apart, so that "work" can be taken both with them (a user's run) and without them (as HTA's work is
# taken: HTA imports its libraries, pandas among them, at `from hta.trace_analysis import ...`).
import launchprobe.analysis.trace_run, launchprobe.collect.kineto, launchprobe.render
t2 = time.perf_counter()
try:
    main(["analyze", sys.argv[1], "--format", "json"])
except SystemExit as exc:
    if exc.code not in (0, None):
        raise
t3 = time.perf_counter()
print({MARK!r} + json.dumps({{"import_s": t1 - t0, "lib_import_s": t2 - t1, "work_s": t3 - t1,
    "work_no_imports_s": t3 - t2}}), file=sys.stderr)
"""

HTA_DRIVER = f"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
ranks = sorted(analyzer.t.traces)
temporal = analyzer.get_temporal_breakdown(visualize=False)
idle = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
t3 = time.perf_counter()
idle_df = idle[0] if isinstance(idle, tuple) else idle
print({MARK!r} + json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2,
    "work_s": t3 - t1, "ranks": ranks, "temporal_rows": len(temporal), "idle_rows": len(idle_df)}}), file=sys.stderr)
"""


@dataclass
class Result:
    wall: list[float] = field(default_factory=list)
    work: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)  # HTA only: TraceAnalysis(...)
    analysis: list[float] = field(default_factory=list)  # HTA only: the two breakdowns
    work_no_imports: list[float] = field(default_factory=list)  # launchprobe only: work less its lazy imports
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def run_driver(cmd: list[str], timeout: float, lp_root: Path) -> tuple[float, dict[str, Any], str]:
    """Run one subprocess; return (wall seconds, the driver's phase times, stdout)."""
    env = dict(os.environ, PYTHONPATH=str(lp_root), MPLBACKEND="Agg")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    marks = [line for line in proc.stderr.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not marks:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {tail}")
    return wall, json.loads(marks[-1][len(MARK) :]), proc.stdout


def count_kernels(path: Path) -> int:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")


# --- synthetic trace --------------------------------------------------------------------------------------------

KERNEL_NAMES = [
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_"
    "bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
    "MulFunctor<float> >, at::detail::Array<char*, 3>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4>)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(c10::BFloat16)#1}> >(at::TensorIteratorBase&, at::native::direct_copy_kernel_"
    "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast)",
    "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, true, false, "
    "false, false>(flash::Flash_fwd_params)",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl"
    "<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::"
    "{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
    "at::native::index_kernel_impl<at::native::OpaqueType<2> > const&)::{lambda(int)#1}>(long, "
    "at::native::gpu_index_kernel)",
]
# Per layer of a decode step: (aten op, kernel index, typical kernel µs).
LAYER = [
    ("aten::mean", 5, 3),
    ("aten::mul", 4, 2),
    ("aten::mm", 0, 14),
    ("aten::add", 3, 2),
    ("aten::index", 8, 3),
    ("aten::copy_", 6, 2),
    ("aten::_flash_attention_forward", 7, 9),
    ("aten::mm", 0, 8),
    ("aten::add", 3, 2),
    ("aten::mean", 5, 3),
    ("aten::mul", 4, 2),
    ("aten::mm", 1, 22),
    ("aten::mul", 4, 2),
    ("aten::mm", 0, 18),
    ("aten::_softmax", 2, 4),
]

# Recorded input shapes (record_shapes=True), as recent PyTorch writes them.
SHAPES = {
    "Input Dims": [[8, 1, 4096], [4096, 4096], []],
    "Input type": ["c10::BFloat16", "c10::BFloat16", ""],
    "Input Strides": [[4096, 4096, 1], [1, 4096], []],
    "Concrete Inputs": ["", "", ""],
}
HOST_OPS = [
    (
        "aten::empty",
        {
            "Input Dims": [[], [], [], [], [], []],
            "Input type": ["GenericList", "Int", "Int", "Device", "Bool", ""],
            "Concrete Inputs": ["[8, 1, 4096]", "15", "0", "cuda:0", "False", ""],
        },
    ),
    (
        "aten::view",
        {
            "Input Dims": [[8, 1, 4096], []],
            "Input type": ["c10::BFloat16", "GenericList"],
            "Input Strides": [[4096, 4096, 1], []],
            "Concrete Inputs": ["", "[8, 4096]"],
        },
    ),
    (
        "aten::as_strided",
        {
            "Input Dims": [[4096, 4096], [], [], []],
            "Input type": ["c10::BFloat16", "GenericList", "GenericList", ""],
            "Concrete Inputs": ["", "[4096, 4096]", "[1, 4096]", ""],
        },
    ),
    (
        "aten::resize_",
        {
            "Input Dims": [[0], [], []],
            "Input type": ["c10::BFloat16", "GenericList", ""],
            "Concrete Inputs": ["", "[8, 4096]", ""],
        },
    ),
]


def synthetic_trace(path: Path, kernels: int, host_ops: int = 4, layers: int = 32, seed: int = 6) -> int:
    """Write a gzipped Kineto trace of a decode loop of short kernels: per step one ProfilerStep#N annotation, then
    for each kernel an aten cpu_op enclosing host_ops small cpu_ops and a cudaLaunchKernel (correlation id, ac2g
    flow), and the kernel on stream 7; a DtoH copy plus cudaStreamSynchronize ends each step. Timestamps are µs
    floats, as recent PyTorch writes them. 46,080 kernels with host_ops=4 make about 7 MB gzipped."""
    rng = random.Random(seed)
    pid, tid, stream = 2817, 2817, 7
    per_step = layers * len(LAYER)
    steps = max(1, round(kernels / per_step))
    events: list[dict[str, Any]] = []
    cpu = 1_732_900_000_000_000.0  # µs
    gpu_free = cpu
    corr, ext, n_kernels = 1000, 1, 0

    def x(cat: str, name: str, p: Any, t: Any, ts: float, dur: float, args: dict[str, Any]) -> None:
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": p,
                "tid": t,
                "ts": round(ts, 3),
                "dur": round(dur, 3),
                "args": args,
            }
        )

    for step in range(steps):
        step_start, step_events = cpu, len(events)
        events.append({})  # ProfilerStep placeholder, filled once its duration is known
        ext += 1
        step_ext = ext
        cpu += rng.uniform(8, 15)
        for _layer in range(layers):
            for op, k, us in LAYER:
                op_start = cpu
                cpu += rng.uniform(3, 8)  # Python + dispatcher before the launch
                launch_dur = rng.uniform(3.5, 7.0)
                corr += 1
                ext += 1
                op_ext = ext  # shared by the op, its launch and its kernel
                kdur = us * rng.uniform(0.85, 1.3)
                kstart = max(gpu_free, cpu + launch_dur * 0.6 + rng.uniform(1.5, 3.0))
                gpu_free = kstart + kdur
                op_end = cpu + launch_dur + rng.uniform(1, 3)
                x(
                    "cpu_op",
                    op,
                    pid,
                    tid,
                    op_start,
                    op_end - op_start,
                    {"External id": op_ext, "Record function id": 0, "Ev Idx": len(events), **SHAPES},
                )
                # Small ops inside the op before its launch (allocation, views), each under 1 µs.
                for j in range(host_ops):
                    ext += 1
                    name, shapes = HOST_OPS[j % len(HOST_OPS)]
                    x(
                        "cpu_op",
                        name,
                        pid,
                        tid,
                        op_start + 0.2 + j * (cpu - op_start - 0.2) / host_ops,
                        rng.uniform(0.3, 0.9) * (cpu - op_start - 0.2) / host_ops,
                        {"External id": ext, "Record function id": 0, "Ev Idx": len(events), **shapes},
                    )
                x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    pid,
                    tid,
                    cpu,
                    launch_dur,
                    {"External id": op_ext, "cbid": 211, "correlation": corr},
                )
                events.append(
                    {"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": round(cpu, 3), "cat": "ac2g", "name": "ac2g"}
                )
                x(
                    "kernel",
                    KERNEL_NAMES[k],
                    0,
                    stream,
                    kstart,
                    kdur,
                    {
                        "External id": op_ext,
                        "queued": 0,
                        "device": 0,
                        "context": 1,
                        "stream": stream,
                        "correlation": corr,
                        "registers per thread": 128,
                        "shared memory": 16384,
                        "blocks per SM": 1.0,
                        "warps per SM": 4.0,
                        "grid": [132, 1, 1],
                        "block": [128, 1, 1],
                        "est. achieved occupancy %": 6,
                    },
                )
                events.append(
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": 0,
                        "tid": stream,
                        "ts": round(kstart, 3),
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
                n_kernels += 1
                cpu = op_end
        # Sample the next token: DtoH copy, then wait for the GPU.
        corr += 1
        ext += 1
        x("cuda_runtime", "cudaMemcpyAsync", pid, tid, cpu, 6.0, {"External id": ext, "cbid": 41, "correlation": corr})
        cstart = max(gpu_free, cpu + 4)
        gpu_free = cstart + 2.5
        x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pinned)",
            0,
            stream,
            cstart,
            2.5,
            {
                "External id": ext,
                "device": 0,
                "context": 1,
                "stream": stream,
                "correlation": corr,
                "bytes": 8,
                "memory bandwidth (GB/s)": 0.0032,
            },
        )
        sync_start = cpu + 6.5
        cpu = max(sync_start + 2, gpu_free + 3)
        x(
            "cuda_runtime",
            "cudaStreamSynchronize",
            pid,
            tid,
            sync_start,
            cpu - sync_start,
            {"External id": ext + 1, "cbid": 131, "correlation": corr + 1},
        )
        corr += 1
        ext += 1
        cpu += rng.uniform(20, 60)  # host-side sampling and bookkeeping
        events[step_events] = {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{step}",
            "pid": pid,
            "tid": tid,
            "ts": round(step_start, 3),
            "dur": round(cpu - step_start, 3),
            "args": {"External id": step_ext, "Record function id": 0},
        }
    meta = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 0, "tid": stream, "args": {"name": f"stream {stream}"}},
    ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85029158912,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": meta + events,
        "traceName": path.name,
    }
    with gzip.open(path, "wt", compresslevel=6) as f:
        json.dump(doc, f)
    return n_kernels


# --- benchmark --------------------------------------------------------------------------------------------------


def versions(hta_python: str) -> str:
    code = "import sys, pandas, numpy, importlib.metadata as m; print(sys.version.split()[0], pandas.__version__, "
    code += "numpy.__version__, m.version('HolisticTraceAnalysis'))"
    out = subprocess.run([hta_python, "-c", code], capture_output=True, text=True).stdout.split()
    import numpy
    import pandas

    mine = f"launchprobe env: python {platform.python_version()}, pandas {pandas.__version__}, "
    mine += f"numpy {numpy.__version__}"
    hta = f"HTA env: python {out[0]}, pandas {out[1]}, numpy {out[2]}, HTA {out[3]}" if len(out) == 4 else "HTA: ?"
    return f"{mine}; {hta}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_file(path: Path, hta_python: str, repeats: int, timeout: float, lp_root: Path) -> tuple[Result, Result]:
    lp, hta = Result(), Result()
    with tempfile.TemporaryDirectory(prefix="hta_") as trace_dir:
        os.symlink(path.resolve(), Path(trace_dir) / path.name)  # HTA reads a folder of rank files
        lp_cmd = [sys.executable, "-c", LAUNCHPROBE_DRIVER, str(path)]
        hta_cmd = [hta_python, "-c", HTA_DRIVER, trace_dir]
        for _ in range(repeats):
            for res, cmd in ((lp, lp_cmd), (hta, hta_cmd)):
                if res.error:
                    continue
                try:
                    wall, info, stdout = run_driver(cmd, timeout, lp_root)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    res.error = str(exc)
                    continue
                res.wall.append(wall)
                res.work.append(info["work_s"])
                if "work_no_imports_s" in info:
                    res.work_no_imports.append(info["work_no_imports_s"])
                if "load_s" in info:
                    res.load.append(info["load_s"])
                    res.analysis.append(info["analysis_s"])
                res.info = info
                if res is lp:
                    windows = json.loads(stdout)["windows"]
                    res.info["kernels"] = sum(w.get("kernels", 0) for w in windows if w.get("instance") is None)
    return lp, hta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", type=Path, nargs="*", help="Kineto traces (default: *.json.gz in %(default)s)")
    parser.add_argument("--hta-python", default="/tmp/htaenv/bin/python", help="python of HTA's venv")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--synthetic-kernels", type=int, default=46_080, help="0: no synthetic trace")
    parser.add_argument("--timeout", type=float, default=600, help="per subprocess, seconds")
    parser.add_argument(
        "--launchprobe-root",
        type=Path,
        default=ROOT,
        help="folder holding the launchprobe package to time, e.g. a `git archive HEAD` export (default: here)",
    )
    args = parser.parse_args()
    traces = args.traces or sorted(DEFAULT_TRACES.glob("*.json.gz"))
    lp_root = args.launchprobe_root.resolve()

    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {cpu_model()}, {os.cpu_count()} CPUs")
    print(f"# {versions(args.hta_python)}")
    print(f"# launchprobe from {lp_root}")
    print(f"# medians of {args.repeats} interleaved runs; 'work' excludes interpreter start-up and each tool's entry")
    print("# imports (HTA's include pandas); 'work, libraries up front' also excludes the libraries launchprobe")
    print("# imports lazily (pandas, numpy, msgspec, rich), which puts both tools on the same footing")
    with tempfile.TemporaryDirectory(prefix="bench_vs_hta_") as tmp:
        if args.synthetic_kernels:
            synth = Path(tmp) / "synthetic_decode.json.gz"
            t0 = time.perf_counter()
            n = synthetic_trace(synth, args.synthetic_kernels)
            print(
                f"# synthetic: {n:,} kernels, {synth.stat().st_size / 1e6:.1f} MB gz, "
                f"written in {time.perf_counter() - t0:.1f} s"
            )
            traces = [*traces, synth]
        # Untimed warm-up of both tools (page cache, .pyc files) on the smallest input.
        bench_file(min(traces, key=lambda p: p.stat().st_size), args.hta_python, 1, args.timeout, lp_root)
        print()
        print(
            "| file | MB gz | kernels | launchprobe s | HTA s | speed-up | launchprobe work s | HTA work s "
            "(load + analysis) | work speed-up | launchprobe work, libraries up front s | speed-up |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        failures = []
        for path in traces:
            kernels = count_kernels(path)
            lp, hta = bench_file(path, args.hta_python, args.repeats, args.timeout, lp_root)
            if lp.error:
                failures.append(f"{path.name}: launchprobe failed: {lp.error}")
            if hta.error:
                failures.append(f"{path.name}: HTA failed: {hta.error}")
            lp_s = statistics.median(lp.wall) if lp.wall else None
            hta_s = statistics.median(hta.wall) if hta.wall else None
            lp_w = statistics.median(lp.work) if lp.work else None
            hta_w = statistics.median(hta.work) if hta.work else None

            def fmt(v: float | None, spec: str = ".2f") -> str:
                return "failed" if v is None else format(v, spec)

            speed = f"{hta_s / lp_s:.1f}x" if lp_s and hta_s else "n/a"
            wspeed = f"{hta_w / lp_w:.1f}x" if lp_w and hta_w else "n/a"
            lp_x = statistics.median(lp.work_no_imports) if lp.work_no_imports else None
            xspeed = f"{hta_w / lp_x:.1f}x" if lp_x and hta_w else "n/a"
            split = f" ({statistics.median(hta.load):.2f} + {statistics.median(hta.analysis):.2f})" if hta_w else ""
            if lp.info.get("kernels") not in (None, kernels):
                failures.append(f"{path.name}: launchprobe counts {lp.info['kernels']:,} kernels, trace {kernels:,}")
            print(
                f"| {path.name} | {path.stat().st_size / 1e6:.1f} | {kernels:,} | {fmt(lp_s)} | {fmt(hta_s)} | "
                f"{speed} | {fmt(lp_w)} | {fmt(hta_w)}{split} | {wspeed} | {fmt(lp_x)} | {xspeed} |",
                flush=True,
            )
        for line in failures:
            print(f"- {line}")


if __name__ == "__main__":
    main()
