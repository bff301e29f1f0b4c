"""Host API names of CUDA (runtime and driver) and ROCm/HIP: which calls launch work, launch graphs, wait or copy.

Pure name tables and functions, no torch, no pandas: the readers use them to fill ``api_calls.category`` and
analyses may call them on names directly. Every function accepts a name as a trace writes it: nsys appends the
API version (``cudaLaunchKernel_v7000``), per-thread default-stream variants end in ``_ptsz`` / ``_ptds``
(CUDA) or ``_spt`` (HIP); all of these are dropped before the lookup (``canonical_api_name``).
"""

from __future__ import annotations

import re

# Calls that launch one kernel (or, for the multi-device forms, one kernel per device).
CUDA_LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cudaLaunch",  # CUDA <= 6.5, after cudaConfigureCall
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuLaunchCooperativeKernelMultiDevice",
        "cuLaunch",  # legacy driver API
        "cuLaunchGrid",
        "cuLaunchGridAsync",
    }
)
HIP_LAUNCH_NAMES = frozenset(
    {
        "hipLaunchKernel",
        "hipLaunchKernelExC",
        "hipLaunchByPtr",
        "hipExtLaunchKernel",
        "hipExtLaunchMultiKernelMultiDevice",
        "hipExtModuleLaunchKernel",
        "hipHccModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipModuleLaunchKernelEx",
        "hipDrvLaunchKernelEx",
        "hipLaunchCooperativeKernel",
        "hipLaunchCooperativeKernelMultiDevice",
        "hipModuleLaunchCooperativeKernel",
        "hipModuleLaunchCooperativeKernelMultiDevice",
    }
)
LAUNCH_NAMES = CUDA_LAUNCH_NAMES | HIP_LAUNCH_NAMES
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
# Host calls that wait for (or poll) the device, besides every "...Synchronize" call
# (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize, hipDeviceSynchronize, ...).
POLL_NAMES = frozenset(
    {"cudaEventQuery", "cudaStreamQuery", "cuEventQuery", "cuStreamQuery", "hipEventQuery", "hipStreamQuery"}
)

_VERSION = re.compile(r"(?:_v\d+)+$")
_PER_THREAD = re.compile(r"_(?:ptsz|ptds|spt)$")


def base_api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``: the trailing nsys API version dropped (one suffix, as
    analyses have always shown the name)."""
    return re.sub(r"_v\d+$", "", name)


def canonical_api_name(name: str) -> str:
    """The name looked up in the tables: every version suffix and a per-thread-stream suffix dropped
    (``cudaLaunchKernel_ptsz_v7000`` -> ``cudaLaunchKernel``, ``hipMemcpy_spt`` -> ``hipMemcpy``)."""
    base = _VERSION.sub("", name)
    base = _PER_THREAD.sub("", base)
    return _VERSION.sub("", base)


def is_launch(name: str) -> bool:
    """A call that launches a kernel (CUDA runtime or driver, HIP), not a graph."""
    return canonical_api_name(name) in LAUNCH_NAMES


def is_graph_launch(name: str) -> bool:
    """``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``."""
    return canonical_api_name(name) in GRAPH_LAUNCH_NAMES


def is_any_launch(name: str) -> bool:
    """A kernel launch or a graph launch: a call whose correlation id GPU work carries."""
    base = canonical_api_name(name)
    return base in LAUNCH_NAMES or base in GRAPH_LAUNCH_NAMES


def is_sync(name: str) -> bool:
    """A host call that waits for or polls the device (``*Synchronize``, event and stream queries)."""
    base = canonical_api_name(name)
    return "Synchronize" in base or base in POLL_NAMES


def is_copy(name: str) -> bool:
    """A copy or set call (``cudaMemcpyAsync``, ``cuMemcpyHtoD``, ``cudaMemsetAsync``, ``hipMemcpyWithStream``, ...)."""
    base = canonical_api_name(name)
    return "Memcpy" in base or "Memset" in base


def api_category(name: str) -> str:
    """``launch`` | ``graph_launch`` | ``sync`` | ``memcpy`` | ``other`` (``api_calls.category``)."""
    base = canonical_api_name(name)
    if base in LAUNCH_NAMES:
        return "launch"
    if base in GRAPH_LAUNCH_NAMES:
        return "graph_launch"
    if "Synchronize" in base or base in POLL_NAMES:
        return "sync"
    if "Memcpy" in base or "Memset" in base:
        return "memcpy"
    return "other"
