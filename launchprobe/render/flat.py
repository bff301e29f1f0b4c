"""CSV: one row per result (classify) or window (analyze), flat columns, no samples or kernel lists."""

from __future__ import annotations

import csv
import io
from typing import Any

from launchprobe.render import values as v

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


def rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    env = v.mapping(run.get("environment"))
    common = {
        "kind": run.get("kind"),
        "created": run.get("created"),
        "gpu": env.get("gpu"),
        "device": env.get("device"),
    }
    if run.get("kind") == "analyze":
        common["source"] = v.get(run, "source", "path")
        records = run.get("windows")
    else:
        common["shape"] = v.get(run, "shape", "name") or v.get(run, "config", "shape")
        common["context"] = v.get(run, "config", "context")
        common["dtype"] = v.get(run, "config", "dtype")
        records = run.get("results")
    out = []
    for record in records if isinstance(records, list) else []:
        if isinstance(record, dict):
            flat = _flatten(record)
            # window "device" is the GPU index; keep the run's device kind apart
            row = {**{k: val for k, val in common.items() if k not in flat}, **flat}
            out.append(row)
    return out


def to_csv(run: dict[str, Any]) -> str:
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
