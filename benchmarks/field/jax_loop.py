"""Field workload D: a jitted JAX step (a small attention-ish + MLP block stack) in a Python loop.

Each step: one call of the jitted function and `block_until_ready`. Truth: an NVTX range `truth_step <i>` in domain
`truth` (nvtx package) around each step. Set XLA_PYTHON_CLIENT_PREALLOCATE=false. No launchprobe code. Prints
`SUMMARY workload=D ...`.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/field/jax_loop.py --steps 40
    python benchmarks/field/jax_loop.py --dry           # CPU smoke test (whatever backend jax has)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def truth_domain() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    try:
        import nvtx
    except ImportError:
        return (lambda name: None), (lambda: None)
    domain = nvtx.get_domain("truth")

    def push(name: str) -> Any:
        return domain.push_range(domain.get_event_attributes(message=name))

    return push, domain.pop_range


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--device", default="gpu", help="gpu or cpu (JAX_PLATFORMS)")
    parser.add_argument("--dry", action="store_true", help="tiny sizes, few steps")
    parser.add_argument("--label", default="run", help="clean / nsys: only printed")
    args = parser.parse_args()
    if args.dry:
        args.hidden, args.seq, args.steps, args.warmup = 64, 16, 4, 1
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    keys = jax.random.split(key, 4 * args.layers + 1)
    dt = jnp.bfloat16
    h = args.hidden
    params = [
        tuple((jax.random.normal(keys[4 * i + j], shape) * 0.02).astype(dt) for j, shape in enumerate(
            [(h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)]))
        for i in range(args.layers)
    ]  # fmt: skip
    x = jax.random.normal(keys[-1], (args.batch, args.seq, h)).astype(dt)

    def norm(v: Any) -> Any:
        vf = v.astype(jnp.float32)
        return (vf * jax.lax.rsqrt(jnp.mean(vf * vf, axis=-1, keepdims=True) + 1e-6)).astype(dt)

    @jax.jit
    def step(params: Any, x: Any) -> Any:
        for qkv, o, up, down in params:
            q, k, v = jnp.split(norm(x) @ qkv, 3, axis=-1)
            att = jax.nn.softmax((q @ jnp.swapaxes(k, -1, -2)).astype(jnp.float32) / jnp.sqrt(h), axis=-1).astype(dt)
            x = x + (att @ v) @ o
            x = x + jax.nn.silu(norm(x) @ up) @ down
        return x

    push, pop = truth_domain()
    for _ in range(args.warmup):
        step(params, x).block_until_ready()
    clean = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step(params, x).block_until_ready()
        clean.append(time.perf_counter() - t0)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        push(f"truth_step {i}")
        step(params, x).block_until_ready()
        pop()
        times.append(time.perf_counter() - t0)
    print(
        f"SUMMARY workload=D label={args.label} steps={args.steps} backend={jax.default_backend()} "
        f"step_ms_unmarked={statistics.median(clean) * 1e3:.4f} step_ms={statistics.median(times) * 1e3:.4f} "
        f"jax={jax.__version__}"
    )


if __name__ == "__main__":
    main()
