"""Bounded fuzzing of run files (issue 14): mutated copies of a real classify run (the H200 fixture) and a
constructed analyze run go through `launchprobe report` and `launchprobe compare` in-process. Each case ends
with a documented exit code (0, 2, 3 or 4) and at most one error line, never a traceback or another exception.
Fixed seed, ~200 cases, a few seconds."""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import runs

from launchprobe.cli import main
from launchprobe.run.files import save_run

FIXTURE = Path(__file__).parent / "fixtures" / "h200_classify_default.json"
SEED = 20261214
CASES = 100  # per run kind
PLOT_EVERY = 10
EXIT_CODES = {0, 2, 3, 4}
HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1.5, -0.0, 1e308, 2**64, -(2**63) - 1, 10**400, "", "x", "[/x]", "\x1b[31mred",
    "[forward] layer", "\udcff", [], {}, [1, "a", None], {"a": {"b": []}}, float("nan"), float("inf"),
]  # fmt: skip

Mutation = Callable[[random.Random, Any], bytes]


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every (container path, key) in the tree: where a value can be deleted or replaced."""
    out = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        out.append((*path, key))
        out.extend(_nodes(value, (*path, key)))
    return out


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        tree = tree[key]
    return tree


def _dump(tree: Any) -> bytes:
    # "\udcff" (a lone surrogate) becomes bytes that are not UTF-8
    return json.dumps(tree, indent=1, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogateescape")


def _delete(rng: random.Random, tree: Any) -> bytes:
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_nodes(tree))
        parent = _parent(tree, path)
        del parent[path[-1]]
    return _dump(tree)


def _retype(rng: random.Random, tree: Any) -> bytes:
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_nodes(tree))
        _parent(tree, path)[path[-1]] = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    return _dump(tree)


def _numbers(rng: random.Random, tree: Any) -> bytes:
    """Change numbers: NaN, infinities, huge, negative, tiny, or slightly off (inconsistent with the samples)."""
    spots = [p for p in _nodes(tree) if isinstance(_parent(tree, p)[p[-1]], int | float)]
    for path in rng.sample(spots, min(len(spots), rng.randint(1, 4))):
        parent, old = _parent(tree, path), _parent(tree, path)[path[-1]]
        choice = rng.choice(["nan", "inf", "huge", "neg", "tiny", "off"])
        huge = rng.choice([10 ** rng.randint(20, 400), 2**63 - 1, 1.7e308])
        parent[path[-1]] = {
            "nan": math.nan, "inf": -math.inf, "huge": huge, "neg": -abs(old) - 1,
            "tiny": 5e-324, "off": old * 1.001 if not isinstance(old, bool) else old,
        }[choice]  # fmt: skip
    text = _dump(tree)
    if rng.random() < 0.3:
        text = text.replace(b"e+", b"e+9", 1)  # a float literal that overflows
    return text


def _nest(rng: random.Random, tree: Any) -> bytes:
    path = rng.choice(_nodes(tree))
    depth = rng.choice([50, 900, 5000, 100_000])
    marker = "@@nest@@"
    _parent(tree, path)[path[-1]] = marker
    return _dump(tree).replace(f'"{marker}"'.encode(), b"[" * depth + b"1" + b"]" * depth)


def _bytes(rng: random.Random, tree: Any) -> bytes:
    """Byte damage: non-UTF-8 inside a string, a byte-order mark, a truncation, random bytes."""
    data = _dump(tree)
    kind = rng.choice(["utf8", "bom", "truncate", "garbage", "nul"])
    at = rng.randrange(len(data))
    if kind == "utf8":
        at = data.index(b'"', at) + 1 if b'"' in data[at:] else 1
        return data[:at] + rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + data[at:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "truncate":
        return data[:at]
    if kind == "nul":
        return data[:at] + b"\x00" + data[at:]
    return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at + rng.randint(0, 64) :]


def _gzip(rng: random.Random, tree: Any) -> bytes:
    """A gzipped run file, intact or damaged (flipped bits, truncated, a wrong checksum)."""
    packed = bytearray(gzip.compress(_dump(tree)))
    kind = rng.choice(["intact", "flip", "truncate", "crc"])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            packed[rng.randrange(10, len(packed))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        packed = packed[: rng.randrange(2, len(packed))]
    elif kind == "crc":
        packed[-8] ^= 0xFF
    return bytes(packed)


def _kind(rng: random.Random, tree: Any) -> bytes:
    """Header damage: another kind, odd schema versions, a list where the run belongs."""
    choice = rng.choice(["kind", "version", "list", "results"])
    if choice == "kind":
        tree["kind"] = "analyze" if tree.get("kind") == "classify" else "classify"
    elif choice == "version":
        tree["schema_version"] = rng.choice([0, 2, -1, "1", 1.0, True, None, 2**70])
    elif choice == "list":
        tree = [tree]
    else:
        rows = tree.get("results") or tree.get("windows") or []
        rows.extend(copy.deepcopy(rows[: rng.randint(0, 2)]))  # duplicated rows
        rng.shuffle(rows)
    return _dump(tree)


MUTATIONS: list[Mutation] = [_delete, _delete, _retype, _retype, _numbers, _numbers, _nest, _bytes, _gzip, _kind]
FORMATS = ["plain", "table", "markdown", "json", "csv"]


def _cli(capsys: pytest.CaptureFixture[str], case: str, *args: object) -> int:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # the point of the test: any exception that is not a LaunchprobeError escapes main
        command = " ".join(map(str, args))
        raise AssertionError(f"{case}: launchprobe {command} raised {type(exc).__name__}: {exc}") from exc
    err = capsys.readouterr().err
    assert code in EXIT_CODES, f"{case}: exit {code}: {err}"
    assert "Traceback" not in err, f"{case}: {err}"
    lines = [line for line in err.splitlines() if not line.startswith("wrote ")]  # report --plot's list
    assert len(lines) <= 1, f"{case}: more than one error line: {err}"
    return code


def _fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, tree: Any, seed: int) -> dict[int, int]:
    rng = random.Random(seed)
    base = tmp_path / f"{name}-base.json"
    base.write_bytes(_dump(tree))
    codes: dict[int, int] = {}
    for i in range(CASES):
        mutation = rng.choice(MUTATIONS)
        path = tmp_path / f"{name}-{i}.json"
        data = mutation(rng, copy.deepcopy(tree))
        path.write_bytes(data)
        case = f"{name} case {i} ({mutation.__name__}, kept as {path})"
        code = _cli(capsys, case, "report", path, "--format", FORMATS[i % len(FORMATS)])
        codes[code] = codes.get(code, 0) + 1
        if code == 0 and i % PLOT_EVERY == 0:  # plots of what reads (slower: a few cases only)
            _cli(capsys, case, "report", path, "--format", "json", "--plot", tmp_path / "plots", "--force")
        _cli(capsys, case, "compare", base, path, "--format", ("plain", "json", "markdown")[i % 3])
        if i % 4 == 0:
            metric = rng.choice(["step_ms", "tokens_per_s", "idle", "capture_mib", "span_ms", "busy_ms", "gap_p50_us"])
            _cli(capsys, case, "compare", path, base, "--metric", metric, "--format", ("json", "table")[i % 8 // 4])
        path.unlink()  # what fails is kept for a look
    return codes


def test_fuzz_classify_run_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    codes = _fuzz(tmp_path, capsys, "classify", json.loads(FIXTURE.read_text()), SEED)
    assert codes.get(0) and codes.get(2), codes  # both outcomes occur: the mutations bite and some files still read


def test_fuzz_analyze_run_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_run(runs.analyze_run(), tmp_path / "analyze.json")
    codes = _fuzz(tmp_path, capsys, "analyze", json.loads((tmp_path / "analyze.json").read_text()), SEED + 1)
    assert codes.get(0) and codes.get(2), codes


def test_values_near_the_float_limit_compare_without_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = runs.analyze_run()
    for w in huge.windows:
        w.idle_fraction = 1.7e308  # the median of two of them overflows to infinity
    save_run(huge, tmp_path / "huge.json")
    save_run(runs.analyze_run(), tmp_path / "base.json")
    for args in (("huge", "base"), ("base", "huge")):
        paths = [tmp_path / f"{name}.json" for name in args]
        assert _cli(capsys, "near the limit", "compare", *paths, "--metric", "idle", "--format", "json") in {0, 3}
        capsys.readouterr()


# What the fuzzing found, each fixed at load (launchprobe/run/files.py) and pinned here.
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (gzip.compress(b'{"schema_version": 1}')[:12] + b"\xff" * 20, "corrupt gzip data"),  # zlib.error
        (b'{"schema_version": 1, "kind": "analyze", "notices": ["\\ud800"]}', "unpaired surrogate"),
        (b'{"schema_version": 1, "kind": "analyze", "notices": ["\xed\xa0\x80"]}', "not UTF-8 text"),
        (b'{"schema_version": 1, "kind": "analyze", "x": 18446744073709551616}', "does not fit in 64 bits"),
        (b'{"schema_version": 1, "kind": "analyze", "x": ' + b"9" * 5000 + b"}", "does not fit in 64 bits"),
        (b'{"schema_version": 1, "kind": "analyze", "x": 1e999}', "1e999 is not a finite number"),
    ],
    ids=["deflate", "surrogate-escape", "surrogate-bytes", "uint64+1", "5000-digits", "1e999"],
)
def test_found_by_fuzzing(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, message: str) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(data)
    assert _cli(capsys, "found", "report", path) == 2
    from launchprobe.errors import UsageError
    from launchprobe.run.files import load_run

    with pytest.raises(UsageError, match=message):
        load_run(path)


def test_a_byte_order_mark_and_paired_surrogates_are_fine(tmp_path: Path) -> None:
    from launchprobe.run.files import load_run

    save_run(runs.analyze_run(), tmp_path / "run.json")
    text = (tmp_path / "run.json").read_text().replace('"notices": []', '"notices": ["\\ud83d\\ude00"]')
    (tmp_path / "run.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_run(tmp_path / "run.json").notices == ["😀"]
