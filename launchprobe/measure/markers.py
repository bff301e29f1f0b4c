"""NVTX ranges in one domain, so a run under ``nsys profile -t cuda,nvtx`` shows the structure of each step.

Domain ``launchprobe``. Names (docs/gaps.md):
  ``decode_step mode=<mode> bucket=<bucket>``               one step (every level but ``off``)
  ``kernel_pass mode=<mode> bucket=<bucket>``               one step of the per-kernel event pass
  ``layer <i>``                                         one layer, eager ops only (level ``ops``)
  ``<op>``                                              one op (``attn_norm``, ``qkv``, ... ``lm_head``)
  ``graph <k>/<n> <first op>..<last op>``               one replay of a captured piece (piecewise, full)
Without the ``nvtx`` package, or without a tool attached, the calls are (nearly) free no-ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOMAIN = "launchprobe"
LEVELS = ("off", "steps", "ops")


class Markers:
    """Push/pop callables for named ranges; attributes are made once, so a range costs two calls."""

    def __init__(self, level: str) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown NVTX level {level!r}")
        self.level = level
        self._domain: Any = None
        if level != "off":
            try:
                import nvtx
            except ImportError:
                self.level = "off"
            else:
                self._domain = nvtx.get_domain(DOMAIN)

    @property
    def enabled(self) -> bool:
        return self._domain is not None

    def push(self, name: str) -> Callable[[], Any]:
        domain = self._domain
        attributes = domain.get_event_attributes(message=name)
        return lambda: domain.push_range(attributes)

    def pop(self) -> Callable[[], Any]:
        return self._domain.pop_range
