"""The CUPTI passes' reading of torch.profiler results, with a stand-in profiler (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from launchprobe.measure import cupti


class FakeEvent:
    def __init__(self, name: str, start: int, duration: int, cuda: bool = True) -> None:
        self._name, self._start, self._duration, self._cuda = name, start, duration, cuda

    def name(self) -> str:
        return self._name

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return self._duration

    def device_type(self) -> Any:
        return torch.autograd.DeviceType.CUDA if self._cuda else torch.autograd.DeviceType.CPU


def fake_profiler(monkeypatch: pytest.MonkeyPatch, events: list[FakeEvent]) -> list[int]:
    """Make torch.profiler.profile record nothing and report ``events``; returns a call counter of the work."""
    calls: list[int] = []

    class FakeProfile:
        def __init__(self, **_: Any) -> None:
            self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))

        def __enter__(self) -> FakeProfile:
            calls.append(1)
            return self

        def __exit__(self, *_: Any) -> None:
            return None

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return calls


def test_gpu_intervals_are_filtered_and_in_start_order(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [FakeEvent("b", 300, 50), FakeEvent("cpu op", 0, 999, cuda=False), FakeEvent("a", 100, 150)]
    fake_profiler(monkeypatch, events)
    ran: list[int] = []
    rows = cupti.cuda_intervals(lambda: ran.append(1))
    assert ran == [1]
    assert rows == [("a", 100, 250), ("b", 300, 350)]


def test_activity_summary_per_step_and_none_without_cupti(monkeypatch: pytest.MonkeyPatch) -> None:
    # two steps: kernels [0,100) [50,120) and [200,260): busy 180 ns over 2 steps
    fake_profiler(monkeypatch, [FakeEvent("k", 0, 100), FakeEvent("k", 50, 70), FakeEvent("k", 200, 60)])
    summary = cupti.profile_gpu_activity(lambda: None, steps=2)
    assert summary is not None
    assert summary.kernels_per_step == 1.5
    assert summary.busy_ns == 180 and summary.span_ns == 260
    assert summary.busy_ms_per_step == pytest.approx(90 / 1e6)
    fake_profiler(monkeypatch, [FakeEvent("cpu op", 0, 10, cuda=False)])
    assert cupti.profile_gpu_activity(lambda: None, steps=2) is None  # CUPTI held elsewhere: not zeros


def test_cupti_pass_is_a_timeline_read_like_a_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass's GPU ops land in the trace readers' Timeline columns, and busy comes from the same window code."""
    events = [FakeEvent("k", 0, 100), FakeEvent("Memcpy DtoH (Device -> Pageable)", 150, 20), FakeEvent("k", 120, 10)]
    fake_profiler(monkeypatch, events)
    summary = cupti.profile_gpu_activity(lambda: None, steps=1)
    assert summary is not None
    ops = summary.timeline.gpu_ops
    assert list(ops["kind"]) == ["kernel", "kernel", "memcpy"] and list(ops["start_ns"]) == [0, 120, 150]
    assert str(ops["start_ns"].dtype) == "int64" and set(ops["device"]) == {0}
    assert (summary.kernels, summary.busy_ns, summary.span_ns) == (3, 130, 170)
