"""The read bandwidth a ceiling uses: the best pass of the best kernel, the median of that kernel as
the typical rate, every kernel really run (and really reading the buffer), the profile's shape."""

from __future__ import annotations

import pytest

from roofline.hardware import readbw
from roofline.hardware.readbw import KernelRates, ReadBandwidth, best_of_kernels


def test_best_of_kernels_is_the_kernel_with_the_fastest_pass_not_the_best_median():
    steady = KernelRates("numpy-sum", (30e9, 30e9, 30e9))
    bursty = KernelRates("gemv", (20e9, 33e9, 21e9))  # lower median, faster best pass
    assert best_of_kernels([steady, bursty]) is bursty
    rb = ReadBandwidth((steady, bursty))
    assert rb.best_bytes_per_s == 33e9 and rb.best_kernel == "gemv"
    assert rb.typical_bytes_per_s == 21e9  # the median of the kernel that gave the best
    # ties: first listed
    assert best_of_kernels([KernelRates("a", (1.0,)), KernelRates("b", (1.0,))]).kernel == "a"


@pytest.mark.parametrize("rates", [[], [KernelRates("a", ())]])
def test_best_of_kernels_refuses_nothing_to_choose_from(rates):
    with pytest.raises(ValueError):
        best_of_kernels(rates)


def test_profile_stats_and_json_keep_every_kernel():
    rb = ReadBandwidth(
        (KernelRates("numpy-sum", (10e9, 12e9, 11e9)), KernelRates("simd-sum", (25e9, 24e9, 26e9))),
        size_bytes=1 << 30,
        threads=2,
        skipped=("gemv",),
    )
    stats = rb.profile_stats()
    assert (
        stats["best"] == stats["max"] == 26e9
        and stats["median"] == 25e9
        and stats["kernel"] == "simd-sum"
    )
    assert stats["runs"] == [25e9, 24e9, 26e9]
    assert stats["kernels"]["numpy-sum"] == {
        "median": 11e9,
        "min": 10e9,
        "max": 12e9,
        "runs": [10e9, 12e9, 11e9],
    }
    again = ReadBandwidth.from_json(rb.to_json())
    assert again == rb and again.to_json()["best_kernel"] == "simd-sum"
    assert (
        "26.0 GB/s best (simd-sum), typical 25.0" in rb.summary()
        and "numpy-sum 12.0" in rb.summary()
    )


def test_measure_runs_every_kernel_interleaved_with_positive_rates(monkeypatch):
    order = []
    real = dict(readbw.READ_KERNELS)

    def spy(name):
        def make(buf, threads, pool):
            run, nbytes = real[name](buf, threads, pool)

            def run_logged():
                order.append(name)
                run()

            return run_logged, nbytes

        return make

    monkeypatch.setattr(readbw, "READ_KERNELS", {name: spy(name) for name in real})
    rb = readbw.measure_read_bandwidth(8 << 20, repeats=3, warmup=1, threads=2)
    assert [k.kernel for k in rb.kernels] == list(real) and rb.skipped == ()
    assert all(len(k.runs) == 3 and all(1e8 < r < 1e14 for r in k.runs) for k in rb.kernels)
    n = len(real)
    assert order[:n] == list(real)  # one warm-up each
    assert order[n:] == list(real) * 3  # then rounds: every kernel once per round


def test_read_kernels_read_the_whole_buffer():
    """Each pass's byte count is the buffer (the gemv's matrix is all of it), and the sums see every
    element."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    buf = np.full(1 << 16, 1.0, dtype=np.float32)  # 16 rows of 4096
    with ThreadPoolExecutor(2) as pool:
        for name, make in readbw.READ_KERNELS.items():
            _, nbytes = make(buf, 2, pool)
            assert nbytes >= buf.nbytes, name
    from roofline.hardware.read_kernels import gemv_kernel

    w = buf.reshape(16, 4096)
    x, y = np.full(4096, 2.0, dtype=np.float32), np.zeros(16, dtype=np.float32)
    gemv_kernel()(w, x, y)
    assert (y == 8192.0).all()


def test_short_probe_size_stays_under_a_quarter_of_memory():
    assert readbw.short_probe_size_bytes(None) == readbw.SHORT_SIZE_BYTES == 1 << 30
    assert readbw.short_probe_size_bytes(64 << 30) == 1 << 30
    assert readbw.short_probe_size_bytes(2 << 30) == 512 << 20


def test_read_bandwidth_now_is_the_best_of_all_kernels():
    rb = readbw.read_bandwidth_now(2, size_bytes=8 << 20, repeats=2, warmup=1)
    assert {k.kernel for k in rb.kernels} == {"numpy-sum", "simd-sum", "gemv"}
    assert rb.best_bytes_per_s == max(r for k in rb.kernels for r in k.runs)
    assert 1e8 < rb.best_bytes_per_s < 1e14
