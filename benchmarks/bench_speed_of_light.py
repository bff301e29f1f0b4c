"""Full-graph decode at batch 1 against the HBM read ceiling, over the kernel choices that decide it.

For each shape: the projections (cuBLAS or launchprobe's Triton GEMV) and programmatic dependent launch (PDL)
of the Triton kernels on or off. Every variant is a full-graph step of the same model (same weights, same KV
cache) captured side by side; their samples are interleaved so drift hits all alike. Bytes per step come from the
cost model; the ceiling is classify's (``x.sum()`` over 4 rotating 2 GiB bf16 buffers, median of 20), measured
in the same process just before the model is allocated. Logits are checked: variants with the same kernels must
agree bit for bit (PDL changes when a kernel starts, never what it computes), cuBLAS against the GEMV within bf16
rounding.

``--hints`` adds variants of the GEMV's weight-load cache hint. The GEMV tiles themselves are swept by
``benchmarks/bench_kernels_sweep.py --only gemv``.

    python benchmarks/bench_speed_of_light.py [--shapes llama-3-8b,llama-3-70b] [--hints] [--samples 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launchprobe.kernels import KernelSettings, get_ops  # noqa: E402
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
    w_hint: str = "evict_first"  # cache hint of the GEMV's weight loads (KernelSettings.gemv_weight_hint)


def build_model(shape: Shape) -> DecodeModel:
    free, _ = torch.cuda.mem_get_info()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    plan = plan_memory(shape, 1, 1024, "bf16", free, l2, 3 << 30)
    return DecodeModel(shape, context=1024, dtype="bf16", device=DEV, max_bucket=1, plan=plan)


def run_shape(shape: Shape, variants: list[Variant], samples: int) -> None:
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
        # same weights and KV cache, the variant's own ops (kernel settings) and projections
        model.ops = get_ops(DEV, settings=KernelSettings(pdl=v.pdl, gemv_weight_hint=v.w_hint))
        model.project = model.ops.gemv if v.projections == "gemv" else model.ops.linear
        runner = prepare("full", 1, model.step(1), pool)
        warm_up(runner.run, 5, True)
        model.logits(1).fill_(float("nan"))
        runner.run()
        torch.cuda.synchronize()
        logits[v.label] = model.logits(1).clone()
        runners[v.label] = runner
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
        same = [o.label for o in variants if o.projections == v.projections and o.label != v.label]
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
    parser.add_argument("--hints", action="store_true", help="add GEMV weight-load cache-hint variants")
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size >> 20} MiB")
    print(f"torch {torch.__version__}, triton {triton.__version__}")
    print(f"PDL supported here: {get_ops(DEV).pdl_active(torch.device(DEV, 0))}")
    for name in args.shapes.split(","):
        shape = load_shape(name)
        variants = [
            Variant("cublas, no PDL", "cublas", False),
            Variant("cublas, PDL (Triton ops)", "cublas", True),
            Variant("gemv, no PDL", "gemv", False),
            Variant("gemv, PDL", "gemv", True),
        ]
        if args.hints:
            variants += [
                Variant("gemv, PDL, weights plain loads", "gemv", True, w_hint="none"),
                Variant("gemv, PDL, weights .cg", "gemv", True, w_hint="cg"),
            ]
        run_shape(shape, variants, args.samples)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
