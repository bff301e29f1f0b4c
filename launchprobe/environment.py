"""What the run ran on: device, GPU, driver, torch, CUDA."""

from __future__ import annotations

import platform
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launchprobe.run.schema import Environment


def describe(device: str) -> Environment:
    import torch

    from launchprobe.run.schema import Environment

    env = Environment(
        device="cuda" if device.startswith("cuda") else "cpu",
        gpu_count=0,
        torch=str(torch.__version__),
        cuda=torch.version.cuda,
        python=platform.python_version(),
        platform=platform.platform(),
    )
    if env.device == "cuda":
        props = torch.cuda.get_device_properties(torch.device(device))
        env.gpu = props.name
        env.gpu_count = torch.cuda.device_count()
        env.sm_count = props.multi_processor_count
        env.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or None
        env.gpu_memory_bytes = int(props.total_memory)
        env.driver = driver_version()
    return env


def nvidia_smi_query(fields: str) -> str | None:
    """``nvidia-smi --query-gpu=FIELDS`` for the first GPU, as one CSV line; None without nvidia-smi or on error."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def driver_version() -> str | None:
    return nvidia_smi_query("driver_version")


def cpu_cache_bytes() -> int:
    """Last-level cache of this CPU, for sizing CPU bandwidth buffers (32 MiB when unknown)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("cache size"):
                    value, unit = line.split(":")[1].split()
                    return int(value) * (1024 if unit.upper().startswith("K") else 1 << 20)
    except (OSError, ValueError, IndexError):
        pass
    return 32 << 20
