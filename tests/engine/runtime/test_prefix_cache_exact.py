"""The prefix cache changes no bit: on a real (tiny) model, prompts served with cached granules give
the logits and greedy ids of the same prompts prefilled cold (`ModelRunner.prefill` alone): for
prefixes that end inside a granule, exactly at a boundary, that diverge in their last token; under
concurrent requests sharing and evicting entries; with speculation on; and on the default model
with a shared chat system prompt. A bounded soak keeps the cache within its budget and the process'
memory flat."""

from __future__ import annotations

import random
import resource
import sys

import numpy as np
import pytest
from fixtures import greedy_ids
from runner_helpers import CHUNK, make_runner, prompt_ids
from scheduler_helpers import LogitsScheduler, N, other_token, serve_all

from roofline.engine import load_runner
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import speculation_factory


def node_mb(runner, granules: int) -> float:
    """MiB of K/V of `granules` prefix-cache nodes of this runner."""
    c = runner.config
    return granules * 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * CHUNK / 2**20


@pytest.mark.parametrize(
    ("dtype", "granule"),
    [("fp32", CHUNK), ("bf16", CHUNK), ("fp32", 16)],
    ids=["fp32", "bf16", "fp32-granules-of-16"],
)
def test_cached_prefixes_give_a_cold_prefills_logits_bit_for_bit(tiny_gguf, dtype, granule):
    runner = make_runner(tiny_gguf, dtype, max_batch=2)
    runner.prefill_chunk_tokens = granule
    base, rest = prompt_ids(150, seed=11), prompt_ids(60, seed=12)
    cases = {
        "the same prompt": base,
        "a prefix ending inside a granule": base[:70] + rest[:40],
        "a prefix ending at a boundary": base[:64] + rest[:40],
        "a prompt of whole cached granules": base[:64],
        "diverging in its last token": [*base[:-1], other_token(base[-1])],
        "diverging in a granule's last token": [*base[:95], other_token(base[95]), *base[96:]],
        "longer than the cached prompt": base + rest,
    }
    cold = {}
    for name, p in cases.items():
        cold[name] = (runner.prefill(0, p).copy(), greedy_ids(runner, p, N))
    with LogitsScheduler(runner, prefix_cache_mb=1) as sched:
        serve_all(sched, [base])
        for name, p in cases.items():
            ids = serve_all(sched, [p])[0]
            assert np.array_equal(sched.accepted[-1], cold[name][0]), f"{name}: logits differ"
            assert ids == cold[name][1], name
        stats = sched.stats().prefix_cache
        assert sched.prefix_cache.referenced() == 0
        # the same prompt again computes nothing: its tail came with its logits
        chunks = sched.stats().prefill_chunks
        assert serve_all(sched, [base]) == [cold["the same prompt"][1]]
        assert np.array_equal(sched.accepted[-1], cold["the same prompt"][0])
        assert sched.stats().prefill_chunks == chunks
    assert stats.hits == len(cases) and stats.tokens_reused >= 13 * CHUNK


@pytest.mark.parametrize("budget", [CHUNK, None], ids=["one granule a turn", "time target"])
def test_concurrent_requests_sharing_and_evicting_entries_give_cold_ids(tiny_gguf, budget):
    """Two waves of six requests (four slots) sharing a 100-token prefix, each with its own suffix,
    in a cache of five granules: they share granules while running side by side, and the second
    wave evicts the first's leaves."""
    runner = make_runner(tiny_gguf, "fp32", max_batch=4)
    shared = prompt_ids(100, seed=20)
    waves = [[shared + prompt_ids(40, seed=21 + 10 * w + i) for i in range(6)] for w in range(2)]
    cold = [[greedy_ids(runner, p, N) for p in wave] for wave in waves]
    with Scheduler(runner, prefill_token_budget=budget, prefix_cache_mb=node_mb(runner, 5)) as s:
        got = [serve_all(s, wave) for wave in waves]
        stats = s.stats().prefix_cache
        assert s.prefix_cache.referenced() == 0
    assert got == cold
    assert stats.hits >= 6 and stats.evictions >= 1
    assert stats.bytes <= stats.budget_bytes and stats.entries <= 5


@pytest.mark.parametrize("method", ["ngram", "trie"])
def test_cached_prefixes_with_speculation_give_cold_ids(tiny_gguf, method):
    runner = make_runner(tiny_gguf, "fp32", max_batch=3)
    loop = prompt_ids(12, seed=30) * 8  # repeats: the proposers find drafts
    prompts = [loop + prompt_ids(20, seed=31 + i) for i in range(3)] + [loop[:70]]
    cold = [greedy_ids(runner, p, 24) for p in prompts]
    options = SpecOptions(method, k=4, prompt_lookup_min=1, adaptive=False)
    with Scheduler(
        runner, speculation=speculation_factory(options, runner), prefix_cache_mb=1
    ) as sched:
        got = [serve_all(sched, [p], n=24)[0] for p in prompts]
        got += serve_all(sched, prompts, n=24)
        stats = sched.stats()
    assert got == cold + cold
    assert stats.prefix_cache.hits >= 6 and stats.spec.drafted > 0


def test_a_bounded_soak_stays_within_the_budget_and_memory_stays_flat(tiny_gguf):
    """Twelve waves of eight requests over three shared prefixes with random suffixes, in a cache of
    four granules: after every wave the cache holds at most its budget and no reference; the
    process' peak RSS grows by less than 64 MiB from the second wave on (generous: the cache itself
    is 64 KiB)."""
    runner = make_runner(tiny_gguf, "fp32", max_batch=4)
    rng = random.Random(0)
    prefixes = [prompt_ids(rng.randrange(40, 120), seed=40 + i) for i in range(3)]
    budget = node_mb(runner, 4)
    peak_after_first = None
    with Scheduler(runner, prefix_cache_mb=budget) as sched:
        for wave in range(12):
            prompts = [
                rng.choice(prefixes) + prompt_ids(rng.randrange(1, 60), seed=1000 * wave + i)
                for i in range(8)
            ]
            serve_all(sched, prompts, n=4)
            stats = sched.stats().prefix_cache
            assert stats.bytes <= stats.budget_bytes == int(budget * 2**20)
            assert sched.prefix_cache.referenced() == 0
            if wave == 0:
                peak_after_first = _peak_rss_bytes()
    assert stats.evictions > 0 and stats.hits > 0
    assert _peak_rss_bytes() - peak_after_first < 64 * 2**20


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@pytest.mark.slow
def test_the_default_model_reuses_a_chat_system_prompt_exactly():
    """The default model, stored weights, 64-token granules: two chats sharing a system prompt (the
    template's token ids are the shared prefix) give a cold prefill's ids with the cache on."""
    runner = load_runner(None, dtype="stored", max_batch=2, max_seq_len=512)
    runner.prefill_chunk_tokens = 64
    system = (
        "You are a careful assistant. Answer in one short sentence, name your sources when you "
        "can, never invent numbers, and say so when you do not know. Prefer plain words to "
        "jargon, keep units with every quantity, and round to two significant figures. When a "
        "question is ambiguous, say which reading you answer; when it rests on a false premise, "
        "say so before anything else. Quote code exactly, in fenced blocks, with the language "
        "named, and explain each step in a short line. Do not apologise; do not repeat the "
        "question; do not end with an offer of more help."
    )
    chats = [
        [{"role": "system", "content": system}, {"role": "user", "content": q}]
        for q in ("Why is the sky blue?", "What is the capital of France?")
    ]
    prompts = [runner.tokenizer.encode_chat(m) for m in chats]
    assert prompts[0][:128] == prompts[1][:128]
    cold = [greedy_ids(runner, p, 16) for p in prompts]
    with Scheduler(runner, prefix_cache_mb=64) as sched:
        got = [serve_all(sched, [p], n=16)[0] for p in prompts]
        stats = sched.stats().prefix_cache
    assert got == cold
    assert stats.hits == 1 and stats.tokens_reused >= 128
