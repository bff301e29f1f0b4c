"""Launch plans and heuristics of the Triton kernels, in plain Python: tile and split choices, launch counts and
tuning constants. Imports neither torch nor triton, so the workload and cost model can ask how many kernels a step
launches without touching a device. The plan classes only hold tensors made by the ops that allocate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# H200 SM count: the default when the device cannot be asked (CPU, Triton interpreter).
DEFAULT_NUM_SMS = 132

# RMSNorm keeps a whole row in registers up to this many columns (16384 fp32 over 16 warps: 32 per thread); wider
# rows loop over chunks of a quarter of it (two passes, the second one served from L1/L2).
NORM_MAX_BLOCK = 16384

# Attention tiles: tokens per K/V tile of the split kernel (the split length is a multiple of this).
ATTN_BLOCK_N = 64
# Split only when (batch x kv heads) programs would fill less than this fraction of the SMs...
ATTN_SPLIT_BELOW_FILL = 0.8
# ...and then aim for this many programs per SM (several resident CTAs hide HBM latency).
ATTN_PROGRAMS_PER_SM = 2
# Merge the splits inside the split kernel (the last program of each (sequence, kv head) to finish merges, found
# with an arrival counter): one launch per attention call. False: a second, reduce kernel (two launches).
ATTN_FUSED_REDUCE = True
ATTN_NUM_WARPS = 4
ATTN_NUM_STAGES = 3

# Kernel launches per call of each Triton op (attention: see ``attention_kernels``).
TRITON_KERNELS = {
    "embedding": 1,  # torch index_select
    "rmsnorm": 1,
    "add_rmsnorm": 1,
    "rotary": 1,
    "kv_write": 1,
    "silu_mul": 1,
    "gemv": 1,  # one pass (split-K configs reduce in-kernel); batches above GEMV_MAX_BATCH fall back to cuBLAS
    "linear": 1,  # cuBLAS; may add a split-K reduce kernel for some shapes
}
GEMV_MAX_BATCH = 16
# GEMV tiles: elements of W per pipelined [BLOCK_N, BLOCK_K] tile (4096 bf16 = 8 KB) and pipeline depth. With
# 16 rows of x per stage that is 40-48 KB of shared memory per program: 4 programs fit on an SM.
GEMV_TILE_ELEMS = 4096
GEMV_STAGES = 4
GEMV_NUM_WARPS = 4
# Rows per program, widest first: the default takes the widest that still gives >= 2 programs per SM.
GEMV_BLOCK_NS = (64, 32, 16)
# Batch 1 (by default): the CUDA-core kernel (W straight into registers, two tiles in flight per program, no shared
# memory, no padded tensor-core dot), one pass over K. Rows per program, K tile and warps by (N, K), tuned for the
# llama-3 8B and 70B projections on a 132-SM GPU (`benchmarks/bench_kernels_sweep.py --only gemv` sweeps them;
# docs/performance.md section 4); other shapes take GEMV_FMA_DEFAULT, and GPUs with another SM count the rule in
# ``gemv_fma_tiles``.
GEMV_FMA_TUNED_SMS = 132
GEMV_FMA_TUNED: dict[tuple[int, int], tuple[int, int, int]] = {  # (N, K): (block_n, block_k, num_warps)
    (6144, 4096): (16, 512, 4),  # 8B qkv
    (4096, 4096): (8, 512, 8),  # 8B o_proj
    (28672, 4096): (16, 256, 4),  # 8B gate_up
    (4096, 14336): (8, 512, 8),  # 8B down
    (128256, 4096): (8, 256, 4),  # 8B lm_head
    (10240, 8192): (8, 512, 4),  # 70B qkv
    (8192, 8192): (8, 512, 8),  # 70B o_proj
    (57344, 8192): (8, 512, 4),  # 70B gate_up
    (8192, 28672): (8, 512, 8),  # 70B down
    (128256, 8192): (8, 256, 4),  # 70B lm_head
}
GEMV_FMA_DEFAULT = (8, 512, 4)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# --------------------------------------------------------------------------------------------------------------
# GEMV


def gemv_fma_tiles(n: int, k: int, num_sms: int = DEFAULT_NUM_SMS) -> tuple[int, int, int]:
    """(block_n, block_k, num_warps) of the batch-1 CUDA-core GEMV: the tuned entry for this shape on an H200-sized
    GPU, else 8 rows x 512 columns, with 8 warps when that leaves fewer than 8 programs per SM (more loads in
    flight per program), else 4. K tiles shrink to fit small K (at least 64 columns)."""
    tiles = GEMV_FMA_TUNED.get((n, k)) if num_sms == GEMV_FMA_TUNED_SMS else None
    if tiles is None:
        block_n, block_k, _ = GEMV_FMA_DEFAULT
        tiles = (block_n, block_k, 8 if cdiv(n, block_n) < 8 * num_sms else 4)
    block_n, block_k, warps = tiles
    return block_n, max(64, min(block_k, _pow2_at_least(k))), warps


@dataclass(frozen=True)
class GemvConfig:
    """Launch configuration of the Triton GEMV: grid (cdiv(N, block_n), splits), K cut in ``splits`` ranges of
    ``k_split`` elements (whole tiles). ``splits == 1`` with ``use_dot`` is the one-pass kernel (no workspace, no
    atomics; the default); ``splits > 1`` (or the CUDA-core B=1 path) is the split-K arrival-counter kernel."""

    block_n: int
    block_k: int
    splits: int
    k_split: int
    num_warps: int = GEMV_NUM_WARPS
    num_stages: int = GEMV_STAGES
    use_dot: bool = True

    def programs(self, n: int) -> int:
        return cdiv(n, self.block_n) * self.splits

    @property
    def split_k(self) -> bool:
        """Runs the split-K kernel (workspace + arrival counters when ``splits > 1``)."""
        return self.splits > 1 or not self.use_dot


def gemv_block_n(n: int, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """Rows per program: the widest of GEMV_BLOCK_NS whose grid still has >= 2 programs per SM, else the narrowest.
    On 132 SMs: 8B o_proj/down/qkv and 70B o_proj/down 16, 70B qkv 32, gate_up and lm_head 64."""
    return next((b for b in GEMV_BLOCK_NS if cdiv(n, b) >= 2 * num_sms), GEMV_BLOCK_NS[-1])


def gemv_config(
    n: int,
    k: int,
    batch: int,
    num_sms: int = DEFAULT_NUM_SMS,
    *,
    block_n: int | None = None,
    splits: int | None = None,
    num_warps: int | None = None,
    num_stages: int = GEMV_STAGES,
    use_dot: bool | None = None,
    block_k: int | None = None,
) -> GemvConfig:
    """Tiles and K splits of ``out[batch, n] = x[batch, k] @ W[n, k].T``; any knob left None is chosen here.

    Batch 1 runs the CUDA-core kernel unless ``use_dot=True``; it takes the tiles of ``gemv_fma_tiles`` when no
    tile knob (``block_n``, ``block_k``, ``num_warps``) is given, and the tensor-core defaults below for the knobs
    left unset otherwise. Batch 2-16 (or ``use_dot=True``): the one-pass tensor-core GEMV, no split (``splits=None``
    means 1): rows per program from ``gemv_block_n``, K tiles of GEMV_TILE_ELEMS elements, 4 warps, 4 stages.
    ``splits > 1`` selects the split-K kernel, K cut in that many ranges of whole tiles. The default never splits.
    """
    use_dot = batch > 1 if use_dot is None else use_dot or batch > 1
    if not use_dot and block_n is None and block_k is None and num_warps is None:
        block_n, block_k, num_warps = gemv_fma_tiles(n, k, num_sms)
    if block_n is None:
        block_n = gemv_block_n(n, num_sms)
    if block_k is None:
        block_k = max(16, min(GEMV_TILE_ELEMS // block_n, _pow2_at_least(k)))
    k_tiles = cdiv(k, block_k)
    if splits is None:
        splits = 1
    splits = max(1, min(splits, k_tiles))
    k_split = cdiv(k_tiles, splits) * block_k
    splits = cdiv(k, k_split)  # no empty split
    return GemvConfig(block_n, block_k, splits, k_split, num_warps or GEMV_NUM_WARPS, num_stages, use_dot)


def gemv_kernels(batch: int) -> int:
    """Launches of one Triton ``gemv`` call: 1 up to GEMV_MAX_BATCH rows (split-K configs reduce in-kernel), else
    cuBLAS's count (1, or 2 where it splits K)."""
    return 1 if batch <= GEMV_MAX_BATCH else TRITON_KERNELS["linear"]


@dataclass(frozen=True)
class GemvPlan:
    """Preallocated split-K state of one GEMV shape (N, K, batch): made once, outside CUDA graph capture.

    ``workspace`` [splits, batch, N] fp32 holds each split's partial; ``counters`` [N tiles] int32 (zeros at
    creation) count arrivals per row tile, and the program that merges resets its counter to 0, so calls and
    graph replays need no memset. Both are None when ``config.splits == 1``. One plan must not serve two calls
    running at once (different streams): they would share the counters.
    """

    n: int
    k: int
    batch: int
    config: GemvConfig
    workspace: torch.Tensor | None = None
    counters: torch.Tensor | None = None


# --------------------------------------------------------------------------------------------------------------
# attention


def attention_splits(
    batch: int,
    num_kv_heads: int,
    context_len: int,
    num_sms: int = DEFAULT_NUM_SMS,
    block_n: int = ATTN_BLOCK_N,
    programs_per_sm: int = ATTN_PROGRAMS_PER_SM,
) -> int:
    """How many pieces the split-K attention cuts each (sequence, kv head) context into.

    The split kernel runs one program per (sequence, kv head, split). With enough (sequence, kv head) pairs to
    fill the chip there is one split and no reduce; below that the context is cut into whole tiles so that about
    ``programs_per_sm`` programs per SM run. Every split holds at least one token.
    """
    pairs = batch * num_kv_heads
    tiles = cdiv(max(context_len, 1), block_n)
    if pairs >= ATTN_SPLIT_BELOW_FILL * num_sms:
        return 1
    want = min(cdiv(programs_per_sm * num_sms, pairs), tiles)
    return cdiv(tiles, cdiv(tiles, want))


def attention_split_tokens(splits: int, context_len: int, block_n: int = ATTN_BLOCK_N) -> int:
    """Tokens per split: a whole number of tiles, so only the last split is ragged."""
    return cdiv(cdiv(max(context_len, 1), splits), block_n) * block_n


def attention_max_splits(
    batch: int,
    num_kv_heads: int,
    context_len: int,
    num_sms: int = DEFAULT_NUM_SMS,
    block_n: int = ATTN_BLOCK_N,
    programs_per_sm: int = ATTN_PROGRAMS_PER_SM,
) -> int:
    """Workspace size in splits: an upper bound of ``attention_splits`` for every context up to ``context_len``."""
    pairs = batch * num_kv_heads
    if pairs >= ATTN_SPLIT_BELOW_FILL * num_sms:
        return 1
    return min(cdiv(programs_per_sm * num_sms, pairs), cdiv(max(context_len, 1), block_n))


def attention_kernels(
    batch: int,
    num_kv_heads: int,
    context_len: int,
    num_sms: int = DEFAULT_NUM_SMS,
    fused_reduce: bool = ATTN_FUSED_REDUCE,
) -> int:
    """Kernel launches of one Triton attention call: 1, or 2 (split + reduce) when it splits without the fused
    reduce."""
    if fused_reduce:
        return 1
    return 1 if attention_splits(batch, num_kv_heads, context_len, num_sms) == 1 else 2


@dataclass(frozen=True)
class AttentionTuning:
    """Knobs of the Triton attention kernel (the sweep benchmark varies them)."""

    block_n: int = ATTN_BLOCK_N  # tokens per K/V tile, a power of two >= 16
    programs_per_sm: int = ATTN_PROGRAMS_PER_SM  # split target when (batch x kv heads) cannot fill the SMs
    fused_reduce: bool = ATTN_FUSED_REDUCE  # merge splits in the split kernel (1 launch) or a reduce kernel (2)
    num_warps: int = ATTN_NUM_WARPS
    num_stages: int = ATTN_NUM_STAGES


DEFAULT_ATTENTION_TUNING = AttentionTuning()


@dataclass(frozen=True)
class AttentionPlan:
    """Setup of decode attention for one (batch bucket, context): split count and preallocated workspace.

    ``batch`` is the padded batch (a call may pass fewer rows). The workspace tensors (fp32, on the device) hold
    each split's partial output and softmax statistics, and ``counters`` ([batch, num_kv_heads] int32, zeros,
    reset by the kernel itself) the arrivals of the fused reduce; they are ``None`` when no split is ever needed
    or for the reference implementation, which needs none. Kernel knobs: ``tuning`` (defaults here; the Triton
    ``attention_plan`` makes a ``TunedAttentionPlan`` carrying its own).
    """

    batch: int
    context_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_sms: int
    max_splits: int
    partial_out: torch.Tensor | None = None  # [batch, num_heads, max_splits, head_dim] fp32, unnormalised
    partial_max: torch.Tensor | None = None  # [batch, num_heads, max_splits] fp32, running max (log2 units)
    partial_sum: torch.Tensor | None = None  # [batch, num_heads, max_splits] fp32, softmax denominator
    counters: torch.Tensor | None = None  # [batch, num_kv_heads] int32 arrivals (fused reduce only)

    @property
    def tuning(self) -> AttentionTuning:
        return DEFAULT_ATTENTION_TUNING

    def splits(self, context_len: int | None = None) -> int:
        ctx = self.context_len if context_len is None else context_len
        t = self.tuning
        return attention_splits(self.batch, self.num_kv_heads, ctx, self.num_sms, t.block_n, t.programs_per_sm)

    def kernels(self, context_len: int | None = None) -> int:
        """Launches of one Triton attention call under this plan."""
        return 1 if self.tuning.fused_reduce or self.splits(context_len) == 1 else 2


@dataclass(frozen=True)
class TunedAttentionPlan(AttentionPlan):
    """An ``AttentionPlan`` with explicit kernel knobs."""

    knobs: AttentionTuning = DEFAULT_ATTENTION_TUNING

    @property
    def tuning(self) -> AttentionTuning:
        return self.knobs
