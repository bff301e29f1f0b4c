"""A corrupt ceilings cache is ignored with a notice and measured again, never a traceback (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launchprobe.measure import ceilings as ceilings_module
from launchprobe.measure.ceilings import Ceilings, cache_key, cache_path, get_ceilings, load_cached, store_cached

KEY = cache_key("cpu test", "2.x", "bf16")


def _good() -> dict[str, Any]:
    return Ceilings("measured", 1e11, 1e12, 50.0, None, "2026-01-01T00:00:00+00:00", {"hbm_method": "x"}).to_dict()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cache_path()
    path.parent.mkdir(parents=True)
    return path


CORRUPT_FILES: list[bytes] = [
    b"[]",
    b'"a string"',
    b"0",
    b"{not json",
    b"\xff\xfe\x00garbage",
    b"[" * 100_000,
    json.dumps({KEY: []}).encode(),
    json.dumps({KEY: "x"}).encode(),
    json.dumps({KEY: {**_good(), "hbm_read_bytes_per_s": -1.0}}).encode(),
    json.dumps({KEY: {**_good(), "matmul_flops_per_s": 0}}).encode(),
    json.dumps({KEY: {**_good(), "hbm_read_bytes_per_s": "fast"}}).encode(),
    json.dumps({KEY: {**_good(), "launch_host_ns": True}}).encode(),
    json.dumps({KEY: {**_good(), "extra": 1}}).encode(),
    json.dumps({KEY: {**_good(), "details": []}}).encode(),
    json.dumps({KEY: {**_good(), "hbm_read_bytes_per_s": float("nan")}}).encode(),  # NaN: Python's JSON writes it
    json.dumps({KEY: {**_good(), "graph_node_ns": float("inf")}}).encode(),
]


@pytest.mark.parametrize("content", CORRUPT_FILES, ids=range(len(CORRUPT_FILES)))
def test_corrupt_cache_is_ignored_with_a_notice_and_remeasured(
    cache: Path, content: bytes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache.write_bytes(content)
    notices: list[str] = []
    assert load_cached(KEY, notices) is None
    err = capsys.readouterr().err
    assert err.startswith("launchprobe: notice: ceilings cache") and "ignored" in err and len(err.splitlines()) == 1
    assert notices and "measuring again" in notices[0]

    fresh = Ceilings(**{**_good(), "hbm_read_bytes_per_s": 2e11})
    monkeypatch.setattr(ceilings_module, "measure_ceilings", lambda *args: Ceilings(**fresh.to_dict()))
    got = get_ceilings(
        device="cpu", device_name="cpu test", torch_version="2.x", dtype="bf16", l2_bytes=1 << 20,
        source="measured", remeasure=False,
    )  # fmt: skip
    assert got.hbm_read_bytes_per_s == 2e11 and "ignored" in got.details["cache_notice"]
    cached = load_cached(KEY)  # the corrupt file was replaced by the new measurement
    assert cached is not None and cached.source == "cached" and cached.hbm_read_bytes_per_s == 2e11
    assert capsys.readouterr().err.count("notice") == 1  # once, when it was corrupt


def test_good_cache_is_used_and_other_keys_kept(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache.write_text(json.dumps({KEY: _good(), "other": _good(), "broken": {"x": 1}}))
    cached = load_cached(KEY)
    assert cached is not None and cached.hbm_read_bytes_per_s == 1e11
    assert load_cached("missing") is None
    assert capsys.readouterr().err == ""  # nothing wrong with this key
    store_cached("new", Ceilings(**_good()))
    assert set(json.loads(cache.read_text())) == {KEY, "other", "new"}  # the broken entry is dropped


def test_cache_that_is_a_folder_or_unwritable(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache.mkdir()
    assert load_cached(KEY) is None
    assert "ignored (cannot read it" in capsys.readouterr().err
    store_cached(KEY, Ceilings(**_good()))  # cannot replace a folder: a re-measure next time, no exception
