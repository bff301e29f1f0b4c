"""Flat tables of a run: one row per record of one kind, every scalar field a column (nested records as dotted
names, ``launch_api_ns.p50``, as their JSON paths), lists left to tables of their own.

analyze: ``windows`` (the default), ``summaries``, ``idle_stretches`` (the longest each window keeps), ``top_kernels``
(per window); classify: ``results`` (the default), ``kernels`` (the per-kernel pass's rows of the step shown) and
``ops`` (its per-op table). CSV (``to_csv``) and pandas (launchprobe.run.frames) draw the same rows.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from launchprobe.errors import UsageError
from launchprobe.run.schema import AnalyzeRun, ClassifyRun, Run

Rows = list[dict[str, Any]]


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted names; lists (samples, kernel rows, top kernels) have tables of their own."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        elif not isinstance(value, list):
            out[name] = value
    return out


def _flat(record: Any) -> dict[str, Any]:
    return _flatten(msgspec.to_builtins(record))


def _windows(run: AnalyzeRun) -> Iterator[dict[str, Any]]:
    for w in run.windows:
        yield _flat(w)


def _summaries(run: AnalyzeRun) -> Iterator[dict[str, Any]]:
    for s in run.summaries:
        yield _flat(s)


def _window_key(index: int, run: AnalyzeRun) -> dict[str, Any]:
    w = run.windows[index]
    return {"window_index": index, "window": w.name, "instance": w.instance, "device": w.device}


def _idle_stretches(run: AnalyzeRun) -> Iterator[dict[str, Any]]:
    for i, w in enumerate(run.windows):
        for stretch in w.largest_idle:
            yield {**_window_key(i, run), **_flat(stretch)}


def _top_kernels(run: AnalyzeRun) -> Iterator[dict[str, Any]]:
    for i, w in enumerate(run.windows):
        for kernel in w.top_kernels:
            yield {**_window_key(i, run), **_flat(kernel)}


def _results(run: ClassifyRun) -> Iterator[dict[str, Any]]:
    for r in run.results:
        yield _flat(r)


def _kernel_rows(run: ClassifyRun, attr: str) -> Iterator[dict[str, Any]]:
    for r in run.sorted_results():
        if r.kernel_pass is None:
            continue
        for row in getattr(r.kernel_pass, attr):
            yield {"mode": r.mode, "batch": r.batch, "bucket": r.bucket, **_flat(row)}


ANALYZE_TABLES: dict[str, Callable[[AnalyzeRun], Iterator[dict[str, Any]]]] = {
    "windows": _windows,
    "summaries": _summaries,
    "idle_stretches": _idle_stretches,
    "top_kernels": _top_kernels,
}
CLASSIFY_TABLES: dict[str, Callable[[ClassifyRun], Iterator[dict[str, Any]]]] = {
    "results": _results,
    "kernels": lambda run: _kernel_rows(run, "kernels"),
    "ops": lambda run: _kernel_rows(run, "ops"),
}
TABLES = tuple(dict.fromkeys([*ANALYZE_TABLES, *CLASSIFY_TABLES]))


def table_names(run: Run) -> tuple[str, ...]:
    """The tables a run of this kind has, the default first."""
    return tuple(ANALYZE_TABLES if isinstance(run, AnalyzeRun) else CLASSIFY_TABLES)


def check_table(run: Run, table: str | None) -> str:
    """``table``, or the run's default table; a table the run's kind does not have is a UsageError."""
    names = table_names(run)
    if table is None:
        return names[0]
    if table not in names:
        raise UsageError(f"a {run.kind} run has no table {table!r}; choose one of {', '.join(names)}")
    return table


def table_rows(run: Run, table: str | None = None) -> Rows:
    """The rows of one table, with exactly the record's fields (and, for child tables, the keys of the parent)."""
    name = check_table(run, table)
    if isinstance(run, AnalyzeRun):
        return list(ANALYZE_TABLES[name](run))
    return list(CLASSIFY_TABLES[name](run))


def _common(run: Run) -> dict[str, Any]:
    """Run-level columns that make a CSV row stand on its own (a record's own field of the same name wins)."""
    common: dict[str, Any] = {
        "kind": run.kind,
        "created": run.created,
        "gpu": run.environment.gpu,
        "device": run.environment.device,
    }
    if isinstance(run, AnalyzeRun):
        common["source"] = run.source.path
    else:
        common["shape"] = run.shape.name or run.config.shape
        common["context"] = run.config.context
        common["dtype"] = run.config.dtype
    return common


def rows(run: Run, table: str | None = None) -> Rows:
    """CSV rows: the run-level columns, then the table's (window ``device`` is the GPU index and wins)."""
    common = _common(run)
    return [{**{k: val for k, val in common.items() if k not in row}, **row} for row in table_rows(run, table)]


def to_csv(run: Run, table: str | None = None) -> str:
    """One table as CSV: integers as integers, empty cells for missing values."""
    records = rows(run, table)
    columns: list[str] = []
    seen: set[str] = set()
    for record in records:
        for key in record:
            if key not in seen:
                seen.add(key)
                columns.append(key)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if val is None else val for k, val in record.items()})
    return buffer.getvalue()
