"""launchprobe: is the GPU computing, reading memory, or waiting for the CPU during LLM decode?

From Python (docs/api.md)::

    import launchprobe
    run = launchprobe.analyze("trace.json.gz", ranges="ProfilerStep#.*")   # an AnalyzeRun
    run.windows_frame()
    run = launchprobe.load_run("run.json")                                 # a saved run of either kind
    run = launchprobe.classify(batches=[1], modes="eager")                 # needs launchprobe[classify]

The functions live in launchprobe.api and are imported on first use, so ``import launchprobe`` stays light (no
pandas, numpy or torch). ``launchprobe.classify`` is also the module of the classify job
(``launchprobe.classify.build_config``); calling it runs ``launchprobe.api.classify``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from launchprobe.api import (
        TraceAnalysis,
        analyze,
        analyze_timeline,
        analyze_trace,
        load_run,
        read_trace,
        save_run,
        write_trace,
    )
    from launchprobe.run.schema import AnalyzeRun, ClassifyRun, Run

__all__ = [
    "AnalyzeRun",
    "ClassifyRun",
    "Run",
    "TraceAnalysis",
    "__version__",
    "analyze",
    "analyze_timeline",
    "analyze_trace",
    "classify",
    "load_run",
    "read_trace",
    "save_run",
    "write_trace",
]
_SCHEMA = ("AnalyzeRun", "ClassifyRun", "Run")
_API = tuple(name for name in __all__ if name not in (*_SCHEMA, "__version__", "classify"))


def __getattr__(name: str) -> Any:
    if name == "classify":  # the module, made callable at its end (the submodule import binds this name anyway)
        return importlib.import_module("launchprobe.classify")
    if name in _API:
        return getattr(importlib.import_module("launchprobe.api"), name)
    if name in _SCHEMA:
        return getattr(importlib.import_module("launchprobe.run.schema"), name)
    raise AttributeError(f"module 'launchprobe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
