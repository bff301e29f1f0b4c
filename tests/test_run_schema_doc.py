"""docs/run-file.md and docs/run-file.schema.json against the run's structs, so neither can drift from the code.

Regenerate the JSON Schema after changing a struct: LAUNCHPROBE_UPDATE_SCHEMA=1 pytest tests/test_run_schema_doc.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import msgspec

from launchprobe.run import schema
from launchprobe.run.files import json_schema

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC = DOCS / "run-file.md"
SHIPPED = DOCS / "run-file.schema.json"


def record_types() -> list[type[msgspec.Struct]]:
    """Every struct a run file is made of, reached from the two run kinds."""
    seen: list[type[msgspec.Struct]] = []
    todo: list[type[msgspec.Struct]] = [schema.ClassifyRun, schema.AnalyzeRun]
    while todo:
        struct = todo.pop()
        if struct in seen:
            continue
        seen.append(struct)
        for info in msgspec.structs.fields(struct):
            todo += [t for t in _structs_in(info.type) if t not in seen]
    return seen


def _structs_in(annotation: object) -> list[type[msgspec.Struct]]:
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return [annotation]
    return [t for arg in getattr(annotation, "__args__", ()) for t in _structs_in(arg)]


def field_names() -> set[str]:
    return {info.encode_name for struct in record_types() for info in msgspec.structs.fields(struct)} | {"kind"}


def test_every_field_of_the_run_is_documented() -> None:
    text = DOC.read_text()
    documented = set(re.findall(r"`([a-z_][a-z0-9_]*)`", text))
    missing = {
        f"{struct.__name__}.{info.encode_name}"
        for struct in record_types()
        for info in msgspec.structs.fields(struct)
        if info.encode_name not in documented
    }
    assert not missing, f"fields missing from docs/run-file.md: {sorted(missing)}"


def test_every_documented_field_exists() -> None:
    """The first cell of each table row names fields: every one of them must be a field of the schema."""
    names = field_names()
    stale = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        stale += [n for n in re.findall(r"`([a-z_][a-z0-9_]*)`", first) if n not in names]
    assert not stale, f"docs/run-file.md documents fields the schema does not have: {stale}"


def test_shipped_json_schema_is_the_generated_one() -> None:
    generated = json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"
    if os.environ.get("LAUNCHPROBE_UPDATE_SCHEMA"):
        SHIPPED.write_text(generated)
    assert SHIPPED.exists() and SHIPPED.read_text() == generated, (
        "docs/run-file.schema.json is out of date: regenerate it with LAUNCHPROBE_UPDATE_SCHEMA=1"
    )


def test_the_schema_validates_real_run_files() -> None:
    """The shipped schema says what the loader accepts: the committed run files fit it (checked by msgspec, which
    generated it, on the raw JSON)."""
    generated = json_schema()
    assert generated["anyOf"] and {ref["$ref"].rsplit("/", 1)[1] for ref in generated["anyOf"]} == {
        "ClassifyRun",
        "AnalyzeRun",
    }
    raw = json.loads((Path(__file__).parent / "fixtures" / "h200_classify_default.json").read_text())
    run = msgspec.convert(raw, schema.ClassifyRun)
    assert run.results and run.kind == "classify"
