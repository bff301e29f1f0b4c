"""Capture sizes, bucket padding and how each mode splits a step into graphed and eager segments."""

from __future__ import annotations

import pytest

from launchprobe.errors import UsageError
from launchprobe.workload.model import Op
from launchprobe.workload.modes import (
    bucket_for,
    capture_sizes_for,
    padding_fraction,
    split_segments,
    vllm_capture_sizes,
)


def test_vllm_default_capture_sizes() -> None:
    sizes = vllm_capture_sizes()
    assert len(sizes) == 51
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert sizes[-1] == 512 and 248 in sizes and 256 in sizes and 272 in sizes


def test_buckets_pad_up_to_next_capture_size() -> None:
    sizes = capture_sizes_for([3, 9, 250])
    assert sizes[-1] == 256
    assert bucket_for(3, sizes) == 4
    assert bucket_for(9, sizes) == 16
    assert bucket_for(250, sizes) == 256
    assert bucket_for(8, sizes) == 8
    assert padding_fraction(3, 4) == 0.25
    assert padding_fraction(8, 8) == 0.0


def test_user_capture_sizes_and_too_large_batch() -> None:
    assert capture_sizes_for([5], [8, 1, 4]) == [1, 4, 8]
    with pytest.raises(UsageError, match="above the largest capture size 8"):
        capture_sizes_for([9], [1, 4, 8])
    with pytest.raises(UsageError):
        capture_sizes_for([1], [0, 4])


def _ops(layers: int) -> list[Op]:
    from launchprobe.workload import costmodel

    def noop() -> None:
        return None

    ops = [Op("embed", -1, noop)]
    for layer in range(layers):
        ops += [Op(name, layer, noop) for name in costmodel.LAYER_OPS]
    return ops + [Op("final_norm", -1, noop), Op("lm_head", -1, noop)]


def test_piecewise_has_layers_plus_one_graphs_and_eager_attention() -> None:
    segments = split_segments(_ops(4), "piecewise")
    graphed = [s for s in segments if s.graphed]
    eager = [s for s in segments if not s.graphed]
    assert len(graphed) == 5 and len(eager) == 4
    assert all([op.name for op in s.ops] == ["kv_write", "attention"] for s in eager)
    assert segments[0].graphed and segments[-1].graphed
    assert segments[0].ops[-1].name == "rotary" and segments[-1].ops[-1].name == "lm_head"


def test_full_is_one_graph_and_eager_is_op_by_op() -> None:
    ops = _ops(2)
    full = split_segments(ops, "full")
    assert len(full) == 1 and full[0].graphed and len(full[0].ops) == len(ops)
    eager = split_segments(ops, "eager")
    assert len(eager) == len(ops) and not any(s.graphed for s in eager)
