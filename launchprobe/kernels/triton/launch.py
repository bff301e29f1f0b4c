"""Launching the Triton kernels: programmatic dependent launch, direct relaunch of bound ops, and ``TritonOps``.

Relaunch. Triton's per-call dispatch (binding and specialising the arguments, the cache key) costs tens of
microseconds of host time, several times a torch launch. A decode step calls each op with the same tensors every
time, so ``TritonOps.bind`` records the compiled kernels and arguments of an op's first call and relaunches them
directly after that (CompiledKernel[grid]), which is all Triton's own launch path does once it has a kernel.

Programmatic dependent launch (PDL, Hopper and later). A decode step is a chain of kernels each of which needs the
previous one's output, so without PDL every kernel starts only after the previous one has drained, plus the launch
latency: at batch 1 that bubble (HBM idle) is paid ~10 times per layer. Launched with PDL, a kernel may start as
soon as every program of the previous kernel has started: its programs are already resident, their set-up done,
when the previous kernel ends. Each kernel waits for the previous one to finish and its writes to be visible
(``griddepcontrol.wait``) before it reads anything, and only then lets the next kernel launch
(``griddepcontrol.launch_dependents``; ``common.wait_for_inputs``): at most one kernel runs ahead, and every kernel
waits, so completion is still ordered transitively (a kernel done implies all before it done). cuBLAS and torch
kernels in between are ordinary launches and wait for everything before them. Inside a CUDA graph the PDL launches
become programmatic edges; an event recorded between two kernels (the per-kernel pass) turns the edge back into a
full dependency.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from launchprobe.kernels import reference
from launchprobe.kernels.ops import KernelSettings
from launchprobe.kernels.plans import AttentionPlan, GemvPlan
from launchprobe.kernels.triton import attention, gemv, kv_cache, norm, rotary, silu
from launchprobe.kernels.triton.common import HAVE_GDC

# Ops that are nothing but Triton launches (no torch work inside), so their recorded launches are the whole op.
# ``gemv`` is one Triton launch up to GEMV_MAX_BATCH rows and torch.mm above: a call that recorded no launch is
# not replayed but called again.
RELAUNCHABLE = frozenset({"rmsnorm", "add_rmsnorm", "rotary", "kv_write", "silu_mul", "attention", "gemv"})


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))  # type: ignore[return-value]


def pdl_supported(device: torch.device) -> bool:
    """Whether kernels on ``device`` can launch with PDL: a CUDA GPU of compute capability >= 9.0, a Triton with
    griddepcontrol, compiled (not interpreted) kernels."""
    return HAVE_GDC and device.type == "cuda" and not _interpreted() and _capability(device.index) >= (9, 0)


class Launcher:
    """Launches kernels for one ``TritonOps``: with PDL when ``pdl`` and the device supports it; records the
    compiled kernels while a bound op makes its first call."""

    def __init__(self, pdl: bool) -> None:
        self.pdl = pdl
        self._recording: list[tuple[Any, tuple[Any, ...]]] | None = None
        self._traced: list[str] | None = None

    def pdl_active(self, device: torch.device) -> bool:
        return self.pdl and pdl_supported(device)

    def __call__(self, kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        if self.pdl_active(device):
            kwargs.update(PDL=True, launch_pdl=True)
        else:
            kwargs["PDL"] = False
        if self._traced is not None:
            self._traced.append(kernel.fn.__name__)
        compiled = kernel[grid](*args, **kwargs)
        if self._recording is not None:
            params = {name: value for name, value in kwargs.items() if name in kernel.arg_names}
            bound = inspect.signature(kernel.fn).bind(*args, **params)
            bound.apply_defaults()
            grid3 = (*grid, *(1,) * (3 - len(grid)))  # CompiledKernel[grid] indexes all three dimensions
            self._recording.append((compiled[grid3], tuple(bound.arguments.values())))

    @contextmanager
    def trace(self) -> Iterator[list[str]]:
        """The names of the kernels launched inside the block, in order (interpreted kernels too)."""
        names: list[str] = []
        self._traced = names
        try:
            yield names
        finally:
            self._traced = None

    def relaunching(self, fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
        """``fn(*args)`` as a closure whose first call records the kernels ``fn`` launches through this launcher;
        later calls launch those directly (or call ``fn`` again if it launched none)."""
        if _interpreted():
            return lambda: fn(*args)  # the interpreter has no compiled kernels to relaunch
        launches: list[tuple[Any, tuple[Any, ...]]] = []
        recorded = False

        def first_then_replay() -> None:
            nonlocal recorded
            if recorded:
                if not launches:
                    fn(*args)
                for runner, values in launches:
                    runner(*values)
                return
            self._recording = launches
            try:
                fn(*args)
            finally:
                self._recording = None
            recorded = True

        return first_then_replay


class TritonOps:
    """The fused Triton ops behind the ``Ops`` interface; embedding and linear stay torch (one kernel each).

    Kernel switches come from ``settings`` and hold for the life of the object. GEMV plans made by ``gemv`` itself
    are cached here, per object.
    """

    name = "triton"

    embedding = staticmethod(reference.embedding)
    linear = staticmethod(reference.linear)
    attention_plan = staticmethod(attention.attention_plan)
    gemv_plan = staticmethod(gemv.gemv_plan)

    def __init__(self, settings: KernelSettings | None = None) -> None:
        self.settings = settings or KernelSettings()
        self.launcher = Launcher(self.settings.pdl)
        self._gemv_plans = gemv.GemvPlans()

    def pdl_active(self, device: torch.device) -> bool:
        return self.launcher.pdl_active(device)

    def bind(self, fn: Callable[..., Any], *args: Any) -> Callable[[], None]:
        """``fn(*args)`` as a closure; one of this object's pure-Triton ops is relaunched directly after its first
        call (``Launcher.relaunching``)."""
        if getattr(fn, "__self__", None) is not self or fn.__name__ not in RELAUNCHABLE:
            return lambda: fn(*args)
        return self.launcher.relaunching(fn, *args)

    def rmsnorm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, residual_out: torch.Tensor | None
    ) -> None:
        norm.rmsnorm(self.launcher, x, weight, eps, out, residual_out, max_block=self.settings.norm_max_block)

    def add_rmsnorm(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        out: torch.Tensor,
        store_residual: bool = True,
    ) -> None:
        max_block = self.settings.norm_max_block
        norm.add_rmsnorm(self.launcher, x, residual, weight, eps, out, store_residual, max_block=max_block)

    def rotary(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float, head_dim: int) -> None:
        rotary.rotary(self.launcher, q, k, positions, theta, head_dim)

    def kv_write(
        self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
    ) -> None:
        kv_cache.kv_write(self.launcher, k, v, k_cache, v_cache, positions)

    def attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        context_len: int,
        out: torch.Tensor,
        scale: float,
        plan: AttentionPlan,
    ) -> None:
        attention.attention(self.launcher, q, k_cache, v_cache, context_len, out, scale, plan)

    def silu_mul(self, gate_up: torch.Tensor, out: torch.Tensor) -> None:
        silu.silu_mul(self.launcher, gate_up, out)

    def gemv(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, plan: GemvPlan | None = None) -> None:
        """``out = x @ w.T``; ``plan`` defaults to this object's cached plan for the shape (see ``gemv.gemv``)."""
        gemv.gemv(self.launcher, self._gemv_plans, x, w, out, plan, weight_hint=self.settings.gemv_weight_hint)
