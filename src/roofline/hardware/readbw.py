"""The read bandwidth a ceiling is held against: the best pass over several read kernels, with that
kernel's median beside it as the typical rate.

The best, because a ceiling must be a bound: a slower pass is the machine doing less than it can (a
neighbour on the bus, a page fault, a kernel that did not saturate it), never more. STREAM
(`stream.c`) prints "Best Rate" = bytes / minimum time, the Empirical Roofline Toolkit keeps the
maximum over trials, likwid-bench ships many read kernels because which reach peak differs between
CPUs. Every kernel of `READ_KERNELS` gets one warm-up pass, then `repeats` rounds of one timed pass
each, interleaved so a drifting machine touches every kernel alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from roofline.hardware.read_kernels import FP32_BYTES, READ_KERNELS
from roofline.hardware.timing import Stats, stats_of_rates, time_one_pass_seconds

# the short probe's buffer: far above any CPU's last-level cache (the largest seen: 260 MiB)
SHORT_SIZE_BYTES = 1 << 30
SHORT_REPEATS = 3
SHORT_WARMUP = 1


@dataclass(frozen=True)
class KernelRates:
    """The pass rates (bytes/s) one read kernel reached, in the order they were measured."""

    kernel: str
    runs: tuple[float, ...]

    @property
    def best_bytes_per_s(self) -> float:
        return max(self.runs)

    @property
    def median_bytes_per_s(self) -> float:
        return statistics.median(self.runs)

    def stats(self) -> Stats:
        return stats_of_rates(self.runs)


def best_of_kernels(rates: Sequence[KernelRates]) -> KernelRates:
    """The kernel whose fastest pass is the fastest of all (ties: the first listed)."""
    if not rates or any(not r.runs for r in rates):
        raise ValueError("best_of_kernels needs at least one kernel, each with at least one pass")
    return max(rates, key=lambda r: r.best_bytes_per_s)


@dataclass(frozen=True)
class ReadBandwidth:
    """The read kernels' rates from one measurement; `best_bytes_per_s` is the figure a ceiling
    uses."""

    kernels: tuple[KernelRates, ...]
    size_bytes: int = 0
    threads: int = 0
    # kernels that could not run here (no numba)
    skipped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> KernelRates:
        return best_of_kernels(self.kernels)

    @property
    def best_bytes_per_s(self) -> float:
        return self.best.best_bytes_per_s

    @property
    def typical_bytes_per_s(self) -> float:
        """The median pass of the kernel that gave the best: what the machine usually delivers."""
        return self.best.median_bytes_per_s

    @property
    def best_kernel(self) -> str:
        return self.best.kernel

    def profile_stats(self) -> Stats:
        """The profile's `bandwidth_bytes_per_s.read` entry: the best kernel's STATS, plus `best`,
        the kernel's name and every kernel's own STATS (see `roofline.hardware.profile`)."""
        return {
            **self.best.stats(),
            "best": self.best_bytes_per_s,
            "kernel": self.best_kernel,
            "kernels": {k.kernel: k.stats() for k in self.kernels},
        }

    def summary(self) -> str:
        """One line: the best, the typical, and each kernel's best."""
        each = ", ".join(f"{k.kernel} {k.best_bytes_per_s / 1e9:.1f}" for k in self.kernels)
        return (
            f"{self.best_bytes_per_s / 1e9:.1f} GB/s best ({self.best_kernel}), typical "
            f"{self.typical_bytes_per_s / 1e9:.1f}; best per kernel: {each} GB/s"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "best_bytes_per_s": self.best_bytes_per_s,
            "typical_bytes_per_s": self.typical_bytes_per_s,
            "best_kernel": self.best_kernel,
            "size_bytes": self.size_bytes,
            "threads": self.threads,
            "kernels": {k.kernel: list(k.runs) for k in self.kernels},
            "skipped": list(self.skipped),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReadBandwidth:
        return cls(
            kernels=tuple(
                KernelRates(name, tuple(float(r) for r in runs))
                for name, runs in d["kernels"].items()
            ),
            size_bytes=int(d.get("size_bytes", 0)),
            threads=int(d.get("threads", 0)),
            skipped=tuple(d.get("skipped", ())),
        )


def measure_read_bandwidth(
    size_bytes: int,
    repeats: int,
    warmup: int,
    threads: int,
    pool: ThreadPoolExecutor | None = None,
    kernels: Sequence[str] | None = None,
    buf: Any = None,
) -> ReadBandwidth:
    """Time every read kernel over one fp32 buffer of size_bytes (see the module's docstring);
    buf: that buffer, made by the caller (`probe_buffer`) and kept for its next probe."""
    names = list(READ_KERNELS) if kernels is None else list(kernels)
    buf = probe_buffer(size_bytes) if buf is None else buf
    size_bytes = buf.size * FP32_BYTES
    own_pool = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=threads, thread_name_prefix="probe-read")
    try:
        passes, skipped = {}, []
        for name in names:
            made = READ_KERNELS[name](buf, threads, pool)
            if made is None:
                skipped.append(name)
            else:
                passes[name] = made
        for run_pass, _ in passes.values():
            for _ in range(warmup):
                run_pass()
        runs: dict[str, list[float]] = {name: [] for name in passes}
        for _ in range(repeats):  # interleaved rounds: drift touches every kernel alike
            for name, (run_pass, nbytes) in passes.items():
                runs[name].append(nbytes / time_one_pass_seconds(run_pass))
    finally:
        if own_pool:
            pool.shutdown()
    return ReadBandwidth(
        tuple(KernelRates(n, tuple(r)) for n, r in runs.items()),
        size_bytes=size_bytes,
        threads=threads,
        skipped=tuple(skipped),
    )


def probe_buffer(size_bytes: int | None = None) -> Any:
    """The fp32 buffer a probe reads (the short probe's size by default), written once: filling
    1 GiB costs about as long as reading it twelve times, so a caller that probes again and again
    keeps it."""
    import numpy as np

    if size_bytes is None:
        from roofline.hardware.machine import total_memory_bytes

        size_bytes = short_probe_size_bytes(total_memory_bytes())
    return np.full(size_bytes // FP32_BYTES, 1.0, dtype=np.float32)


def short_probe_size_bytes(memory_bytes: int | None) -> int:
    """SHORT_SIZE_BYTES, or a quarter of the machine's memory when that is less."""
    return (
        SHORT_SIZE_BYTES
        if not memory_bytes
        else max(1 << 20, min(SHORT_SIZE_BYTES, memory_bytes // 4))
    )


def read_bandwidth_now(
    threads: int | None = None,
    *,
    size_bytes: int | None = None,
    repeats: int = SHORT_REPEATS,
    warmup: int = SHORT_WARMUP,
    buf: Any = None,
) -> ReadBandwidth:
    """The short probe (about a second): every read kernel over 1 GiB, one warm-up and three timed
    passes each. The bandwidth of these minutes, to hold a run taken now against (a shared host
    drifts). buf: a `probe_buffer` kept from an earlier probe (size_bytes is then its size)."""
    from roofline.hardware.machine import usable_cpu_count

    threads = usable_cpu_count() if threads is None else threads
    buf = probe_buffer(size_bytes) if buf is None else buf
    return measure_read_bandwidth(buf.size * FP32_BYTES, repeats, warmup, threads, buf=buf)


def read_bandwidth_now_bytes_per_s(threads: int | None = None) -> float:
    """The short probe's best rate (bytes/s)."""
    return read_bandwidth_now(threads).best_bytes_per_s
