"""Measure this machine: memory bandwidth (read, copy, triad) and matrix rates (matvec, matmul).

Each kernel runs `warmup` untimed passes, then `repeats` timed ones, all kept; rate = bytes it must
move (or FLOPs it must do) / seconds. Bytes as STREAM counts them, over fp32 arrays of n elements:
    read   s = sum(a)        4n bytes
    copy   b = a             8n bytes
    triad  a = b + s*c      12n bytes
The write-allocate read is not counted, so copy and triad can come out below read.

The read, which ceilings use, is measured as `readbw` says. Copy and triad run numpy on one slice
per thread in a pool (numpy's loops are single-threaded and release the GIL); the triad goes in
blocks so s*c stays in a cached scratch buffer (a full-size temporary would add two arrays of
traffic). BLAS gets the same threads (threadpoolctl). fp32 matmul is numpy even with torch, so
profiles stay comparable; torch adds bf16 matmul and a CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from roofline.errors import UserError
from roofline.hardware.machine import (
    cpu_model_name,
    optional_torch,
    total_memory_bytes,
    usable_cpu_count,
)
from roofline.hardware.read_kernels import (
    FP32_BYTES,
    TRIAD_BLOCK_ELEMS,
    in_parallel,
    matvec_shape,
    slices,
    triad_slice,
)
from roofline.hardware.readbw import measure_read_bandwidth
from roofline.hardware.timing import (
    Stats,
    cuda_time_passes_seconds,
    matmul_n_within,
    rate_stats,
    time_passes_seconds,
)

# per kernel, all its arrays together: far beyond any CPU's last-level cache
DEFAULT_SIZE_BYTES = 1 << 30
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 2
# 2n^3 = 17 GFLOP per fp32 pass: long enough for a CPU to reach its peak (smaller where a pass
# would take over timing.MATMUL_PASS_SECONDS; the size used is kept as the stats' "n")
DEFAULT_MATMUL_N = 2048
CUDA_MATMUL_N = 8192  # 1.1 TFLOP per pass: a GPU needs big tiles to fill its tensor cores
MIN_SIZE_BYTES = 1 << 20

# progress(what is being measured now, steps done, steps in all)
Progress = Callable[[str, int, int], None]
# A step is (kernel, backend, measure); measure() returns {path in the profile: stats},
# e.g. {("flops", "matmul_fp32"): stats}.
Step = tuple[str, str, Callable[[], dict[tuple[str, ...], Stats]]]


def numpy_stream_steps(
    size_bytes: int, repeats: int, warmup: int, threads: int, pool: ThreadPoolExecutor
) -> list[Step]:
    """read, copy and triad over `size_bytes` of fp32 arrays in all (split evenly between the
    arrays)."""
    import numpy as np

    def timed(kernel: str, n: int, per_slice: Callable[[slice], Any], arrays: int) -> dict:
        parts = slices(n, threads)
        seconds = time_passes_seconds(lambda: in_parallel(pool, per_slice, parts), repeats, warmup)
        return {("bandwidth_bytes_per_s", kernel): rate_stats(arrays * n * FP32_BYTES, seconds)}

    def read() -> dict:
        rb = measure_read_bandwidth(size_bytes, repeats, warmup, threads, pool)
        return {("bandwidth_bytes_per_s", "read"): rb.profile_stats()}

    def copy() -> dict:
        n = size_bytes // (2 * FP32_BYTES)
        src, dst = np.full(n, 1.0, dtype=np.float32), np.full(n, 0.0, dtype=np.float32)
        return timed("copy", n, lambda p: np.copyto(dst[p], src[p]), arrays=2)

    def triad() -> dict:
        n = size_bytes // (3 * FP32_BYTES)
        a, b, c = (np.full(n, v, dtype=np.float32) for v in (0.0, 1.0, 2.0))
        return timed("triad", n, lambda p: triad_slice(a, b, c, np.float32(3.0), p), arrays=3)

    return [
        ("read", "best of read kernels", read),
        ("copy", "numpy", copy),
        ("triad", "numpy", triad),
    ]


def read_bandwidth_now_bytes_per_s() -> float:
    """The short best-of-kernels read probe (about a second,
    `roofline.hardware.readbw.read_bandwidth_now`)."""
    from roofline.hardware.readbw import read_bandwidth_now_bytes_per_s as now

    return now()


def matvec_results(rows: int, cols: int, seconds: Sequence[float]) -> dict[tuple[str, ...], Stats]:
    """y = A x streams A once (plus x and y) and does 2 FLOPs (multiply, add) per element of A."""
    nbytes = FP32_BYTES * (rows * cols + rows + cols)
    return {
        ("bandwidth_bytes_per_s", "matvec_fp32"): rate_stats(nbytes, seconds),
        ("flops", "matvec_fp32"): rate_stats(2.0 * rows * cols, seconds),
    }


def numpy_matvec_step(size_bytes: int, repeats: int, warmup: int) -> Step:
    def matvec() -> dict:
        import numpy as np

        rows, cols = matvec_shape(size_bytes)
        a = np.full((rows, cols), 1.0, dtype=np.float32)
        x, y = np.full(cols, 1.0, dtype=np.float32), np.empty(rows, dtype=np.float32)
        return matvec_results(
            rows, cols, time_passes_seconds(lambda: np.matmul(a, x, out=y), repeats, warmup)
        )

    return ("matvec_fp32", "numpy", matvec)


def numpy_matmul_step(n: int, repeats: int, warmup: int) -> Step:
    def matmul() -> dict:
        import numpy as np

        rng = np.random.default_rng(0)

        def pass_at(m: int) -> Callable[[], Any]:
            a, b = rng.random((m, m), dtype=np.float32), rng.random((m, m), dtype=np.float32)
            out = np.empty((m, m), np.float32)
            return lambda: np.matmul(a, b, out=out)

        used = matmul_n_within(n, pass_at)
        seconds = time_passes_seconds(pass_at(used), repeats, warmup)
        # n^3 multiply-adds
        return {("flops", "matmul_fp32"): {**rate_stats(2.0 * used**3, seconds), "n": used}}

    return ("matmul_fp32", "numpy", matmul)


# ---- torch kernels (CPU matmuls; everything on CUDA) ---------------------------------------------


def torch_matmul_step(
    torch: Any, device: str, dtype_name: str, n: int, repeats: int, warmup: int
) -> Step:
    def matmul() -> dict:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        gen = torch.Generator(device=device).manual_seed(0)

        def pass_at(m: int) -> Callable[[], Any]:
            a = torch.rand((m, m), generator=gen, device=device).to(dtype)
            b = torch.rand((m, m), generator=gen, device=device).to(dtype)
            out = torch.empty((m, m), dtype=dtype, device=device)
            return lambda: torch.mm(a, b, out=out)

        # a GPU's pass is timed by events and is short at any n; a CPU's slow path gets a smaller n
        used = n if device == "cuda" else matmul_n_within(n, pass_at)
        seconds = _torch_time(torch, device, pass_at(used), repeats, warmup)
        return {
            ("flops", f"matmul_{dtype_name}"): {**rate_stats(2.0 * used**3, seconds), "n": used}
        }

    return (f"matmul_{dtype_name}", f"torch-{device}", matmul)


def torch_device_steps(
    torch: Any, device: str, size_bytes: int, matmul_n: int, repeats: int, warmup: int
) -> list[Step]:
    """All kernels on one torch device, counted exactly as the numpy ones are."""

    def full(n: int | tuple[int, int], value: float) -> Any:
        return torch.full(
            n if isinstance(n, tuple) else (n,), value, dtype=torch.float32, device=device
        )

    def timed(kernel: str, n: int, run_pass: Callable[[], Any], arrays: int) -> dict:
        seconds = _torch_time(torch, device, run_pass, repeats, warmup)
        return {("bandwidth_bytes_per_s", kernel): rate_stats(arrays * n * FP32_BYTES, seconds)}

    def read() -> dict:
        n = size_bytes // FP32_BYTES
        a = full(n, 1.0)
        return timed("read", n, lambda: a.sum(), arrays=1)

    def copy() -> dict:
        n = size_bytes // (2 * FP32_BYTES)
        src, dst = full(n, 1.0), full(n, 0.0)
        return timed("copy", n, lambda: dst.copy_(src), arrays=2)

    def triad() -> dict:
        n = size_bytes // (3 * FP32_BYTES)
        a, b, c = full(n, 0.0), full(n, 1.0), full(n, 2.0)
        # torch.add(b, c, alpha=s) computes b + s*c in one pass, with no temporary
        return timed("triad", n, lambda: torch.add(b, c, alpha=3.0, out=a), arrays=3)

    def matvec() -> dict:
        rows, cols = matvec_shape(size_bytes)
        a, x, y = full((rows, cols), 1.0), full(cols, 1.0), full(rows, 0.0)
        return matvec_results(
            rows, cols, _torch_time(torch, device, lambda: torch.mv(a, x, out=y), repeats, warmup)
        )

    backend = f"torch-{device}"
    steps: list[Step] = [
        (name, backend, fn)
        for name, fn in (("read", read), ("copy", copy), ("triad", triad), ("matvec_fp32", matvec))
    ]
    return steps + [
        torch_matmul_step(torch, device, d, matmul_n, repeats, warmup) for d in ("fp32", "bf16")
    ]


def _torch_time(
    torch: Any, device: str, run_pass: Callable[[], Any], repeats: int, warmup: int
) -> list[float]:
    if device == "cuda":
        return cuda_time_passes_seconds(torch, run_pass, repeats, warmup)
    return time_passes_seconds(run_pass, repeats, warmup)


@contextmanager
def cpu_threads(threads: int, torch: Any | None) -> Iterator[None]:
    """Run BLAS and torch on `threads` threads for the duration, then give back what was set
    before."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads() if torch is not None else None
    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            if torch is not None:
                torch.set_num_threads(threads)
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


# ---- the whole profile -------------------------------------------------------------------------


def measure_profile(
    size_bytes: int = DEFAULT_SIZE_BYTES,
    repeats: int = DEFAULT_REPEATS,
    threads: int | None = None,
    progress: Progress | None = None,
    *,
    warmup: int = DEFAULT_WARMUP,
    matmul_n: int = DEFAULT_MATMUL_N,
    cuda_matmul_n: int = CUDA_MATMUL_N,
    use_cuda: bool = True,
) -> dict[str, Any]:
    """Measure every kernel and return the profile (shape in `roofline.hardware.profile`); saves
    nothing."""
    import numpy as np

    from roofline import __version__
    from roofline.simd import kernel_isa

    threads = usable_cpu_count() if threads is None else threads
    check_settings(size_bytes, repeats, threads, warmup=warmup, matmul_n=matmul_n)
    torch = optional_torch()
    rows, cols = matvec_shape(size_bytes)
    profile: dict[str, Any] = {
        "name": "local",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "roofline_version": __version__,
        "cpu": cpu_model_name(),
        "kernel_isa": kernel_isa(),  # what the SIMD read kernel and the engine compile for
        "threads": threads,
        "memory_bytes": total_memory_bytes(),
        "backends": {"kernels": {}, "versions": {"numpy": np.__version__}},
        "settings": {
            "size_bytes": size_bytes,
            "repeats": repeats,
            "warmup": warmup,
            "threads": threads,
            "matmul_n": matmul_n,
            "matvec_shape": [rows, cols],
            "triad_block_bytes": TRIAD_BLOCK_ELEMS * FP32_BYTES,
            "byte_counting": (
                "STREAM: read 1 array, copy 2, triad 3; write-allocate traffic not counted"
            ),
        },
    }
    if torch is not None:
        profile["backends"]["versions"]["torch"] = torch.__version__

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="probe") as pool:
        steps = numpy_stream_steps(size_bytes, repeats, warmup, threads, pool)
        steps += [
            numpy_matvec_step(size_bytes, repeats, warmup),
            numpy_matmul_step(matmul_n, repeats, warmup),
        ]
        if torch is not None:  # numpy has no bf16
            steps.append(torch_matmul_step(torch, "cpu", "bf16", matmul_n, repeats, warmup))
        cuda_steps = []
        if use_cuda and torch is not None and torch.cuda.is_available():
            cuda_steps = torch_device_steps(
                torch, "cuda", size_bytes, cuda_matmul_n, repeats, warmup
            )
            profile["cuda"] = {
                "device": torch.cuda.get_device_name(0),
                "memory_bytes": torch.cuda.get_device_properties(0).total_memory,
                "backend": "torch-cuda",
                "settings": {
                    "size_bytes": size_bytes,
                    "repeats": repeats,
                    "warmup": warmup,
                    "matmul_n": cuda_matmul_n,
                    "matvec_shape": [rows, cols],
                    # "highest" means fp32 matmuls really are fp32 (no TF32 shortcut)
                    "float32_matmul_precision": torch.get_float32_matmul_precision(),
                },
            }
        with cpu_threads(threads, torch):
            _run_steps(profile, steps, cuda_steps, progress)
    return profile


def _run_steps(
    profile: dict[str, Any], steps: list[Step], cuda_steps: list[Step], progress: Progress | None
) -> None:
    """Run each step in turn and file its results in the profile (GPU ones under "cuda")."""
    total = len(steps) + len(cuda_steps)
    for i, (kernel, backend, step) in enumerate(steps + cuda_steps):
        if progress is not None:
            progress(f"{kernel} ({backend})", i, total)
        on_gpu = i >= len(steps)
        for path, stats in step().items():
            _put(profile, ("cuda", *path) if on_gpu else path, stats)
        if not on_gpu:
            profile["backends"]["kernels"][kernel] = backend
    if progress is not None:
        progress("done", total, total)


def _put(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        d = d.setdefault(key, {})
    d[path[-1]] = value


def check_settings(
    size_bytes: int,
    repeats: int,
    threads: int | None,
    *,
    warmup: int = DEFAULT_WARMUP,
    matmul_n: int = DEFAULT_MATMUL_N,
) -> None:
    """Raise a UserError naming the option that is out of range; threads=None means all CPUs."""
    memory_bytes = total_memory_bytes()
    if size_bytes < MIN_SIZE_BYTES:
        raise UserError(
            f"--size must be at least 1MiB (got {size_bytes} bytes); use well above the "
            "CPU's last-level cache, e.g. 1GiB, to measure memory rather than cache"
        )
    if memory_bytes and size_bytes > memory_bytes // 2:
        raise UserError(
            f"--size {size_bytes} bytes is over half of this machine's "
            f"{memory_bytes} bytes of memory; "
            "use a smaller size, e.g. 1GiB"
        )
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {repeats})")
    if threads is not None and threads < 1:
        raise UserError(f"--threads must be at least 1 (got {threads})")
    if warmup < 0 or matmul_n < 1:
        raise UserError(
            f"warm-up passes must be >= 0 and the matmul size >= 1 (got {warmup}, {matmul_n})"
        )
