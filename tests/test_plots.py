"""Plots: the PNGs are written and non-empty, and each plot drew the data it should (not pixels)."""

from __future__ import annotations

from pathlib import Path

import pytest
import runs

from launchprobe.errors import UsageError
from launchprobe.render import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_classify_plots_are_written(tmp_path: Path) -> None:
    paths = plots.write_plots(runs.classify_run(), tmp_path / "plots")
    assert [p.name for p in paths] == ["timeline-b1.png", "regime.png", "gaps-b1.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_timeline_data() -> None:
    run = runs.classify_run()
    plot = plots.plot_timeline(run, 1)
    assert plot is not None
    rows = {row["mode"]: row for row in plot.data["rows"]}
    assert list(rows) == ["eager", "piecewise", "full"]
    kernel_pass = run.results[0].kernel_pass
    assert kernel_pass is not None
    kernels = kernel_pass.kernels
    eager_busy = sum(d for _, d in rows["eager"]["busy_ms"])
    assert eager_busy == pytest.approx(sum(k.end_ns - k.start_ns for k in kernels) / 1e6)
    assert rows["eager"]["step_ms"] > rows["full"]["step_ms"]  # one shared time axis
    ax = plot.figure.axes[0]
    assert ax.get_xlabel() == "time from step start (ms)" and "batch 1" in ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["full", "piecewise", "eager"]
    assert plots.plot_timeline(run, 64) is None  # no per-kernel pass at batch 64


def test_regime_data_marks_verdicts() -> None:
    plot = plots.plot_regime(runs.classify_run())
    assert plot is not None
    eager = plot.data["series"]["eager"]
    assert [(b, v) for b, _, v in eager] == [(1.0, "launch-bound"), (64.0, "memory-bound")]
    assert eager[0][1] == pytest.approx(1 / 9.47e-3)
    assert set(plot.data["memory_roof"]) == {1.0, 64.0}
    ax = plot.figure.axes[0]
    assert "tokens/s" in ax.get_ylabel() and "batch" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"eager", "piecewise", "full", "launch-bound", "memory-bound"} <= set(labels)


def test_gap_histogram_counts_every_kernel() -> None:
    run = runs.classify_run()
    plot = plots.plot_gaps(run, 1)
    assert plot is not None
    kernel_pass = run.results[0].kernel_pass
    assert kernel_pass is not None
    n_kernels = len(kernel_pass.kernels)
    assert {mode: sum(c) for mode, c in plot.data["counts"].items()} == {
        m: n_kernels for m in ("eager", "piecewise", "full")
    }
    # the launch-bound eager step waits tens of us; the graph step only between steps (its op 0)
    assert max(plot.data["gaps_us"]["eager"]) > 30 and max(plot.data["gaps_us"]["full"][1:]) < 5
    assert "stitched" in plot.figure.axes[0].get_title()


def test_without_kernel_pass_busy_idle_replaces_timeline(tmp_path: Path) -> None:
    paths = plots.write_plots(runs.classify_run(with_kernel_pass=False), tmp_path)
    assert [p.name for p in paths] == ["busy-idle.png", "regime.png"]
    plot = plots.plot_busy_idle(runs.classify_run(with_kernel_pass=False))
    assert plot is not None and plot.data["busy_ms"][0] == pytest.approx(4.45)


def test_cpu_run_has_only_the_regime_map(tmp_path: Path) -> None:
    assert [p.name for p in plots.write_plots(runs.cpu_classify_run(), tmp_path)] == ["regime.png"]


def test_plan_run_has_nothing_to_plot(tmp_path: Path) -> None:
    assert plots.write_plots(runs.plan_run(), tmp_path) == []


def test_analyze_windows_plot(tmp_path: Path) -> None:
    paths = plots.write_plots(runs.analyze_run(), tmp_path)
    assert [p.name for p in paths] == ["windows.png"] and paths[0].stat().st_size > 5_000
    plot = plots.plot_windows(runs.analyze_run())
    assert plot is not None
    assert plot.data["ms"]["busy_ns"] == pytest.approx([4.4, 4.4, 27.0])
    totals = [sum(parts) for parts in zip(*plot.data["ms"].values(), strict=True)]
    assert totals == pytest.approx([9.5, 9.4, 30.0])  # busy + idle split = the span


def test_existing_plots_are_not_overwritten_without_force(tmp_path: Path) -> None:
    (tmp_path / "regime.png").write_bytes(b"mine")
    with pytest.raises(UsageError, match="--force"):
        plots.write_plots(runs.cpu_classify_run(), tmp_path)
    assert (tmp_path / "regime.png").read_bytes() == b"mine"
    plots.write_plots(runs.cpu_classify_run(), tmp_path, force=True)
    assert (tmp_path / "regime.png").read_bytes().startswith(PNG_MAGIC)


def test_plot_dir_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        plots.write_plots(runs.classify_run(), target)


def test_windows_plot_is_bounded_for_thousands_of_windows(tmp_path: Path) -> None:
    run = runs.analyze_run()
    run.windows = [runs.window(f"step {i}", 0, 9.0 + (i % 97) / 10, 4.4, 480) for i in range(5_000)]
    plot = plots.plot_windows(run)
    assert plot is not None
    width, height = plot.figure.get_size_inches()
    assert len(plot.data["labels"]) == plots.MAX_ROWS and plot.data["total"] == 5_000
    assert height * plots.DPI < 2_000 and width * plots.DPI < 2_000  # pixels, however many windows
    assert "slowest 40 of 5,000 windows" in plot.figure.axes[0].get_title()
    spans = [a + b + c + d for a, b, c, d in zip(*plot.data["ms"].values(), strict=True)]
    assert min(spans) == pytest.approx(18.6)  # the slowest: spans of 18.6 ms (i % 97 == 96), kept in time order
    assert plot.data["labels"][0] == "step 96 #96 (dev 0)"
    (path,) = plots.write_plots(run, tmp_path)
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_few_windows_are_all_drawn() -> None:
    plot = plots.plot_windows(runs.analyze_run())
    assert plot is not None and plot.data["total"] == 3 and len(plot.data["labels"]) == 3
    assert "slowest" not in plot.figure.axes[0].get_title()


def test_busy_idle_plot_is_bounded() -> None:
    run = runs.classify_run(batches=tuple(range(1, 40)), with_kernel_pass=False)
    plot = plots.plot_busy_idle(run)
    assert plot is not None and len(plot.data["labels"]) == plots.MAX_ROWS
    assert plot.figure.get_size_inches()[1] * plots.DPI < 2_000


def test_names_in_plots_are_text(tmp_path: Path) -> None:
    run = runs.analyze_run()
    run.windows = [runs.window(name, 0, 9.5, 4.4, 480) for name in ("cost $x$", "a $\\frac$ b", "\x1b[31mred", "[/x]")]
    plot = plots.plot_windows(run)
    assert plot is not None
    assert plot.data["labels"] == ["cost $x$ #0 (dev 0)", "a $\\frac$ b #1 (dev 0)", "\\x1b[31mred #2 (dev 0)",
                                   "[/x] #3 (dev 0)"]  # fmt: skip
    ticks = plot.figure.axes[0].get_yticklabels()
    assert {t.get_text() for t in ticks} == set(plot.data["labels"])
    assert not any(t.get_parse_math() for t in ticks)
    plots.write_plots(run, tmp_path)  # mathtext would fail on "$\frac"
