"""`roofline probe`: the kernels compute what they claim, the numbers are sane, the CLI keeps its
contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from roofline.errors import UserError
from roofline.hardware import probe, read_kernels, timing

SMALL = {"size_bytes": 4 << 20, "repeats": 2, "warmup": 1, "matmul_n": 64, "use_cuda": False}


def _assert_sane(stats: dict, repeats: int, low: float, high: float) -> None:
    assert len(stats["runs"]) == repeats
    assert all(r > 0 for r in stats["runs"])
    assert stats["min"] <= stats["median"] <= stats["max"]
    assert stats["min"] == min(stats["runs"]) and stats["max"] == max(stats["runs"])
    assert low < stats["median"] < high, stats["median"]


def test_rate_stats_is_amount_over_each_run_seconds():
    s = timing.rate_stats(12.0, [1.0, 2.0, 4.0])
    assert s["runs"] == [12.0, 6.0, 3.0]
    assert (s["min"], s["median"], s["max"]) == (3.0, 6.0, 12.0)


@pytest.mark.parametrize("n, parts", [(10, 3), (7, 7), (5, 8), (1 << 20, 2)])
def test_slices_cover_the_array_exactly_once(n, parts):
    covered = np.zeros(n, dtype=int)
    for s in read_kernels.slices(n, parts):
        covered[s] += 1
    assert (covered == 1).all()


def test_blocked_triad_computes_b_plus_s_times_c_across_block_edges():
    n = 2 * read_kernels.TRIAD_BLOCK_ELEMS + 7
    rng = np.random.default_rng(1)
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.zeros(n, dtype=np.float32)
    for part in read_kernels.slices(n, 3):
        read_kernels.triad_slice(a, b, c, np.float32(3.0), part)
    np.testing.assert_array_equal(a, b + np.float32(3.0) * c)


def test_matvec_shape_fits_the_size():
    rows, cols = read_kernels.matvec_shape(1 << 30)
    assert cols == read_kernels.MATVEC_COLS and rows * cols * 4 == 1 << 30
    rows, cols = read_kernels.matvec_shape(1 << 20)
    assert rows >= 1 and rows * cols * 4 <= 1 << 20


def test_quick_probe_gives_positive_sane_numbers_and_reports_progress():
    seen = []
    p = probe.measure_profile(
        threads=2, progress=lambda what, done, total: seen.append((done, total)), **SMALL
    )
    for kernel in ("read", "copy", "triad", "matvec_fp32"):
        # anything from a slow laptop to an HBM GPU: 100 MB/s .. 100 TB/s
        _assert_sane(p["bandwidth_bytes_per_s"][kernel], 2, 1e8, 1e14)
    for kernel in ("matvec_fp32", "matmul_fp32", "matmul_bf16"):
        _assert_sane(p["flops"][kernel], 2, 1e6, 1e16)
    # a matvec moves 4 bytes per 2 FLOPs: its two rates come from the same timings
    ratio = (
        p["bandwidth_bytes_per_s"]["matvec_fp32"]["median"] / p["flops"]["matvec_fp32"]["median"]
    )
    assert ratio == pytest.approx(2.0, rel=0.01)
    assert p["threads"] == 2 and p["settings"]["repeats"] == 2 and p["memory_bytes"] > 0
    # the best read kernel's passes, its name, and every kernel's own
    read = p["bandwidth_bytes_per_s"]["read"]
    assert set(read["kernels"]) == {"numpy-sum", "simd-sum", "gemv"}
    assert read["best"] == max(k["max"] for k in read["kernels"].values()) == read["max"]
    assert read["runs"] == read["kernels"][read["kernel"]]["runs"]
    assert p["backends"]["kernels"] == {
        "read": "best of read kernels",
        "copy": "numpy",
        "triad": "numpy",
        "matvec_fp32": "numpy",
        "matmul_fp32": "numpy",
        "matmul_bf16": "torch-cpu",
    }
    assert [d for d, _ in seen] == list(range(len(seen))) and seen[-1][0] == seen[-1][1]
    assert "cuda" not in p


def test_matmul_size_shrinks_so_a_slow_pass_stays_within_budget(monkeypatch):
    sizes = []
    # a pass "takes" what it returns: a matmul of its size at the given rate, with no real waiting
    monkeypatch.setattr(timing, "time_one_pass_seconds", lambda run_pass: run_pass())

    def seconds_at(rate_flop_per_s):
        def at(n):
            sizes.append(n)
            return lambda: 2.0 * n**3 / rate_flop_per_s

        return at

    # a fast path keeps the asked size; a 1 GFLOP/s one gets the n whose pass takes ~budget (n^3
    # scaling)
    assert timing.matmul_n_within(2048, seconds_at(200e9), budget_seconds=0.5) == 2048
    n = timing.matmul_n_within(2048, seconds_at(1e9), budget_seconds=0.5)
    assert n % 64 == 0 and timing.MIN_MATMUL_N <= n < 2048
    assert 2.0 * n**3 / 1e9 <= 0.5 < 2.0 * (n + 64) ** 3 / 1e9
    assert set(sizes) == {timing.MIN_MATMUL_N}  # judged from passes at the smallest size only
    # never below
    assert timing.matmul_n_within(2048, seconds_at(1e6), budget_seconds=0.5) == timing.MIN_MATMUL_N
    # a size asked below the floor stays as asked
    assert timing.matmul_n_within(64, seconds_at(1e6)) == 64


def test_a_slow_matmul_path_is_timed_at_a_smaller_size(monkeypatch):
    """The profile keeps the size each matmul was timed at ("n"), and the rate is counted for that
    size."""
    monkeypatch.setattr(probe, "matmul_n_within", lambda n, pass_at: 256)
    p = probe.measure_profile(threads=1, **{**SMALL, "matmul_n": 2048})
    for kernel in ("matmul_fp32", "matmul_bf16"):
        assert p["flops"][kernel]["n"] == 256
        _assert_sane(p["flops"][kernel], 2, 1e6, 1e16)
    assert p["settings"]["matmul_n"] == 2048


def test_probe_works_with_numpy_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setitem(sys.modules, "numba", None)
    assert (
        probe.optional_torch() is None
        and read_kernels.simd_read_kernel() is None
        and read_kernels.gemv_kernel() is None
    )
    p = probe.measure_profile(threads=1, **SMALL)
    # the numba kernels are skipped
    assert set(p["bandwidth_bytes_per_s"]["read"]["kernels"]) == {"numpy-sum"}
    assert set(p["flops"]) == {"matvec_fp32", "matmul_fp32"}  # no bf16 without torch
    assert p["backends"]["kernels"]["matmul_fp32"] == "numpy"
    assert "torch" not in p["backends"]["versions"]
    _assert_sane(p["flops"]["matmul_fp32"], 2, 1e6, 1e16)


def test_torch_device_kernels_run_on_cpu():
    # the CUDA block runs exactly these steps with device="cuda"; here they run on the CPU
    import torch

    results = {}
    for _, _, step in probe.torch_device_steps(torch, "cpu", 3 << 20, 64, repeats=2, warmup=1):
        results.update(step())
    for kernel in ("read", "copy", "triad", "matvec_fp32"):
        _assert_sane(results[("bandwidth_bytes_per_s", kernel)], 2, 1e8, 1e14)
    for kernel in ("matmul_fp32", "matmul_bf16"):
        _assert_sane(results[("flops", kernel)], 2, 1e6, 1e16)


def test_cuda_block_has_the_same_sections(monkeypatch, capsys):
    # no GPU in CI: pretend torch sees one, and run its steps on the CPU, to check how they are
    # filed
    import torch

    real_steps = probe.torch_device_steps
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU")
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i=0: type("P", (), {"total_memory": 1 << 30})
    )
    monkeypatch.setattr(probe, "torch_device_steps", lambda t, device, *a: real_steps(t, "cpu", *a))
    p = probe.measure_profile(threads=1, **{**SMALL, "use_cuda": True, "cuda_matmul_n": 64})
    gpu = p["cuda"]
    assert (
        gpu["device"] == "Fake GPU"
        and gpu["memory_bytes"] == 1 << 30
        and gpu["settings"]["matmul_n"] == 64
    )
    assert set(gpu["bandwidth_bytes_per_s"]) == set(p["bandwidth_bytes_per_s"])
    assert set(gpu["flops"]) == set(p["flops"])
    # GPU steps do not overwrite the CPU's backends
    assert p["backends"]["kernels"]["read"] == "best of read kernels"
    from roofline.cli.probe import _print

    _print(p, None, as_json=False, as_markdown=True)
    out = capsys.readouterr().out
    assert (
        "| Fake GPU: read |" in out
        and "| Fake GPU: matmul bf16 |" in out
        and "| torch-cuda |" in out
    )


class _FakeCuda:
    """Stands in for torch.cuda: events read a clock that each pass advances by 1 microsecond."""

    def __init__(self):
        self.now_ms = 0.0
        cuda = self

        class Event:
            def __init__(self, enable_timing):
                self.t = None

            def record(self):
                self.t = cuda.now_ms

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        self.Event = Event

    def synchronize(self):
        pass


def test_cuda_timer_batches_short_passes_and_reports_seconds_per_pass():
    fake = type("FakeTorch", (), {})()
    fake.cuda = _FakeCuda()
    calls = []

    def one_pass():
        calls.append(1)
        fake.cuda.now_ms += 1e-3  # 1 µs per pass, too short to time one at a time

    seconds = timing.cuda_time_passes_seconds(
        fake, one_pass, repeats=3, warmup=2, min_run_seconds=1e-3
    )
    assert seconds == pytest.approx([1e-6] * 3)
    # one calibration pass, then batches of ~1000 passes (float rounding may make it 1001): one more
    # warm-up and three timed runs
    assert 1 + 4 * 1000 <= len(calls) <= 1 + 4 * 1001


def test_probe_gives_back_the_thread_settings():
    import torch
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    torch_before, blas_before = torch.get_num_threads(), blas_threads()
    probe.measure_profile(threads=1, **SMALL)
    assert torch.get_num_threads() == torch_before and blas_threads() == blas_before


@pytest.mark.parametrize(
    "kwargs, option",
    [
        ({"size_bytes": 0}, "--size"),
        ({"size_bytes": 1 << 60}, "--size"),
        ({"threads": -1}, "--threads"),
        ({"repeats": 0}, "--repeats"),
    ],
)
def test_bad_settings_name_the_option(kwargs, option):
    args = {"size_bytes": 4 << 20, "repeats": 2, "threads": 1, **kwargs}
    with pytest.raises(UserError, match=option):
        probe.check_settings(args["size_bytes"], args["repeats"], args["threads"])


@pytest.mark.parametrize(
    "text, nbytes",
    [
        ("1GiB", 2**30),
        ("256MiB", 2**28),
        ("64 KiB", 2**16),
        ("1e9", 10**9),
        ("1.5GB", 15 * 10**8),
        ("4096", 4096),
        ("2M", 2 * 10**6),
    ],
)
def test_size_option_reads_binary_and_decimal_units(text, nbytes):
    from roofline.units import parse_bytes

    assert parse_bytes(text) == nbytes


@pytest.mark.parametrize("text", ["lots", "-1GiB", "1 GiBs", "GiB", ""])
def test_size_option_rejects_nonsense(text):
    from roofline.units import parse_bytes

    with pytest.raises(UserError, match="1GiB"):
        parse_bytes(text, what="--size")


def _roofline(args: list[str], cache) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROOFLINE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "roofline", *args]
    return subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)


def test_cli_quick_json_prints_the_profile_and_saves_it(tmp_path, monkeypatch):
    r = _roofline(
        ["probe", "--quick", "--json", "--size", "4MiB", "--repeats", "2", "--threads", "1"],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in (
        "name",
        "measured_at",
        "roofline_version",
        "cpu",
        "threads",
        "memory_bytes",
        "bandwidth_bytes_per_s",
        "flops",
        "backends",
        "settings",
    ):
        assert key in out, key
    assert set(out["bandwidth_bytes_per_s"]) >= {"read", "copy", "triad"}
    assert set(out["flops"]) >= {"matvec_fp32", "matmul_fp32"}
    assert out["settings"]["quick"] is True and out["settings"]["size_bytes"] == 4 << 20
    saved = tmp_path / "hardware" / "local.json"
    assert out["profile_path"] == str(saved)
    from roofline.hardware.profile import load_local_profile

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    assert load_local_profile()["bandwidth_bytes_per_s"] == out["bandwidth_bytes_per_s"]


@pytest.mark.parametrize(
    "args", [["--size", "0"], ["--threads", "-1"], ["--size", "lots"], ["--repeats", "0"]]
)
def test_cli_bad_options_exit_2_with_one_line(tmp_path, args):
    r = _roofline(["probe", "--no-save", *args], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert not (tmp_path / "hardware").exists()


def test_cli_markdown_table_and_no_save(tmp_path, monkeypatch, capsys):
    from roofline.cli.probe import probe as probe_command

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    probe_command(
        size="4MiB", repeats=2, threads=1, quick=True, save=False, as_json=False, as_markdown=True
    )
    out = capsys.readouterr().out
    assert "| kernel | best | median | min | unit | backend |" in out
    for label in (
        "| read (ceiling) |",
        "|   read: numpy-sum |",
        "|   read: gemv |",
        "| copy |",
        "| triad |",
        "| matmul fp32 |",
    ):
        assert label in out
    assert "not saved" in out and not (tmp_path / "hardware").exists()


def test_simd_read_kernel_sums_exactly_what_it_reads():
    import numpy as np

    reader = read_kernels.simd_read_kernel()
    a = np.arange(1000, dtype=np.float32) % 7
    assert reader(a, 0, 1000) == a.sum() and reader(a, 100, 77) == a[100:177].sum()


def test_gemv_kernel_is_a_matrix_vector_product():
    import numpy as np

    gemv = read_kernels.gemv_kernel()
    rng = np.random.default_rng(2)
    w, x = rng.random((37, 100), dtype=np.float32), rng.random(100, dtype=np.float32)
    y = np.zeros(37, dtype=np.float32)
    gemv(w, x, y)
    np.testing.assert_allclose(y, w.astype(np.float64) @ x, rtol=1e-5)


def test_probe_output_names_a_matmul_timed_at_a_smaller_size():
    from roofline.cli.probe import _matmul_sizes

    assert (
        _matmul_sizes({"matmul_fp32": {"n": 2048}, "matmul_bf16": {"n": 2048}}, 2048)
        == "2048² matmul"
    )
    # profiles from before "n"
    assert _matmul_sizes({"matmul_fp32": {"median": 1.0}}, 2048) == "2048² matmul"
    text = _matmul_sizes(
        {"matvec_fp32": {}, "matmul_fp32": {"n": 2048}, "matmul_bf16": {"n": 512}}, 2048
    )
    assert text.startswith("matmul fp32 2048², bf16 512² (smaller where a pass would take over")
