"""The report of an analyze run: where the trace came from, then where the time went and why.

Readable at a glance however many windows there are: one row per range name and device (instances of ``step 17``,
``ProfilerStep#3`` ... pooled, see launchprobe.analysis.trace_run), then every window when there are few, or the
slowest few and a count of the rest (the JSON and CSV keep every window); top kernels and largest idle stretches
once per range name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from launchprobe.names import DEFAULT_NAME_WIDTH, short_kernel_name
from launchprobe.render import common
from launchprobe.render import values as v
from launchprobe.render.classify import what_if_text
from launchprobe.render.model import Block, Lines, Report, Strip, Strips, Table
from launchprobe.run.schema import AnalyzeRun, IdleStretch, PooledIdleStretch, Record, Summary, TopKernel, Window

SOURCE_KEYS_SHOWN = ("path", "format", "time_origin_ns")  # the origin is in the tables, not the header
FEW_WINDOWS = 12  # up to this many windows, show every one
SLOWEST = 8  # otherwise, the slowest this many
KINDS_PICTURED = 12  # step kinds drawn along time (strips, step-kinds.png), most steps first
MOSTLY_NO_WORK = 0.5  # as analysis.trace_verdict: a window idle with no work issued for half its span says so


def _names(rows: list[Window]) -> list[str]:
    """Window names, with the instance number where a name repeats (``decode_step #3``) and the rank of a run of
    several files (``decode_step #3 [r1]``)."""
    counts = Counter((w.name, w.rank) for w in rows)
    names = [
        f"{w.name} #{w.instance}" if counts[(w.name, w.rank)] > 1 and w.instance is not None else w.name for w in rows
    ]
    return [_ranked(name, w.rank) for name, w in zip(names, rows, strict=True)]


def _ranked(name: str, rank: int | None) -> str:
    return name if rank is None else f"{name} [r{rank}]"


def build(run: AnalyzeRun, *, name_width: int | None = None) -> Report:
    """The report; kernel names in the tables are shortened to ``name_width`` characters (default 60)."""
    width = name_width or DEFAULT_NAME_WIDTH
    report = Report(title="launchprobe analyze")
    report.fields = _header(run)
    report.notices = list(run.notices)
    rows = run.windows
    groups, hidden = _shown_summaries(run.summaries)
    if groups:
        report.blocks.append(_ranges_table(groups, hidden))
    if len(run.ranks) > 1:
        report.blocks.append(_ranks_table(run))
    strips = step_strips(groups)
    if strips is not None:
        report.blocks.append(strips)
    shown = rows if len(rows) <= FEW_WINDOWS else sorted(rows, key=lambda w: -w.span_ns)
    shown = shown[: max(FEW_WINDOWS if len(rows) <= FEW_WINDOWS else SLOWEST, 0)]
    names = dict(zip(map(id, rows), _names(rows), strict=True))
    shown_names = [names[id(w)] for w in shown]
    report.blocks += [_windows_table(shown, shown_names, len(rows)), _gaps_table(shown, shown_names)]
    reasons = [
        f"{g.label}, {v.integer(g.instances)} windows: {g.verdict_reason}"
        for g in groups
        if g.verdict_reason and g.instances > 1
    ]
    if len(shown) == len(rows):
        reasons += [f"{w.label}: {w.verdict_reason}" for w in rows if w.verdict_reason]
    if reasons:
        report.blocks.append(Lines("Why each verdict", reasons))
    helps = [f"{g.label}: {what_if_text(w)}" for g in groups for w in g.what_ifs]
    if not groups:
        helps += [f"{w.label}: {what_if_text(x)}" for w in shown for x in w.what_ifs]
    if helps:
        report.blocks.append(Lines("What would help (predicted)", helps))
    report.blocks += _lists(shown, groups, rows, width, run.source.time_origin_ns)
    return report


def _header(run: AnalyzeRun) -> list[tuple[str, str]]:
    source = run.source.to_dict()
    fields = [("source", f"{v.text(run.source.path)} ({v.text(run.source.format)})")]
    versions = [
        f"{k} {val}" for k, val in source.items() if k not in SOURCE_KEYS_SHOWN and isinstance(val, str | int | float)
    ]
    if versions:
        fields.append(("read from", ", ".join(versions)))
    options = [f"{k}={v.text(val)}" for k, val in run.config.to_dict().items() if val not in (None, [], {}, "")]
    fields.append(("options", ", ".join(options) or "defaults"))
    if run.environment.known:
        fields.append(("device", common.device_text(run.environment)))
    fields.append(("made", common.made_text(run)))
    return fields


def _verdicts(counts: dict[str, int]) -> str:
    if not counts:
        return v.MISSING
    return ", ".join(f"{name} {v.integer(n)}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _typical_verdict(g: Summary) -> str:
    """The verdict most typical instances got, with how many did (``launch-bound 27/28``)."""
    if not g.verdicts:
        return v.text(g.verdict)
    count = g.verdicts.get(g.verdict)
    return f"{g.verdict} {v.integer(count)}/{v.integer(g.instances)}" if count is not None else v.text(g.verdict)


def _shown_summaries(groups: list[Summary]) -> tuple[list[Summary], list[Summary]]:
    """Every range summary and the first ``KINDS_PICTURED`` step kinds (the run lists them most steps first), and
    the kinds left out: a trace can hold dozens of small repeating kinds (a JAX model's per-parameter
    initialisation) around its loop."""
    kinds = [g for g in groups if g.step_kind is not None]
    hidden = {id(g) for g in kinds[KINDS_PICTURED:]}
    return [g for g in groups if id(g) not in hidden], [g for g in groups if id(g) in hidden]


def _ranges_table(groups: list[Summary], hidden: list[Summary]) -> Table:
    body = [
        [
            v.text(_ranked(g.name, g.rank)),
            v.text(g.device),
            v.integer(g.instances),
            *(v.fixed(x, 3, 1e-6) for x in (g.span_p50_ns, g.span_p90_ns, g.busy_p50_ns, g.busy_p90_ns)),
            v.percent(g.idle_fraction_p50 if g.idle_fraction_p50 is not None else g.idle_fraction),
            v.percent(g.share(g.idle_host_wait_ns)),
            v.percent(g.share(g.idle_short_gap_ns)),
            v.percent(g.share(g.idle_other_ns)),
            v.percent(g.share(g.idle_no_work_ns)),
            v.sig(g.gap_p50_ns, 1e-3),
            v.fixed(g.host_ahead_p50_ns, 3, 1e-6),
            _typical_verdict(g),
            v.integer(len(g.outliers)),
        ]
        for g in groups
    ]
    columns = [
        "range", "dev", "count", "span p50\nms", "span p90\nms", "busy p50\nms", "busy p90\nms", "idle\np50",
        "host\nwait", "short\ngaps", "other\nidle", "no\nwork", "gap p50\nus", "ahead\np50 ms", "verdict",
        "out-\nliers",
    ]  # fmt: skip
    note = (
        "each name's windows (<n>: an instance number); idle p50 and verdict: the typical instance (outliers, span > "
        "3x the median, left out); idle split: totals as shares of their span; ahead: how long the host queued the "
        "first op before the GPU ran it"
    )
    if hidden:
        steps = sum(g.instances for g in hidden)
        note += f"; {len(hidden)} more step kinds ({v.integer(steps)} steps, fewest steps each) in the JSON"
    return Table(title="Ranges", columns=columns, rows=body, align="llrrrrrrrrrrrrlr", note=note)


def pictured_kinds(groups: list[Summary]) -> list[Summary]:
    """The step kinds with a picture (``typical_step``), in the run's order (by device, most steps first)."""
    return [g for g in groups if g.typical_step is not None and g.typical_step.span_ns > 0]


def kind_name(g: Summary, devices: int) -> str:
    """A step kind as a picture labels it: its label, the rank of a run of several files, the device if several."""
    name = _ranked(v.text(g.step_kind), g.rank)
    return f"{name} dev {g.device}" if devices > 1 else name


def step_caption(g: Summary) -> str:
    """Beside a kind's picture: the pictured step's time and busy share, the kind's verdict, which step it is."""
    p = g.typical_step
    assert p is not None
    return f"{v.fixed(p.span_ns, 3, 1e-6)} ms, {v.percent(p.busy_fraction)} busy, {v.text(g.verdict)}, #{p.instance}"


def merged_text(g: Summary) -> str | None:
    """What the interval cap merged in a kind's picture (None: nothing)."""
    p = g.typical_step
    if p is None or not p.merged_idle_ns:
        return None
    merged = p.intervals - len(p.busy_intervals)
    return f"{v.integer(merged)} shortest gaps ({v.sig(p.merged_idle_ns, 1e-3)} us of idle) drawn busy"


def step_strips(groups: list[Summary]) -> Strips | None:
    """One typical step of each step kind along time (``typical_step``), each strip its own step's length."""
    kinds = pictured_kinds(groups)
    if not kinds:
        return None
    shown = kinds[:KINDS_PICTURED]
    devices = len({g.device for g in kinds})
    strips = []
    for g in shown:
        p = g.typical_step
        assert p is not None
        span = p.span_ns
        strips.append(
            Strip(
                label=kind_name(g, devices),
                busy=[(start / span, end / span) for start, end in p.busy_intervals],
                length=1.0,
                caption=step_caption(g),
            )
        )
    note = (
        "per step kind, the step whose step time is nearest its p50 (#: its instance), from the end of the "
        "previous step's work to the end of its own; each strip is its own step's length; busy: union of its ops"
    )
    merged = [f"{kind_name(g, devices)}: {text}" for g in shown if (text := merged_text(g))]
    if merged:
        note += " (a picture keeps a few hundred intervals: " + "; ".join(merged) + ")"
    if len(shown) < len(kinds):
        note += f"; {len(kinds) - len(shown)} more kinds' pictures in the JSON"
    return Strips(title="One typical step of each kind along time", strips=strips, note=note)


def _ranks_table(run: AnalyzeRun) -> Table:
    """One row per rank (several trace files): its file, devices, windows and their verdicts; then the skew of each
    summary name across ranks."""
    ranks = run.ranks
    sources = dict(zip(_source_ranks(run), run.sources, strict=False))
    body = []
    for rank in ranks:
        mine = [w for w in run.windows if w.rank == rank]
        verdicts = Counter(w.verdict for w in mine)
        source = sources.get(rank)
        body.append(
            [
                v.integer(rank),
                v.text(source.path if source else None),
                v.text(",".join(str(d) for d in sorted({w.device for w in mine}))),
                v.integer(len(mine)),
                v.percent(source.comm_busy_fraction if source else None),
                _verdicts(dict(verdicts)),
            ]
        )
    skews = [
        f"{s.name}: slowest rank {v.text(s.slowest_rank)}, skew {v.percent(s.skew)} (span p50 ms: "
        + ", ".join(f"r{r} {v.fixed(ns, 3, 1e-6)}" for r, ns in s.rank_span_p50_ns.items())
        + ")"
        for s in run.rank_skew
    ]
    note = "skew across ranks (slowest p50 / fastest p50 - 1): " + ("; ".join(skews) if skews else "none shared")
    columns = ["rank", "file", "devices", "windows", "comm\nshare", "verdicts"]
    note = "comm share: NCCL kernels' busy time over GPU busy (whole trace); " + note
    return Table(title="Ranks", columns=columns, rows=body, align="rllrrl", note=note)


def _source_ranks(run: AnalyzeRun) -> list[int]:
    """The rank of each entry of ``run.sources``, in order (as the merge gave them)."""
    from launchprobe.analysis.ranks import ranks_of_sources

    return ranks_of_sources(run.sources)


def _verdict_cell(w: Window) -> str:
    verdict = v.text(w.verdict)
    if w.no_work_fraction is not None and w.no_work_fraction >= MOSTLY_NO_WORK:
        return f"{verdict}, mostly no work"
    return verdict


def _windows_table(rows: list[Window], names: list[str], total: int) -> Table:
    body = [
        [
            name,
            v.text(w.device),
            v.integer(w.kernels),
            v.integer(w.gpu_ops),
            v.fixed(w.kernels_per_launch, 2),
            v.fixed(w.span_ns, 3, 1e-6),
            v.fixed(w.busy_ns, 3, 1e-6),
            v.percent(w.idle_fraction),
            v.percent(w.share(w.idle_host_wait_ns)),
            v.percent(w.share(w.idle_short_gap_ns)),
            v.percent(w.share(w.idle_other_ns)),
            v.percent(w.share(w.idle_no_work_ns)),
            v.fixed(w.range_ns, 3, 1e-6),
            v.fixed(w.host_ahead_ns, 3, 1e-6),
            _verdict_cell(w),
        ]
        for w, name in zip(rows, names, strict=True)
    ]
    columns = [
        "window", "dev", "kernels", "GPU\nops", "kernels\n/launch", "span\nms", "busy\nms", "idle",
        "host\nwait", "short\ngaps", "other\nidle", "no\nwork", "range\nms", "ahead\nms", "verdict",
    ]  # fmt: skip
    note = (
        "span and busy: the window's own GPU work; idle split as shares of the span: host wait (launch came after "
        "the GPU went idle), short gaps, other, no work (the process issued none); range: the range on the host; "
        "ahead: how long the host queued the first op before the GPU ran it"
    )
    title = "Windows"
    if total > len(rows):
        title = f"Slowest {len(rows)} of {total} windows"
        note = f"{total - len(rows)} more windows in the JSON/CSV (--format json, --format csv); {note}"
    return Table(title=title, columns=columns, rows=body, align="llrrrrrrrrrrrrl", note=note)


def _gaps_table(rows: list[Window], names: list[str]) -> Table:
    body = []
    for w, name in zip(rows, names, strict=True):
        launch_text = ", ".join(f"{api} {v.integer(n)}" for api, n in w.launches.items()) or v.MISSING
        gaps = (w.gap_p50_ns, w.gap_p90_ns, w.gap_p99_ns, w.gap_max_ns)
        body.append([name, v.text(w.device), *(v.sig(g, 1e-3) for g in gaps), launch_text])
    columns = ["window", "dev", "gap p50\nus", "gap p90\nus", "gap p99\nus", "gap max\nus", "launch calls"]
    return Table(title="Gaps before each GPU op, and launches", columns=columns, rows=body, align="llrrrrl")


def _short_names(records: Sequence[Record] | None, width: int, origin_ns: int | None = None) -> Sequence[Record] | None:
    """Kernel names (top kernels' ``name``, idle stretches' ``next_op``) shortened for a table; idle stretches'
    times from the trace's first GPU op (``origin_ns``), not the trace clock's 16-digit epoch values."""
    if not records:
        return records
    out: list[Record] = []
    for r in records:
        if isinstance(r, TopKernel):
            r = msgspec.structs.replace(r, name=short_kernel_name(r.name, width))
        elif isinstance(r, IdleStretch | PooledIdleStretch):
            if r.next_op:
                r = msgspec.structs.replace(r, next_op=short_kernel_name(r.next_op, width))
            if origin_ns is not None:
                r = msgspec.structs.replace(r, start_ns=r.start_ns - origin_ns, end_ns=r.end_ns - origin_ns)
        out.append(r)
    return out


def _lists(
    shown: list[Window], groups: list[Summary], rows: list[Window], width: int, origin_ns: int | None = None
) -> list[Block]:
    """Top kernels and largest idle stretches: once per range name (pooled over its windows; the slowest window's
    in runs saved before pooling) or, for whole-trace windows, per window shown."""
    blocks: list[Block] = []
    idle_title = "Largest idle stretches" + ("" if origin_ns is None else " (times from the first GPU op)")
    for key, title in (("top_kernels", "Top kernels"), ("largest_idle", idle_title)):
        if groups:
            for g in groups:
                records: Sequence[Record] | None = getattr(g, key)
                label = f"{g.label}, {v.integer(g.instances)} windows"
                if records is None:  # an older run: the slowest window of that name
                    mine = [w for w in rows if w.name == g.name and w.device == g.device]
                    slowest = max(mine, key=lambda w: w.span_ns, default=None)
                    records, label = (getattr(slowest, key) if slowest else None), f"{g.label}, slowest window"
                table = common.records_table(f"{title}: {label}", _short_names(records, width, origin_ns))
                if table is not None:
                    blocks.append(table)
            continue
        for w in shown:
            table = common.records_table(f"{title}: {w.label}", _short_names(getattr(w, key), width, origin_ns))
            if table is not None:
                blocks.append(table)
    return blocks
