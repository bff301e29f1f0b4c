"""Bounded fuzzing of the readers: mutated nsys exports and Kineto traces either read or fail with a
LaunchprobeError, never with another exception. Fixed seed, ~200 cases, a few seconds."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("msgspec", reason="msgspec is not installed here")

from launchprobe.collect import load_trace  # noqa: E402
from launchprobe.errors import LaunchprobeError  # noqa: E402
from launchprobe.timeline import Timeline  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20261201
HOSTILE_NUMBERS = [b"1e999", b"-1", b"NaN", b"18446744073709551616", b'"x"', b"[]", b"{}", b"null", b"true",
                   b"-9223372036854775809", b"1e-400", b'"1e99999999"', b"0.0000001"]  # fmt: skip

Mutation = Callable[[random.Random, bytes], bytes]


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _garbage(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data))
    return data[:at] + rng.randbytes(rng.randint(1, 512)) + data[at + rng.randint(0, 512) :]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def _zero_page(rng: random.Random, data: bytes) -> bytes:
    page = rng.randrange(max(1, len(data) // 4096))
    return data[: page * 4096] + bytes(4096) + data[(page + 1) * 4096 :]


def _numbers(rng: random.Random, data: bytes) -> bytes:
    spots = [m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?", data)]
    out = data
    for start, end in sorted(rng.sample(spots, min(len(spots), rng.randint(1, 6))), reverse=True):
        out = out[:start] + rng.choice(HOSTILE_NUMBERS) + out[end:]
    return out


def _structure(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data))
    insert = rng.choice([b"[" * 5000, b"{" * 300, b'"\xff\xfe"', b"\xef\xbb\xbf", b",,", b"]}", b"\x00"])
    return data[:at] + insert + data[at:]


def _check(path: Path) -> str:
    try:
        result = load_trace(path)
    except LaunchprobeError as exc:
        assert "\n" not in str(exc), str(exc)
        return "error"
    assert isinstance(result, Timeline)
    for frame in (result.gpu_ops, result.api_calls, result.ranges):
        for col in ("start_ns", "end_ns"):
            assert str(frame[col].dtype) == "int64"
    return "read"


def _run(tmp_path: Path, name: str, data: bytes, mutations: list[Mutation], cases: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes = {"read": 0, "error": 0}
    for i in range(cases):
        mutated = rng.choice(mutations)(rng, data)
        path = tmp_path / f"{i}-{name}"
        path.write_bytes(mutated)
        try:
            outcomes[_check(path)] += 1
        except AssertionError:
            raise
        except Exception as exc:  # the point of the test: report the case that escaped
            keep = tmp_path / f"escaped-{name}"
            keep.write_bytes(mutated)
            raise AssertionError(f"case {i} ({name}) raised {type(exc).__name__}: {exc} (kept as {keep})") from exc
        path.unlink()
    return outcomes


def _kineto() -> bytes:
    events = []
    for i in range(40):
        host = {"pid": 10, "tid": 11}
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **host, "ts": 1000.125 + 10 * i,
                       "dur": 4.5, "args": {"correlation": i + 1, "cbid": 211}})  # fmt: skip
        args = {"correlation": i + 1, "device": 0, "stream": 7}
        events.append({"ph": "X", "cat": "kernel", "name": f"void k{i % 3}<float>(float*)", "pid": 0, "tid": 7,
                       "ts": 1003 + 10 * i, "dur": 2.25, "args": args})  # fmt: skip
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 1500, "dur": 3,
                   "args": {"correlation": 99, "device": 0, "stream": 7, "bytes": 4096}})  # fmt: skip
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 11, "ts": 990,
                   "dur": 600})  # fmt: skip
    header = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "distributedInfo": {"rank": 0}}
    return json.dumps({**header, "traceEvents": events}).encode()


def test_fuzz_nsys_sqlite(tmp_path: Path) -> None:
    packed = (FIXTURES / "plain_torch.sqlite.gz").read_bytes()
    plain = gzip.decompress(packed)
    outcomes = _run(tmp_path, "t.sqlite", plain, [_flip, _flip, _garbage, _truncate, _zero_page], 90, SEED)
    assert outcomes["read"] and outcomes["error"], outcomes  # both outcomes occur: the mutations bite
    gz = _run(tmp_path, "t.sqlite.gz", packed, [_flip, _garbage, _truncate], 20, SEED + 1)
    assert sum(gz.values()) == 20


def test_fuzz_kineto(tmp_path: Path) -> None:
    raw = _kineto()
    mutations: list[Mutation] = [_flip, _garbage, _truncate, _numbers, _numbers, _structure]
    outcomes = _run(tmp_path, "t.json", raw, mutations, 70, SEED + 2)
    assert outcomes["read"] and outcomes["error"], outcomes
    packed = gzip.compress(raw)
    gz = _run(tmp_path, "t.json.gz", packed, [_flip, _garbage, _truncate], 20, SEED + 3)
    assert sum(gz.values()) == 20
