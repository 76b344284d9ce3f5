"""Prefill rows invariant to the rows beside them: how pieces are grouped into runs
(`prefill_runs`), the cost model that sizes a turn's runs (`PrefillCost`), the probe that decides
whether a runner may merge granules and start inside one (`prefill_probe.rows_invariant`) checked
against every split point of a prompt, and the prefix cache loading part of a granule with a cold
server's bits."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures import greedy_ids
from test_prefill_chunked import CHUNK, make_runner, prompt_ids
from test_prefix_cache_exact import LogitsScheduler, serve_all

from roofline.engine import prefill
from roofline.engine.model_runner import KERNEL_PREFILL_MAX_TOKENS
from roofline.engine.prefill_chunks import (
    MERGE_MAX_TOKENS,
    PrefillCost,
    chunk_bounds,
    prefill_runs,
)
from roofline.engine.prefill_probe import rows_invariant
from roofline.engine.prefix_cache import PrefixCache

K = KERNEL_PREFILL_MAX_TOKENS


def test_runs_take_their_way_from_the_whole_granule_and_merge_only_when_asked():
    torch_, kernels = False, True
    assert prefill_runs(50, 150, 32, K, merge=False) == [
        ([(50, 64)], torch_),
        ([(64, 96)], torch_),
        ([(96, 128)], torch_),
        ([(128, 150)], kernels),  # a 22-token last granule
    ]
    assert prefill_runs(50, 150, 32, K, merge=True) == [
        ([(50, 64), (64, 96), (96, 128)], torch_),
        ([(128, 150)], kernels),
    ]
    # the rest of a granule runs the way its whole granule does, however few rows are left
    assert prefill_runs(60, 64, 32, K, merge=True) == [([(60, 64)], torch_)]
    assert prefill_runs(140, 150, 32, K, merge=True) == [([(140, 150)], kernels)]
    assert prefill_runs(140, 155, 32, K, merge=True) == [([(140, 155)], torch_)]
    runs = prefill_runs(0, 2000, 64, K, merge=True)  # 31 granules and 16 tokens
    assert [p for r, _ in runs for p in r] == chunk_bounds(0, 2000, 64)
    assert [(r[0][0], r[-1][1], way) for r, way in runs] == [
        (0, 512, torch_),
        (512, 1024, torch_),
        (1024, 1536, torch_),
        (1536, 1984, torch_),
        (1984, 2000, kernels),
    ]
    assert MERGE_MAX_TOKENS == 512


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


def test_part_of_a_node_is_the_longest_shared_start_among_nodes_of_the_same_length():
    cache = PrefixCache(granule=4, budget_bytes=1 << 20)
    kv = lambda: (np.zeros((1, 1, 4, 2), np.float32),)  # noqa: E731
    root = cache.insert([], [1, 2, 3, 4], kv)
    for tokens in ([5, 6, 7, 8], [5, 6, 9, 9], [5, 1, 1, 1]):
        cache.insert([root], [1, 2, 3, 4, *tokens], kv)
    tail = cache.insert([root], [1, 2, 3, 4, 5, 6, 7], kv, logits=np.zeros(3, np.float32))
    ids = [1, 2, 3, 4, 5, 6, 7, 0, 0]
    node, shared = cache.partial_child([root], ids, 4)
    assert (node.tokens, shared) == ((5, 6, 7, 8), 3)
    assert cache.partial_child([root], ids, 3) == (tail, 3)  # a tail of the same length only
    assert cache.partial_child([root], [1, 2, 3, 4, 7, 6, 7, 8], 4) is None
    assert cache.partial_child([], [1, 2, 9], 3) is None  # no root node of three tokens
    assert cache.partial_child([], [1, 2, 9, 9], 4) == (root, 2)


def _cold(runner, ids):
    runner.merge_prefill = False
    logits = runner.prefill(0, ids)
    k, v = runner.save_kv(0, 0, len(ids))
    return logits, k, v


def _from(runner, ids, p, cold):
    """Logits, K, V of `ids` continued in merged runs from position p, the first p rows loaded from
    the cold prefill."""
    _, k, v = cold
    runner.merge_prefill = True
    runner.load_kv(1, 0, (k[:, :, :p], v[:, :, :p]))
    logits = runner.prefill(1, ids[p:], start=p)
    k2, v2 = runner.save_kv(1, 0, len(ids))
    return logits, k2, v2


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_the_probe_agrees_with_every_split_point(tiny_gguf, dtype):
    """A 150-token prompt (granules of 32, a 22-token last one for the kernels) continued from
    every position inside a granule, in merged runs: the probe says the rows are invariant exactly
    when every split gives the cold prefill's logits and K/V."""
    runner = make_runner(tiny_gguf, dtype)
    verdict = rows_invariant(runner)
    assert runner.merge_prefill is False and runner.position(0) == 0  # left as it was
    ids = prompt_ids(150, seed=5)
    cold = _cold(runner, ids)
    same = [
        all(np.array_equal(a, b) for a, b in zip(_from(runner, ids, p, cold), cold))
        for p in range(1, 150)
        if p % CHUNK
    ]
    assert verdict == all(same), f"probe {verdict}, splits differing: {same.count(False)}"


def test_the_probe_refuses_rows_that_depend_on_their_neighbours(tiny_gguf, monkeypatch):
    """Attention that adds a trace of its query count (as a blocked kernel's rounding would) makes
    the probe say no, and the runner then refuses to start inside a granule."""
    runner = make_runner(tiny_gguf, "fp32")
    attention = prefill.attention

    def skewed(q, k, v, start, mask):
        out = attention(q, k, v, start, mask)
        return out * (1 + 1e-6 * q.shape[0])

    monkeypatch.setattr(prefill, "attention", skewed)
    assert rows_invariant(runner) is False
    runner.prefill(0, prompt_ids(40))
    with pytest.raises(ValueError, match="multiple of 32"):
        runner.prefill(0, prompt_ids(8), start=40)


def test_the_cache_loads_part_of_a_granule_and_gives_cold_bits(tiny_gguf):
    """Prompts that share a cached prompt's first 70 or 100 tokens (inside granules [64, 96) and
    [96, 128)), or all but its last token, with a runner that merges: each gives the logits and
    greedy ids of a cold prefill, and the cache counts the rows it loaded from inside granules."""
    runner = make_runner(tiny_gguf, "fp32", max_batch=2)
    runner.merge_prefill = rows_invariant(runner)
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
    whole = {"sharing 70 tokens": 64, "sharing 100 tokens": 96}
    if runner.merge_prefill:
        assert reused == {
            "sharing 70 tokens": 70,
            "sharing 100 tokens": 100,
            "diverging in its last token": 149,
            "a tail of the same length": 140,
        }
    else:
        assert reused == {
            **whole,
            "diverging in its last token": 128,
            "a tail of the same length": 128,
        }
