"""The report of a comparison (launchprobe.compare): per row and metric, both sides with their noise, the
change, and the call; verdict flips each on their own line; then the result that sets the exit code."""

from __future__ import annotations

import dataclasses
import json

from launchprobe.compare import INCONCLUSIVE, REGRESSED, Change, Comparison, metrics_for
from launchprobe.render import values as v
from launchprobe.render.model import Lines, Report, Table
from launchprobe.run.schema import Run

RULE = (
    "regressed/improved: the change exceeds the threshold AND the noise band (mean of both IQRs) AND, with >= 5 "
    "samples a side, a Mann-Whitney test (p < 0.01); beyond the threshold but inside the noise: inconclusive"
)


def _run_text(label: str, run: Run | None) -> str:
    if run is None:
        return label
    gpu = run.environment.gpu or run.environment.device
    parts = [str(x) for x in (run.kind, run.created, gpu) if x]
    return f"{label} ({', '.join(parts)})" if parts else label


def _value(c: Change, value: float | None) -> str:
    if c.points:
        return v.percent(value, 1)
    if c.metric == "tokens_per_s":
        return v.integer(value)
    if c.metric == "step_ms":
        return v.fixed(value, 3)
    return v.sig(value)


def _change(c: Change) -> str:
    x = c.change
    if x is None:
        return v.MISSING
    return f"{x * 100:+.1f} pt" if c.points else f"{x * 100:+.1f}%"


def _band(c: Change) -> str:
    if c.band is None:
        return "unknown"
    return f"{c.band * 100:.1f} pt" if c.points else f"{c.band * 100:.1f}%"


def build(
    comparison: Comparison,
    base_label: str = "base",
    new_label: str = "new",
    base: Run | None = None,
    new: Run | None = None,
) -> Report:
    table = metrics_for(comparison.kind)
    names = [table[m].label if m in table else m for m in comparison.metrics]
    report = Report(title="launchprobe compare")
    report.fields = [
        ("base", _run_text(base_label, base)),
        ("new", _run_text(new_label, new)),
        ("gate", f"threshold {comparison.threshold * 100:g}% on {', '.join(names)}"),
        ("rule", RULE),
    ]
    if comparison.problems:
        report.blocks.append(Lines("Cannot compare these runs", comparison.problems))
    if comparison.changes:
        rows = [
            [
                c.key,
                table[c.metric].label if c.metric in table else c.metric,
                _value(c, c.base.median),
                _value(c, c.base.iqr),
                _value(c, c.new.median),
                _value(c, c.new.iqr),
                _change(c),
                _band(c),
                v.MISSING if c.p_value is None else f"{c.p_value:.3f}",
                c.call,
            ]
            for c in comparison.changes
        ]
        columns = ["row", "metric", "base", "base\nIQR", "new", "new\nIQR", "change", "noise\nband", "p", "call"]
        report.blocks.append(Table("Changes", columns, rows, align="llrrrrrrrl"))
    if comparison.flips:
        report.blocks.append(
            Lines("Verdict changes", [f"VERDICT CHANGED {f.key}: {f.base} -> {f.new}" for f in comparison.flips])
        )
    skipped = [f"only in base: {k}" for k in comparison.only_base] + [f"only in new: {k}" for k in comparison.only_new]
    if skipped:
        report.blocks.append(Lines("Not compared", skipped))
    if comparison.notes:
        report.blocks.append(Lines("Notes", comparison.notes))
    report.blocks.append(Lines("Result", [summary(comparison)]))
    return report


def summary(comparison: Comparison) -> str:
    code = comparison.exit_code
    if comparison.problems:
        return f"INCOMPARABLE: {len(comparison.problems)} problem(s) above (exit {code})"
    counts = ", ".join(
        f"{comparison.count(call)} {call}"
        for call in ("regressed", "improved", "unchanged", "inconclusive", "n/a")
        if comparison.count(call)
    )
    threshold = f"{comparison.threshold * 100:g}%"
    if comparison.count(REGRESSED):
        return f"REGRESSION beyond {threshold} and the noise: {counts} (exit {code})"
    note = " (inside the noise: not a failure)" if comparison.count(INCONCLUSIVE) else ""
    return f"no regression beyond {threshold}: {counts}{note} (exit {code})"


def to_json(comparison: Comparison, base_label: str = "base", new_label: str = "new") -> str:
    data = dataclasses.asdict(comparison)
    data.update(base=base_label, new=new_label, exit_code=comparison.exit_code, summary=summary(comparison))
    return json.dumps(data, indent=1, allow_nan=False)
