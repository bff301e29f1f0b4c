"""The report of an analyze run: where the trace came from, then per window where the time went and why."""

from __future__ import annotations

from typing import Any

from launchprobe.render import common
from launchprobe.render import values as v
from launchprobe.render.model import Block, Lines, Report, Table

SOURCE_KEYS_SHOWN = ("path", "format")


def windows(run: dict[str, Any]) -> list[dict[str, Any]]:
    raw = run.get("windows")
    return [w for w in raw if isinstance(w, dict)] if isinstance(raw, list) else []


def window_label(w: dict[str, Any]) -> str:
    return f"{v.text(w.get('name'))} (device {v.text(w.get('device'))})"


def build(run: dict[str, Any]) -> Report:
    report = Report(title="launchprobe analyze")
    report.fields = _header(run)
    report.notices = common.notices(run)
    rows = windows(run)
    report.blocks += [_windows_table(rows), _gaps_table(rows)]
    reasons = [f"{window_label(w)}: {w['verdict_reason']}" for w in rows if w.get("verdict_reason")]
    if reasons:
        report.blocks.append(Lines("Why each verdict", reasons))
    report.blocks += _lists(run, rows)
    return report


def _header(run: dict[str, Any]) -> list[tuple[str, str]]:
    source = v.mapping(run.get("source"))
    fields = [("source", f"{v.text(source.get('path'))} ({v.text(source.get('format'))})")]
    versions = [
        f"{k} {val}" for k, val in source.items() if k not in SOURCE_KEYS_SHOWN and isinstance(val, str | int | float)
    ]
    if versions:
        fields.append(("read from", ", ".join(versions)))
    config = run.get("config")
    if isinstance(config, dict):
        options = [f"{k}={v.text(val)}" for k, val in config.items() if val not in (None, [], {}, "")]
        fields.append(("options", ", ".join(options) or "defaults"))
    env = run.get("environment")
    if isinstance(env, dict) and env:
        fields.append(("device", common.device_text(env)))
    fields.append(("made", common.made_text(run)))
    return fields


def _share(w: dict[str, Any], key: str) -> str:
    part, span = v.number(w.get(key)), v.number(w.get("span_ns"))
    return v.percent(part / span) if part is not None and span else v.MISSING


def _windows_table(rows: list[dict[str, Any]]) -> Table:
    body = [
        [
            v.text(w.get("name")),
            v.text(w.get("device")),
            v.integer(w.get("kernels")),
            v.integer(w.get("gpu_ops")),
            v.fixed(w.get("kernels_per_launch"), 2),
            v.fixed(w.get("span_ns"), 3, 1e-6),
            v.fixed(w.get("busy_ns"), 3, 1e-6),
            v.percent(w.get("idle_fraction")),
            _share(w, "idle_host_wait_ns"),
            _share(w, "idle_short_gap_ns"),
            _share(w, "idle_other_ns"),
            v.text(w.get("verdict")),
        ]
        for w in rows
    ]
    columns = [
        "window", "dev", "kernels", "GPU\nops", "kernels\n/launch", "span\nms", "busy\nms", "idle",
        "host\nwait", "short\ngaps", "other\nidle", "verdict",
    ]  # fmt: skip
    note = "idle split as shares of the span: host wait (launch came after the GPU went idle), short gaps, other"
    return Table(title="Windows", columns=columns, rows=body, align="llrrrrrrrrrl", note=note)


def _gaps_table(rows: list[dict[str, Any]]) -> Table:
    body = []
    for w in rows:
        launches = w.get("launches")
        launch_text = (
            ", ".join(f"{name} {v.integer(n)}" for name, n in launches.items()) or v.MISSING
            if isinstance(launches, dict)
            else v.MISSING
        )
        body.append(
            [
                v.text(w.get("name")),
                v.text(w.get("device")),
                *(v.sig(w.get(f"gap_{q}_ns"), 1e-3) for q in ("p50", "p90", "p99", "max")),
                launch_text,
            ]
        )
    columns = ["window", "dev", "gap p50\nus", "gap p90\nus", "gap p99\nus", "gap max\nus", "launch calls"]
    return Table(title="Gaps before each GPU op, and launches", columns=columns, rows=body, align="llrrrrl")


def _lists(run: dict[str, Any], rows: list[dict[str, Any]]) -> list[Block]:
    blocks: list[Block] = []
    for key, title in (("top_kernels", "Top kernels"), ("largest_idle", "Largest idle stretches")):
        table = common.records_table(title, run.get(key))
        if table is not None:
            blocks.append(table)
        for w in rows:
            table = common.records_table(f"{title}: {window_label(w)}", w.get(key))
            if table is not None:
                blocks.append(table)
    return blocks
