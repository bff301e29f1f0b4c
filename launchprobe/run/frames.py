"""A run's tables as pandas DataFrames (docs/api.md): the rows of launchprobe.render.flat, columns named as in
the JSON (nested records dotted: ``launch_api_ns.p50``). Integer columns are ``int64``, or pandas' nullable
``Int64`` where a value is missing, so nanoseconds never pass through floats. pandas is imported here, only when
a frame is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from launchprobe.run.schema import Run


def _integers(values: list[Any]) -> bool:
    present = [x for x in values if x is not None]
    return bool(present) and all(isinstance(x, int) and not isinstance(x, bool) for x in present)


def frame(run: Run, table: str | None = None) -> pd.DataFrame:
    """One table of ``run`` (launchprobe.render.flat.table_names) as a DataFrame, one row per record."""
    import pandas as pd

    from launchprobe.render.flat import table_rows

    records = table_rows(run, table)
    columns: dict[str, list[Any]] = {}
    for i, record in enumerate(records):
        for key in record:
            if key not in columns:
                columns[key] = [None] * i
        for key, values in columns.items():
            values.append(record.get(key))
    data: dict[str, pd.Series] = {}
    for key, values in columns.items():
        if _integers(values):
            data[key] = pd.Series(values, dtype="Int64" if any(x is None for x in values) else "int64")
        else:
            data[key] = pd.Series(values)
    return pd.DataFrame(data, index=pd.RangeIndex(len(records)))
