"""The Triton kernels, run on CPU by the Triton interpreter (TRITON_INTERPRET=1), against the torch reference.

Skipped when triton is not importable (CI has none). The kernels run in a subprocess: TRITON_INTERPRET must be
set before ``triton.jit`` wraps them, and another test module may already have imported them compiled. The
subprocess (this file run as a script) runs every case once and prints a JSON report that the tests read.

What the interpreter cannot tell: speed, register/shared-memory limits, compiled-mode layout or pipelining bugs,
and bf16 ``tl.dot`` (it multiplies the raw uint16 bits), so the dot ops (attention, gemv) are checked in fp32 and
fp16 here and in bf16 by the GPU tests. Its fp32->bf16 cast truncates where the GPU rounds to nearest, so bf16
results here differ from the reference by up to one bf16 ulp.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIGHT = 1e-5  # fp32: only summation order differs...
TIGHT_ROTARY = 1e-4  # ...or, for rotary, the last bit of inv_freq (exp2 vs pow) times positions up to 4096
LOOSE = 1e-2  # fp16 / bf16 outputs

# (case id, op, dtype, params); the ids become test ids.
CASES: list[tuple[str, str, str, dict[str, Any]]] = []


def _case(op: str, dtypes: tuple[str, ...], **params: Any) -> None:
    label = "-".join(f"{k}{v}" for k, v in params.items())
    for dt in dtypes:
        CASES.append((f"{op}-{dt}-{label}", op, dt, params))


ALL = ("float32", "float16", "bfloat16")
NO_BF16 = ("float32", "float16")
for b, h in ((1, 256), (3, 100), (4, 4096)):
    _case("rmsnorm", ALL, b=b, h=h, loop=0)
    _case("add_rmsnorm", ALL, b=b, h=h, loop=0, store=1)
    _case("add_rmsnorm", ALL, b=b, h=h, loop=0, store=0)
for store in (1, 0):
    _case("add_rmsnorm", ALL, b=3, h=200, loop=1, store=store)  # chunked two-pass path
_case("rmsnorm", ALL, b=2, h=200, loop=1)
for b, nh, nkv, d in ((1, 4, 2, 16), (3, 4, 2, 64), (64, 32, 8, 16), (2, 6, 2, 20)):
    _case("rotary", ALL, b=b, nh=nh, nkv=nkv, d=d, maxpos=4096)
_case("rotary", ("float16", "bfloat16"), b=8, nh=4, nkv=2, d=64, maxpos=131072)  # angles ~1e5 rad
for b, nkv, d in ((1, 2, 16), (3, 2, 64), (64, 8, 64)):
    _case("kv_write", ALL, b=b, nkv=nkv, d=d)
for b, nh, nkv, d, c, ctx, sms in (
    (1, 8, 2, 16, 256, 256, 132),  # splits > 1, reduce kernel
    (3, 4, 2, 16, 200, 150, 132),  # ragged last split
    (3, 4, 2, 16, 200, 150, 2),  # one split, several tiles in the loop
    (2, 8, 8, 32, 128, 100, 132),  # MHA (group of 1)
    (1, 16, 2, 64, 130, 129, 132),  # group of 8
    (2, 4, 1, 80, 70, 70, 132),  # head_dim not a power of two
    (1, 4, 2, 16, 64, 1, 132),  # a single cached entry
    (1, 2, 1, 16, 2600, 2560, 132),  # 40 splits: the reduce kernel folds them in several chunks
):
    _case("attention", NO_BF16, b=b, nh=nh, nkv=nkv, d=d, c=c, ctx=ctx, sms=sms)
_case("attention", NO_BF16, b=2, nh=4, nkv=2, d=16, c=300, ctx=300, sms=132, plan_b=4)  # padded-batch plan
# the tuning knobs: the two-kernel reduce, 16/32-token tiles (more splits), a group of 8 merged in chunks
for b, nh, nkv, d, c, ctx, bn, fused in (
    (1, 8, 2, 16, 256, 256, 64, 0),
    (3, 4, 2, 16, 200, 150, 16, 1),
    (1, 16, 2, 64, 300, 257, 16, 1),
    (2, 8, 1, 80, 100, 97, 32, 1),
):
    _case("attention", NO_BF16, b=b, nh=nh, nkv=nkv, d=d, c=c, ctx=ctx, sms=132, bn=bn, fused=fused)
for b, f in ((1, 96), (3, 1000), (1, 14336)):
    _case("silu_mul", ALL, b=b, f=f)
# the default: batch 1 the CUDA-core kernel (one or several K tiles, ragged), batch 2-16 the one-pass tensor-core
# kernel (no split), ragged N and K; B=17 falls back to torch.mm
for b, n, k in ((1, 70, 100), (3, 256, 512), (8, 48, 1024), (16, 33, 64), (17, 20, 30), (1, 100, 1000)):
    _case("gemv", NO_BF16, b=b, n=n, k=k)
# the one-pass kernel with each row tile (16/32/64 rows: several K tiles, a ragged last tile, N < BLOCK_N)
for b, n, k, bn in ((1, 70, 1000, 16), (3, 130, 520, 32), (8, 100, 300, 64), (16, 33, 200, 16), (1, 64, 4096, 64)):
    _case("gemv", NO_BF16, b=b, n=n, k=k, bn=bn, sp=1, dot=1)
# split-K (in-kernel reduce through the arrival counters), ragged K, the B=1 multiply-and-reduce path
for b, n, k, bn, sp, dot in (
    (1, 70, 1000, 32, 3, 1),
    (3, 256, 512, 32, 4, 1),
    (16, 33, 640, 32, 5, 1),
    (1, 100, 512, 16, 4, 0),
    (1, 40, 300, 32, 1, 0),
    (2, 64, 4096, 64, 16, 1),
):
    _case("gemv", NO_BF16, b=b, n=n, k=k, bn=bn, sp=sp, dot=dot)
# the CUDA-core kernel under each weight-load cache hint of KernelSettings
for b, n, k in ((1, 100, 1000), (1, 40, 300)):
    _case("gemv_hints", NO_BF16, b=b, n=n, k=k)


# --------------------------------------------------------------------------------------------------------------
# Subprocess side: runs under TRITON_INTERPRET=1 and imports triton.


def _numpy_index_shim() -> None:
    """triton 3.6's interpreter turns loop bounds into ints with ``int(array)``, which numpy >= 2.4 refuses for
    1-element arrays (fixed in later triton). Patch that one conversion; a no-op where it is not needed."""
    import numpy as np
    import triton.runtime.interpreter as ti

    original = getattr(ti, "_patch_lang_tensor", None)
    if original is None:
        return

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    ti._patch_lang_tensor = patched


def _run_case(op: str, dtype_name: str, p: dict[str, Any]) -> dict[str, Any]:
    import torch

    from launchprobe.kernels import GEMV_MAX_BATCH, GEMV_WEIGHT_HINTS, KernelSettings, gemv_config
    from launchprobe.kernels import reference as R
    from launchprobe.kernels.triton import TritonOps

    dt = getattr(torch, dtype_name)
    nan = float("nan")

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))

    T = TritonOps(KernelSettings(norm_max_block=64) if p.get("loop") else KernelSettings())
    checks: dict[str, bool] = {}
    errs: dict[str, float] = {}
    if op in ("rmsnorm", "add_rmsnorm"):
        b, h = p["b"], p["h"]
        x, w = torch.randn(b, h, dtype=dt), torch.randn(h, dtype=dt)
        res = torch.randn(b, h, dtype=dt)
        o_t, o_r = torch.full((b, h), nan, dtype=dt), torch.full((b, h), nan, dtype=dt)
        if op == "rmsnorm":
            r_t, r_r = torch.full((b, h), nan, dtype=dt), torch.full((b, h), nan, dtype=dt)
            T.rmsnorm(x, w, 1e-5, o_t, r_t)
            R.rmsnorm(x, w, 1e-5, o_r, r_r)
        else:
            r_t, r_r = res.clone(), res.clone()
            T.add_rmsnorm(x, r_t, w, 1e-5, o_t, store_residual=bool(p["store"]))
            R.add_rmsnorm(x, r_r, w, 1e-5, o_r, store_residual=bool(p["store"]))
            if not p["store"]:
                checks["residual untouched"] = bool(torch.equal(r_t, res))
        errs["out"], errs["residual"] = rel(o_t, o_r), rel(r_t, r_r)
        checks["fully written"] = bool(torch.isfinite(o_t.float()).all() and torch.isfinite(r_t.float()).all())
    elif op == "rotary":
        b, nh, nkv, d = p["b"], p["nh"], p["nkv"], p["d"]
        qkv = torch.randn(b, (nh + 2 * nkv) * d, dtype=dt)
        pos = torch.randint(0, p["maxpos"], (b,), dtype=torch.int32)
        a_t, a_r = qkv.clone(), qkv.clone()
        for t, impl in ((a_t, T.rotary), (a_r, R.rotary)):
            impl(t[:, : nh * d], t[:, nh * d : (nh + nkv) * d], pos, 500000.0, d)
        errs["qk"] = rel(a_t, a_r)
        checks["v untouched"] = bool(torch.equal(a_t[:, (nh + nkv) * d :], qkv[:, (nh + nkv) * d :]))
    elif op == "kv_write":
        b, nkv, d = p["b"], p["nkv"], p["d"]
        c = 40
        qkv = torch.randn(b, 6 * nkv * d, dtype=dt)
        k, v = qkv[:, 4 * nkv * d : 5 * nkv * d], qkv[:, 5 * nkv * d :]
        pos = torch.randint(0, c, (b,))
        caches_t = [torch.randn(b + 2, c, nkv, d, dtype=dt) for _ in range(2)]
        caches_r = [t.clone() for t in caches_t]
        T.kv_write(k, v, caches_t[0][:b], caches_t[1][:b], pos)
        R.kv_write(k, v, caches_r[0][:b], caches_r[1][:b], pos)
        checks["caches equal"] = all(torch.equal(x, y) for x, y in zip(caches_t, caches_r, strict=True))
        out_of_range = torch.full((b,), c + 5, dtype=torch.int64)
        before = [t.clone() for t in caches_t]
        T.kv_write(k, v, caches_t[0][:b], caches_t[1][:b], out_of_range)
        checks["out-of-range positions dropped"] = all(torch.equal(x, y) for x, y in zip(caches_t, before, strict=True))
    elif op == "attention":
        b, nh, nkv, d, c, ctx = p["b"], p["nh"], p["nkv"], p["d"], p["c"], p["ctx"]
        qkv = torch.randn(b, (nh + 2 * nkv) * d, dtype=dt)
        q = qkv[:, : nh * d]
        kc, vc = torch.randn(b, c, nkv, d, dtype=dt), torch.randn(b, c, nkv, d, dtype=dt)
        big = torch.full((b, nh * d + 8), nan, dtype=dt)  # out as a row-strided view: the tail must stay NaN
        o_t, o_r = big[:, : nh * d], torch.full((b, nh * d), nan, dtype=dt)
        knobs = {"block_n": p.get("bn", 64), "fused_reduce": bool(p.get("fused", 1))}
        plan = T.attention_plan(p.get("plan_b", b), c, nh, nkv, d, "cpu", num_sms=p["sms"], **knobs)
        T.attention(q, kc, vc, ctx, o_t, d**-0.5, plan)
        R.attention(q, kc, vc, ctx, o_r, d**-0.5)
        errs["out"] = rel(o_t, o_r)
        checks["fully written"] = bool(torch.isfinite(o_t.float()).all())
        checks["nothing written past the rows"] = bool(big[:, nh * d :].isnan().all())
        first = o_t.clone()
        o_t.fill_(nan)
        T.attention(q, kc, vc, ctx, o_t, d**-0.5, plan)  # again: the arrival counters were reset
        checks["second call identical"] = bool(torch.equal(o_t, first))
        if plan.counters is not None:
            checks["counters back to zero"] = not bool(plan.counters.any())
        errs["splits"] = float(plan.splits(ctx))
    elif op == "silu_mul":
        b, f = p["b"], p["f"]
        gu = torch.randn(b, 2 * f, dtype=dt) * 3
        o_t, o_r = torch.full((b, f), nan, dtype=dt), torch.full((b, f), nan, dtype=dt)
        T.silu_mul(gu, o_t)
        R.silu_mul(gu, o_r)
        errs["out"] = rel(o_t, o_r)
        checks["fully written"] = bool(torch.isfinite(o_t.float()).all())
    elif op == "gemv":
        b, n, k = p["b"], p["n"], p["k"]
        x, w = torch.randn(b, k, dtype=dt), torch.randn(n, k, dtype=dt)
        big = torch.full((b, n + 8), nan, dtype=dt)  # out as a row-strided view: the tail must stay NaN
        o_t = big[:, :n]
        if "sp" in p:
            cfg = gemv_config(n, k, b, block_n=p["bn"], splits=p["sp"], use_dot=bool(p["dot"]))
        else:
            cfg = gemv_config(n, k, b)
            checks["default does not split K"] = cfg.splits == 1
            checks["CUDA cores at batch 1 only"] = cfg.use_dot == (b > 1)
        gplan = T.gemv_plan(n, k, b, "cpu", config=cfg)
        errs["splits"] = float(cfg.splits)
        with T.launcher.trace() as launched:
            T.gemv(x, w, o_t, gplan)
        if b <= GEMV_MAX_BATCH:
            want = "_gemv_splitk_kernel" if cfg.split_k else "_gemv_kernel"
            checks[f"one launch of {want}"] = launched == [want]
        else:
            checks["torch.mm above GEMV_MAX_BATCH"] = launched == []
        errs["out"] = rel(o_t, x.double() @ w.double().T)
        checks["fully written"] = bool(torch.isfinite(o_t.float()).all())
        checks["nothing written past the rows"] = bool(big[:, n:].isnan().all())
        first = o_t.clone()
        o_t.fill_(nan)
        T.gemv(x, w, o_t, gplan)  # again: the counters were reset, the fixed-order reduce is deterministic
        checks["second call identical"] = bool(torch.equal(o_t, first))
        if gplan.counters is not None:
            checks["counters back to zero"] = not bool(gplan.counters.any())
    elif op == "gemv_hints":
        b, n, k = p["b"], p["n"], p["k"]
        x, w = torch.randn(b, k, dtype=dt), torch.randn(n, k, dtype=dt)
        outs = {}
        for hint in GEMV_WEIGHT_HINTS:
            ops = TritonOps(KernelSettings(gemv_weight_hint=hint))
            outs[hint] = torch.full((b, n), nan, dtype=dt)
            with ops.launcher.trace() as launched:
                ops.gemv(x, w, outs[hint])
            checks[f"{hint}: one launch of _gemv_splitk_kernel"] = launched == ["_gemv_splitk_kernel"]
        errs["out"] = rel(outs["evict_first"], x.double() @ w.double().T)
        checks["every hint computes the same"] = all(torch.equal(o, outs["evict_first"]) for o in outs.values())
    else:  # pragma: no cover
        raise ValueError(op)
    return {"errs": errs, "checks": checks}


def _main() -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT))
    _numpy_index_shim()
    import torch

    report: dict[str, Any] = {}
    for case_id, op, dt, params in CASES:
        torch.manual_seed(zlib.crc32(case_id.encode()))
        try:
            report[case_id] = _run_case(op, dt, params)
        except Exception as exc:  # reported per case, so one failure does not hide the others
            report[case_id] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report))


# --------------------------------------------------------------------------------------------------------------
# pytest side.

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("case_id", "dtype"), [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_interpreted_kernel_matches_reference(report: dict[str, Any], case_id: str, dtype: str) -> None:
    result = report[case_id]
    assert "error" not in result, result.get("error")
    bound = LOOSE if dtype != "float32" else TIGHT_ROTARY if case_id.startswith("rotary") else TIGHT
    for name, err in result["errs"].items():
        if name != "splits":
            assert err < bound, f"{name}: relative error {err:.3g} >= {bound}"
    for name, ok in result["checks"].items():
        assert ok, name


if __name__ == "__main__":
    _main()
