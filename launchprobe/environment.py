"""What the run ran on: device, GPU, driver, torch, CUDA."""

from __future__ import annotations

import os
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


def available_memory_bytes() -> int | None:
    """RAM this process can still allocate: the smaller of the kernel's MemAvailable and what the memory cgroup
    (a container's limit) has left; None when neither can be read (then nothing can be checked in advance)."""
    # MemAvailable counts reclaimable page cache, which sysconf's free pages do not: sysconf only without it.
    system = _meminfo_available()
    if system is None:
        system = _sysconf_available()
    known = [value for value in (system, _cgroup_available()) if value is not None]
    return max(0, min(known)) if known else None


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    value, unit = line.split(":", 1)[1].split()[:2]
                    return int(value) * (1024 if unit.lower() == "kb" else 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Limit minus usage of this process's memory cgroup (v2, then v1); None without a limit."""
    candidates = [("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")]
    try:
        with open("/proc/self/cgroup", encoding="ascii", errors="replace") as cgroup:
            for line in cgroup:
                if line.startswith("0::"):
                    own = "/sys/fs/cgroup" + line.strip()[3:].rstrip("/")
                    candidates.insert(0, (f"{own}/memory.max", f"{own}/memory.current"))
    except OSError:
        pass
    candidates.append(("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))
    for limit_path, usage_path in candidates:
        try:
            with open(limit_path, encoding="ascii") as limit_file, open(usage_path, encoding="ascii") as usage_file:
                limit_text, usage = limit_file.read().strip(), int(usage_file.read().strip())
        except (OSError, ValueError):
            continue
        if limit_text == "max" or not limit_text.isdigit() or int(limit_text) >= 1 << 60:  # no limit
            return None
        return int(limit_text) - usage
    return None


def _sysconf_available() -> int | None:
    try:
        pages, page_size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None
