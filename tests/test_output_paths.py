"""Where outputs go (issue 14): a save writes through a symbolic link to its target, straight to a character
device (/dev/null) and never replaces either; new files honour the umask; and every output of a long command
(--output, --plot) is checked before any measuring, failing in one line with exit 2 and no stray files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import runs

from launchprobe import classify as job
from launchprobe.cli import main
from launchprobe.errors import UsageError
from launchprobe.render import emit
from launchprobe.run.files import load_run, save_run


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    try:
        main([*map(str, args)])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


# --- saving ---------------------------------------------------------------------------------------------------


def test_save_through_a_link_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "run.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="already exists"):
        save_run(runs.analyze_run(), link)
    save_run(runs.analyze_run(), link, force=True)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load_run(target).kind == "analyze"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its mode
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["run.json"]  # no temporary left


def test_save_through_a_dangling_link_creates_the_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    save_run(runs.analyze_run(), link)
    assert link.is_symlink() and load_run(tmp_path / "made.json").kind == "analyze"


def test_character_devices_are_written_straight_not_replaced() -> None:
    before = os.stat("/dev/null")
    save_run(runs.analyze_run(), Path("/dev/null"))  # no --force needed: nothing is overwritten
    emit(runs.analyze_run(), fmt="markdown", output=Path("/dev/null"))
    emit(runs.analyze_run(), fmt="plain", output=Path("/dev/null"))
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_a_pipe_is_written_straight(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        save_run(runs.analyze_run(), fifo)
        data = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert data.startswith(b'{\n "schema_version"') and stat.S_ISFIFO(fifo.stat().st_mode)


def test_new_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        save_run(runs.analyze_run(), tmp_path / "run.json")
        emit(runs.analyze_run(), fmt="markdown", output=tmp_path / "run.md")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "run.md").stat().st_mode) == 0o640
    os.umask(0o022)
    try:
        save_run(runs.analyze_run(), tmp_path / "other.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "other.json").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("folder", "it is a folder"),
        ("/proc/launchprobe-run.json", "does not take new files"),
        ("missing/run.json", "does not exist"),
        ("file/run.json", "does not exist"),
    ],
)
def test_unwritable_outputs_are_one_line(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    path = tmp_path / where if not where.startswith("/") else Path(where)
    with pytest.raises(UsageError, match=message):
        save_run(runs.analyze_run(), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="Permission denied"):
            save_run(runs.analyze_run(), folder / "run.json")
    finally:
        folder.chmod(0o700)


def test_a_failing_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UsageError, match="No space left on device"):
        save_run(runs.analyze_run(), tmp_path / "run.json")
    assert list(tmp_path.iterdir()) == []


# --- every output checked before the measurement --------------------------------------------------------------


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured although an output cannot be written")

    monkeypatch.setattr(job, "classify", measure)
    monkeypatch.setattr(job, "plan", measure)


@pytest.mark.parametrize(
    ("option", "make", "message"),
    [
        ("--output", "folder", "it is a folder"),
        ("--output", "/proc/launchprobe-run.json", "does not take new files"),
        ("--plot", "file", "not a folder"),
        ("--plot", "file/plots", "is not a folder"),
        ("--plot", "pngs", "already holds plots (gaps-b8.png, regime.png)"),
        ("--plot", "/proc/launchprobe-plots", "does not take new files"),
    ],
)
@pytest.mark.usefixtures("no_measuring")
def test_classify_checks_outputs_before_measuring(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, make: str, message: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "pngs").mkdir()
    (tmp_path / "pngs" / "regime.png").write_bytes(b"mine")
    (tmp_path / "pngs" / "gaps-b8.png").write_bytes(b"mine")  # a batch this run may not have: refused anyway
    (tmp_path / "pngs" / "photo.png").write_bytes(b"mine")
    path = Path(make) if make.startswith("/") else tmp_path / make
    for args in (["--device", "cpu"], ["--plan"]):
        code, _, err = run_cli(capsys, "classify", *args, "-q", option, path)
        assert code == 2, err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder", "pngs"]
    assert (tmp_path / "pngs" / "regime.png").read_bytes() == b"mine"


@pytest.mark.usefixtures("no_measuring")
def test_analyze_checks_plots_before_reading(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "windows.png").write_bytes(b"mine")
    code, _, err = run_cli(capsys, "analyze", tmp_path / "missing.sqlite", "--plot", tmp_path)
    assert code == 2 and "already holds plots (windows.png)" in err


def test_plot_folder_with_force_and_other_pngs(tmp_path: Path) -> None:
    from launchprobe.render.plots import check_plot_dir, write_plots

    (tmp_path / "photo.png").write_bytes(b"mine")
    check_plot_dir(tmp_path)  # not a plot's name
    (tmp_path / "timeline-b1.png").write_bytes(b"mine")
    check_plot_dir(tmp_path, force=True)
    # when the run is at hand, only the names it writes count
    assert [p.name for p in write_plots(runs.cpu_classify_run(), tmp_path)] == ["regime.png"]
    assert (tmp_path / "timeline-b1.png").read_bytes() == b"mine"


def test_dev_stdout_redirected_to_a_file_is_appended_to(tmp_path: Path) -> None:
    import subprocess
    import sys

    save_run(runs.analyze_run(), tmp_path / "run.json")
    out = tmp_path / "out.md"
    out.write_text("# earlier\n")
    before = out.stat().st_ino
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    with out.open("a") as handle:  # as the shell's `>>` (and `>`, which leaves nothing to keep) opens it
        proc = subprocess.run(
            [sys.executable, "-m", "launchprobe", "report", str(tmp_path / "run.json"), "--format", "json",
             "-o", "/dev/stdout"],
            stdout=handle, stderr=subprocess.PIPE, text=True, env=env, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith('# earlier\n{\n "schema_version"') and out.stat().st_ino == before
