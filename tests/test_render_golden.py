"""Golden outputs of the renderers at a fixed width: terminal (rich, box drawing), plain and markdown.

Regenerate after an intended change: pytest tests/test_render_golden.py --update-goldens
(or LAUNCHPROBE_UPDATE_GOLDENS=1), then review the diff of tests/golden/.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import runs
from rich.console import Console

from launchprobe.compare import compare_runs
from launchprobe.console import make_console
from launchprobe.render import build_report, render_table
from launchprobe.render import comparison as comparison_report
from launchprobe.render.markdown import report_markdown
from launchprobe.render.terminal import print_report
from launchprobe.run.schema import Run

GOLDEN = Path(__file__).parent / "golden"
WIDTH = 100


def terminal(draw: Callable[[Console], None]) -> str:
    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    draw(console)
    return console.export_text(styles=False)


def plain(draw: Callable[[Console], None]) -> str:
    buffer = io.StringIO()
    draw(make_console(buffer, plain=True, width=WIDTH))
    return buffer.getvalue()


def compare_regression() -> Any:
    base = runs.classify_run()
    new = runs.scaled(runs.scaled(base, 1.10, mode="eager", batch=1), 0.93, mode="full", batch=64)
    new = runs.scaled(new, 1.06, mode="piecewise", batch=1, spread=0.15)
    return comparison_report.build(compare_runs(base, new), "base.json", "new.json", base, new)


RUNS: dict[str, Callable[[], Run]] = {
    "classify": runs.classify_run,
    "classify-cpu": runs.cpu_classify_run,
    "classify-plan": runs.plan_run,
    "analyze": runs.analyze_run,
    "analyze-many": runs.analyze_many_run,
    "analyze-steps": runs.analyze_steps_run,
}


def check(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    normal = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    if update or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(normal)
        if not update:
            pytest.fail(f"{path} did not exist; written now, review it and rerun")
        return
    assert normal == path.read_text(), f"{name} differs from its golden; rerun with --update-goldens if intended"


@pytest.mark.parametrize("kind", list(RUNS))
def test_terminal(kind: str, update_goldens: bool) -> None:
    run = RUNS[kind]()
    check(f"{kind}.terminal.txt", terminal(lambda c: render_table(run, c)), update_goldens)


@pytest.mark.parametrize("kind", list(RUNS))
def test_plain(kind: str, update_goldens: bool) -> None:
    run = RUNS[kind]()
    text = plain(lambda c: render_table(run, c))
    assert "\x1b[" not in text
    assert not set(text) - set(map(chr, range(32, 127))) - {"\n"}, "plain output is ASCII only"
    check(f"{kind}.plain.txt", text, update_goldens)


@pytest.mark.parametrize("kind", list(RUNS))
def test_markdown(kind: str, update_goldens: bool) -> None:
    check(f"{kind}.md", report_markdown(build_report(RUNS[kind]())), update_goldens)


def test_compare_goldens(update_goldens: bool) -> None:
    report = compare_regression()
    check("compare.terminal.txt", terminal(lambda c: print_report(report, c)), update_goldens)
    check("compare.plain.txt", plain(lambda c: print_report(report, c)), update_goldens)
    check("compare.md", report_markdown(report), update_goldens)
