"""`launchprobe nsys` end to end against a fake nsys that records its argv, runs the command and writes files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchprobe.cli import main

FAKE_NSYS = """#!{python}
import json, os, shutil, signal, subprocess, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[0] == "export":
    shutil.copy(os.environ["FAKE_NSYS_SQLITE"], args[args.index("--output") + 1])
    sys.exit(0)
i, out = 1, None
while i < len(args) and args[i].startswith("-"):
    if args[i] in ("-t", "-s", "-o"):
        out = args[i + 1] if args[i] == "-o" else out
        i += 2
    else:
        i += 1
report = out + ".nsys-rep"
if os.path.exists(report) and "--force-overwrite=false" in args:
    sys.exit(1)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
proc = subprocess.Popen(args[i:])
while proc.poll() is None:
    if stop:
        proc.terminate()
        proc.wait()
    time.sleep(0.01)
with open(report, "wb") as handle:
    handle.write(b"fake report")
sys.exit(0 if stop else proc.returncode)
"""


@pytest.fixture
def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from tests.fixtures import nsys_synth as synth

    sqlite = synth.write_nsys_sqlite(tmp_path / "fixture.sqlite", synth.decode_loop(synth.Loop(steps=3)))
    binary = tmp_path / "bin" / "nsys"
    binary.parent.mkdir()
    binary.write_text(FAKE_NSYS.format(python=sys.executable))
    binary.chmod(0o755)
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("LAUNCHPROBE_NSYS", str(binary))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_SQLITE", str(sqlite))
    return log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_end_to_end_and_pass_through(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prof"
    user = [sys.executable, "-c", "import sys; print(sys.argv)", "--model", "m x", "-o", "y", "--format", "z"]
    code = _cli(["nsys", "--dir", str(out), "--range", "decode_step", "--format", "json", "--", *user])
    assert code == 0
    run = json.loads(capsys.readouterr().out)
    assert run["kind"] == "analyze" and len(run["windows"]) == 3
    assert run["windows"][0]["verdict"] == "launch-bound"
    assert run["source"]["format"] == "nsys-rep"
    profile, export = _calls(fake_nsys)
    assert profile[:8] == [
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=process-tree",
        "--cuda-graph-trace=node",
        "-o",
    ]
    assert profile[8] == str(out / "report") and "--force-overwrite=false" in profile
    assert profile[-len(user) :] == user  # the user's arguments, untouched
    # exported to a temporary name beside the report, renamed to report.sqlite once complete (never half a file)
    assert export[:4] == ["export", "--type", "sqlite", "--output"] and export[4].startswith(str(out / "report.sqlite"))
    assert export[4] != str(out / "report.sqlite")
    assert export[-1] == str(out / "report.nsys-rep")
    for name in ("report.nsys-rep", "report.sqlite", "report.json"):
        assert (out / name).exists()


def test_options_reach_nsys(fake_nsys: Path, tmp_path: Path) -> None:
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--capture-nvtx", "decode", "--gpu-metrics-devices", "all",
            "--nsys-arg=--duration=30", "--format", "json", "--", sys.executable, "-c", "pass"]  # fmt: skip
    assert _cli(argv) == 0
    profile = _calls(fake_nsys)[0]
    for arg in ("--capture-range=nvtx", "--nvtx-capture=decode", "--gpu-metrics-devices=all", "--duration=30"):
        assert arg in profile


def test_nothing_overwritten_unless_forced(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--format", "json", "--", sys.executable, "-c", "pass"]
    assert _cli(argv) == 0
    before = (tmp_path / "p" / "report.json").read_text()
    capsys.readouterr()
    assert _cli(argv) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "p" / "report.json").read_text() == before
    assert _cli([*argv[:1], "--force", *argv[1:]]) == 0
    assert "--force-overwrite=true" in _calls(fake_nsys)[-2]


def test_failing_command_exit_code(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--format", "json", "--", sys.executable, "-c", "raise SystemExit(3)"]
    assert _cli(argv) == 3
    captured = capsys.readouterr()
    assert "failed with exit code 3" in captured.err
    assert json.loads(captured.out)["notices"]  # what was collected is still analysed, with a notice
    assert (tmp_path / "p" / "report.nsys-rep").exists()


def test_missing_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LAUNCHPROBE_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _cli(["nsys", "--dir", str(tmp_path / "p"), "--", "true"]) == 5
    assert "nsys" in capsys.readouterr().err
    assert _cli(["nsys", "--nsys", str(tmp_path / "nope"), "--", "true"]) == 5


def test_command_not_found(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["nsys", "--dir", str(tmp_path / "p"), "--", "no-such-command-xyz"]) == 127
    assert "command not found: no-such-command-xyz" in capsys.readouterr().err
    assert not fake_nsys.exists()  # nsys never ran


def test_ctrl_c_stops_cleanly_and_keeps_what_was_collected(fake_nsys: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    cmd = [sys.executable, "-m", "launchprobe", "nsys", "--dir", str(out), "--format", "json", "--",
           sys.executable, "-c", "import time; time.sleep(60)"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 20
    while not fake_nsys.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    run = json.loads(stdout)
    assert any("interrupted" in n for n in run["notices"])
    assert (out / "report.sqlite").exists() and (out / "report.json").exists()


def test_analyze_nsys_rep_exports_once(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"fake report")
    assert _cli(["analyze", str(rep), "--format", "json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["source"]["format"] == "nsys-rep" and run["source"]["sqlite"] == str(tmp_path / "r.sqlite")
    assert _cli(["analyze", str(rep), "--format", "json"]) == 0  # the up-to-date export is reused
    assert [c[0] for c in _calls(fake_nsys)] == ["export"]
    assert _cli(["analyze", str(rep), "--format", "json", "--remove-sqlite", "--force"]) == 0
    assert not (tmp_path / "r.sqlite").exists()


def test_options_after_the_command_are_the_commands(
    fake_nsys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    user_file = tmp_path / "x"
    user_file.write_text("the user's own file")
    script = "import sys; print('ARGV', sys.argv[1:], file=sys.stderr)"
    argv = ["nsys", "--dir", "p", "--format", "json", sys.executable, "-c", script, "--output", "x", "--force"]
    assert _cli(argv) == 0
    assert user_file.read_text() == "the user's own file"  # not taken as launchprobe's --output, not replaced
    profile = _calls(fake_nsys)[0]
    assert profile[-6:] == [sys.executable, "-c", script, "--output", "x", "--force"]
    assert "--force-overwrite=false" in profile  # --force was the command's, not ours
    assert "ARGV ['--output', 'x', '--force']" in capfd.readouterr().err


@pytest.mark.parametrize("regex", ["decode[", "a{99999999999}", "(" * 3000 + ")" * 3000])
def test_invalid_range_is_refused_before_anything_runs(
    fake_nsys: Path, tmp_path: Path, regex: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--range", regex, "--", sys.executable, "-c", "pass"]
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("launchprobe: error: ") and "not a valid regular expression" in err
    assert len(err.strip().splitlines()) == 1
    assert not fake_nsys.exists() and not (tmp_path / "p").exists()  # nsys never ran, nothing was created
    rep = tmp_path / "r.sqlite"
    rep.write_bytes(b"")
    assert _cli(["analyze", str(rep), "--range", regex]) == 2  # analyze checks the same way


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", ""])
def test_name_stays_inside_dir(fake_nsys: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--name", name, "--", sys.executable, "-c", "pass"]
    assert _cli(argv) == 2
    assert "--name" in capsys.readouterr().err
    assert not fake_nsys.exists() and not (tmp_path / "p").exists() and not (tmp_path / "x.nsys-rep").exists()


def test_nsys_killed_by_a_signal_says_so(fake_nsys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kill_parent = "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"  # the parent is (fake) nsys
    argv = ["nsys", "--dir", str(tmp_path / "p"), "--", sys.executable, "-c", kill_parent]
    assert _cli(argv) == 128 + signal.SIGKILL
    err = capsys.readouterr().err
    assert "nsys was killed by signal 9 (SIGKILL)" in err and "Traceback" not in err


def test_collect_only_runs_nsys() -> None:
    """Issue 10: collect/nsys_run.py runs nsys and reads its report; analysing, saving, rendering are the CLI's."""
    import ast

    import launchprobe.collect.nsys_run as nsys_run

    tree = ast.parse(Path(nsys_run.__file__).read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    command_side = ("analysis", "run", "render", "cli", "pipeline")
    assert not [m for m in imported if m.split(".")[1:2] and m.split(".")[1] in command_side], imported
    assert not hasattr(nsys_run, "profile_and_analyze")
