"""Header pieces shared by the classify and analyze reports, and a generic table for lists of records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launchprobe.render import values as v
from launchprobe.render.model import Table
from launchprobe.run.schema import Environment, Record, RunHeader


def device_text(env: Environment) -> str:
    if not env.known:
        return v.MISSING
    device = env.device or "?"
    if not env.gpu:
        return str(device)
    extra = []
    if env.gpu_count not in (None, 1):
        extra.append(f"{env.gpu_count} GPUs")
    if env.sm_count is not None:
        extra.append(f"{v.integer(env.sm_count)} SMs")
    if env.gpu_memory_bytes is not None:
        extra.append(v.size(env.gpu_memory_bytes))
    if env.driver:
        extra.append(f"driver {env.driver}")
    if env.cuda:
        extra.append(f"CUDA {env.cuda}")
    return f"{device}: {env.gpu}" + (f" ({', '.join(extra)})" if extra else "")


def software_text(env: Environment) -> str:
    parts = [f"{name} {value}" for value, name in ((env.torch, "torch"), (env.python, "python")) if value]
    if env.platform:
        parts.append(env.platform)
    return ", ".join(parts) or v.MISSING


def made_text(run: RunHeader) -> str:
    made = v.text(run.created or None)
    return f"{made} by launchprobe {run.tool.version}" if run.tool.version else made


def _scalar_cell(key: str, value: Any) -> tuple[str, str]:
    """Header and cell for one field of a generic record, picking the unit from the field name."""
    if key.endswith("_ns"):
        return key[:-3] + " (us)", v.sig(value, 1e-3)
    if key.endswith("_ms"):
        return key[:-3] + " (ms)", v.sig(value)
    if key.endswith("_fraction") or key in ("share", "share_of_step", "share_of_busy", "share_of_span"):
        return key.replace("_fraction", ""), v.percent(value, 1)
    if key.endswith("_bytes"):
        return key, v.size(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return key, v.text(value)
    return key, v.integer(value) if isinstance(value, int) else v.sig(value)


def records_table(title: str, records: Sequence[Record] | None, limit: int = 20) -> Table | None:
    """A table of flat records, columns from their fields (top kernels, largest gaps)."""
    if not records:
        return None
    rows = [r.to_dict() for r in records[:limit]]
    if not rows:
        return None
    keys: list[str] = []
    for record in rows:
        keys.extend(k for k, val in record.items() if k not in keys and not isinstance(val, dict | list))
    text_keys = [k for k in keys if all(isinstance(r.get(k), str) or r.get(k) is None for r in rows)]
    keys = text_keys + [k for k in keys if k not in text_keys]
    header = [_scalar_cell(k, None)[0] for k in keys]
    body = [[_scalar_cell(k, record.get(k))[1] for k in keys] for record in rows]
    align = "l" * len(text_keys) + "r" * (len(keys) - len(text_keys))
    return Table(title=title, columns=header, rows=body, align=align)
