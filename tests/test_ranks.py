"""Several trace files at once (issue 16): per-file runs merged with each window's rank, skew across ranks, the
Ranks table, and the CLI taking several files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from launchprobe.analysis.ranks import analyze_files, merge_runs, rank_skew
from launchprobe.api import analyze_trace
from launchprobe.cli import main
from launchprobe.render.analyze import build
from launchprobe.run.schema import AnalyzeRun, Source, Summary

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PLAIN = FIXTURES / "plain_torch.sqlite.gz"
KINETO = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "kineto"


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _plain(raw: object) -> object:
    return msgspec.to_builtins(raw)


@pytest.fixture(scope="module")
def two_copies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ranks")
    a, b = folder / "a.sqlite.gz", folder / "b.sqlite.gz"
    shutil.copy(PLAIN, a)
    shutil.copy(PLAIN, b)
    return a, b


def test_two_files_merge_to_the_single_file_windows_plus_rank(two_copies: tuple[Path, Path]) -> None:
    a, b = two_copies
    single = analyze_trace(a).run
    merged = analyze_files([a, b], {})
    assert merged.ranks == [0, 1]
    assert len(merged.windows) == 2 * len(single.windows)
    assert len(merged.summaries) == 2 * len(single.summaries)
    for rank in (0, 1):
        mine = [w for w in merged.windows if w.rank == rank]
        assert [_plain(msgspec.structs.replace(w, rank=None)) for w in mine] == [_plain(w) for w in single.windows]
        sums = [s for s in merged.summaries if s.rank == rank]
        assert [_plain(msgspec.structs.replace(s, rank=None)) for s in sums] == [_plain(s) for s in single.summaries]
    assert [s.path for s in merged.sources] == [str(a), str(b)]
    assert merged.source.path == str(a)
    assert single.sources == [] and single.rank_skew == [] and all(w.rank is None for w in single.windows)
    # identical files: every step kind found on both ranks, no skew
    assert {k.name for k in merged.rank_skew} == {s.name for s in single.summaries if s.span_p50_ns is not None}
    assert all(k.skew == 0 and k.slowest_rank == 0 and set(k.rank_span_p50_ns) == {"0", "1"} for k in merged.rank_skew)
    # a merged run round-trips through the run-file format
    again = msgspec.json.decode(msgspec.json.encode(merged), type=AnalyzeRun)
    assert _plain(again) == _plain(merged)


def test_ranks_table_only_with_several_ranks(two_copies: tuple[Path, Path]) -> None:
    a, b = two_copies
    merged = analyze_files([a, b], {}, workers=1)
    titles = [getattr(block, "title", None) for block in build(merged).blocks]
    assert "Ranks" in titles
    single = analyze_trace(a).run
    assert "Ranks" not in [getattr(block, "title", None) for block in build(single).blocks]


def test_cli_two_files_exit_0(
    two_copies: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_copies
    out = tmp_path / "run.json"
    assert _cli(["analyze", str(a), str(b), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["sources"]) == 2
    assert {w["rank"] for w in data["windows"]} == {0, 1}
    assert "Ranks" in capsys.readouterr().out
    assert _cli(["analyze", str(a), str(b), "--trace-out", str(tmp_path / "t.json")]) == 2


def test_skew_and_slowest_rank() -> None:
    def summary(name: str, rank: int, device: int, p50: int) -> Summary:
        return Summary(
            name=name, device=device, instances=3, names=1, span_ns=3 * p50, busy_ns=p50, idle_ns=2 * p50,
            idle_host_wait_ns=0, idle_short_gap_ns=0, idle_other_ns=0, kernels=3, gpu_ops=3, launch_calls=3,
            verdict="launch-bound", verdict_reason="", span_p50_ns=p50, rank=rank,
        )  # fmt: skip

    rows = rank_skew(
        [
            summary("step", 0, 0, 1_000),
            summary("step", 1, 1, 1_250),
            summary("step", 1, 2, 1_100),  # rank 1's other device: its slowest counts
            summary("only-rank-0", 0, 0, 5),
        ]
    )
    assert len(rows) == 1
    (row,) = rows
    assert row.name == "step" and row.slowest_rank == 1 and row.skew == pytest.approx(0.25)
    assert row.rank_span_p50_ns == {"0": 1_000, "1": 1_250}


def test_distributed_ranks_used_unless_they_repeat() -> None:
    def run(rank: int | None) -> AnalyzeRun:
        return AnalyzeRun(source=Source(path=f"r{rank}", rank=rank))

    merged = merge_runs([run(1), run(0)])
    assert [s.path for s in merged.sources] == ["r1", "r0"] and not merged.notices
    merged = merge_runs([run(0), run(0)])
    assert any("repeats ranks" in n for n in merged.notices)
    merged = merge_runs([run(3), run(None)])
    assert any("not every file" in n for n in merged.notices)


def _kineto(name: str) -> Path:
    path = KINETO / name
    if not path.exists():
        pytest.skip("../shared/traces/kineto is absent")
    return path


def test_shared_kineto_traces_with_distributed_info() -> None:
    rank0, nccl = _kineto("rank0.json.gz"), _kineto("nccl_data.json.gz")
    merged = analyze_files([rank0, nccl], {})
    # both files say rank 0 (different jobs): ranks are the files' positions, with a notice
    assert merged.ranks == [0, 1]
    assert [s.rank for s in merged.sources] == [0, 0]
    assert [s.world_size for s in merged.sources] == [16, 2]
    assert any("repeats ranks" in n for n in merged.notices)
    singles = [analyze_trace(p).run for p in (rank0, nccl)]
    for rank, single in enumerate(singles):
        assert [w.name for w in merged.windows if w.rank == rank] == [w.name for w in single.windows]
    assert "Ranks" in [getattr(block, "title", None) for block in build(merged).blocks]


def test_comm_kernels_counted_and_their_union() -> None:
    from launchprobe.analysis.trace_run import analyze_timeline
    from launchprobe.analysis.windows import AnalysisOptions
    from tests.test_analyze import US, timeline

    tl = timeline(
        ops=[(0, 10 * US, 1), (5 * US, 20 * US, 2), (30 * US, 40 * US, 3), (50 * US, 60 * US, 4)],
        apis=[("cudaLaunchKernel", i * US, i * US + 500, i + 1) for i in range(4)],
    )
    tl.gpu_ops["name"] = ["ncclDevKernel_AllReduce_Sum_bf16", "gemm", "NCCLKernel_x", "cross_device_reduce_1stage"]
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert w.comm_kernels == 2  # nccl in any case; vLLM's custom all-reduce is not NCCL
    assert w.comm_busy_ns == 20 * US
    tl.gpu_ops["name"] = ["a", "b", "c", "d"]
    [w], _ = analyze_timeline(tl, AnalysisOptions())
    assert (w.comm_kernels, w.comm_busy_ns) == (0, 0)


def test_shared_nccl_trace_has_comm_kernels() -> None:
    run = analyze_trace(_kineto("nccl_data.json.gz")).run
    whole = [w for w in run.windows if w.instance is None]
    assert whole and all(0 < w.comm_kernels <= w.kernels and 0 < w.comm_busy_ns <= w.busy_ns for w in whole)
    assert run.summaries and all(s.comm_kernels > 0 for s in run.summaries)
