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
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> str:
    """The CPU's feature flags as /proc/cpuinfo lists them ("" where it does not)."""
    return _cpuinfo_field("flags") or ""


def _cpuinfo_field(name: str) -> str | None:
    """The first /proc/cpuinfo line's value for `name`; None when absent or unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


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
