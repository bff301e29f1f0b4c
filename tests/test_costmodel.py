"""The cost model against values worked out by hand from the published Llama shapes."""

from __future__ import annotations

import pytest

from launchprobe.workload import costmodel
from launchprobe.workload.shape import load_shape


def test_llama_3_8b_batch_1_bytes_and_flops_by_hand() -> None:
    shape = load_shape("llama-3-8b")
    h, f, v, layers = 4096, 14336, 128256, 32
    qkv = 4096 + 2 * 8 * 128  # q heads x 128 + k and v for 8 kv heads
    layer_weights = h * qkv + 4096 * h + h * 2 * f + f * h + 2 * h  # elements
    weights = 2 * (layers * layer_weights + h * v + h + h)  # + lm_head, final norm, one embedding row
    kv = 2 * layers * (2 * 1024 * 8 * 128 + 2 * 8 * 128)  # read K,V over 1024 entries + write the new entry
    cost = costmodel.step_cost(shape, batch=1, context=1024, dtype="bf16")
    assert cost.weight_bytes == weights == 15_009_857_536
    assert cost.kv_bytes == kv
    flops_per_layer = 2 * (h * qkv + 4096 * h + h * 2 * f + f * h) + 4 * 32 * 1024 * 128
    assert cost.flops == layers * flops_per_layer + 2 * h * v == 15_546_187_776
    # activations are a small share at batch 1
    assert 0 < cost.activation_bytes < 0.001 * cost.bytes


def test_llama_3_70b_layer_weights_and_memory() -> None:
    shape = load_shape("llama-3-70b")
    per_layer = 2 * (8192 * (8192 + 2048) + 8192 * 8192 + 8192 * 57344 + 28672 * 8192 + 2 * 8192)
    assert costmodel.layer_weight_bytes(shape, "bf16") == per_layer == 1_711_308_800
    total = 80 * per_layer + 2 * (2 * 128256 * 8192 + 8192)
    assert costmodel.weight_memory_bytes(shape, "bf16") == total
    assert costmodel.logical_ops_per_step(shape) == 1 + 80 * 10 + 2


def test_tied_embeddings_count_once_in_memory_but_lm_head_is_read_every_step() -> None:
    shape = load_shape("llama-3.2-1b")
    assert shape.tie_embeddings
    assert costmodel.step_weight_bytes(shape, "bf16") == 2 * (128256 * 2048 + 2048)
    lm_head = costmodel.step_cost(shape, 1, 128, "bf16").by_name()["lm_head"]
    assert lm_head.weight_bytes == 2 * 2048 * 128256


def test_kv_and_flops_scale_with_batch_and_context() -> None:
    shape = load_shape("llama-3-8b")
    base = costmodel.step_cost(shape, 1, 1024, "bf16")
    wide = costmodel.step_cost(shape, 64, 1024, "bf16")
    long = costmodel.step_cost(shape, 1, 4096, "bf16")
    assert wide.weight_bytes - base.weight_bytes == 2 * 63 * 4096  # only the embedding rows grow
    assert wide.kv_bytes == 64 * base.kv_bytes
    assert wide.flops == 64 * base.flops
    attention_reads = 2 * 32 * 8 * 128 * 2  # per extra entry: K and V, 32 layers, 8x128 each, bf16
    assert long.kv_bytes - base.kv_bytes == 3072 * attention_reads


def test_kv_cache_bytes() -> None:
    shape = load_shape("llama-3-8b")
    assert costmodel.kv_cache_bytes(shape, 256, 1024, "fp16") == 2 * 32 * 2 * 256 * 1024 * 1024


@pytest.mark.parametrize("name", ["tiny", "llama-3.2-1b", "llama-3-8b", "llama-3-70b"])
def test_per_op_costs_add_up(name: str) -> None:
    shape = load_shape(name)
    cost = costmodel.step_cost(shape, 8, 512, "bf16")
    by_name = cost.by_name()
    assert list(by_name)[:2] == ["embed", "attn_norm"]
    assert sum(op.bytes for op in by_name.values()) == cost.bytes
    assert sum(op.flops for op in by_name.values()) == cost.flops
    assert len(cost.ops) == costmodel.logical_ops_per_step(shape)
