"""A plain PyTorch decode-like loop (no launchprobe inside), for `launchprobe nsys` on a third-party script.

Each step: 12 small MLP blocks in eager PyTorch, a greedy "sample" that copies one token to the host (a sync, as
serving loops do), marked with one NVTX range per step via torch.cuda.nvtx.
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    blocks = [
        (torch.nn.Linear(args.hidden, 4 * args.hidden), torch.nn.Linear(4 * args.hidden, args.hidden))
        for _ in range(12)
    ]
    blocks = [(a.cuda().half(), b.cuda().half()) for a, b in blocks]
    head = torch.nn.Linear(args.hidden, 32000).cuda().half()
    x = torch.randn(args.batch, args.hidden, device="cuda", dtype=torch.half)
    with torch.no_grad():
        for step in range(args.steps):
            torch.cuda.nvtx.range_push(f"step {step}")
            h = x
            for up, down in blocks:
                h = h + down(torch.nn.functional.silu(up(torch.nn.functional.layer_norm(h, h.shape[-1:]))))
            token = head(h).argmax(dim=-1)
            token.cpu()  # the host waits for the step, as a sampler would
            torch.cuda.nvtx.range_pop()
    print(f"ran {args.steps} steps")


if __name__ == "__main__":
    main()
