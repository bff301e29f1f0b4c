"""PNG pictures of a run (matplotlib, Agg backend, imported only when plotting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(run: dict[str, Any], directory: Path) -> list[Path]:
    """Write every picture that the run has data for into ``directory``; return the files written."""
    return []
