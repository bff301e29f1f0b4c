"""Formatting of run-file values. Missing or non-numeric values render as a dash, never raise."""

from __future__ import annotations

from typing import Any

from launchprobe.run.files import finite_number

MISSING = "—"
MISSING_PLAIN = "-"


number = finite_number  # a finite float, or None for anything missing or not a number


def fixed(value: Any, digits: int = 2, scale: float = 1.0) -> str:
    x = number(value)
    return MISSING if x is None else f"{x * scale:,.{digits}f}"


def signed(value: Any, digits: int = 2, scale: float = 1.0) -> str:
    """A number with its sign always shown: +0.45, -0.61."""
    x = number(value)
    return MISSING if x is None else f"{x * scale:+.{digits}f}"


def sig(value: Any, scale: float = 1.0) -> str:
    """About three significant digits: 0.0123, 1.23, 12.3, 1,234."""
    x = number(value)
    if x is None:
        return MISSING
    x *= scale
    ax = abs(x)
    if ax >= 100 or ax == 0:
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def percent(value: Any, digits: int = 0) -> str:
    """A 0..1 fraction as a percentage."""
    x = number(value)
    return MISSING if x is None else f"{x * 100:.{digits}f}%"


def integer(value: Any) -> str:
    x = number(value)
    return MISSING if x is None else f"{round(x):,}"


def ratio(value: Any) -> str:
    x = number(value)
    return MISSING if x is None else f"{x:.2f}x"


def size(value: Any) -> str:
    """Bytes with a binary unit."""
    x = number(value)
    if x is None:
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return MISSING  # unreachable


def text(value: Any) -> str:
    if value is None or value == "":
        return MISSING
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or MISSING
    return str(value)


def get(record: Any, *keys: str) -> Any:
    """record[k1][k2]..., None where any level is missing or not a dict."""
    for key in keys:
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def mapping(value: Any) -> dict[str, Any]:
    """The value if it is a dict, else an empty one (a run file from elsewhere may hold anything)."""
    return value if isinstance(value, dict) else {}
