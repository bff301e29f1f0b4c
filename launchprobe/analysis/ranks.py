"""Several trace files (one per rank) -> one ``kind: "analyze"`` run (issue 16): each file analysed in its own
worker process, the runs merged with each window and summary marked with its rank, and the skew of each summary
name across ranks (the slowest rank sets the step)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from launchprobe.run.schema import AnalyzeRun, RankSkew, Source, Summary


def _analyze_one(path: Path, options: dict[str, Any]) -> AnalyzeRun:
    """One file's run (a worker process's job; module level so it pickles)."""
    from launchprobe.api import analyze_trace
    from launchprobe.errors import LaunchprobeError

    try:
        return analyze_trace(path, **options).run
    except LaunchprobeError as exc:  # name the file among several
        raise LaunchprobeError(f"{path}: {exc}", exc.exit_code) from None


def analyze_files(paths: Sequence[Path], options: dict[str, Any], *, workers: int | None = None) -> AnalyzeRun:
    """Each file analysed with ``options`` (``analyze_trace``'s keywords), in parallel worker processes when
    there is more than one (at most one per CPU), merged by ``merge_runs``."""
    paths = list(paths)
    if len(paths) == 1:
        return _analyze_one(paths[0], options)
    workers = workers or min(len(paths), os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(_analyze_one, paths, [options] * len(paths)))
    return merge_runs(runs)


def ranks_of_sources(sources: Sequence[Source]) -> list[int]:
    """The rank of each file of a merged run, from its ``sources`` (as ``ranks_of``)."""
    return ranks_of(sources)[0]


def ranks_of(sources: Sequence[Source]) -> tuple[list[int], str | None]:
    """Each file's rank: its trace's distributed info when every file has one and they differ, else its position
    (with a notice saying why)."""
    found = [source.rank for source in sources]
    positions = list(range(len(sources)))
    if all(isinstance(x, int) for x in found):
        ranks = [int(x) for x in found if x is not None]
        if len(set(ranks)) == len(ranks):
            return ranks, None
        return positions, f"the files' distributed info repeats ranks ({ranks}): ranks are the files' positions"
    if any(x is not None for x in found):
        return positions, "not every file has distributed info: ranks are the files' positions"
    return positions, None


def merge_runs(runs: Sequence[AnalyzeRun]) -> AnalyzeRun:
    """One run of several files' runs: windows and summaries marked with their file's rank, in rank order;
    ``sources`` one per file (``source`` the first's), notices of each file prefixed with its rank, and
    ``rank_skew``."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    ranks, why = ranks_of([run.source for run in runs])
    first = runs[0]
    windows, summaries, notices = [], [], []
    if why:
        notices.append(why)
    for rank, run in sorted(zip(ranks, runs, strict=True), key=lambda pair: pair[0]):
        for w in run.windows:
            w.rank = rank
            windows.append(w)
        for s in run.summaries:
            s.rank = rank
            summaries.append(s)
        notices += [f"rank {rank}: {text}" for text in run.notices]
    for run in runs:  # each file's whole-trace windows hold each of its ops once
        whole = [w for w in run.windows if w.instance is None]
        busy = sum(w.busy_ns for w in whole)
        run.source.comm_busy_fraction = sum(w.comm_busy_ns for w in whole) / busy if busy else None
    environment = first.environment
    gpus = {g for run in runs for g in (run.environment.gpu or "").split(", ") if g}
    environment.gpu = ", ".join(sorted(gpus)) or None
    environment.gpu_count = len({(w.rank, w.device) for w in windows})
    return msgspec.structs.replace(
        first,
        notices=notices,
        environment=environment,
        source=first.source,
        config=first.config,
        windows=windows,
        summaries=summaries,
        sources=[run.source for run in runs],
        rank_skew=rank_skew(summaries),
    )


def rank_skew(summaries: Sequence[Summary]) -> list[RankSkew]:
    """For each summary name found on more than one rank (ranks usually drive different devices): each rank's
    span p50 (its slowest device's, when it has several), the slowest rank and the skew (max p50 / min p50 - 1)."""
    groups: dict[str, dict[int, int]] = {}
    for s in summaries:
        if s.rank is not None and s.span_p50_ns is not None:
            spans = groups.setdefault(s.name, {})
            spans[s.rank] = max(spans.get(s.rank, 0), s.span_p50_ns)
    out = []
    for name, spans in groups.items():
        if len(spans) < 2:
            continue
        slowest = max(spans, key=lambda r: (spans[r], -r))
        low = min(spans.values())
        skew = round(spans[slowest] / low - 1, 6) if low > 0 else None
        out.append(
            RankSkew(
                name=name,
                rank_span_p50_ns={str(r): spans[r] for r in sorted(spans)},
                slowest_rank=slowest,
                skew=skew,
            )
        )
    return out
