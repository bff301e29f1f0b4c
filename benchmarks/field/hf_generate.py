"""Field workload C: Hugging Face transformers `generate()` on a small random-weight Llama (no download).

`LlamaForCausalLM(LlamaConfig(4 layers, hidden 512, 8 heads, 2 KV heads, vocab 32000))`, bf16, a batch of 2
prompts, `generate(max_new_tokens=32, do_sample=False)`: one prefill forward and 31 decode forwards. Truth: forward
pre/post hooks on the top-level model push/pop `truth_forward <i>` (NVTX domain `truth`, or with `--kineto` a
`record_function("truth_forward <i>")`), one per forward. No launchprobe code. Prints `SUMMARY workload=C ...`.

    python benchmarks/field/hf_generate.py                              # eager; run it under nsys
    python benchmarks/field/hf_generate.py --kineto OUT.json            # eager, clean + torch.profiler trace
    python benchmarks/field/hf_generate.py --compiled                   # static cache + torch.compile (graphs)
    python benchmarks/field/hf_generate.py --device cpu --dry            # CPU smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch


class TruthHooks:
    """Pushes a range before and pops it after every top-level forward; counts forwards."""

    def __init__(self, kineto: bool) -> None:
        self.index = 0
        self.enabled = True
        self.kineto = kineto
        self._open: list[Any] = []
        self._domain: Any = None
        if not kineto:
            try:
                import nvtx

                self._domain = nvtx.get_domain("truth")
            except ImportError:
                self._domain = None

    def pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled:
            return
        name = f"truth_forward {self.index}"
        self.index += 1
        if self.kineto:
            profiler: Any = torch.autograd.profiler  # record_function is a decorated class: untyped
            rf = profiler.record_function(name)
            rf.__enter__()
            self._open.append(rf)
        elif self._domain is not None:
            self._domain.push_range(self._domain.get_event_attributes(message=name))

    def post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not self.enabled:
            return
        if self.kineto:
            self._open.pop().__exit__(None, None, None)
        elif self._domain is not None:
            self._domain.pop_range()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed generate() calls before the recorded one")
    parser.add_argument("--compiled", action="store_true", help="static cache + torch.compile")
    parser.add_argument(
        "--compile-mode", default="reduce-overhead", help="torch.compile mode: reduce-overhead (CUDA graphs) or default"
    )
    parser.add_argument("--kineto", metavar="JSON", help="also record one generate() with torch.profiler here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry", action="store_true", help="CPU smoke test: float32 on the CPU, tiny")
    parser.add_argument("--label", default="run", help="clean / nsys: only printed")
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    dtype = torch.float32 if args.dry else torch.bfloat16
    model: Any = LlamaForCausalLM(config)  # transformers wraps .to(): keep mypy out of it
    model = model.to(device=args.device, dtype=dtype).eval()
    model.generation_config.pad_token_id = 0
    if args.compiled:
        model.generation_config.cache_implementation = "static"
        compiled: Any = torch.compile(model.forward, mode=args.compile_mode)

        def forward(*a: Any, **k: Any) -> Any:
            if args.compile_mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()  # the static cache is updated in place between calls
            return compiled(*a, **k)

        model.forward = forward
    prompts = torch.randint(1, config.vocab_size, (2, args.prompt_len), device=args.device)
    mask = torch.ones_like(prompts)
    cuda = args.device.startswith("cuda")

    def generate() -> tuple[float, int]:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=prompts, attention_mask=mask, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                do_sample=False,
            )  # fmt: skip
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, int(out.shape[1] - prompts.shape[1])

    t_compile = time.perf_counter()
    generate()  # warm-up (and compile)
    warm_s = time.perf_counter() - t_compile
    clean = [generate()[0] for _ in range(args.repeats)]
    hooks = TruthHooks(kineto=bool(args.kineto))
    model.register_forward_pre_hook(hooks.pre, with_kwargs=True)
    model.register_forward_hook(hooks.post, with_kwargs=True)
    if args.kineto:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            recorded, new = generate()
        prof.export_chrome_trace(args.kineto)
    else:
        recorded, new = generate()
    per_token = args.new_tokens
    print(
        f"SUMMARY workload=C label={args.label} compiled={args.compiled and args.compile_mode} "
        f"kineto={bool(args.kineto)} "
        f"forwards={hooks.index} new_tokens={new} warmup_s={warm_s:.2f} "
        f"clean_generate_ms={statistics.median(clean) * 1e3:.3f} "
        f"clean_step_ms={statistics.median(clean) * 1e3 / per_token:.4f} "
        f"recorded_generate_ms={recorded * 1e3:.3f} recorded_step_ms={recorded * 1e3 / per_token:.4f}"
    )


if __name__ == "__main__":
    main()
