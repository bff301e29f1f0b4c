"""Lab tool: the host time of one timer launch, through Triton's dispatch (``record_time``) and relaunched directly
(``bound_timer``), measured side by side with the GPU busy so launches only queue. On the GPU machine:

    source .gpu/setup.sh; python3 benchmarks/field/timer_host_cost.py
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable


def host_us(launch: Callable[[], object], count: int = 200) -> float:
    import torch

    torch.cuda._sleep(5_000_000)  # the GPU busy for a few ms: the launches queue behind it
    t = time.perf_counter_ns()
    for _ in range(count):
        launch()
    elapsed = (time.perf_counter_ns() - t) / count / 1e3
    torch.cuda.synchronize()
    return elapsed


def main() -> None:
    import torch

    from launchprobe.kernels.triton.timer import bound_timer, record_time

    times = torch.zeros(1, dtype=torch.int64, device="cuda")
    for pdl in (False, True):
        bound = bound_timer(times, 0, pdl)
        dispatched, direct = [], []
        for _ in range(10):  # alternated, so both see the same host
            dispatched.append(host_us(functools.partial(record_time, times, 0, pdl)))
            direct.append(host_us(bound))
        print(
            f"pdl={pdl}: host us per timer launch, median of 10 x 200: Triton dispatch "
            f"{statistics.median(dispatched):.2f}, direct relaunch {statistics.median(direct):.2f}"
        )


if __name__ == "__main__":
    main()
