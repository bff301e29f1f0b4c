"""The run file: save/load round trip, schema upgrades, refusals with clear messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import runs

from launchprobe.errors import UsageError
from launchprobe.run import files as runfile


def test_round_trip(tmp_path: Path) -> None:
    run = runs.classify_run()
    path = tmp_path / "run.json"
    runfile.save_run(run, path)
    assert runfile.load_run(path) == run


def test_a_file_before_the_class_parts_of_the_gap_total_loads(tmp_path: Path) -> None:
    """Files written between the classes' parts (2026-12-04 05:00 UTC) and their stored difference (08:30) still
    load: the difference is null there, not an error."""
    from launchprobe.run.schema import ClassGapTotal, ClassifyRun

    run = runs.classify_run()
    check = next(r.kernel_pass.cupti_check for r in run.sorted_results() if r.kernel_pass and r.kernel_pass.cupti_check)
    assert check is not None
    check.gap_total_by_class = [
        ClassGapTotal(op="qkv", count=2, stitched_ns=5_000.0, cupti_ns=3_000.0, diff_ns=2_000.0)
    ]
    path = tmp_path / "run.json"
    runfile.save_run(run, path)
    raw = json.loads(path.read_text())
    stored = [
        part
        for result in raw["results"]
        if result.get("kernel_pass") and result["kernel_pass"].get("cupti_check")
        for part in result["kernel_pass"]["cupti_check"]["gap_total_by_class"]
    ]
    assert [part.pop("diff_ns") for part in stored] == [2_000.0]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(raw))
    loaded = runfile.load_run(old)
    assert isinstance(loaded, ClassifyRun)
    parts = next(
        r.kernel_pass.cupti_check.gap_total_by_class
        for r in loaded.sorted_results()
        if r.kernel_pass and r.kernel_pass.cupti_check and r.kernel_pass.cupti_check.gap_total_by_class
    )
    assert [(c.op, c.stitched_ns, c.diff_ns) for c in parts] == [("qkv", 5_000.0, None)]


def test_save_refuses_to_overwrite_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("mine")
    with pytest.raises(UsageError, match="already exists"):
        runfile.save_run(runs.analyze_run(), path)
    assert path.read_text() == "mine"
    runfile.save_run(runs.analyze_run(), path, force=True)
    assert runfile.load_run(path).kind == "analyze"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_nan_is_not_written(tmp_path: Path) -> None:
    run = runs.analyze_run()
    run.windows[0].idle_fraction = float("nan")
    with pytest.raises(ValueError):
        runfile.save_run(run, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_future_version_is_refused(tmp_path: Path) -> None:
    run = runfile.to_builtins(runs.classify_run())
    run["schema_version"] = runfile.SCHEMA_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(run))
    with pytest.raises(UsageError, match=r"newer than this launchprobe understands .*upgrade launchprobe"):
        runfile.load_run(path)


def test_older_version_is_upgraded_on_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # pretend this launchprobe writes version 2 and knows how to lift version 1 files
    def from_1(run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "schema_version": 2, "notices": [*run["notices"], "upgraded from schema 1"]}

    monkeypatch.setattr(runfile, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(runfile.UPGRADES, 1, from_1)
    path = tmp_path / "old.json"
    runfile.save_run(runs.classify_run(), path)
    upgraded = runfile.load_run(path)
    assert upgraded.schema_version == 2 and upgraded.notices[-1] == "upgraded from schema 1"


def test_version_without_upgrade_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runfile, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(runfile, "UPGRADES", {2: lambda run: {**run, "schema_version": 3}})
    assert runfile.upgrade_run({"schema_version": 2, "kind": "classify"})["schema_version"] == 3
    with pytest.raises(UsageError, match="too old to read; re-run"):
        runfile.upgrade_run({"schema_version": 1, "kind": "classify"}, "old.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "invalid JSON at line 1"),
        ('{"kind": "classify"}', "no schema_version or kind"),
        ('{"schema_version": 1, "kind": "profile"}', "no schema_version or kind"),
        ('{"schema_version": "1", "kind": "classify"}', "invalid schema_version"),
    ],
)
def test_not_a_run_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        runfile.load_run(path)


def test_missing_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        runfile.load_run(tmp_path / "nope.json")
    with pytest.raises(UsageError, match="cannot read"):
        runfile.load_run(tmp_path)  # a folder


def test_every_kernel_pass_field_is_documented() -> None:
    import msgspec

    from launchprobe.run.schema import CuptiCheck, KernelPass, KernelRow, OpCheck, StrideProbe

    doc = (Path(__file__).parent.parent / "docs" / "run-file.md").read_text()
    for record in (KernelPass, CuptiCheck, OpCheck, StrideProbe, KernelRow):
        missing = [f.name for f in msgspec.structs.fields(record) if f"`{f.name}`" not in doc]
        assert not missing, f"{record.__name__}: {missing} not in docs/run-file.md"
