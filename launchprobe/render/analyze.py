"""The report of an analyze run: where the trace came from, then where the time went and why.

Readable at a glance however many windows there are: one row per range name and device (instances of ``step 17``,
``ProfilerStep#3`` ... pooled, see launchprobe.analysis.trace_run), then every window when there are few, or the
slowest few and a count of the rest (the JSON and CSV keep every window); top kernels and largest idle stretches
once per range name.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from launchprobe.render import common
from launchprobe.render import values as v
from launchprobe.render.model import Block, Lines, Report, Table

SOURCE_KEYS_SHOWN = ("path", "format")
FEW_WINDOWS = 12  # up to this many windows, show every one
SLOWEST = 8  # otherwise, the slowest this many


def windows(run: dict[str, Any]) -> list[dict[str, Any]]:
    raw = run.get("windows")
    return [w for w in raw if isinstance(w, dict)] if isinstance(raw, list) else []


def window_label(w: dict[str, Any]) -> str:
    return f"{v.text(w.get('name'))} (device {v.text(w.get('device'))})"


def summaries(run: dict[str, Any]) -> list[dict[str, Any]]:
    raw = run.get("summaries")
    return [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []


def _names(rows: list[dict[str, Any]]) -> list[str]:
    """Window names, with the instance number where a name repeats (``decode_step #3``)."""
    counts = Counter(w.get("name") for w in rows)
    return [
        f"{v.text(w.get('name'))} #{w['instance']}"
        if counts[w.get("name")] > 1 and isinstance(w.get("instance"), int)
        else v.text(w.get("name"))
        for w in rows
    ]


def build(run: dict[str, Any]) -> Report:
    report = Report(title="launchprobe analyze")
    report.fields = _header(run)
    report.notices = common.notices(run)
    rows, groups = windows(run), summaries(run)
    if groups:
        report.blocks.append(_ranges_table(groups))
    shown = rows if len(rows) <= FEW_WINDOWS else sorted(rows, key=lambda w: -(v.number(w.get("span_ns")) or 0))
    shown = shown[: max(FEW_WINDOWS if len(rows) <= FEW_WINDOWS else SLOWEST, 0)]
    names = dict(zip(map(id, rows), _names(rows), strict=True))
    shown_names = [names[id(w)] for w in shown]
    report.blocks += [_windows_table(shown, shown_names, len(rows)), _gaps_table(shown, shown_names)]
    reasons = [
        f"{window_label(g)}, {v.integer(g.get('instances'))} windows: {g['verdict_reason']}"
        for g in groups
        if g.get("verdict_reason") and (v.number(g.get("instances")) or 0) > 1
    ]
    if len(shown) == len(rows):
        reasons += [f"{window_label(w)}: {w['verdict_reason']}" for w in rows if w.get("verdict_reason")]
    if reasons:
        report.blocks.append(Lines("Why each verdict", reasons))
    report.blocks += _lists(run, shown, groups, rows)
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


def _verdicts(counts: Any) -> str:
    if not isinstance(counts, dict) or not counts:
        return v.MISSING
    return ", ".join(f"{name} {v.integer(n)}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _ranges_table(groups: list[dict[str, Any]]) -> Table:
    body = [
        [
            v.text(g.get("name")),
            v.text(g.get("device")),
            v.integer(g.get("instances")),
            *(v.fixed(g.get(k), 3, 1e-6) for k in ("span_p50_ns", "span_p90_ns", "busy_p50_ns", "busy_p90_ns")),
            v.percent(g.get("idle_fraction")),
            _share(g, "idle_host_wait_ns"),
            _share(g, "idle_short_gap_ns"),
            _share(g, "idle_other_ns"),
            v.sig(g.get("gap_p50_ns"), 1e-3),
            v.sig(g.get("gap_p90_ns"), 1e-3),
            _verdicts(g.get("verdicts")),
        ]
        for g in groups
    ]
    columns = [
        "range", "dev", "count", "span p50\nms", "span p90\nms", "busy p50\nms", "busy p90\nms", "idle", "host\nwait",
        "short\ngaps", "other\nidle", "gap p50\nus", "gap p90\nus", "verdicts",
    ]  # fmt: skip
    note = "totals over each name's windows (<n>: an instance number), as shares of their span; gaps: all idle"
    return Table(title="Ranges", columns=columns, rows=body, align="llrrrrrrrrrrrl", note=note)


def _windows_table(rows: list[dict[str, Any]], names: list[str], total: int) -> Table:
    body = [
        [
            name,
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
        for w, name in zip(rows, names, strict=True)
    ]
    columns = [
        "window", "dev", "kernels", "GPU\nops", "kernels\n/launch", "span\nms", "busy\nms", "idle",
        "host\nwait", "short\ngaps", "other\nidle", "verdict",
    ]  # fmt: skip
    note = "idle split as shares of the span: host wait (launch came after the GPU went idle), short gaps, other"
    title = "Windows"
    if total > len(rows):
        title = f"Slowest {len(rows)} of {total} windows"
        note = f"{total - len(rows)} more windows in the JSON/CSV (--format json, --format csv); {note}"
    return Table(title=title, columns=columns, rows=body, align="llrrrrrrrrrl", note=note)


def _gaps_table(rows: list[dict[str, Any]], names: list[str]) -> Table:
    body = []
    for w, name in zip(rows, names, strict=True):
        launches = w.get("launches")
        launch_text = (
            ", ".join(f"{name} {v.integer(n)}" for name, n in launches.items()) or v.MISSING
            if isinstance(launches, dict)
            else v.MISSING
        )
        body.append(
            [
                name,
                v.text(w.get("device")),
                *(v.sig(w.get(f"gap_{q}_ns"), 1e-3) for q in ("p50", "p90", "p99", "max")),
                launch_text,
            ]
        )
    columns = ["window", "dev", "gap p50\nus", "gap p90\nus", "gap p99\nus", "gap max\nus", "launch calls"]
    return Table(title="Gaps before each GPU op, and launches", columns=columns, rows=body, align="llrrrrl")


def _lists(
    run: dict[str, Any], shown: list[dict[str, Any]], groups: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> list[Block]:
    """Top kernels and largest idle stretches: once per range name (pooled over its windows; the slowest window's
    in runs saved before pooling) or, for whole-trace windows, per window shown."""
    blocks: list[Block] = []
    for key, title in (("top_kernels", "Top kernels"), ("largest_idle", "Largest idle stretches")):
        table = common.records_table(title, run.get(key))
        if table is not None:
            blocks.append(table)
        if groups:
            for g in groups:
                records, label = g.get(key), f"{window_label(g)}, {v.integer(g.get('instances'))} windows"
                if not isinstance(records, list):  # an older run: the slowest window of that name
                    mine = [w for w in rows if w.get("name") == g.get("name") and w.get("device") == g.get("device")]
                    slowest = max(mine, key=lambda w: v.number(w.get("span_ns")) or 0, default={})
                    records, label = slowest.get(key), f"{window_label(g)}, slowest window"
                table = common.records_table(f"{title}: {label}", records)
                if table is not None:
                    blocks.append(table)
            continue
        for w in shown:
            table = common.records_table(f"{title}: {window_label(w)}", w.get(key))
            if table is not None:
                blocks.append(table)
    return blocks
