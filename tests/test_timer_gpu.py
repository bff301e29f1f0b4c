"""The timer kernel on a real GPU: two timers around a kernel of known length read what CUPTI reads."""

from __future__ import annotations

import importlib.util
import statistics

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]


@pytest.mark.parametrize("pdl", [False, True])
def test_two_timers_read_the_kernel_between_them_as_cupti_does(pdl: bool) -> None:
    """A graph of: an elementwise kernel, a timer, a sleep kernel of about 20 us, a timer. The timers' difference
    is the sleep's end less the first kernel's end, as CUPTI times both (each timer lags its op's end alike)."""
    from launchprobe.kernels.triton.launch import pdl_supported
    from launchprobe.kernels.triton.timer import record_time
    from launchprobe.measure.cupti import cuda_intervals

    if pdl and not pdl_supported(torch.device("cuda")):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    a = torch.ones(1 << 20, device="cuda")
    b = torch.empty_like(a)
    times = torch.zeros(2, dtype=torch.int64, device="cuda")
    record_time(times, 0, pdl)  # compiled outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.mul(a, 2.0, out=b)
        record_time(times, 0, pdl)
        torch.cuda._sleep(40_000)
        record_time(times, 1, pdl)
    torch.cuda.synchronize()
    for _ in range(3):
        graph.replay()
    readings: list[int] = []

    def work() -> None:
        for _ in range(20):
            graph.replay()
            torch.cuda.synchronize()
            t0, t1 = times.tolist()
            readings.append(t1 - t0)

    rows = [r for r in cuda_intervals(work) if "DtoH" not in r[0]]
    kernels = [r for r in rows if "timer" not in r[0]]
    assert len(kernels) == 40, [r[0] for r in rows[:6]]
    spans = [kernels[k + 1][2] - kernels[k][2] for k in range(0, 40, 2)]  # sleep's end less the first kernel's
    cupti, timers = statistics.median(spans), statistics.median(readings)
    assert cupti > 10_000  # the sleep is long enough to tell
    assert abs(timers - cupti) < 1_500, (timers, cupti)


@pytest.mark.parametrize("pdl", [False, True])
def test_a_bound_timer_launched_by_the_host_reads_as_the_captured_one(pdl: bool) -> None:
    """The host launches a sleep kernel and a bound timer (relaunched directly, no Triton dispatch) after it, in a
    stream with no graph: the timer reads the sleep's end as CUPTI does (within the timer's lag). A long sleep goes
    first, so that the host is ahead and every timer is queued before the kernel it follows ends, as in a step whose
    host keeps its lead (without it, a timer launched after its kernel ended reads its own launch)."""
    from launchprobe.kernels.triton.launch import pdl_supported
    from launchprobe.kernels.triton.timer import bound_timer
    from launchprobe.measure.cupti import cuda_intervals

    if pdl and not pdl_supported(torch.device("cuda")):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    times = torch.zeros(2, dtype=torch.int64, device="cuda")
    first, second = bound_timer(times, 0, pdl), bound_timer(times, 1, pdl)
    torch.cuda.synchronize()
    readings: list[int] = []

    def work() -> None:
        for _ in range(20):
            torch.cuda._sleep(1_000_000)  # the host's lead
            torch.cuda._sleep(20_000)
            first()
            torch.cuda._sleep(40_000)
            second()
            torch.cuda.synchronize()
            t0, t1 = times.tolist()
            readings.append(t1 - t0)

    rows = [r for r in cuda_intervals(work) if "DtoH" not in r[0]]
    sleeps = [r for r in rows if "timer" not in r[0]]
    assert len(sleeps) == 60 and len(rows) == 100, [r[0] for r in rows[:6]]
    spans = [sleeps[k + 2][2] - sleeps[k + 1][2] for k in range(0, 60, 3)]  # second short sleep's end less the first's
    assert abs(statistics.median(readings) - statistics.median(spans)) < 1_500, (readings[:3], spans[:3])
