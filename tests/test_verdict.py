"""The classify verdict rule on constructed measurements."""

from __future__ import annotations

from launchprobe.analysis.verdict import classify_step


def test_idle_half_the_step_is_launch_bound() -> None:
    v = classify_step(step_ms=10.0, idle_fraction=0.5, memory_floor_ms=4.0, compute_floor_ms=1.0)
    assert v.verdict == "launch-bound"
    assert "50%" in v.reason and "10.000 ms" in v.reason


def test_busy_step_goes_to_the_larger_floor() -> None:
    memory = classify_step(step_ms=10.0, idle_fraction=0.2, memory_floor_ms=8.0, compute_floor_ms=1.0)
    compute = classify_step(step_ms=10.0, idle_fraction=0.49, memory_floor_ms=2.0, compute_floor_ms=7.5)
    assert memory.verdict == "memory-bound"
    assert compute.verdict == "compute-bound"
    assert "7.500 ms" in compute.reason and "20%" in memory.reason


def test_unknown_idle_uses_floors_only() -> None:
    v = classify_step(step_ms=1.0, idle_fraction=None, memory_floor_ms=0.1, compute_floor_ms=0.2)
    assert v.verdict == "compute-bound"
    assert "idle" not in v.reason
