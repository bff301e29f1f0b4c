"""Execution modes of one decode step: eager, piecewise CUDA graphs (attention eager) and one full CUDA graph.

Graph modes mirror vLLM: one graph (or one set of pieces) per batch bucket from a capture-size list, captured
largest bucket first into one shared memory pool; a batch is padded up to the next captured size.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from launchprobe.errors import UsageError
from launchprobe.measure.markers import Markers
from launchprobe.workload.model import EAGER_IN_PIECEWISE, Op

MODES = ("eager", "piecewise", "full")
GRAPH_MODES = ("piecewise", "full")


def vllm_capture_sizes() -> list[int]:
    """vLLM's default CUDA-graph capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16)."""
    return [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


def capture_sizes_for(batches: Sequence[int], sizes: Sequence[int] | None = None) -> list[int]:
    """The capture-size list up to the smallest size that holds the largest requested batch."""
    full = sorted(set(sizes if sizes is not None else vllm_capture_sizes()))
    if not full or full[0] < 1:
        raise UsageError("capture sizes must be positive integers")
    largest = max(batches)
    if largest > full[-1]:
        raise UsageError(
            f"batch {largest} is above the largest capture size {full[-1]}; vLLM would run it eager: "
            f"add a larger size with --capture-sizes or drop the graph modes"
        )
    return full[: bisect.bisect_left(full, largest) + 1]


def bucket_for(batch: int, sizes: Sequence[int]) -> int:
    """The smallest capture size that holds ``batch`` (sizes sorted ascending)."""
    index = bisect.bisect_left(sizes, batch)
    if index == len(sizes):
        raise UsageError(f"batch {batch} exceeds the largest capture size {sizes[-1]}")
    return sizes[index]


def padding_fraction(batch: int, bucket: int) -> float:
    return (bucket - batch) / bucket


@dataclass
class Segment:
    """Consecutive ops that run together: either captured as one graph or run eagerly op by op."""

    ops: list[Op]
    graphed: bool
    graph: Any = None  # torch.cuda.CUDAGraph once captured

    @property
    def name(self) -> str:
        first, last = self.ops[0], self.ops[-1]
        return first.label if first is last else f"{first.label}..{last.label}"


def split_segments(ops: Sequence[Op], mode: str) -> list[Segment]:
    """eager: every op on its own; full: one graphed segment; piecewise: graphed runs between attention ops."""
    if mode == "eager":
        return [Segment([op], graphed=False) for op in ops]
    if mode == "full":
        return [Segment(list(ops), graphed=True)]
    if mode != "piecewise":
        raise ValueError(f"unknown mode {mode!r}")
    segments: list[Segment] = []
    for op in ops:
        graphed = op.name not in EAGER_IN_PIECEWISE
        if segments and segments[-1].graphed == graphed:
            segments[-1].ops.append(op)
        else:
            segments.append(Segment([op], graphed=graphed))
    return segments


@dataclass
class StepRunner:
    """Runs one decode step of one bucket in one mode. Build with ``prepare``; call ``run()`` per step."""

    mode: str
    bucket: int
    segments: list[Segment]
    capture_s: float | None = None
    capture_bytes: int | None = None
    markers: Markers | None = None
    range_name: str = "decode_step"  # NVTX name of the step range
    _calls: list[Callable[[], Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._calls = self._flatten()

    def _flatten(self) -> list[Callable[[], Any]]:
        """The step as a flat list of calls: graph replays, eager ops, and NVTX pushes and pops around them."""
        markers = self.markers if self.markers is not None and self.markers.enabled else None
        per_op = markers is not None and markers.level == "ops"
        calls: list[Callable[[], Any]] = []
        if markers:
            calls.append(markers.push(f"{self.range_name} mode={self.mode} bucket={self.bucket}"))
        graphs = self.graphs
        graph_index = 0
        open_layer: int | None = None
        for seg in self.segments:
            if seg.graphed and seg.graph is not None:
                if per_op and open_layer is not None:
                    calls.append(markers.pop())  # type: ignore[union-attr]
                    open_layer = None
                graph_index += 1
                if per_op:
                    calls.append(markers.push(f"graph {graph_index}/{graphs} {seg.name}"))  # type: ignore[union-attr]
                calls.append(seg.graph.replay)
                if per_op:
                    calls.append(markers.pop())  # type: ignore[union-attr]
                continue
            for op in seg.ops:
                if per_op:
                    assert markers is not None
                    if op.layer != open_layer:
                        if open_layer is not None:
                            calls.append(markers.pop())
                        open_layer = op.layer if op.layer >= 0 else None
                        if open_layer is not None:
                            calls.append(markers.push(f"layer {op.layer}"))
                    calls += [markers.push(op.name), op.run, markers.pop()]
                else:
                    calls.append(op.run)
        if per_op and open_layer is not None:
            calls.append(markers.pop())  # type: ignore[union-attr]
        if markers:
            calls.append(markers.pop())
        return calls

    def run(self) -> None:
        for call in self._calls:
            call()

    @property
    def graphs(self) -> int:
        return sum(1 for seg in self.segments if seg.graphed)

    def capture(self, pool: Any, warmup: int = 2) -> None:
        """Capture the graphed segments (warming up on a side stream first), timing it and its memory."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                for op in (op for seg in self.segments for op in seg.ops):
                    op.run()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        start = time.perf_counter()
        for seg in self.segments:
            if not seg.graphed:
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                for op in seg.ops:
                    op.run()
            seg.graph = graph
        torch.cuda.synchronize()
        self.capture_s = time.perf_counter() - start
        self.capture_bytes = max(0, free_before - torch.cuda.mem_get_info()[0])
        self._calls = self._flatten()


def prepare(
    mode: str,
    bucket: int,
    ops: Sequence[Op],
    pool: Any = None,
    markers: Markers | None = None,
    range_name: str = "decode_step",
) -> StepRunner:
    runner = StepRunner(mode, bucket, split_segments(ops, mode), markers=markers, range_name=range_name)
    if mode in GRAPH_MODES:
        runner.capture(pool)
    return runner
