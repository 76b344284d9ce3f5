"""The decode pass's building blocks and scheduling: the fixed summation order of `simd`, SiLU
blocks, and one pass giving the same bits whatever the thread count and the split of the work among
threads."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit
from runner_helpers import FOLLOW, LONG_PROMPT, PROMPT, bf16_bits, bits_to_f32, tiny_checkpoint

from roofline import simd
from roofline.engine.kernels import decode, layer_kernels, simd_loops
from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE
from roofline.engine.runtime.kernel_choice import KernelChoice
from roofline.engine.runtime.model_runner import ModelRunner, available_cores


@njit(cache=False)
def _vsum(a):
    return simd.vsum(a, 0, a.shape[0])


@njit(cache=False)
def _dot(w, x):
    return simd.dot(w, 0, x, 0, x.shape[0])


def documented_order_sum(v: np.ndarray, partials: int = 4) -> np.float32:
    """simd's order, in float32 numpy: 4 x 16 lanes over the 64-blocks, (a0 + a1) + (a2 + a3)
    (partials 1, the matrix order: one 16-lane sum takes the four lane blocks in turn), halving
    folds; then an 8-lane sum seeded with the running total over the 8-blocks; then one by one."""
    f32 = np.float32

    def fold(x):
        while x.size > 1:
            x = (x[: x.size // 2] + x[x.size // 2 :]).astype(f32)
        return f32(x[0])

    n = v.size
    n64 = n - n % 64
    lanes = [np.zeros(16, f32) for _ in range(4)]
    for i in range(0, n64, 64):
        for c in range(4):
            p = c % partials
            lanes[p] = (lanes[p] + v[i + 16 * c : i + 16 * c + 16]).astype(f32)
    if partials == 1:
        total = fold(lanes[0])
    else:
        total = fold(
            ((lanes[0] + lanes[1]).astype(f32) + (lanes[2] + lanes[3]).astype(f32)).astype(f32)
        )
    n8 = n64 + (n - n64) // 8 * 8
    if n8 > n64:
        acc = np.zeros(8, f32)
        acc[0] = total
        for i in range(n64, n8, 8):
            acc = (acc + v[i : i + 8]).astype(f32)
        total = fold(acc)
    for i in range(n8, n):
        total = f32(total + v[i])
    return total


@pytest.mark.parametrize("n", [1, 7, 8, 15, 63, 64, 65, 100, 127, 128, 200, 576, 1536 + 13])
def test_reductions_follow_the_documented_order_bit_for_bit(n):
    rng = np.random.default_rng(n)
    # wide range: order matters
    v = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    assert _vsum(v) == documented_order_sum(v)
    # fma(w, 1, s) is a plain add, so a dot with ones follows the same order
    assert _dot(v[None], np.ones(n, np.float32)) == documented_order_sum(v)
    bits = bf16_bits(v)
    assert _dot(bits[None], np.ones(n, np.float32)) == documented_order_sum(bits_to_f32(bits))


@njit(cache=False)
def _vmax(a, start, n):
    return simd_loops.vmax(a, start, n)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 63, 64, 65, 127, 128, 200])
def test_vmax_is_the_largest_value_wherever_it_lies(n):
    rng = np.random.default_rng(n)
    v = (rng.standard_normal(n + 70) * 100).astype(np.float32)
    for start in (0, 3):
        expected = v[start : start + n].max() if n else -np.inf
        assert _vmax(v, start, n) == expected
        for at in {start, start + n // 2, start + n - 1} if n else ():
            w = v.copy()
            w[at] = 1e30  # the largest in each part of the loop: main lanes, the rest
            assert _vmax(w, start, n) == np.float32(1e30)


def _dot_block_ones(a, a_rows, b_rows, n, lines):
    """simd.dot_block of a's first a_rows rows (of n) with b_rows rows of ones (the literal shapes
    need one compiled function each, so this picks among them)."""
    ones = np.ones((b_rows, n), np.float32)
    return _DOT_BLOCKS[a_rows, b_rows](a, ones, n, lines)


def _make_dot_block(a_rows, b_rows):
    @njit(cache=False)
    def block(a, b, n, lines):
        return simd.dot_block(a, 0, n, b, 0, n, n, a_rows, b_rows, 0, lines, 2)

    return block


_DOT_BLOCKS = {(w, r): _make_dot_block(w, r) for w in (1, 2, 4) for r in (1, 3, 4)}


@pytest.mark.parametrize("n", [7, 64, 200, 576, 1536 + 13])
@pytest.mark.parametrize("a_rows,b_rows", sorted(_DOT_BLOCKS))
def test_dot_block_sums_every_pair_in_the_documented_order(n, a_rows, b_rows):
    # several weight rows against several x rows, folded together: each sum bit for bit the
    # matrix order's, whatever the block, with and without read hints (hints may run past the
    # array: never read)
    rng = np.random.default_rng(n + 10 * a_rows + b_rows)
    a = (rng.standard_normal((a_rows, n)) * 10.0 ** rng.integers(-3, 4, (a_rows, n))).astype(
        np.float32
    )
    want = [documented_order_sum(a[w], partials=1) for w in range(a_rows)]
    for lines in (0, 3, 10**6):
        got = _dot_block_ones(a, a_rows, b_rows, n, lines)
        assert list(got) == [want[q // b_rows] for q in range(a_rows * b_rows)], lines


def test_silu_of_a_column_does_not_depend_on_the_range_it_is_computed_in():
    rng = np.random.default_rng(3)
    ffn = 50
    gu = (rng.standard_normal((2, 2 * ffn)) * 6).astype(np.float32)
    whole = np.empty((2, ffn), np.float32)
    layer_kernels.silu_mul(gu, whole)
    pieces = np.full((2, ffn), np.nan, np.float32)
    for j0, j1 in [(0, 3), (3, 19), (19, 35), (35, 50)]:
        layer_kernels.silu_mul(gu, pieces, j0, j1)
    assert np.array_equal(whole, pieces)
    g, u = gu[:, :ffn].astype(np.float64), gu[:, ffn:].astype(np.float64)
    np.testing.assert_allclose(whole, g / (1 + np.exp(-g)) * u, rtol=3e-6, atol=1e-30)


def _pass(runner: ModelRunner) -> list[np.ndarray]:
    """Prefill two slots (torch and kernel paths), extend one past an attention chunk, decode
    both."""
    out = [runner.prefill(0, LONG_PROMPT), runner.prefill(1, PROMPT)]
    out.append(runner.extend(0, (FOLLOW * 20)[:100]))  # positions 35..134: two chunks
    out.append(runner.decode([1, 0], [7, 9]))
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_decode_is_bit_identical_whatever_the_threads_and_the_work_split(dtype):
    """One thread; two threads with one-row units (every phase split fine, units taken over between
    threads); two threads with the default units: the same logits, bit for bit."""
    threads = min(2, available_cores())
    results = []
    for n_threads, unit_bytes in [(1, None), (threads, 1), (threads, None)]:
        runner = ModelRunner(
            tiny_checkpoint("qwen3"), dtype=dtype, threads=n_threads, max_batch=2, max_seq_len=160
        )
        if unit_bytes is not None:
            shape = DEFAULT_SHAPE._replace(unit_bytes=unit_bytes)
            runner.kernels = KernelChoice(shape, shape)
        results.append(_pass(runner))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert np.array_equal(a, b)


def test_more_workers_than_threads_still_finish_with_the_same_result():
    """Workers that never run concurrently (here: 3 workers on 1 thread) leave their units to the
    ones that do: the pass completes (no worker waits for a unit nobody will take) and gives the
    same logits."""
    runner = ModelRunner(
        tiny_checkpoint("llama"), dtype="fp32", threads=1, max_batch=1, max_seq_len=32
    )
    runner.prefill(0, PROMPT)
    want = runner.decode([0], [11])
    runner.truncate(0, len(PROMPT))
    c = runner.config
    got = np.empty_like(want)
    numba.set_num_threads(1)
    n = len(PROMPT)
    rows = decode.Rows(
        tokens=np.array([11]),
        slots=np.array([0]),
        positions=np.array([n]),
        cache_positions=np.array([n]),
        tree_base=np.array([n + 1]),
        tree_path=np.zeros((1, 1), dtype=np.int64),
        logit_rows=np.array([0]),
    )
    layers, head = decode.kernel_weights(runner.weights)
    shape = decode.kernel_shape(c, runner.weights)
    cache = decode.Cache(runner._cos, runner._sin, runner.cache.k, runner.cache.v)
    decode.decode_rows(
        rows, shape, layers, head, cache, got, 3, DEFAULT_SHAPE._replace(unit_bytes=64)
    )
    assert np.array_equal(got, want)
