"""The CPU kernels the probe times: the read kernels (whose best is the ceiling's bandwidth) and the
helpers the STREAM-style copy and triad share with them.

`READ_KERNELS` (one registry), each reading every byte of one fp32 buffer per pass:

    numpy-sum  numpy's sum, one slice per thread in a pool (numpy releases the GIL)
    simd-sum   `simd.vsum` the same way: numpy's sum can be compute-bound below memory's rate
    gemv       y = W x, rows of MATVEC_COLS floats over numba's threads, one `simd.dot` each:
               a decode step's access pattern

Which is fastest depends on the CPU, its prefetchers and the threads: the probe takes the best.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

FP32_BYTES = 4
MATVEC_COLS = 4096  # a hidden-size-like row length; the matrix has size_bytes / (4 * cols) rows
TRIAD_BLOCK_ELEMS = 1 << 18  # 1 MiB of fp32 scratch per thread: stays in L2/L3

# make(buffer, threads, pool) -> (one pass over the buffer, bytes that pass reads), or None when the
# kernel cannot run here (numba missing)
ReadPass = tuple[Callable[[], Any], int]
MakeReadPass = Callable[[Any, int, ThreadPoolExecutor], "ReadPass | None"]


def slices(n: int, parts: int) -> list[slice]:
    """`parts` contiguous slices covering range(n) exactly once (empty ones dropped)."""
    edges = [n * i // parts for i in range(parts + 1)]
    return [slice(edges[i], edges[i + 1]) for i in range(parts) if edges[i + 1] > edges[i]]


def in_parallel(pool: ThreadPoolExecutor, fn: Callable[[slice], Any], parts: list[slice]) -> None:
    for future in [pool.submit(fn, p) for p in parts]:
        future.result()


def triad_slice(a: Any, b: Any, c: Any, scalar: Any, part: slice) -> None:
    """a = b + scalar*c over one slice, block by block through a cache-resident scratch buffer."""
    import numpy as np

    scratch = np.empty(min(TRIAD_BLOCK_ELEMS, part.stop - part.start), dtype=np.float32)
    for lo in range(part.start, part.stop, TRIAD_BLOCK_ELEMS):
        hi = min(lo + TRIAD_BLOCK_ELEMS, part.stop)
        t = scratch[: hi - lo]
        np.multiply(c[lo:hi], scalar, out=t)
        np.add(b[lo:hi], t, out=a[lo:hi])


def matvec_shape(size_bytes: int) -> tuple[int, int]:
    """(rows, cols) of an fp32 matrix of about size_bytes, rows of MATVEC_COLS where that fits."""
    cols = max(1, min(MATVEC_COLS, size_bytes // FP32_BYTES))
    return max(1, size_bytes // (FP32_BYTES * cols)), cols


def simd_read_kernel() -> Callable | None:
    """sum of a[lo:lo+n] through `roofline.simd.vsum` (compiled with numba, GIL released), or None
    without numba."""
    try:
        import numba
    except ImportError:
        return None
    from roofline import simd

    @numba.njit(nogil=True, cache=True)
    def read_sum(a, lo, n):
        return simd.vsum(a, lo, n)

    return read_sum


def gemv_kernel() -> Callable | None:
    """gemv(w, x, y): y[o] = sum_i w[o, i] * x[i] for every row o of the C-contiguous fp32 matrix w,
    rows shared out over numba's threads (prange); None without numba."""
    try:
        import numba
    except ImportError:
        return None
    from roofline import simd

    @numba.njit(parallel=True, nogil=True, cache=True)
    def gemv(w, x, y):
        n = w.shape[1]
        for o in numba.prange(w.shape[0]):
            y[o] = simd.dot(w, o * n, x, 0, n)

    return gemv


def _numpy_sum_pass(buf: Any, threads: int, pool: ThreadPoolExecutor) -> ReadPass:
    import numpy as np

    parts = slices(buf.size, threads)
    return (
        lambda: in_parallel(pool, lambda p: np.add.reduce(buf[p]), parts)
    ), buf.size * FP32_BYTES


def _simd_sum_pass(buf: Any, threads: int, pool: ThreadPoolExecutor) -> ReadPass | None:
    reader = simd_read_kernel()
    if reader is None:
        return None
    reader(buf, 0, min(64, buf.size))  # compile (or load from numba's cache) before timing
    parts = slices(buf.size, threads)
    return (
        lambda: in_parallel(pool, lambda p: reader(buf, p.start, p.stop - p.start), parts)
    ), buf.size * FP32_BYTES


def _gemv_pass(buf: Any, threads: int, pool: ThreadPoolExecutor) -> ReadPass | None:
    import numpy as np

    gemv = gemv_kernel()
    if gemv is None:
        return None
    import numba

    rows, cols = matvec_shape(buf.size * FP32_BYTES)
    w = buf[: rows * cols].reshape(rows, cols)
    x, y = np.full(cols, 1.0, dtype=np.float32), np.empty(rows, dtype=np.float32)
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))

    def run() -> None:
        before = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            gemv(w, x, y)
        finally:
            numba.set_num_threads(before)

    return run, FP32_BYTES * (rows * cols + rows + cols)  # W once, plus x and y


READ_KERNELS: dict[str, MakeReadPass] = {
    "numpy-sum": _numpy_sum_pass,
    "simd-sum": _simd_sum_pass,
    "gemv": _gemv_pass,
}
