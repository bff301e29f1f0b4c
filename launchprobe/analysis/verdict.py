"""The classify verdict: launch-bound, memory-bound or compute-bound, with the numbers and rule behind it."""

from __future__ import annotations

from dataclasses import dataclass

LAUNCH_IDLE_THRESHOLD = 0.5  # the GPU idles at least half the step

RULE = (
    "launch-bound when the GPU is idle for at least half of the step; otherwise memory-bound or compute-bound "
    "by the larger floor: bytes / HBM read ceiling against FLOPs / matmul ceiling"
)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str


def classify_step(
    *,
    step_ms: float,
    idle_fraction: float | None,
    memory_floor_ms: float,
    compute_floor_ms: float,
    idle_note: str = "GPU idle",
) -> Verdict:
    """Apply the rule. ``idle_fraction`` is None when idle cannot be observed (then floors alone decide)."""
    floor_kind = "memory-bound" if memory_floor_ms >= compute_floor_ms else "compute-bound"
    floors = f"memory floor {memory_floor_ms:.3f} ms vs compute floor {compute_floor_ms:.3f} ms"
    if idle_fraction is not None and idle_fraction >= LAUNCH_IDLE_THRESHOLD:
        return Verdict(
            "launch-bound",
            f"{idle_note} {idle_fraction:.0%} of a {step_ms:.3f} ms step (>= {LAUNCH_IDLE_THRESHOLD:.0%})",
        )
    idle = "" if idle_fraction is None else f"{idle_note} {idle_fraction:.0%} (< {LAUNCH_IDLE_THRESHOLD:.0%}); "
    return Verdict(floor_kind, f"{idle}{floors}: the larger floor decides")
