"""The Triton ops' launch path without a GPU: PDL flags, recording an op's launches and relaunching them, tracing.

A stand-in kernel takes the place of a compiled Triton kernel (same indexing protocol: ``kernel[grid](...)`` returns
a compiled kernel, ``compiled[grid3](*values)`` relaunches it). Skipped when triton is not importable.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

events: list[tuple[Any, ...]] = []


def _fake_kernel(x_ptr: Any, n: Any, BLOCK: Any = 16, PDL: Any = False) -> None:
    raise AssertionError("never called: the stand-in only records")


class _Compiled:
    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        return lambda *values: events.append(("relaunch", grid, values))


class _Kernel:
    fn = staticmethod(_fake_kernel)
    arg_names = ["x_ptr", "n", "BLOCK", "PDL"]

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> _Compiled:
            events.append(("launch", grid, args, kwargs))
            return _Compiled()

        return launch


KERNEL = _Kernel()


@pytest.fixture
def ops(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A TritonOps whose ``rmsnorm`` (a relaunchable op) launches the stand-in kernel twice and ``gemv`` none."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    from launchprobe.kernels.triton import TritonOps

    class StandIn(TritonOps):
        def rmsnorm(self, x: torch.Tensor, *rest: Any) -> None:
            self.launcher(KERNEL, (4,), x, x.shape[0], BLOCK=32, num_warps=4)
            self.launcher(KERNEL, (2, 3), x, 5)

        def gemv(self, x: torch.Tensor, *rest: Any) -> None:
            events.append(("torch work", x.shape[0]))

    events.clear()
    return StandIn()


def test_launches_without_pdl_off_a_gpu(ops: Any) -> None:
    x = torch.zeros(3, 8)
    assert not ops.pdl_active(x.device)
    ops.rmsnorm(x)
    assert events[0] == ("launch", (4,), (x, 3), {"BLOCK": 32, "num_warps": 4, "PDL": False})
    assert events[1] == ("launch", (2, 3), (x, 5), {"PDL": False})


def test_pdl_flags_follow_the_settings_where_the_device_supports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from launchprobe.kernels import KernelSettings
    from launchprobe.kernels.triton import TritonOps, launch

    monkeypatch.setattr(launch, "pdl_supported", lambda device: True)
    x = torch.zeros(1, 8)
    for pdl, extra in ((True, {"PDL": True, "launch_pdl": True}), (False, {"PDL": False})):
        events.clear()
        ops = TritonOps(KernelSettings(pdl=pdl))
        assert ops.pdl_active(x.device) == pdl
        ops.launcher(KERNEL, (1,), x, 1)
        assert events == [("launch", (1,), (x, 1), extra)]


def test_bound_op_records_its_first_call_then_relaunches(ops: Any) -> None:
    x = torch.zeros(3, 8)
    step = ops.bind(ops.rmsnorm, x)
    step()
    assert [e[0] for e in events] == ["launch", "launch"]
    events.clear()
    step()
    step()
    # every argument bound (defaults applied, launch options left out), grids padded to three dimensions
    one, two = ("relaunch", (4, 1, 1), (x, 3, 32, False)), ("relaunch", (2, 3, 1), (x, 5, 16, False))
    assert events == [one, two, one, two]


def test_bind_calls_again_what_it_cannot_relaunch(ops: Any) -> None:
    x = torch.zeros(2, 8)
    for fn in (ops.gemv, type(ops)().rmsnorm, lambda x: ops.rmsnorm(x)):  # no launch; another object's; not an op
        events.clear()
        step = ops.bind(fn, x)
        step()
        first = list(events)
        events.clear()
        step()
        assert events == first and not any(e[0] == "relaunch" for e in events)


def test_trace_names_the_kernels_launched(ops: Any) -> None:
    x = torch.zeros(1, 8)
    with ops.launcher.trace() as names:
        ops.rmsnorm(x)
    assert names == ["_fake_kernel", "_fake_kernel"]
    ops.rmsnorm(x)
    assert names == ["_fake_kernel", "_fake_kernel"]  # nothing recorded outside the block
