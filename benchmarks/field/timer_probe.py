"""Triton kernels for the lab tool probe_kernels.py: a one-program kernel that reads the GPU's global timer.

Launched with programmatic dependent launch right after an op, it waits for that op (``griddepcontrol.wait``),
reads ``%globaltimer`` and stores it in its slot: the op's end, as a kernel in the PDL chain rather than an event
node. ``TRIGGER_FIRST`` lets the next kernel launch before the wait (as early as the op itself let it), else
after; the pass's own timer (launchprobe/kernels/triton/timer.py) is the trigger-first one. Imported only on a
machine with Triton.
"""

from __future__ import annotations

import triton
import triton.language as tl
import triton.language.extra.cuda as cuda_ext

from launchprobe.kernels.triton.timer import globaltimer as _now


@triton.jit
def probe_kernel(out_ptr, slot, TRIGGER_FIRST: tl.constexpr):
    if TRIGGER_FIRST:
        cuda_ext.gdc_launch_dependents()
        cuda_ext.gdc_wait()
    else:
        cuda_ext.gdc_wait()
    t = _now()
    tl.store(out_ptr + slot, t)
    if not TRIGGER_FIRST:
        cuda_ext.gdc_launch_dependents()


@triton.jit
def timer_loop_kernel(out_ptr, N: tl.constexpr):
    """N reads of the timer, back to back, each stored: the timer's resolution from their differences."""
    for k in range(N):
        t = _now()
        tl.store(out_ptr + k, t)
