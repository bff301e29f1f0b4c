"""The GEMV kernels compiled for sm_90 (to PTX, no GPU needed): W tiles must reach shared memory as 16-byte
cp.async copies (the pipelined path). ead8863's split-K kernel lost them (its K loop started at an offset Triton
could not prove aligned: 2-byte scalar loads, no cp.async) and ran 2-3x slower on the H200; this catches that.

Skipped when triton is not importable or cannot compile for CUDA here. Runs in a subprocess (like the
interpreter tests) so a TRITON_INTERPRET=1 import elsewhere cannot turn the kernels into interpreted ones.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARGS = ("x_ptr", "w_ptr", "out_ptr", "ws_ptr", "cnt_ptr", "n_batch", "N", "K", "k_split", "stride_xb", "stride_wn")
PTRS = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32"}
ALIGNED = {"x_ptr", "w_ptr", "out_ptr", "ws_ptr", "cnt_ptr", "N", "K", "stride_xb", "stride_wn", "stride_ob"}
# (case, kernel, constexprs)
NO_PDL = {"PDL": False}
PDL = {"PDL": True}
SPLITK_NO_PDL = {"W_HINT": 0, **NO_PDL}
SPLITK_PDL = {"W_HINT": 0, **PDL}
CASES = [
    ("one-pass bn16", "_gemv_kernel", {"BLOCK_B": 16, "BLOCK_N": 16, "BLOCK_K": 256, "EVEN_K": True, **NO_PDL}),
    ("one-pass bn64", "_gemv_kernel", {"BLOCK_B": 16, "BLOCK_N": 64, "BLOCK_K": 64, "EVEN_K": True, **NO_PDL}),
    (
        "split-K 4",
        "_gemv_splitk_kernel",
        {"BLOCK_B": 16, "BLOCK_N": 16, "BLOCK_K": 256, "SPLITS": 4, "EVEN_K": True, "USE_DOT": True, **SPLITK_NO_PDL},
    ),
    (
        "split-K 1",
        "_gemv_splitk_kernel",
        {"BLOCK_B": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLITS": 1, "EVEN_K": True, "USE_DOT": True, **SPLITK_NO_PDL},
    ),
    ("one-pass bn16 PDL", "_gemv_kernel", {"BLOCK_B": 16, "BLOCK_N": 16, "BLOCK_K": 256, "EVEN_K": True, **PDL}),
    (
        "split-K 4 PDL",
        "_gemv_splitk_kernel",
        {"BLOCK_B": 16, "BLOCK_N": 16, "BLOCK_K": 256, "SPLITS": 4, "EVEN_K": True, "USE_DOT": True, **SPLITK_PDL},
    ),
]


def _main() -> None:
    import inspect

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from launchprobe.kernels.triton import gemv as T

    report: dict[str, Any] = {}
    for case, name, consts in CASES:
        kernel = getattr(T, name)
        params = list(inspect.signature(kernel.fn).parameters)
        sig = {p: "constexpr" if p in consts else PTRS.get(p, "i32") for p in params}
        attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params) if p in ALIGNED}
        src = ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
        try:
            ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 4})
            text = ptx.asm["ptx"]
        except Exception as exc:  # no CUDA backend / toolchain here
            report[case] = {"skip": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        report[case] = {
            "cp_async_16": len(re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*, 0x10,", text)),
            "cp_async_narrow": len(re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*, 0x(?:4|8),", text)),
            "scalar_b16": len(re.findall(r"ld\.global[^ ]*\.b16 ", text)),
            "gdc_wait": text.count("griddepcontrol.wait"),
            "gdc_launch": text.count("griddepcontrol.launch_dependents"),
            "wait_before_first_cp_async": text.find("griddepcontrol.wait") < text.find("cp.async"),
        }
    print(json.dumps(report))


pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_gemv_weight_tiles_are_16_byte_cp_async(report: dict[str, Any], case: str) -> None:
    r = report[case]
    if "skip" in r:
        pytest.skip(r["skip"])
    assert r["cp_async_16"] > 0 and r["cp_async_narrow"] == 0, r
    assert r["scalar_b16"] == 0, r


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_gemv_waits_for_its_input_only_under_pdl(report: dict[str, Any], case: str) -> None:
    """Under PDL the kernel waits for the previous kernel once, before loading anything into shared memory, then
    lets the next one launch; without PDL it has no grid-dependency instructions at all (they need sm_90, and
    launching without PDL makes them moot)."""
    r = report[case]
    if "skip" in r:
        pytest.skip(r["skip"])
    if case.endswith("PDL"):
        assert r["gdc_wait"] == 1 and r["gdc_launch"] == 1, r
        assert r["wait_before_first_cp_async"], r
    else:
        assert r["gdc_wait"] == r["gdc_launch"] == 0, r


if __name__ == "__main__":
    _main()
