"""The numba decode kernels against numpy/torch references, and the k-row == 1-row bit-identity."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from runner_helpers import bf16_bits, bits_to_f32

from roofline.engine.kernels import attention, kv_cache, layer_kernels
from roofline.engine.kernels import reference as model
from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE
from roofline.engine.loading import weights


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(1)


def test_int8_rows_round_to_the_nearest_step_of_their_scale(rng):
    w = rng.standard_normal((6, 50), dtype=np.float32)
    w[3] = 0.0  # an all-zero row gets scale 1, not a division by zero
    q, scale = weights.matrix(w, "int8")
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    np.testing.assert_allclose(
        scale[[0, 1, 2, 4, 5]], np.abs(w[[0, 1, 2, 4, 5]]).max(axis=1) / 127, rtol=1e-6
    )
    assert scale[3] == 1.0 and not q[3].any()
    assert np.all(np.abs(q * scale[:, None] - w) <= scale[:, None] / 2 * (1 + 1e-5))


def kernel_weights(w: np.ndarray, dtype: str):
    """(matrix as the kernels store it, row scales, the float32 values it stands for)."""
    q, scale = weights.matrix(w, dtype)
    if dtype == "bf16":
        return q, scale, bits_to_f32(q)
    if dtype == "int8":
        return q, scale, q.astype(np.float32) * scale[:, None]
    return q, scale, w


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("n_out,n_in", [(37, 64), (130, 203), (5, 1536)])
def test_matvec_matches_float64_reference(rng, dtype, n_out, n_in):
    w = rng.standard_normal((n_out, n_in), dtype=np.float32)
    x = rng.standard_normal((3, n_in), dtype=np.float32)
    w_kernel, scale, w_exact = kernel_weights(w, dtype)
    out = np.empty((3, n_out), np.float32)
    layer_kernels.matvec_rows(w_kernel, scale, x, out, 0, n_out, False, DEFAULT_SHAPE)
    ref = x.astype(np.float64) @ w_exact.astype(np.float64).T
    # fp32 accumulation of n_in products: error ~ sqrt(n_in) * eps * |terms|
    tol = 1e-5 * np.sqrt(n_in) * np.abs(x).max() * np.abs(w_exact).max() * 4
    np.testing.assert_allclose(out, ref, rtol=0, atol=tol)
    acc = np.ones((3, n_out), np.float32)
    layer_kernels.matvec_rows(w_kernel, scale, x, acc, 0, n_out, True, DEFAULT_SHAPE)
    np.testing.assert_allclose(acc, ref + 1.0, rtol=0, atol=tol)


def test_bf16_widening_is_exact():
    values = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 1e-30, 6.5e4, np.inf, -np.inf], np.float32)
    bits = bf16_bits(values)
    w = bits.reshape(-1, 1)
    out = np.empty((1, values.size), np.float32)
    layer_kernels.matvec_rows(
        w,
        np.ones(values.size, np.float32),
        np.ones((1, 1), np.float32),
        out,
        0,
        values.size,
        False,
        DEFAULT_SHAPE,
    )
    np.testing.assert_array_equal(out[0], bits_to_f32(bits))
    np.testing.assert_array_equal(
        out[0], torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("k", [2, 4, 7, 16, 18])
@pytest.mark.parametrize("n_in", [577, 576])
def test_k_row_matvec_is_bit_identical_to_one_row(rng, dtype, k, n_in):
    # 101 rows: tiles of whole 4-row blocks and single rows; 577 columns: a main loop, middle and
    # tail; 576: the main loop alone, where 4-row blocks store each x row's sums as one piece
    # (`simd_blocks`); k past 4 takes the tiled kernel (groups of four x rows and a partial
    # group), with accumulate
    w, scale, _ = kernel_weights(rng.standard_normal((101, n_in), dtype=np.float32), dtype)
    x = rng.standard_normal((k, n_in), dtype=np.float32)
    start = rng.standard_normal((k, 101), dtype=np.float32)
    many, summed = np.empty((k, 101), np.float32), start.copy()
    layer_kernels.matvec_rows(w, scale, x, many, 0, 101, False, DEFAULT_SHAPE)
    layer_kernels.matvec_rows(
        w, scale, x, summed, 3, 98, True, DEFAULT_SHAPE
    )  # a range off the tile grid
    for r in range(k):
        one = np.empty((1, 101), np.float32)
        layer_kernels.matvec_rows(w, scale, x[r : r + 1].copy(), one, 0, 101, False, DEFAULT_SHAPE)
        assert np.array_equal(one[0], many[r]), (
            f"row {r} differs between the 1-row and {k}-row kernels"
        )
        plus = start[r : r + 1].copy()
        layer_kernels.matvec_rows(w, scale, x[r : r + 1].copy(), plus, 3, 98, True, DEFAULT_SHAPE)
        assert np.array_equal(plus[0], summed[r]), f"row {r}: accumulate over rows 3..98 differs"


def test_rms_norm_and_silu_match_torch(rng):
    x = rng.standard_normal((4, 96), dtype=np.float32)
    w = rng.standard_normal(96, dtype=np.float32)
    out = np.empty_like(x)
    layer_kernels.rms_norm(x, w, np.float32(1e-5), out)
    ref = model.rms_norm(torch.from_numpy(x), torch.from_numpy(w), 1e-5).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    gu = rng.standard_normal((4, 2 * 48), dtype=np.float32)
    act = np.empty((4, 48), np.float32)
    layer_kernels.silu_mul(gu, act)
    t = torch.from_numpy(gu)
    np.testing.assert_allclose(
        act, (torch.nn.functional.silu(t[:, :48]) * t[:, 48:]).numpy(), rtol=1e-5, atol=1e-6
    )


def blocked_keys(keys: np.ndarray) -> np.ndarray:
    """Keys (..., S, d) in the cache's layout (..., S / B, d, B), S padded to whole attention
    chunks."""
    *lead, n, d = keys.shape
    padded = -(-n // kv_cache.ATTN_CHUNK) * kv_cache.ATTN_CHUNK
    full = np.zeros((*lead, padded, d), np.float32)
    full[..., :n, :] = keys
    b = kv_cache.KEY_BLOCK
    return np.ascontiguousarray(np.swapaxes(full.reshape(*lead, padded // b, b, d), -1, -2))


def attend_all(qkv, n_heads, slots, positions, layer, k_cache, v_cache, out, window=0):
    """The decode pass's attention: every work item (`attend_work`: runs of rows of one slot share
    their keys and values), here in order on one thread, then the merge. window: a sliding
    window's tokens (0: none)."""
    n_kv, k = v_cache.shape[2], positions.shape[0]
    first_unit, n_chunks = attention.attention_units(positions, n_kv)
    work = attention.attention_work(slots, n_chunks, n_kv, 1)
    scores, part_out, part_max, part_sum = attention.attention_scratch(
        first_unit[-1], n_heads // n_kv, v_cache.shape[4]
    )
    g_k, g_v, g_s = attention.gather_scratch(1, 1, v_cache.shape[4])
    no_tree = np.zeros((k, 1), dtype=np.int64)
    offs = np.empty((3, k * (n_heads // n_kv)), dtype=np.int64)
    scale = np.float32(1.0 / math.sqrt(v_cache.shape[4]))
    for i in range(work.shape[0]):
        attention.attend_work(
            i, work, first_unit, n_chunks, qkv, n_heads, scale, window, slots, positions,
            positions + 1, no_tree, layer, k_cache, v_cache, scores, part_out, part_max, part_sum,
            g_k[0], g_v[0], g_s[0], offs,
        )  # fmt: skip
    attention.merge_attention(
        first_unit, n_chunks, part_out, part_max, part_sum, out, np.zeros(1, np.float32), False
    )


@pytest.mark.parametrize("n_heads,n_kv,d", [(4, 2, 16), (6, 2, 24), (3, 3, 80)])
def test_attention_over_cache_matches_torch(rng, n_heads, n_kv, d):
    """Rows of different slots at different positions (one and several context chunks), GQA (query
    heads share kv heads, an odd number per group too), head dims a multiple of 16 or not; keys in
    blocks."""
    max_len = 300
    keys = rng.standard_normal((3, 2, n_kv, max_len, d), dtype=np.float32)
    k_cache = blocked_keys(keys)
    v_cache = np.zeros((3, 2, n_kv, k_cache.shape[3] * kv_cache.KEY_BLOCK, d), np.float32)
    v_cache[:, :, :, :max_len] = rng.standard_normal((3, 2, n_kv, max_len, d), dtype=np.float32)
    slots, positions, layer = (
        np.array([2, 0, 1, 1]),
        np.array([260, 0, attention.ATTN_CHUNK - 1, attention.ATTN_CHUNK]),
        1,
    )
    qkv = rng.standard_normal((4, (n_heads + 2 * n_kv) * d), dtype=np.float32)
    out = np.empty((4, n_heads * d), np.float32)
    attend_all(qkv, n_heads, slots, positions, layer, k_cache, v_cache, out)
    for r in range(4):
        n = positions[r] + 1
        q = torch.from_numpy(qkv[r, : n_heads * d].reshape(1, n_heads, d))
        k = torch.from_numpy(keys[slots[r], layer, :, :n].transpose(1, 0, 2).copy())
        v = torch.from_numpy(v_cache[slots[r], layer, :, :n].transpose(1, 0, 2).copy())
        ref = model.attention(q, k, v, start=positions[r]).numpy()[0]
        np.testing.assert_allclose(out[r], ref, rtol=1e-5, atol=2e-6, err_msg=f"row {r}")
        alone = np.empty((1, n_heads * d), np.float32)
        attend_all(
            qkv[r : r + 1].copy(),
            n_heads,
            slots[r : r + 1],
            positions[r : r + 1],
            layer,
            k_cache,
            v_cache,
            alone,
        )
        assert np.array_equal(alone[0], out[r]), (
            f"row {r}: batched attention differs from the row alone"
        )


@pytest.mark.parametrize("window", [1, 20, 130, 300])
def test_sliding_window_attention_matches_torch_and_each_row_alone(rng, window):
    """A sliding window (Gemma 3's local layers): each row sees its last `window` positions; a run
    of rows of one slot spans chunks wholly inside, partly inside and wholly outside some rows'
    windows; each row equals itself alone, bit for bit."""
    n_heads, n_kv, d, max_len = 4, 2, 32, 300
    keys = rng.standard_normal((2, 1, n_kv, max_len, d), dtype=np.float32)
    k_cache = blocked_keys(keys)
    v_cache = np.zeros((2, 1, n_kv, k_cache.shape[3] * kv_cache.KEY_BLOCK, d), np.float32)
    v_cache[:, :, :, :max_len] = rng.standard_normal((2, 1, n_kv, max_len, d), dtype=np.float32)
    positions = np.array([3, 250, 251, 252, 260, 127, 128, 129])
    slots = np.array([0, 1, 1, 1, 1, 0, 0, 0])
    k = positions.shape[0]
    qkv = rng.standard_normal((k, (n_heads + 2 * n_kv) * d), dtype=np.float32)
    out = np.empty((k, n_heads * d), np.float32)
    attend_all(qkv, n_heads, slots, positions, 0, k_cache, v_cache, out, window)
    for r in range(k):
        n = positions[r] + 1
        q = torch.from_numpy(qkv[r, : n_heads * d].reshape(1, n_heads, d))
        kk = torch.from_numpy(keys[slots[r], 0, :, :n].transpose(1, 0, 2).copy())
        v = torch.from_numpy(v_cache[slots[r], 0, :, :n].transpose(1, 0, 2).copy())
        ref = model.attention(q, kk, v, start=positions[r], window=window).numpy()[0]
        np.testing.assert_allclose(out[r], ref, rtol=1e-5, atol=2e-6, err_msg=f"row {r}")
        alone = np.empty((1, n_heads * d), np.float32)
        attend_all(qkv[r : r + 1].copy(), n_heads, slots[r : r + 1], positions[r : r + 1], 0,
                   k_cache, v_cache, alone, window)  # fmt: skip
        assert np.array_equal(alone[0], out[r]), f"row {r}: batched differs from alone"


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_attention_work_covers_every_row_chunk_and_head_once_within_one_slot(rng, threads):
    slots = np.array([3, 3, 3, 0, 1, 1, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2])
    positions = rng.integers(0, 700, size=slots.shape[0])
    n_kv = 3
    first_unit, n_chunks = attention.attention_units(positions, n_kv)
    work = attention.attention_work(slots, n_chunks, n_kv, threads)
    seen = {}
    for lo, hi, cg in work.tolist():
        assert lo < hi and len(set(slots[lo:hi].tolist())) == 1  # one slot's consecutive rows
        for r in range(lo, hi):
            if cg // n_kv < n_chunks[r]:
                seen[first_unit[r] + cg] = seen.get(first_unit[r] + cg, 0) + 1
    assert seen == {u: 1 for u in range(first_unit[-1])}
    # the nine rows of slot 2 go together unless that leaves a thread too few items
    runs = {(lo, hi) for lo, hi, _ in work.tolist() if slots[lo] == 2}
    chunks = int(n_chunks[8:].max()) * n_kv
    pieces = min(9, max(1, -(-attention.ITEMS_PER_THREAD * threads // chunks)))
    assert len(runs) == -(-9 // -(-9 // pieces))


@pytest.mark.parametrize("n_heads,n_kv,d,start", [(6, 2, 24, 300), (9, 3, 64, 190), (4, 1, 16, 5)])
def test_a_run_of_rows_of_one_slot_gives_each_row_its_attention_alone(rng, n_heads, n_kv, d, start):
    """Rows of one slot at consecutive positions (a verify pass's chain, a short prompt) share the
    keys and values of their common context in one work item, four (row, head) queries at a time:
    every row's result is bit-identical to the row alone, whatever the group and the run's length
    (runs of 7 with 3 heads a group leave batches of one to three queries)."""
    rows, max_len = 7, start + 7
    keys = rng.standard_normal((2, 1, n_kv, max_len, d), dtype=np.float32)
    k_cache = blocked_keys(keys)
    v_cache = np.zeros((2, 1, n_kv, k_cache.shape[3] * kv_cache.KEY_BLOCK, d), np.float32)
    v_cache[:, :, :, :max_len] = rng.standard_normal((2, 1, n_kv, max_len, d), dtype=np.float32)
    # a run of 7 rows of slot 1, one row of slot 0 between its first two and the rest
    slots = np.array([1, 0, *[1] * (rows - 1)])
    positions = np.array([start, start // 2, *range(start + 1, start + rows)])
    qkv = rng.standard_normal((rows + 1, (n_heads + 2 * n_kv) * d), dtype=np.float32)
    out = np.empty((rows + 1, n_heads * d), np.float32)
    work = attention.attention_work(slots, attention.attention_units(positions, n_kv)[1], n_kv, 1)
    assert max(int(w[1] - w[0]) for w in work) > 1  # rows attend together
    attend_all(qkv, n_heads, slots, positions, 0, k_cache, v_cache, out)
    for r in range(rows + 1):
        alone = np.empty((1, n_heads * d), np.float32)
        attend_all(
            qkv[r : r + 1].copy(), n_heads, slots[r : r + 1], positions[r : r + 1], 0, k_cache,
            v_cache, alone,
        )  # fmt: skip
        assert np.array_equal(alone[0], out[r]), f"row {r}: attention in a run differs from alone"
        n = positions[r] + 1
        q = torch.from_numpy(qkv[r, : n_heads * d].reshape(1, n_heads, d))
        k = torch.from_numpy(keys[slots[r], 0, :, :n].transpose(1, 0, 2).copy())
        v = torch.from_numpy(v_cache[slots[r], 0, :, :n].transpose(1, 0, 2).copy())
        ref = model.attention(q, k, v, start=positions[r]).numpy()[0]
        np.testing.assert_allclose(out[r], ref, rtol=1e-5, atol=2e-6, err_msg=f"row {r}")


def test_rope_and_cache_write_match_torch(rng):
    from roofline.engine.loading.config import ModelConfig

    cfg = ModelConfig(
        arch="llama",
        name="t",
        n_layers=1,
        hidden=32,
        n_heads=2,
        n_kv_heads=1,
        head_dim=16,
        ffn=8,
        vocab_size=10,
        max_seq_len=40,
        rope_theta=10000.0,
        rms_eps=1e-5,
    )
    cos, sin = model.rope_tables(cfg, 40)
    qkv = rng.standard_normal((1, 4 * 16), dtype=np.float32)
    cache = kv_cache.KVCache(cfg, 1, 40)
    pos = 37
    rotated = qkv.copy()
    layer_kernels.qkv_to_cache(
        rotated[0:1],
        np.zeros(64, np.float32),
        np.ones(16, np.float32),
        np.ones(16, np.float32),
        False,
        np.float32(1e-5),
        2,
        cos.numpy(),
        sin.numpy(),
        np.array([0]),
        np.array([pos]),
        np.array([pos]),
        0,
        cache.k,
        cache.v,
    )
    heads = torch.from_numpy(qkv[0, :48].reshape(1, 3, 16))
    ref = model.apply_rope(heads, cos[pos : pos + 1], sin[pos : pos + 1]).numpy().reshape(-1)
    np.testing.assert_allclose(rotated[0, :48], ref, rtol=1e-6, atol=1e-6)
    b = kv_cache.KEY_BLOCK
    # a key block is (d, B)
    np.testing.assert_array_equal(cache.k[0, 0, 0, pos // b, :, pos % b], rotated[0, 32:48])
    np.testing.assert_array_equal(cache.v[0, 0, 0, pos], qkv[0, 48:])
    k_torch, _ = cache.torch_views(0)
    np.testing.assert_array_equal(
        kv_cache.read_keys(k_torch[0], pos + 1)[pos, 0].numpy(), rotated[0, 32:48]
    )


def test_fast_exp_is_within_a_few_ulp_of_exp():
    from numba import njit

    @njit(fastmath=True, error_model="numpy")
    def apply(x, out):
        for i in range(x.shape[0]):
            out[i] = layer_kernels.exp_nonpos(x[i])

    x = np.concatenate(
        [
            -np.linspace(0, 87, 200001, dtype=np.float32),
            np.float32([-0.0, -1e-7, -0.6931472, -86.9]),
        ]
    )
    out = np.empty_like(x)
    apply(x, out)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(out - ref) / ref) < 4e-7  # fp32 ulp at 1 is 1.2e-7
    assert out[0] == 1.0
    apply(np.float32([-200.0, -np.inf]), out[:2])
    assert np.all(out[:2] >= 0) and np.all(out[:2] < 1e-37)  # clamped, never negative or NaN


def test_silu_does_not_overflow_at_large_inputs():
    g = np.float32([[-1000.0, -90.0, -20.0, 0.0, 20.0, 90.0, 1000.0]])
    gu = np.concatenate([g, np.ones_like(g)], axis=1)
    out = np.empty_like(g)
    layer_kernels.silu_mul(gu, out)
    ref = torch.nn.functional.silu(torch.from_numpy(g)).numpy()
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-30)
