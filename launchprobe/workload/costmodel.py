"""Per-step cost model: the fewest bytes each op must move and the matmul FLOPs it must do.

Bytes count each input read once and each output written once (weights, activations, KV cache); FLOPs count
only multiply-adds of GEMMs and attention (2 per multiply-add), which is what the matmul ceiling bounds.
Elementwise work (norms, rotary, SiLU) is counted as bytes, not FLOPs. See docs/workload.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from launchprobe.workload.shape import Shape

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}

# The logical ops of one decode step, in launch order, one kernel each (attention may add a reduce kernel).
STEP_HEAD_OPS = ("embed",)
LAYER_OPS = (
    "attn_norm",  # fused residual add + RMSNorm
    "qkv",  # GEMM
    "rotary",  # rotary embedding of q and k, in place
    "kv_write",  # write k, v into the KV cache
    "attention",  # decode attention over the cached context, grouped KV heads
    "o_proj",  # GEMM
    "mlp_norm",  # fused residual add + RMSNorm
    "gate_up",  # GEMM
    "silu_mul",  # SiLU(gate) * up
    "down",  # GEMM
)
STEP_TAIL_OPS = ("final_norm", "lm_head")


@dataclass(frozen=True)
class OpCost:
    name: str
    layer: int  # -1 for per-step ops (embed, final_norm, lm_head)
    weight_bytes: int  # bytes of weights read
    kv_bytes: int  # bytes of KV cache read or written
    activation_bytes: int  # activation bytes read and written
    flops: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes


@dataclass(frozen=True)
class StepCost:
    """One step's costs, kept in constant size whatever the layer count: layer 0 (whose input norm has no residual
    to add) and one representative of layers 1..L-1, which cost the same. Totals are computed from these, so a
    plan for any shape takes the same time; ``ops`` lists every op, one per layer, only when asked for."""

    head: tuple[OpCost, ...]  # per-step ops before the layers (embed)
    first_layer: tuple[OpCost, ...]  # layer 0
    layer: tuple[OpCost, ...]  # each of layers 1..layers-1 (layer index 1 stands for all of them)
    layers: int
    tail: tuple[OpCost, ...]  # per-step ops after the layers (final_norm, lm_head)

    @property
    def ops(self) -> tuple[OpCost, ...]:
        """Every op of the step in launch order (as long as the step: for reports of small shapes and tests)."""
        repeated = (dataclasses.replace(op, layer=i) for i in range(1, self.layers) for op in self.layer)
        return (*self.head, *self.first_layer, *repeated, *self.tail)

    def _total(self, field: str) -> int:
        def total(ops: tuple[OpCost, ...]) -> int:
            return sum(getattr(op, field) for op in ops)

        repeats = self.layers - 1
        return total(self.head) + total(self.first_layer) + repeats * total(self.layer) + total(self.tail)

    @property
    def bytes(self) -> int:
        return self._total("bytes")

    @property
    def flops(self) -> int:
        return self._total("flops")

    @property
    def weight_bytes(self) -> int:
        return self._total("weight_bytes")

    @property
    def kv_bytes(self) -> int:
        return self._total("kv_bytes")

    @property
    def activation_bytes(self) -> int:
        return self._total("activation_bytes")

    def by_name(self) -> dict[str, OpCost]:
        """Costs summed over layers, per op name, in launch order."""
        totals: dict[str, list[int]] = {}
        weighted = [(self.head, 1), (self.first_layer, 1), (self.layer, self.layers - 1), (self.tail, 1)]
        for ops, times in weighted:
            for op in ops:
                acc = totals.setdefault(op.name, [0, 0, 0, 0])
                acc[0] += times * op.weight_bytes
                acc[1] += times * op.kv_bytes
                acc[2] += times * op.activation_bytes
                acc[3] += times * op.flops
        return {name: OpCost(name, -1, *vals) for name, vals in totals.items()}


def layer_op_costs(shape: Shape, batch: int, context: int, elem: int, layer: int) -> list[OpCost]:
    """Costs of one layer's ops. ``context`` is the number of KV entries attended (new entry included)."""
    b, h, f = batch, shape.hidden, shape.ffn
    q, kv, qkv = shape.q_dim, shape.kv_dim, shape.qkv_dim

    def op(name: str, weights: int = 0, kv_cache: int = 0, act: int = 0, flops: int = 0) -> OpCost:
        return OpCost(name, layer, weights * elem, kv_cache * elem, act * elem, flops)

    # Layer 0's input norm has no residual to add: it reads x, writes the normed x and the residual.
    norm_in_act = b * h * (2 if layer == 0 else 3) + b * h
    return [
        op("attn_norm", weights=h, act=norm_in_act),
        op("qkv", weights=h * qkv, act=b * h + b * qkv, flops=2 * b * h * qkv),
        op("rotary", act=2 * b * (q + kv)),
        op("kv_write", kv_cache=2 * b * kv, act=2 * b * kv),
        op(
            "attention",
            kv_cache=2 * b * context * kv,
            act=2 * b * q,
            flops=4 * b * shape.heads * context * shape.head_dim,
        ),
        op("o_proj", weights=q * h, act=b * q + b * h, flops=2 * b * q * h),
        op("mlp_norm", weights=h, act=4 * b * h),
        op("gate_up", weights=h * 2 * f, act=b * h + b * 2 * f, flops=2 * b * h * 2 * f),
        op("silu_mul", act=b * 2 * f + b * f),
        op("down", weights=f * h, act=b * f + b * h, flops=2 * b * f * h),
    ]


def step_cost(shape: Shape, batch: int, context: int, dtype: str) -> StepCost:
    elem = DTYPE_BYTES[dtype]
    b, h, v = batch, shape.hidden, shape.vocab
    # embedding rows gathered by token id (int64 ids): read B rows, write B rows
    head = (OpCost("embed", -1, b * h * elem, 0, b * h * elem + 8 * b, 0),)
    tail = (
        OpCost("final_norm", -1, h * elem, 0, 3 * b * h * elem, 0),
        OpCost("lm_head", -1, h * v * elem, 0, (b * h + b * v) * elem, 2 * b * h * v),
    )
    first = tuple(layer_op_costs(shape, batch, context, elem, 0))
    rest = tuple(layer_op_costs(shape, batch, context, elem, 1))
    return StepCost(head=head, first_layer=first, layer=rest, layers=shape.layers, tail=tail)


def layer_weight_bytes(shape: Shape, dtype: str) -> int:
    h, f = shape.hidden, shape.ffn
    return DTYPE_BYTES[dtype] * (h * shape.qkv_dim + shape.q_dim * h + h * 2 * f + f * h + 2 * h)


def step_weight_bytes(shape: Shape, dtype: str) -> int:
    """Embedding, final norm and lm_head (shared when embeddings are tied)."""
    tables = 1 if shape.tie_embeddings else 2
    return DTYPE_BYTES[dtype] * (tables * shape.vocab * shape.hidden + shape.hidden)


def weight_memory_bytes(shape: Shape, dtype: str, distinct_layers: int | None = None) -> int:
    layers = shape.layers if distinct_layers is None else distinct_layers
    return layers * layer_weight_bytes(shape, dtype) + step_weight_bytes(shape, dtype)


def kv_cache_bytes(shape: Shape, batch: int, context: int, dtype: str) -> int:
    return DTYPE_BYTES[dtype] * shape.layers * 2 * batch * context * shape.kv_dim


def logical_ops_per_step(shape: Shape) -> int:
    return len(STEP_HEAD_OPS) + shape.layers * len(LAYER_OPS) + len(STEP_TAIL_OPS)
