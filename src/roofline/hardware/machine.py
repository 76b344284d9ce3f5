"""Facts about this machine the probe records: usable CPUs, the CPU's name, the memory size."""

from __future__ import annotations

import os
import platform
from typing import Any


def usable_cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), else all the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def total_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def optional_torch() -> Any | None:
    """The torch module when it is installed, else None; the probe works without it."""
    try:
        import torch
    except ImportError:
        return None
    return torch
