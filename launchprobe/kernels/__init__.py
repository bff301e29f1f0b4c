"""The decode step's kernels: ``get_ops(device_type, impl=None, settings=KernelSettings(...))`` and their plans.

Modules: ``ops`` (the ``Ops`` interface, ``KernelSettings``, ``get_ops``), ``plans`` (torch-free tile, split and
launch-count heuristics), ``reference`` (the plain-torch ops), ``triton`` (the fused Triton kernels, one module per
kernel family). Importing this package imports neither torch nor triton.
"""

from launchprobe.kernels.ops import GEMV_WEIGHT_HINTS, IMPLS, KernelSettings, Ops, get_ops
from launchprobe.kernels.plans import (
    DEFAULT_NUM_SMS,
    GEMV_MAX_BATCH,
    AttentionPlan,
    AttentionTuning,
    GemvConfig,
    GemvPlan,
    TunedAttentionPlan,
    attention_kernels,
    attention_max_splits,
    attention_split_tokens,
    attention_splits,
    cdiv,
    gemv_block_n,
    gemv_config,
    gemv_fma_tiles,
    gemv_kernels,
)

__all__ = [
    "DEFAULT_NUM_SMS",
    "GEMV_MAX_BATCH",
    "GEMV_WEIGHT_HINTS",
    "IMPLS",
    "AttentionPlan",
    "AttentionTuning",
    "GemvConfig",
    "GemvPlan",
    "KernelSettings",
    "Ops",
    "TunedAttentionPlan",
    "attention_kernels",
    "attention_max_splits",
    "attention_split_tokens",
    "attention_splits",
    "cdiv",
    "gemv_block_n",
    "gemv_config",
    "gemv_fma_tiles",
    "gemv_kernels",
    "get_ops",
]
