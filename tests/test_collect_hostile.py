"""Hostile input to the readers: every class is a one-line LaunchprobeError (exit 6 or 2), never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("msgspec", reason="msgspec is not installed here")

from launchprobe.collect import load_trace, sniff_format  # noqa: E402
from launchprobe.collect.nsys_rep import export_sqlite  # noqa: E402
from launchprobe.collect.nsys_sqlite import read_nsys_sqlite  # noqa: E402
from launchprobe.collect.sqlite_pages import read_int_columns  # noqa: E402
from launchprobe.errors import BadTraceError, LaunchprobeError, UsageError  # noqa: E402
from tests.fixtures import nsys_synth as synth  # noqa: E402

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
ROOT = Path(__file__).parents[1]


def _export(tmp_path: Path, name: str = "t.sqlite") -> Path:
    return synth.write_nsys_sqlite(tmp_path / name, synth.decode_loop(synth.Loop(steps=2)))


def _edit(path: Path, *sql: str, params: tuple[Any, ...] = ()) -> Path:
    conn = sqlite3.connect(path)
    for statement in sql:
        conn.execute(statement, params if "?" in statement else ())
    conn.commit()
    conn.close()
    return path


def _kineto_events() -> list[dict[str, Any]]:
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10.5, "dur": 2,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 1.25,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
    ]  # fmt: skip


def _kineto_bytes(events: list[dict[str, Any]] | None = None) -> bytes:
    return json.dumps({"traceEvents": _kineto_events() if events is None else events}).encode()


# --- nsys: missing or renamed columns --------------------------------------------------------------------------


def _drop_column(path: Path, table: str, column: str) -> Path:
    return _edit(path, f'ALTER TABLE "{table}" DROP COLUMN "{column}"')


@pytest.mark.parametrize(
    "table,column",
    [
        (KERNEL, "start"),
        (KERNEL, "end"),
        (KERNEL, "deviceId"),
        (KERNEL, "streamId"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
        ("NVTX_EVENTS", "eventType"),
        ("StringIds", "value"),
    ],
)
def test_missing_required_column_names_table_and_column(tmp_path: Path, table: str, column: str) -> None:
    path = _drop_column(_export(tmp_path), table, column)
    with pytest.raises(BadTraceError, match=f"{table}.*'{column}'"):
        read_nsys_sqlite(path)


def test_renamed_column_is_missing(tmp_path: Path) -> None:
    path = _edit(_export(tmp_path), f'ALTER TABLE "{KERNEL}" RENAME COLUMN "start" TO "startTime"')
    with pytest.raises(BadTraceError, match=f"{KERNEL} has no column 'start'"):
        read_nsys_sqlite(path)


def test_kernel_table_without_any_name_column(tmp_path: Path) -> None:
    path = _drop_column(_drop_column(_export(tmp_path), KERNEL, "shortName"), KERNEL, "demangledName")
    with pytest.raises(BadTraceError, match="no kernel name column"):
        read_nsys_sqlite(path)


def test_optional_columns_may_be_missing(tmp_path: Path) -> None:
    path = _drop_column(_drop_column(_export(tmp_path), KERNEL, "correlationId"), KERNEL, "globalPid")
    tl = read_nsys_sqlite(path)
    assert (tl.gpu_ops["correlation_id"] == -1).all() and len(tl.gpu_ops)


# --- nsys: values of the wrong type, invalid UTF-8 ------------------------------------------------------------


@pytest.mark.parametrize("value,kind", [("'abc'", "text"), ("1.5", "real"), ("x'00ff'", "blob")])
def test_wrong_type_in_an_integer_column(tmp_path: Path, value: str, kind: str) -> None:
    path = _export(tmp_path)
    conn = sqlite3.connect(path)
    # a column without type affinity keeps what it is given, as a hand-made or damaged file can
    conn.execute(f'CREATE TABLE k2 AS SELECT * FROM "{KERNEL}"')
    conn.execute(f'DROP TABLE "{KERNEL}"')
    cols = [r[1] for r in conn.execute("PRAGMA table_info(k2)")]
    conn.execute(f'CREATE TABLE "{KERNEL}" ({", ".join(c + (" ANY" if c == "start" else " INTEGER") for c in cols)})')
    conn.execute(f'INSERT INTO "{KERNEL}" SELECT * FROM k2')
    conn.execute("DROP TABLE k2")
    conn.execute(f'UPDATE "{KERNEL}" SET start = {value} WHERE rowid = 3')
    conn.commit()
    n = conn.execute(f'SELECT count(*) FROM "{KERNEL}"').fetchone()[0]
    out = np.empty((1, n), dtype=np.int64)
    assert not read_int_columns(conn, path, KERNEL, ["start"], [0], out)  # the page reader declines
    conn.close()
    with pytest.raises(BadTraceError, match=f"{KERNEL}, column start: a {kind} value .*row 3"):
        read_nsys_sqlite(path)


def test_text_in_nvtx_and_metric_columns(tmp_path: Path) -> None:
    path = _edit(_export(tmp_path), "UPDATE NVTX_EVENTS SET globalTid = 'x' WHERE rowid = 1")
    with pytest.raises(BadTraceError, match="NVTX_EVENTS, column globalTid: a text value"):
        read_nsys_sqlite(path)
    data = synth.decode_loop(synth.Loop(steps=1))
    metrics = [(1_000_000 + i * 10_000, "DRAM Read Bandwidth [Throughput %]", 70.0) for i in range(5)]
    path = synth.write_nsys_sqlite(tmp_path / "m.sqlite", data, metrics=metrics)
    _edit(path, "UPDATE GPU_METRICS SET value = 'hot' WHERE rowid = 2")
    with pytest.raises(BadTraceError, match="GPU_METRICS, column value: a text value"):
        read_nsys_sqlite(path)


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    path = _export(tmp_path)
    conn = sqlite3.connect(path)
    kernel_name_id = conn.execute(f'SELECT shortName FROM "{KERNEL}" LIMIT 1').fetchone()[0]
    conn.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (b"gemm\xff\xfe_kernel", kernel_name_id))
    meta = next(
        t for (t,) in conn.execute("SELECT name FROM sqlite_master") if t in ("META_DATA_EXPORT", "EXPORT_META_DATA")
    )
    conn.execute(f"UPDATE {meta} SET value = CAST(? AS TEXT) WHERE name = 'EXPORT_PRODUCT_VERSION'", (b"2025\xc3",))
    # invalid UTF-8 in the schema itself: a table whose name and CREATE statement are not UTF-8
    conn.execute("CREATE TABLE extra (a INTEGER)")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET name = CAST(? AS TEXT), tbl_name = CAST(? AS TEXT), sql = CAST(? AS TEXT) "
        "WHERE name = 'extra'",
        (b"ex\xfftra", b"ex\xfftra", b"CREATE TABLE ex\xfftra (a INTEGER)"),
    )
    conn.commit()
    conn.close()
    tl = read_nsys_sqlite(path)
    assert "gemm\ufffd\ufffd_kernel" in set(tl.gpu_ops["name"])
    assert tl.meta["tool_version"] == "2025\ufffd"


def test_blob_strings_are_decoded(tmp_path: Path) -> None:
    path = _export(tmp_path)
    conn = sqlite3.connect(path)
    kernel_name_id = conn.execute(f'SELECT shortName FROM "{KERNEL}" LIMIT 1').fetchone()[0]
    conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (b"blob_kernel", kernel_name_id))
    conn.commit()
    conn.close()
    assert "blob_kernel" in set(read_nsys_sqlite(path).gpu_ops["name"])


def test_times_beyond_the_limit(tmp_path: Path) -> None:
    path = _edit(_export(tmp_path), f'UPDATE "{KERNEL}" SET "end" = 9223372036854775807 WHERE rowid = 1')
    with pytest.raises(BadTraceError, match="time out of range"):
        read_nsys_sqlite(path)


def test_odd_characters_in_the_path(tmp_path: Path) -> None:
    path = _export(tmp_path, "a #b ?c %41.sqlite")
    assert len(load_trace(path).gpu_ops)


# --- files that are not files, pipes, byte-order marks --------------------------------------------------------


def test_folders_are_usage_errors(tmp_path: Path) -> None:
    folder = tmp_path / "x.sqlite"
    folder.mkdir()
    for call in (load_trace, read_nsys_sqlite, sniff_format):
        with pytest.raises(UsageError, match="folder"):
            call(folder)


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"  \r\n\t", b"\xef\xbb\xbf\n\n   ", b" " * 100_000])
@pytest.mark.parametrize("compress", [False, True])
def test_byte_order_mark_and_leading_whitespace(tmp_path: Path, prefix: bytes, compress: bool) -> None:
    raw = prefix + _kineto_bytes()
    path = tmp_path / ("t.json.gz" if compress else "t.json")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    assert sniff_format(path) == "kineto"
    assert load_trace(path).gpu_ops["start_ns"].tolist() == [13000]


def _through_fifo(tmp_path: Path, data: bytes, read: Callable[[Path], Any]) -> Any:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("wb") as handle:
            handle.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        return read(fifo)
    finally:
        writer.join(timeout=10)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_kineto_and_sqlite(tmp_path: Path) -> None:
    tl = _through_fifo(tmp_path, b"\xef\xbb\xbf " + _kineto_bytes(), load_trace)
    assert tl.gpu_ops["start_ns"].tolist() == [13000] and tl.meta["path"] == str(tmp_path / "fifo")
    sqlite_bytes = _export(tmp_path).read_bytes()
    (tmp_path / "fifo").unlink()
    tl = _through_fifo(tmp_path, sqlite_bytes, load_trace)
    assert len(tl.gpu_ops) == len(read_nsys_sqlite(tmp_path / "t.sqlite").gpu_ops)
    (tmp_path / "fifo").unlink()
    with pytest.raises(BadTraceError, match=f"{tmp_path / 'fifo'}: not a trace"):  # the error names the input
        _through_fifo(tmp_path, b"garbage" * 10, load_trace)


def test_sqlite_gz_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite.gz"
    path.write_bytes(gzip.compress(_export(tmp_path).read_bytes()))
    assert sniff_format(path) == "nsys-sqlite-gz"
    tl = load_trace(path)
    assert len(tl.gpu_ops) and tl.meta["path"] == str(path)


def _cli(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "launchprobe", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_analyze_dev_stdin_pipe() -> None:
    done = _cli(["analyze", "/dev/stdin", "--format", "json"], stdin=b"\xef\xbb\xbf\n" + _kineto_bytes())
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["windows"][0]["kernels"] == 1
    bad = _cli(["analyze", "/dev/stdin"], stdin=b"\x00garbage")
    assert bad.returncode == 6 and b"Traceback" not in bad.stderr
    assert bad.stderr.decode().count("\n") == 1


# --- nsys export: a folder in the way, interrupted exports -----------------------------------------------------


def _fake_nsys(tmp_path: Path, body: str) -> str:
    binary = tmp_path / "bin" / "nsys"
    binary.parent.mkdir(exist_ok=True)
    binary.write_text(
        f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\nout = args[args.index('--output') + 1]\n{body}\n"
    )
    binary.chmod(0o755)
    return str(binary)


def test_export_target_is_a_folder(tmp_path: Path) -> None:
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"fake")
    (tmp_path / "x.sqlite").mkdir()
    with pytest.raises(UsageError, match="x.sqlite is a folder"):
        load_trace(report, nsys=_fake_nsys(tmp_path, "sys.exit(0)"))


def test_export_goes_through_a_temporary_name(tmp_path: Path) -> None:
    fixture = _export(tmp_path, "fixture.sqlite")
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"fake")
    log = tmp_path / "outputs"
    nsys = _fake_nsys(tmp_path, f"open({str(log)!r}, 'a').write(out + '\\n')\nshutil.copy({str(fixture)!r}, out)")
    tl = load_trace(report, nsys=nsys)
    [used] = log.read_text().split()
    assert used != str(tmp_path / "x.sqlite") and Path(used).parent == tmp_path and used.endswith(".sqlite")
    assert tl.meta["sqlite"] == str(tmp_path / "x.sqlite") and (tmp_path / "x.sqlite").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("x.")) == ["x.nsys-rep", "x.sqlite"]


def test_failed_export_leaves_nothing_to_reuse(tmp_path: Path) -> None:
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"fake")
    nsys = _fake_nsys(tmp_path, "open(out, 'wb').write(b'SQLite format 3\\x00half')\nsys.exit(3)")
    with pytest.raises(BadTraceError, match="nsys export failed \\(exit 3\\)"):
        load_trace(report, nsys=nsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "x.nsys-rep"]


def test_interrupted_export_leaves_nothing_to_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"fake")

    def interrupted(command: list[str], **_: Any) -> None:
        Path(command[command.index("--output") + 1]).write_bytes(b"SQLite format 3\x00half-written")
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_sqlite(report, nsys=_fake_nsys(tmp_path, "sys.exit(0)"), atomic=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "x.nsys-rep"]


def test_reused_corrupt_export_says_force(tmp_path: Path) -> None:
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"fake")
    (tmp_path / "x.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(BadTraceError, match="pass --force to export again"):
        load_trace(report, nsys=_fake_nsys(tmp_path, "sys.exit(0)"))


# --- Kineto: numbers out of range, NaN, depth, gzip, UTF-8 -----------------------------------------------------


def _kernel_with(**fields: Any) -> list[dict[str, Any]]:
    events = _kineto_events()
    args = fields.pop("args", {})
    events[1].update(fields)
    events[1]["args"].update(args)
    return events


@pytest.mark.parametrize(
    "raw,match",
    [
        (_kineto_bytes(_kernel_with(ts=10**30)), "out of range"),
        (_kineto_bytes(_kernel_with(ts=2**63 // 1000 + 1)), "out of range"),
        (_kineto_bytes(_kernel_with(dur=10**17)), "out of range"),
        (_kineto_bytes(_kernel_with(args={"correlation": 2**64})), "correlation_id value out of range"),
        (_kineto_bytes(_kernel_with(args={"device": -(2**70)})), "device value out of range"),
        (_kineto_bytes(_kernel_with(pid=10**40, args={"device": None})), "device value out of range"),
        (_kineto_bytes(_kernel_with(ts="inf")), "not a finite time"),
        (_kineto_bytes(_kernel_with(ts="NaN")), "not a finite time"),
        (_kineto_bytes(_kernel_with(ts=[1])), "not a time"),
        (_kineto_bytes().replace(b'"ts": 13', b'"ts": 1e999999999'), "out of range"),
        (_kineto_bytes().replace(b'"ts": 13', b'"ts": 1e400'), "out of range"),
        (_kineto_bytes().replace(b'"ts": 13', b'"ts": NaN'), "not a finite time"),
        (_kineto_bytes().replace(b'"ts": 13', b'"ts": -Infinity'), "not a finite time"),
        (b'{"traceEvents": [' + b"[" * 100_000, "nested too deeply"),
        (b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (b'{"traceEvents": [NaN, {"ph": "X"', "invalid JSON"),
    ],
)
def test_kineto_hostile_values(tmp_path: Path, raw: bytes, match: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    with pytest.raises(BadTraceError, match=match):
        load_trace(path)


def test_kineto_nan_in_an_unused_field_reads(tmp_path: Path) -> None:
    raw = _kineto_bytes(_kernel_with(args={"est. achieved occupancy %": 1})).replace(b'%": 1', b'%": NaN')
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    assert load_trace(path).gpu_ops["end_ns"].tolist() == [14250]


def test_kineto_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_kineto_bytes().replace(b'"name": "k"', b'"name": "k\xff\xfe"'))
    assert load_trace(path).gpu_ops["name"].tolist() == ["k\ufffd\ufffd"]


def _gzip_cases() -> list[bytes]:
    events = _kineto_events() * 2000
    for i, ev in enumerate(events):
        ev = events[i] = json.loads(json.dumps(ev))
        ev["name"] = f"kernel_{i * 7919 % 10007}"
    packed = gzip.compress(json.dumps({"traceEvents": events}).encode())
    cases = [packed[:n] for n in (11, 30, len(packed) // 2, len(packed) - 9, len(packed) - 1)]
    for at in (12, 40, len(packed) // 3, len(packed) // 2, len(packed) - 6):  # deflate data, CRC and size trailer
        flipped = bytearray(packed)
        flipped[at] ^= 0xFF
        cases.append(bytes(flipped))
    cases.append(packed + b"trailing garbage")
    return cases


@pytest.mark.parametrize("raw", _gzip_cases())
def test_corrupt_gzip_anywhere(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(raw)
    with pytest.raises(LaunchprobeError) as info:
        load_trace(path)
    assert info.value.exit_code == 6


@pytest.mark.parametrize(
    "content,code",
    [
        (b"\xef\xbb\xbf" + b'{"traceEvents": [' + b"[" * 50_000, 6),
        (_kineto_bytes(_kernel_with(ts=10**30)), 6),
        (gzip.compress(_kineto_bytes())[:-4] + b"\x00\x00\x00\x00", 6),
        (b"\xef\xbb\xbf" + _kineto_bytes(), 0),
    ],
)
def test_cli_one_line_and_exit_code(tmp_path: Path, content: bytes, code: int) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    done = _cli(["analyze", str(path), "--format", "json"])
    assert done.returncode == code, done.stderr
    assert b"Traceback" not in done.stderr
    if code:
        assert done.stderr.decode().count("\n") == 1


def test_malformed_schema_that_is_not_utf8(tmp_path: Path) -> None:
    # SQLite's own error message quotes the damaged CREATE statement: Python cannot decode it (UnicodeDecodeError)
    path = _export(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE extra (a INTEGER)")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = CAST(? AS TEXT) WHERE name = 'extra'", (b'CREATE TABLE extra (a "\xff\xfe',)
    )
    conn.commit()
    conn.close()
    with pytest.raises(BadTraceError, match="corrupt"):
        load_trace(path)
