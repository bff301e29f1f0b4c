"""CSV: one row per result (classify) or window (analyze), flat columns, no samples or kernel lists."""

from __future__ import annotations

import csv
import io
from typing import Any

import msgspec

from launchprobe.run.schema import AnalyzeRun, Run

DROPPED = ("step_ms_samples", "kernels")  # raw lists; the run file keeps them


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        elif isinstance(value, list) or key in DROPPED:
            continue
        else:
            out[name] = value
    return out


def rows(run: Run) -> list[dict[str, Any]]:
    common: dict[str, Any] = {
        "kind": run.kind,
        "created": run.created,
        "gpu": run.environment.gpu,
        "device": run.environment.device,
    }
    records: list[Any]
    if isinstance(run, AnalyzeRun):
        common["source"] = run.source.path
        records = run.windows
    else:
        common["shape"] = run.shape.name or run.config.shape
        common["context"] = run.config.context
        common["dtype"] = run.config.dtype
        records = run.results
    out = []
    for record in records:
        flat = _flatten(msgspec.to_builtins(record))
        # window "device" is the GPU index; keep the run's device kind apart
        out.append({**{k: val for k, val in common.items() if k not in flat}, **flat})
    return out


def to_csv(run: Run) -> str:
    records = rows(run)
    columns: list[str] = []
    for record in records:
        columns.extend(k for k in record if k not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if val is None else val for k, val in record.items()})
    return buffer.getvalue()
