"""The synthetic decode step: weights, KV cache, static buffers and the ordered list of ops of one step.

Every op writes into preallocated buffers with fixed addresses, so the same list runs eagerly, is captured whole
as one CUDA graph (full mode) or in pieces between attentions (piecewise mode). On CUDA each op is one kernel
(attention may add a split-K reduce kernel); on CPU the same ops run as plain torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from launchprobe.errors import UsageError
from launchprobe.workload import costmodel
from launchprobe.workload.shape import Shape

if TYPE_CHECKING:
    from launchprobe.kernels import KernelSettings

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# Ops that vLLM's piecewise mode leaves outside the graphs: the attention op, which in vLLM v1 also writes the
# new key and value into the KV cache.
EAGER_IN_PIECEWISE = frozenset({"kv_write", "attention"})

PROJECTIONS = ("cublas", "gemv")  # torch.mm (cuBLAS, as vLLM), or launchprobe's Triton GEMV up to batch 16

WEIGHT_STD = 0.02  # random weights, never zeros: zeros can run faster than real data


@dataclass(frozen=True)
class Op:
    name: str  # a cost-model op name (costmodel.LAYER_OPS, STEP_HEAD_OPS, STEP_TAIL_OPS)
    layer: int  # -1 for per-step ops
    run: Callable[[], Any]

    @property
    def label(self) -> str:
        return self.name if self.layer < 0 else f"layer{self.layer}.{self.name}"


@dataclass
class LayerWeights:
    qkv: torch.Tensor  # [qkv_dim, hidden], nn.Linear layout: y = x @ w.T
    o_proj: torch.Tensor  # [hidden, q_dim]
    gate_up: torch.Tensor  # [2 * ffn, hidden]
    down: torch.Tensor  # [hidden, ffn]
    attn_norm: torch.Tensor  # [hidden]
    mlp_norm: torch.Tensor  # [hidden]


@dataclass(frozen=True)
class MemoryPlan:
    distinct_layers: int  # layer weights allocated; layers cycle through them when < shape.layers
    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int

    def cycled(self, shape: Shape) -> bool:
        return self.distinct_layers < shape.layers


def activation_bytes(shape: Shape, batch: int, dtype: str) -> int:
    """Static activation buffers for the largest bucket (see DecodeBuffers)."""
    per_row = 3 * shape.hidden + shape.qkv_dim + shape.q_dim + 3 * shape.ffn + shape.vocab
    return costmodel.DTYPE_BYTES[dtype] * batch * per_row + 16 * batch


def plan_memory(
    shape: Shape, max_bucket: int, context: int, dtype: str, free_bytes: int, l2_bytes: int, headroom: int
) -> MemoryPlan:
    """Decide how many distinct layer weights to allocate, or fail naming what to change.

    Weights are cycled across layers only when they do not fit and one layer's weights are at least 4x the L2
    cache, so that re-reading a cycled layer still comes from HBM and the traffic per step is that of the model.
    """
    kv = costmodel.kv_cache_bytes(shape, max_bucket, context, dtype)
    act = activation_bytes(shape, max_bucket, dtype)
    step_weights = costmodel.step_weight_bytes(shape, dtype)
    layer_bytes = costmodel.layer_weight_bytes(shape, dtype)
    budget = free_bytes - headroom - kv - act - step_weights
    gib = 1 << 30
    if budget < layer_bytes:
        need = kv + act + step_weights + layer_bytes + headroom
        raise UsageError(
            f"{shape.name} at batch {max_bucket}, context {context} needs at least {need / gib:.1f} GiB "
            f"and {free_bytes / gib:.1f} GiB is free: KV cache {kv / gib:.1f} GiB + activations {act / gib:.1f} GiB "
            f"+ embeddings {step_weights / gib:.1f} GiB + one layer {layer_bytes / gib:.2f} GiB + working space "
            f"{headroom / gib:.1f} GiB; lower --batch or --context"
        )
    distinct = min(shape.layers, budget // layer_bytes)
    if distinct < shape.layers and layer_bytes < 4 * l2_bytes:
        raise UsageError(
            f"{shape.name}: weights ({costmodel.weight_memory_bytes(shape, dtype) / gib:.1f} GiB) do not fit in "
            f"{free_bytes / gib:.1f} GiB free, and one layer ({layer_bytes / 2**20:.0f} MiB) is under 4x the L2 "
            f"cache ({l2_bytes / 2**20:.0f} MiB), so cycling layers would read from cache; lower --set layers, "
            f"--batch or --context"
        )
    return MemoryPlan(int(distinct), costmodel.weight_memory_bytes(shape, dtype, int(distinct)), kv, act)


CPU_RUNTIME_BYTES = 256 << 20  # torch itself, the Python heap, the ceilings' buffers freed before the model


def cpu_working_bytes(shape: Shape, max_bucket: int, context: int) -> int:
    """Scratch the CPU (plain torch) step allocates on top of the plan: attention's fp32 copies of one layer's K
    and V plus its scores and probabilities, and fp32 temporaries of the norms, SiLU and logits."""
    fp32 = 4
    attention = fp32 * max_bucket * context * (2 * shape.kv_dim + 2 * shape.heads)
    elementwise = fp32 * max_bucket * 4 * (4 * shape.hidden + 3 * shape.ffn + shape.vocab)
    return CPU_RUNTIME_BYTES + attention + elementwise


def cpu_memory_budget(shape: Shape, max_bucket: int, context: int) -> tuple[int, int, int]:
    """``(free, l2, headroom)`` for plan_memory on the CPU path: RAM that can really be had (environment), the
    last-level cache, and the step's working space, so a shape that does not fit is refused, saying how much it
    needs, before anything is allocated. Unknown free RAM (no /proc/meminfo, no sysconf) checks nothing."""
    from launchprobe import environment

    free = environment.available_memory_bytes()
    return (
        (1 << 62) if free is None else free,
        environment.cpu_cache_bytes(),
        cpu_working_bytes(shape, max_bucket, context),
    )


class DecodeModel:
    """Weights and KV cache for the largest bucket; ``step(bucket)`` builds the op list for one batch bucket.

    ``kernel_settings`` are the switches of the ops it gets from ``get_ops`` (PDL, GEMV load hint; defaults if None).
    """

    def __init__(
        self,
        shape: Shape,
        *,
        context: int,
        dtype: str,
        device: str,
        max_bucket: int,
        plan: MemoryPlan,
        projections: str = "cublas",
        kernel_settings: KernelSettings | None = None,
    ):
        from launchprobe.kernels import get_ops

        self.shape, self.context, self.dtype, self.device = shape, context, dtype, device
        self.max_bucket, self.plan = max_bucket, plan
        self.ops = get_ops(torch.device(device).type, settings=kernel_settings)
        if projections not in PROJECTIONS:
            raise UsageError(f"--projections {projections!r}: expected one of {', '.join(PROJECTIONS)}")
        # The same projection kernels in every mode, so eager and graphs stay comparable.
        self.project = self.ops.gemv if projections == "gemv" else self.ops.linear
        try:
            self._allocate(shape, context, dtype, device, max_bucket, plan)
        except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            if not isinstance(exc, MemoryError) and "memory" not in str(exc).lower() and "alloc" not in str(exc):
                raise
            gib = 1 << 30
            total = plan.weight_bytes + plan.kv_cache_bytes + plan.activation_bytes
            raise UsageError(
                f"out of memory on {device} allocating {shape.name} ({total / gib:.1f} GiB: weights "
                f"{plan.weight_bytes / gib:.1f}, KV cache {plan.kv_cache_bytes / gib:.1f}); lower --batch, --context "
                f"or --set layers"
            ) from None

    def _allocate(self, shape: Shape, context: int, dtype: str, device: str, max_bucket: int, plan: MemoryPlan) -> None:
        tdtype = TORCH_DTYPES[dtype]
        gen = torch.Generator(device=device).manual_seed(0)

        def rand(*size: int) -> torch.Tensor:
            t = torch.empty(size, dtype=tdtype, device=device)
            return t.normal_(0.0, WEIGHT_STD, generator=gen)

        def norm_weight() -> torch.Tensor:
            return 1.0 + rand(shape.hidden)

        h, f = shape.hidden, shape.ffn
        self.layer_weights = [
            LayerWeights(
                qkv=rand(shape.qkv_dim, h),
                o_proj=rand(h, shape.q_dim),
                gate_up=rand(2 * f, h),
                down=rand(h, f),
                attn_norm=norm_weight(),
                mlp_norm=norm_weight(),
            )
            for _ in range(plan.distinct_layers)
        ]
        self.embedding = rand(shape.vocab, h)
        self.lm_head = self.embedding if shape.tie_embeddings else rand(shape.vocab, h)
        self.final_norm = norm_weight()
        kv_size = (max_bucket, context, shape.kv_heads, shape.head_dim)
        # KV cache filled with random values: attention reads real-looking data.
        self.k_cache = [rand(*kv_size) for _ in range(shape.layers)]
        self.v_cache = [rand(*kv_size) for _ in range(shape.layers)]
        self.buffers = DecodeBuffers(shape, max_bucket, context, tdtype, device, gen)

    def weights_for(self, layer: int) -> LayerWeights:
        return self.layer_weights[layer % len(self.layer_weights)]

    def step(self, bucket: int) -> list[Op]:
        """The ops of one decode step for ``bucket`` sequences, in launch order."""
        if not 1 <= bucket <= self.max_bucket:
            raise ValueError(f"bucket {bucket} outside 1..{self.max_bucket}")
        s, ops, b = self.shape, self.ops, self.buffers.view(bucket)
        q_dim, kv_dim = s.q_dim, s.kv_dim
        q = b.qkv[:, :q_dim]
        k = b.qkv[:, q_dim : q_dim + kv_dim]
        v = b.qkv[:, q_dim + kv_dim :]
        attention_plan = ops.attention_plan(bucket, self.context, s.heads, s.kv_heads, s.head_dim, self.device)
        scale = s.head_dim**-0.5
        bind = ops.bind  # Triton ops relaunch their compiled kernels directly after the first call
        steps: list[Op] = [Op("embed", -1, bind(ops.embedding, b.token_ids, self.embedding, b.x))]
        for layer in range(s.layers):
            w = self.weights_for(layer)
            kc, vc = self.k_cache[layer][:bucket], self.v_cache[layer][:bucket]
            if layer == 0:
                attn_norm = bind(ops.rmsnorm, b.x, w.attn_norm, s.rms_eps, b.normed, b.residual)
            else:
                attn_norm = bind(ops.add_rmsnorm, b.x, b.residual, w.attn_norm, s.rms_eps, b.normed, True)
            steps += [
                Op("attn_norm", layer, attn_norm),
                Op("qkv", layer, bind(self.project, b.normed, w.qkv, b.qkv)),
                Op("rotary", layer, bind(ops.rotary, q, k, b.positions, s.rope_theta, s.head_dim)),
                Op("kv_write", layer, bind(ops.kv_write, k, v, kc, vc, b.positions)),
                Op("attention", layer, bind(ops.attention, q, kc, vc, self.context, b.attn_out, scale, attention_plan)),
                Op("o_proj", layer, bind(self.project, b.attn_out, w.o_proj, b.x)),
                Op("mlp_norm", layer, bind(ops.add_rmsnorm, b.x, b.residual, w.mlp_norm, s.rms_eps, b.normed, True)),
                Op("gate_up", layer, bind(self.project, b.normed, w.gate_up, b.gate_up)),
                Op("silu_mul", layer, bind(ops.silu_mul, b.gate_up, b.act)),
                Op("down", layer, bind(self.project, b.act, w.down, b.x)),
            ]
        steps += [
            Op("final_norm", -1, bind(ops.add_rmsnorm, b.x, b.residual, self.final_norm, s.rms_eps, b.normed, False)),
            Op("lm_head", -1, bind(self.project, b.normed, self.lm_head, b.logits)),
        ]
        return steps

    def kernels_expected(self, bucket: int, num_sms: int) -> int:
        return kernels_per_step(self.shape, bucket, self.context, num_sms)

    def logits(self, bucket: int) -> torch.Tensor:
        return self.buffers.logits[:bucket]


def kernels_per_step(shape: Shape, bucket: int, context: int, num_sms: int) -> int:
    """Kernels one step launches on CUDA by construction; the report shows CUPTI's count beside it."""
    from launchprobe.kernels import attention_kernels

    extra = attention_kernels(bucket, shape.kv_heads, context, num_sms) - 1
    return costmodel.logical_ops_per_step(shape) + shape.layers * extra


class DecodeBuffers:
    """Static activations sized for the largest bucket; a bucket uses the first rows (still contiguous)."""

    def __init__(
        self, shape: Shape, max_bucket: int, context: int, dtype: torch.dtype, device: str, gen: torch.Generator
    ):
        def buf(cols: int) -> torch.Tensor:
            return torch.empty(max_bucket, cols, dtype=dtype, device=device).normal_(generator=gen)

        self.token_ids = torch.randint(0, shape.vocab, (max_bucket,), device=device, generator=gen)
        # Every sequence sits at the end of a full context: the step writes entry context-1 and reads all of it.
        self.positions = torch.full((max_bucket,), context - 1, dtype=torch.int64, device=device)
        self.x = buf(shape.hidden)
        self.residual = buf(shape.hidden)
        self.normed = buf(shape.hidden)
        self.qkv = buf(shape.qkv_dim)
        self.attn_out = buf(shape.q_dim)
        self.gate_up = buf(2 * shape.ffn)
        self.act = buf(shape.ffn)
        self.logits = buf(shape.vocab)

    def view(self, bucket: int) -> DecodeBuffers:
        view = object.__new__(DecodeBuffers)
        for name, tensor in vars(self).items():
            setattr(view, name, tensor[:bucket])
        return view
