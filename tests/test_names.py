"""short_kernel_name: demangled C++ / ROCm kernel names cut down for tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from launchprobe.names import ELLIPSIS, short_kernel_name

TRACES = Path(__file__).parents[1].parent / "shared" / "traces"

ELEMENTWISE = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, "
    "float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::"
    "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
    "float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})"
)
CUTLASS = (
    "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>("
    "cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)"
)
SOFTMAX = (
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int)"
)
ROCM = "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT"


@pytest.mark.parametrize(
    "name,width,expected",
    [
        (
            ELEMENTWISE,
            200,
            "at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<…>(…)::{lambda(…)#1}>(…)",
        ),
        (ELEMENTWISE, 60, "at::native::elementwise_kernel<…>(…)"),
        (ELEMENTWISE, 30, "elementwise_kernel<…>(…)"),
        (ELEMENTWISE, 20, "elementwise_kernel"),
        (ELEMENTWISE, 12, "elementwise…"),
        (
            CUTLASS,
            120,
            "cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
        ),
        (CUTLASS, 70, "cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(…)"),  # the argument that names it
        (CUTLASS, 30, "cutlass::Kernel<…>(…)"),
        (SOFTMAX, 60, "(anonymous namespace)::softmax_warp_forward<…>(…)"),
        (SOFTMAX, 40, "softmax_warp_forward<…>(…)"),
        (SOFTMAX, 20, "softmax_warp_forward"),
        (ROCM, 40, ROCM[:39] + ELLIPSIS),
        (ROCM, 200, ROCM),
        ("void foo<bool operator<(int, int)>(int)", 80, "foo<bool operator<(int, int)>(int)"),
        (
            "void at::native::(anonymous namespace)::k<int>(int) [clone .kd]",
            80,
            "at::native::(anonymous namespace)::k<int>(int)",
        ),
        ("std::enable_if<true, int>::type foo<int>(int)", 80, "foo<int>(int)"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 40, "ncclKernel_AllReduce_RING_LL_Sum_float"),
        ("triton_poi_fused_add_0", 40, "triton_poi_fused_add_0"),
        ("Memcpy HtoD (Pageable -> Device)", 80, "Memcpy HtoD (Pageable -> Device)"),  # not a C++ name
        ("Memcpy HtoD (Pageable -> Device)", 12, "Memcpy HtoD" + ELLIPSIS),
        ("_ZN7cutlass6KernelI", 10, "_ZN7cutla" + ELLIPSIS),
        ("  void   k<int>(int)  ", 80, "k<int>(int)"),
        ("void broken<int(", 80, "broken<int("),  # unbalanced: as written, never an error
        ("k", 1, "k"),
        ("kernel", 1, ELLIPSIS),
        ("kernel", 0, ""),
        ("", 10, ""),
    ],
)
def test_short_kernel_name(name: str, width: int, expected: str) -> None:
    assert short_kernel_name(name, width) == expected


def _real_names() -> list[str]:
    names: set[str] = set()
    kineto = sorted((TRACES / "kineto").glob("*.json.gz"))
    if kineto:
        pytest.importorskip("msgspec", reason="msgspec is not installed here")
        from launchprobe.collect.kineto import read_kineto

        for path in kineto:
            names |= {str(n) for n in read_kineto(path).gpu_ops["name"].unique()}
    query = "SELECT value FROM StringIds WHERE id IN (SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    for path in sorted((TRACES / "nsys").glob("*.sqlite")):
        conn = sqlite3.connect(path)
        names |= {n for (n,) in conn.execute(query)}
        conn.close()
    return sorted(n for n in names if not n.startswith(("Memcpy", "Memset")))


def test_real_long_names_fit_and_keep_their_base_name() -> None:
    names = _real_names()
    if not names:
        pytest.skip("shared traces not present")
    long = [n for n in names if len(n) > 300]
    assert len(long) >= 20  # 5,123 characters at most in these traces
    for name in names:
        for width in (16, 24, 40, 60, 100):
            short = short_kernel_name(name, width)
            assert 0 < len(short) <= width, (name, width, short)
            assert not short.startswith("void "), short
    # the base name survives where it fits: a 5,123-character distribution kernel
    [distribution] = [
        n for n in long if n.startswith("void at::native::(anonymous namespace)::distribution_elementwise")
    ]
    assert short_kernel_name(distribution, 60) == "distribution_elementwise_grid_stride_kernel<…>(…)"
    assert short_kernel_name(distribution, 90) == (
        "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<…>(…)"
    )
    # distinct kernels of one family stay distinct at a table's width
    cutlass = {n for n in names if n.startswith("void cutlass::Kernel<")}
    assert len({short_kernel_name(n, 80) for n in cutlass}) == len(cutlass)
