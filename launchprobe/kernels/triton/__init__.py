"""The fused Triton kernels of the decode step, one module per kernel family (``norm``, ``rotary``, ``kv_cache``,
``attention``, ``gemv``, ``silu``), launched through ``launch`` (PDL, relaunch, ``TritonOps``).

Decode ops move a few KB to a few hundred MB and do almost no math, so every kernel is written for HBM latency
and bandwidth rather than FLOPs: each program loads its working set with wide loads (rows are contiguous, so
Triton emits 16-byte vectors), computes in fp32 registers, writes each output once, and grids are sized so that
a batch of 1 still spreads over the 132 SMs of an H200 where the op is large enough to care. Nothing allocates,
syncs or branches on tensor values per call: every op is safe inside a CUDA graph (``positions`` is read on
the device, ``context_len`` is a Python int fixed per graph).

Importing this package imports triton; nothing imports it at ``launchprobe.kernels`` import time (``get_ops``
does, lazily). Under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (that is how they are tested
without a GPU).
"""

from launchprobe.kernels.triton.launch import TritonOps

__all__ = ["TritonOps"]
