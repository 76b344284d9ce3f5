"""A prefill row's bits do not depend on the rows beside it, by construction: every row runs through
the decode kernels, which sum each row in the order a one-row decode does. So a prompt prefilled in
one call gives the logits and K/V of decoding it one token at a time; a prompt continued from any
split point, in passes of any length, gives the cold prefill's bits; and the prefix cache may load
the shared first rows of a granule that differs further on. Also: how a prefill is cut into
passes (`prefill_passes`) and the cost model that sizes a turn's granules (`PrefillCost`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from fixtures import greedy_ids
from runner_helpers import CHUNK, make_runner, prompt_ids
from scheduler_helpers import LogitsScheduler, other_token, serve_all

from roofline.engine.runtime import prefill_chunks
from roofline.engine.runtime.prefill_chunks import (
    PREFILL_PASS_MAX_ROWS,
    PREFILL_PASS_SCRATCH_BYTES,
    PrefillCost,
    prefill_passes,
)
from roofline.engine.runtime.prefix_cache import PrefixCache

DTYPES = ["fp32", "bf16", "int8"]


def test_passes_cover_the_prompt_within_the_row_and_scratch_bounds():
    assert prefill_passes(0, 600, n_heads=4, head_dim=16, attn_chunk=128) == [
        (0, 256),
        (256, 512),
        (512, 600),
    ]
    assert prefill_passes(50, 51, n_heads=4, head_dim=16, attn_chunk=128) == [(50, 51)]
    # late in a long context, a pass's attention partials bound its rows
    heads, d, chunk = 32, 128, 128
    passes = prefill_passes(30000, 32000, n_heads=heads, head_dim=d, attn_chunk=chunk)
    assert passes[0][0] == 30000 and passes[-1][1] == 32000
    assert all(a == b0 for (_, a), (b0, _) in itertools.pairwise(passes))
    for a, b in passes:
        assert 1 <= b - a <= PREFILL_PASS_MAX_ROWS
        partials = (b - a) * (b // chunk + 1) * 4 * heads * (chunk + d + 2)
        assert partials <= PREFILL_PASS_SCRATCH_BYTES
    assert max(b - a for a, b in passes) < PREFILL_PASS_MAX_ROWS


def test_the_cost_model_fits_fixed_and_per_token_seconds():
    cost = PrefillCost()
    assert cost.seconds(10) is None
    cost.observe(64, 0.05 + 64 * 0.002)
    assert cost.seconds(32) == pytest.approx(32 * (0.05 / 64 + 0.002))  # one size: a rate
    for n in (13, 40, 64, 26, 39):
        cost.observe(n, 0.05 + n * 0.002)
    assert cost.seconds(39) == pytest.approx(0.05 + 39 * 0.002)
    assert cost.seconds(1) == pytest.approx(0.052)
    falling = PrefillCost()
    for n, s in ((10, 0.5), (60, 0.1), (30, 0.3)):  # no sensible line: tokens / rate
        falling.observe(n, s)
    assert falling.seconds(20) == pytest.approx(20 * falling.t / falling.n)


def test_part_of_a_node_is_the_longest_shared_start_among_its_siblings():
    cache = PrefixCache(granule=4, budget_bytes=1 << 20)
    kv = lambda: (np.zeros((1, 1, 4, 2), np.float32),)  # noqa: E731
    root = cache.insert([], [1, 2, 3, 4], kv)
    for tokens in ([5, 6, 7, 8], [5, 6, 9, 9], [5, 1, 1, 1]):
        cache.insert([root], [1, 2, 3, 4, *tokens], kv)
    cache.insert([root], [1, 2, 3, 4, 5, 6, 7], kv, logits=np.zeros(3, np.float32))
    ids = [1, 2, 3, 4, 5, 6, 7, 0, 0]
    node, shared = cache.partial_child([root], ids, 4)
    assert (node.tokens, shared) == ((5, 6, 7, 8), 3)
    # a node of any length will do: only the shared rows are loaded
    node, shared = cache.partial_child([root], ids, 3)
    assert node.tokens[:3] == (5, 6, 7) and shared == 3
    assert cache.partial_child([root], [1, 2, 3, 4, 7, 6, 7, 8], 4) is None
    assert cache.partial_child([], [1, 2, 9], 3) == (root, 2)
    assert cache.partial_child([], [2, 2, 9, 9], 4) is None


def _kv(runner, slot, n):
    return runner.save_kv(slot, 0, n)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_prefill_gives_the_bits_of_decoding_one_token_at_a_time(tiny_gguf, dtype):
    """150 tokens in one call (passes of up to PREFILL_PASS_MAX_ROWS rows) against the same tokens
    decoded one by one: the last logits and every position's K/V are identical."""
    runner = make_runner(tiny_gguf, dtype)
    ids = prompt_ids(150, seed=5)
    logits = runner.prefill(0, ids)
    runner.prefill(1, ids[:1])
    for t in ids[1:]:
        step = runner.decode([1], [t])[0]
    assert np.array_equal(logits, step)
    for a, b in zip(_kv(runner, 0, 150), _kv(runner, 1, 150)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_split_point_gives_the_cold_prefills_bits(tiny_gguf, dtype):
    """A 150-token prompt continued from every position (in and between granules of 32), on top of
    the first p rows' K/V loaded from the cold prefill: the cold prefill's logits and K/V."""
    runner = make_runner(tiny_gguf, dtype)
    ids = prompt_ids(150, seed=5)
    cold = (runner.prefill(0, ids), *_kv(runner, 0, 150))
    differing = []
    for p in range(1, 150):
        runner.load_kv(1, 0, tuple(a[:, :, :p] for a in cold[1:]))
        got = (runner.prefill(1, ids[p:], start=p), *_kv(runner, 1, 150))
        if not all(np.array_equal(a, b) for a, b in zip(got, cold)):
            differing.append(p)
    assert differing == [], f"split points whose bits differ from the cold prefill: {differing}"


def test_the_cut_into_passes_changes_no_bit(tiny_gguf, monkeypatch):
    """The same prompt in passes of 256, 7 and 1 rows: identical logits and K/V."""
    runner = make_runner(tiny_gguf, "fp32")
    ids = prompt_ids(150, seed=9)
    results = []
    for rows in (256, 7, 1):
        monkeypatch.setattr(prefill_chunks, "PREFILL_PASS_MAX_ROWS", rows)
        results.append((runner.prefill(0, ids), *_kv(runner, 0, 150)))
    for other in results[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(results[0], other))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_shared_prefix_ending_at_every_offset_of_a_granule_gives_cold_bits(tiny_gguf, dtype):
    """Prompts that share a cached prompt's first p tokens, for every p from 64 to 96 (each offset
    of granule [64, 96)) and a few in its last, shorter granule, served with the prefix cache: each
    gives the logits and greedy ids of a cold prefill, and the cache reports exactly the shared
    rows reused (those of a granule that differs further on included)."""
    runner = make_runner(tiny_gguf, dtype, max_batch=2)
    base, rest = prompt_ids(150, seed=11), prompt_ids(60, seed=12)
    shares = [*range(64, 97), 129, 140, 149]
    cases = {p: [*base[:p], other_token(base[p]), *rest[:20]] for p in shares}
    cold = {p: (runner.prefill(0, q).copy(), greedy_ids(runner, q, 8)) for p, q in cases.items()}
    with LogitsScheduler(runner, prefix_cache_mb=1) as sched:
        serve_all(sched, [base])
        for p, prompt in cases.items():
            before = sched.stats().prefix_cache.tokens_reused
            ids = serve_all(sched, [prompt])[0]
            reused = sched.stats().prefix_cache.tokens_reused - before
            assert np.array_equal(sched.accepted[-1], cold[p][0]), f"sharing {p}: logits differ"
            assert ids == cold[p][1], f"sharing {p}: ids differ"
            assert reused == p, f"sharing {p}: {reused} rows reused"
        assert sched.prefix_cache.referenced() == 0


def test_the_cache_loads_part_of_a_granule_and_gives_cold_bits(tiny_gguf):
    """Prompts that share a cached prompt's first 70 or 100 tokens (inside granules [64, 96) and
    [96, 128)), or all but its last token, or a tail of the same length: each gives the logits and
    greedy ids of a cold prefill, and the cache counts exactly the shared rows it loaded."""
    runner = make_runner(tiny_gguf, "fp32", max_batch=2)
    base, rest = prompt_ids(150, seed=11), prompt_ids(60, seed=12)
    cases = {
        "sharing 70 tokens": base[:70] + rest[:40],
        "sharing 100 tokens": base[:100] + rest[:50],
        "diverging in its last token": [*base[:-1], 3 + base[-1] % 200],
        "a tail of the same length": base[:140] + rest[:10],
    }
    cold = {
        name: (runner.prefill(0, p).copy(), greedy_ids(runner, p, 8)) for name, p in cases.items()
    }
    reused = {}
    with LogitsScheduler(runner, prefix_cache_mb=1) as sched:
        serve_all(sched, [base])
        for name, p in cases.items():
            before = sched.stats().prefix_cache.tokens_reused
            ids = serve_all(sched, [p])[0]
            reused[name] = sched.stats().prefix_cache.tokens_reused - before
            assert np.array_equal(sched.accepted[-1], cold[name][0]), f"{name}: logits differ"
            assert ids == cold[name][1], name
        assert sched.prefix_cache.referenced() == 0
    assert reused == {
        "sharing 70 tokens": 70,
        "sharing 100 tokens": 100,
        "diverging in its last token": 149,
        "a tail of the same length": 140,
    }
    assert CHUNK == 32
