"""A timer kernel: one program that waits for the kernel before it and stores the GPU's global timer.

The per-kernel pass's timer pairs (docs/gaps.md) put one after op i - 1 and one after op i of a captured step;
their difference less op i's duration is the gap before op i. Launched with programmatic dependent launch it lets
the next kernel launch first (``griddepcontrol.launch_dependents``), then waits for the op before it to finish
(``griddepcontrol.wait``) and reads ``%globaltimer``: a kernel in the PDL chain, not a node that drains it as an
event node does. Without PDL it is an ordinary launch, which starts once the op before it has finished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from launchprobe.kernels.triton.common import HAVE_GDC, _cuda_ext


@triton.jit
def globaltimer():
    """The GPU's global timer, ns (inline PTX: %globaltimer)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _timer_kernel(out_ptr, slot, PDL: tl.constexpr):
    if PDL:
        _cuda_ext.gdc_launch_dependents()
        _cuda_ext.gdc_wait()
    tl.store(out_ptr + slot, globaltimer())


def record_time(out: torch.Tensor, slot: int, pdl: bool) -> Any:
    """Launch the timer kernel on the current stream: ``out[slot]`` gets the time (ns) the kernel before it ended.
    ``pdl``: launch it with programmatic dependent launch (the GPU and Triton must support it). Returns Triton's
    compiled kernel."""
    if out.dtype != torch.int64 or out.dim() != 1 or not 0 <= slot < out.numel():
        raise ValueError(f"timer slot {slot} needs a 1-D int64 buffer of more than {slot} entries")
    kwargs: dict[str, Any] = {"PDL": pdl and HAVE_GDC, "num_warps": 1}
    if kwargs["PDL"]:
        kwargs["launch_pdl"] = True
    return _timer_kernel[(1,)](out, slot, **kwargs)


def bound_timer(out: torch.Tensor, slot: int, pdl: bool) -> Callable[[], None]:
    """``record_time(out, slot, pdl)`` as a closure that relaunches the compiled kernel directly, without Triton's
    per-call dispatch (on the H200 machine's host 7.5-8.3 us a launch against 14.1-14.3 through it,
    benchmarks/field/timer_host_cost.py): for a timer the host launches inside a step. Launches the timer once
    now, to compile it."""
    compiled = record_time(out, slot, pdl)
    runner = compiled[(1, 1, 1)]
    flag = pdl and HAVE_GDC
    return lambda: runner(out, slot, flag)
