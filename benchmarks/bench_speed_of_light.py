"""Full-graph decode at batch 1 against the HBM read ceiling, over the kernel choices that decide it.

For each shape: the projections (cuBLAS or launchprobe's Triton GEMV) and programmatic dependent launch (PDL)
of the Triton kernels on or off. Every variant is a full-graph step of the same model (same weights, same KV
cache) captured side by side; their samples are interleaved so drift hits all alike. Bytes per step come from the
cost model; the ceiling is classify's (``x.sum()`` over 4 rotating 2 GiB bf16 buffers, median of 20), measured
in the same process just before the model is allocated. Logits are checked: variants with the same kernels must
agree bit for bit (PDL changes when a kernel starts, never what it computes), cuBLAS against the GEMV within bf16
rounding.

With ``--sweep``, first times GEMV configurations of each projection shape at batch 1 (a graph of calls over
rotating weights, PDL as set) and adds a variant that uses the fastest configuration per shape.

    python benchmarks/bench_speed_of_light.py [--shapes llama-3-8b,llama-3-70b] [--sweep] [--samples 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graph_timing import time_graph  # noqa: E402  (benchmarks/, on the path as the script's folder)

from launchprobe.kernels import GemvConfig, cdiv, gemv_config  # noqa: E402
from launchprobe.kernels import triton_ops as T  # noqa: E402
from launchprobe.measure.ceilings import measure_hbm_read  # noqa: E402
from launchprobe.measure.timing import time_block_cuda, warm_up  # noqa: E402
from launchprobe.workload import costmodel  # noqa: E402
from launchprobe.workload.model import DecodeModel, plan_memory  # noqa: E402
from launchprobe.workload.modes import prepare  # noqa: E402
from launchprobe.workload.shape import Shape, load_shape  # noqa: E402

DEV = "cuda"


@dataclass(frozen=True)
class Variant:
    label: str
    projections: str  # cublas | gemv
    pdl: bool
    tuned: bool = False  # GEMV configs from the sweep
    w_hint: int = 2  # cache hint of the GEMV's weight loads (triton_ops._load_w; 2, evict_first, is the default)


def projection_shapes(shape: Shape) -> dict[str, tuple[int, int]]:
    h = shape.hidden
    return {
        "qkv": (shape.qkv_dim, h),
        "o_proj": (h, shape.q_dim),
        "gate_up": (2 * shape.ffn, h),
        "down": (h, shape.ffn),
        "lm_head": (shape.vocab, h),
    }


def time_gemv(n: int, k: int, cfg: GemvConfig | None, copies: int, ws: list[torch.Tensor]) -> float:
    """Microseconds per call of a graph of calls over rotating weight copies (cuBLAS when cfg is None)."""
    x = torch.randn(1, k, dtype=torch.bfloat16, device=DEV)
    out = torch.empty(1, n, dtype=torch.bfloat16, device=DEV)
    plan = None if cfg is None else T.gemv_plan(n, k, 1, DEV, config=cfg)
    calls = 4 * copies

    def call(i: int) -> None:
        if plan is None:
            torch.mm(x, ws[i % copies].t(), out=out)
        else:
            T.gemv(x, ws[i % copies], out, plan)

    for i in range(copies):
        call(i)
    ref = x.float() @ ws[0].float().T
    call(0)
    err = float((out.float() - ref).norm() / ref.norm())
    if not err < 1e-2:
        raise RuntimeError(f"config {cfg} is wrong: relative error {err:.2e}")
    return time_graph(call, calls, warm=0, reps=5) * 1e6


def sweep_gemv(shape: Shape, sms: int, l2: int) -> dict[tuple[int, int], GemvConfig]:
    best: dict[tuple[int, int], GemvConfig] = {}
    print(f"\nGEMV sweep, {shape.name}, batch 1, PDL {'on' if T.PDL_SETTINGS.enabled else 'off'} (us per call)")
    for name, (n, k) in projection_shapes(shape).items():
        copies = max(2, cdiv(4 * l2, 2 * n * k))
        ws = [torch.empty(n, k, dtype=torch.bfloat16, device=DEV).normal_(0, 0.02) for _ in range(copies)]
        cands: list[tuple[str, GemvConfig | None]] = [("cublas", None)]
        for bn in (16, 32, 64):
            cands.append((f"one-pass bn{bn}", gemv_config(n, k, 1, sms, block_n=bn, use_dot=True)))
        for bn in (16, 32):
            for splits in (2, 4):
                split = gemv_config(n, k, 1, sms, block_n=bn, splits=splits, use_dot=True)
                cands.append((f"split-K bn{bn} x{splits}", split))
        for bn in (8, 16, 32):
            for bk in (256, 512, 1024, 2048):
                for warps in (4, 8):
                    if not 16 <= bn * bk // (32 * warps) <= 64:
                        continue  # fp32 products per thread: too few loads in flight, or spills
                    for splits in (1, 2, 4):
                        if k // splits < 2 * bk:
                            continue
                        fma = gemv_config(
                            n, k, 1, sms, block_n=bn, block_k=bk, splits=splits, num_warps=warps, use_dot=False
                        )
                        cands.append((f"fma bn{bn} bk{bk} w{warps} x{splits}", fma))
        results = []
        for label, cfg in cands:
            try:
                results.append((time_gemv(n, k, cfg, copies, ws), label, cfg))
            except Exception as exc:  # one bad candidate must not end the run
                print(f"  {name:<8} {label:<20} ERROR {type(exc).__name__}: {str(exc)[:100]}")
        results.sort(key=lambda r: r[0])
        mb = 2 * n * k / 1e6
        line = ", ".join(f"{label} {us:.2f}" for us, label, _ in results[:6])
        cublas = next((us for us, label, _ in results if label == "cublas"), float("nan"))
        print(f"  {name:<8} {mb:7.1f} MB  cublas {cublas:.2f} us ({mb / cublas:.2f} TB/s); fastest: {line}")
        triton_best = next(((us, cfg) for us, _, cfg in results if cfg is not None), None)
        if triton_best is not None:
            best[(n, k)] = triton_best[1]
        ws.clear()
        torch.cuda.empty_cache()
    return best


def build_model(shape: Shape) -> DecodeModel:
    free, _ = torch.cuda.mem_get_info()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    plan = plan_memory(shape, 1, 1024, "bf16", free, l2, 3 << 30)
    return DecodeModel(shape, context=1024, dtype="bf16", device=DEV, max_bucket=1, plan=plan)


def run_shape(shape: Shape, variants: list[Variant], tuned: dict[tuple[int, int], GemvConfig], samples: int) -> None:
    hbm = measure_hbm_read(DEV, buffer_bytes=2 << 30, buffers=4, repeats=20)  # before the model takes the memory
    torch.cuda.empty_cache()
    t0 = time.monotonic()
    model = build_model(shape)
    layers = model.plan.distinct_layers
    print(f"\n{shape.name}: model built in {time.monotonic() - t0:.1f} s ({layers} distinct layers)")
    bytes_step = costmodel.step_cost(shape, 1, 1024, "bf16").bytes
    pool = torch.cuda.graph_pool_handle()
    runners = {}
    logits = {}
    for v in variants:
        T.PDL_SETTINGS.enabled = v.pdl
        T.GEMV_W_HINT = v.w_hint
        T._GEMV_PLANS.clear()
        if v.tuned:
            for (n, k), cfg in tuned.items():
                T._GEMV_PLANS[(n, k, 1, torch.device(DEV, torch.cuda.current_device()))] = T.gemv_plan(
                    n, k, 1, DEV, config=cfg
                )
        model.project = model.ops.gemv if v.projections == "gemv" else model.ops.linear
        runner = prepare("full", 1, model.step(1), pool)
        warm_up(runner.run, 5, True)
        model.logits(1).fill_(float("nan"))
        runner.run()
        torch.cuda.synchronize()
        logits[v.label] = model.logits(1).clone()
        runners[v.label] = runner
    vars(T.PDL_SETTINGS).update(vars(T.PdlSettings()))  # back to the defaults
    T.GEMV_W_HINT = 2
    per: dict[str, list[float]] = {v.label: [] for v in variants}
    for _ in range(samples):
        for v in variants:
            per[v.label].append(time_block_cuda(runners[v.label].run, 30) / 30)
    ceiling = hbm
    print(f"HBM read ceiling {ceiling / 1e12:.3f} TB/s (measured before the model); {bytes_step / 1e9:.2f} GB per step")
    print(f"  {'variant':<44} {'step ms':>8} {'IQR':>6} {'of HBM':>7}  logits")
    base = variants[0].label
    for v in variants:
        ms = statistics.median(per[v.label])
        q = statistics.quantiles(per[v.label], n=4)
        kind = (v.projections, v.tuned)
        same = [o.label for o in variants if (o.projections, o.tuned) == kind and o.label != v.label]
        bitwise = all(torch.equal(logits[v.label], logits[o]) for o in same)
        err = float((logits[v.label].float() - logits[base].float()).norm() / logits[base].float().norm())
        check = ("bitwise = same-kernel variants" if bitwise else "DIFFERS from same-kernel variants") + (
            f", rel {err:.1e} vs {base}"
        )
        if not torch.isfinite(logits[v.label].float()).all():
            check = "NON-FINITE"
        frac = bytes_step / (ms * 1e-3) / ceiling
        print(f"  {v.label:<44} {ms:8.3f} {(q[2] - q[0]) / ms:6.1%} {frac:7.1%}  {check}")
    runners.clear()
    del model
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="llama-3-8b,llama-3-70b")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--hints", action="store_true", help="add GEMV weight-load cache-hint variants")
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size >> 20} MiB")
    print(f"torch {torch.__version__}, triton {T.triton.__version__}")
    print(f"PDL supported here: {T.pdl_active(torch.device(DEV, 0))}")
    for name in args.shapes.split(","):
        shape = load_shape(name)
        tuned: dict[tuple[int, int], GemvConfig] = {}
        if args.sweep:
            T.PDL_SETTINGS.enabled = True
            tuned = sweep_gemv(shape, props.multi_processor_count, props.L2_cache_size)
        variants = [
            Variant("cublas, no PDL", "cublas", False),
            Variant("cublas, PDL (Triton ops)", "cublas", True),
            Variant("gemv, no PDL", "gemv", False),
            Variant("gemv, PDL", "gemv", True),
        ]
        if args.hints:
            variants += [
                Variant("gemv, PDL, weights plain loads", "gemv", True, w_hint=0),
                Variant("gemv, PDL, weights .cg", "gemv", True, w_hint=1),
            ]
        if tuned:
            variants += [
                Variant("gemv swept, no PDL", "gemv", False, tuned=True),
                Variant("gemv swept, PDL", "gemv", True, tuned=True),
            ]
        run_shape(shape, variants, tuned, args.samples)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
