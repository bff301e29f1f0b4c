"""Field workload F: a torch.profiler (Kineto) trace of a few training steps of a small transformer.

Forward + backward + AdamW step per iteration, torch.profiler with `schedule(wait=1, warmup=1, active=ACTIVE)` and
`prof.step()` per iteration, so the trace has `ProfilerStep#N` ranges; backward kernels are launched from the
autograd engine's device thread. Truth: `ProfilerStep#N` plus `record_function("truth_train_step <i>")` around
each iteration. The same loop runs first without the profiler (clean time). No launchprobe code. Prints
`SUMMARY workload=F ...`.

    python benchmarks/field/kineto_train.py --output train.json
    python benchmarks/field/kineto_train.py --device cpu --dry --output /tmp/f.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--active", type=int, default=6)
    parser.add_argument("--clean-steps", type=int, default=10)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry", action="store_true", help="CPU smoke test: tiny sizes")
    args = parser.parse_args()
    if args.dry:
        args.d_model, args.seq, args.active, args.clean_steps = 64, 16, 2, 2
    torch.manual_seed(0)
    cuda = args.device.startswith("cuda")
    layer = torch.nn.TransformerEncoderLayer(args.d_model, nhead=8, dim_feedforward=4 * args.d_model, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, args.layers), torch.nn.Linear(args.d_model, 1000))
    model = model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.seq, args.d_model, device=args.device)
    y = torch.randint(0, 1000, (args.batch, args.seq), device=args.device)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        train_step()
    sync()
    clean = []
    for _ in range(args.clean_steps):
        t0 = time.perf_counter()
        train_step()
        sync()
        clean.append(time.perf_counter() - t0)
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    total = 2 + args.active
    times = []
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=args.active)) as prof:
        for i in range(total):
            t0 = time.perf_counter()
            with record_function(f"truth_train_step {i}"):
                train_step()
            sync()
            times.append(time.perf_counter() - t0)
            prof.step()
    prof.export_chrome_trace(args.output)
    profiled = times[2:]
    print(
        f"SUMMARY workload=F steps={args.active} clean_step_ms={statistics.median(clean) * 1e3:.4f} "
        f"profiled_step_ms={statistics.median(profiled) * 1e3:.4f} d_model={args.d_model} layers={args.layers} "
        f"batch={args.batch} seq={args.seq}"
    )


if __name__ == "__main__":
    main()
