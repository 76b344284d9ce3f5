"""The prefix cache: the structure alone (exact keys, references, LRU eviction within the budget),
then in the scheduler over the fake runner (what is loaded instead of prefilled, references given
back however a request ends, the /metrics figures).

Exactness on a real model is in test_prefix_cache_exact.py."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from scheduler_helpers import Collector, FakeRunner, fake_greedy_ids, greedy, prefills, wait_until

from roofline.engine.runtime.prefix_cache import PrefixCache
from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.serve.server_metrics import SchedulerCollector

G = 4
NODE_BYTES = G * 8  # the fake's K/V: its granule's token ids as int64


def kv_of(ids, k):
    return lambda: (np.array(ids[k * G : (k + 1) * G], dtype=np.int64),)


def insert_path(cache, ids, n):
    """Insert granules 0..n-1 of ids; returns the nodes (each holding one reference)."""
    path = []
    for k in range(n):
        node = cache.insert(path, ids, kv_of(ids, k))
        assert node is not None
        path.append(node)
    return path


def test_a_match_is_exact_and_whole_granules_only():
    cache = PrefixCache(G, 10_000)
    ids = list(range(10, 30))
    cache.release(insert_path(cache, ids, 5))
    assert len(cache.match(ids, 5)) == 5
    # diverging in the last token of granule 2: granules 0 and 1 only
    other = [*ids[:11], 99, *ids[12:]]
    path = cache.match(other, 5)
    assert [n.tokens for n in path] == [tuple(ids[0:4]), tuple(ids[4:8])]
    assert len(cache.match(ids, 3)) == 3  # at most max_granules
    assert cache.match([10, 11, 12], 5) == []  # a partial granule never matches
    s = cache.stats()
    assert (s.lookups, s.hits, s.tokens_reused) == (4, 3, (5 + 2 + 3) * G)
    assert s.entries == 5 and s.bytes == 5 * NODE_BYTES


def test_eviction_takes_unreferenced_leaves_least_recently_used_within_the_budget():
    cache = PrefixCache(G, 4 * NODE_BYTES)
    a, b = list(range(100, 112)), list(range(200, 212))
    held = insert_path(cache, a, 3)  # a request still prefilling holds a's path
    cache.release(insert_path(cache, b, 1))
    # b's node is the only unreferenced one: it goes; a's referenced path stays
    c = list(range(300, 312))
    c_path = insert_path(cache, c, 1)
    s = cache.stats()
    assert s.evictions == 1 and s.bytes == 4 * NODE_BYTES <= cache.budget_bytes
    assert cache.match(b, 3) == []
    path = cache.match(a, 3)
    assert len(path) == 3
    cache.release(path)
    # everything referenced: a new node does not fit and is not stored
    assert cache.insert([], list(range(400, 404)), kv_of(list(range(400, 404)), 0)) is None
    assert cache.stats().bytes <= cache.budget_bytes
    # both requests end: c's node (used before a's path was last matched) goes first, then a's
    # leaf (d's first node is referenced by its insert)
    cache.release(held)
    cache.release(c_path)
    insert_path(cache, list(range(500, 508)), 2)
    assert cache.stats().evictions == 3 and cache.stats().bytes == 4 * NODE_BYTES
    assert cache.match(c, 1) == [] and len(cache.match(a, 3)) == 2
    with pytest.raises(ValueError, match="released more often"):
        cache.release(c_path)
    # a node larger than the whole budget evicts nothing
    big = PrefixCache(G, NODE_BYTES - 1)
    assert big.insert([], a, kv_of(a, 0)) is None and big.stats().entries == 0
    small = PrefixCache(G, NODE_BYTES)
    small.release(insert_path(small, a, 1))
    assert small.insert([], b, lambda: (np.zeros(2 * G),)) is None
    assert small.stats().evictions == 0 and len(small.match(a, 1)) == 1


class CachingFakeRunner(FakeRunner):
    """The fake runner with K/V to save and load: a granule's "K/V" are its token ids, so loading
    the wrong node changes the context and the fake model's output."""

    def save_kv(self, slot, start, end):
        self.log.append(("save", slot, start, end))
        return (np.array(self.ctx[slot][start:end], dtype=np.int64),)

    def load_kv(self, slot, start, kv, rows=None):
        ids = kv[0][:rows].tolist()
        self.log.append(("load", slot, start, len(ids)))
        if start == 0:
            assert slot not in self.ctx, f"slot {slot} busy"
        else:
            assert len(self.ctx[slot]) == start
        self.ctx[slot] = self.ctx.get(slot, [])[:start] + ids
        self.prompt_len[slot] = len(self.ctx[slot])


def loads(runner):
    return [(e[1], e[2]) for e in runner.log if e[0] == "load"]


def run_one(sched, prompt, n=5):
    c = Collector()
    sched.submit(prompt, greedy(n, ignore_eos=True), c)
    return c.wait(30)


def test_a_shared_prefix_is_loaded_and_the_rest_prefilled_at_the_same_positions():
    runner = CachingFakeRunner(max_batch=2, prefill_chunk_tokens=G)
    tok = runner.tokenizer
    base = tok.encode("the system prompt!!")  # 20 tokens with BOS: granules 0..4
    cases = {
        "same prompt": base,  # every granule, the last with its logits: nothing computed
        "ends inside a granule": base[:14],  # 3 whole granules and 1 of granule 3's 2 rows
        "ends at a boundary": base[:12],  # 2 whole granules and 3 rows of granule 2
        "diverges in its last token": base[:-1] + tok.encode("?", add_special_tokens=False),
        "longer": base + tok.encode(" and more", add_special_tokens=False),
    }
    # rows loaded: whole granules, then the rows shared with a cached granule short of the last
    # (computed: its logits are needed)
    want_loaded = {
        "same prompt": 20,
        "ends inside a granule": 13,
        "ends at a boundary": 11,
        "diverges in its last token": 19,
        "longer": 20,
    }
    with Scheduler(runner, prefix_cache_mb=1) as sched:
        assert run_one(sched, base).ids == fake_greedy_ids(tok, base, 5, ignore_eos=True)
        assert loads(runner) == []
        for name, prompt in cases.items():
            before_log = len(runner.log)
            c = run_one(sched, prompt)
            assert c.ids == fake_greedy_ids(tok, prompt, 5, ignore_eos=True), name
            log = runner.log[before_log:]
            loaded = [(e[2], e[3]) for e in log if e[0] == "load"]
            n = want_loaded[name]
            assert loaded == [(k, min(G, n - k)) for k in range(0, n, G)], name
            computed = [(e[3], e[2]) for e in log if e[0] == "prefill"]  # (start, tokens)
            ends = [a + t for a, t in computed]
            assert [a for a, _ in computed] == [n, *ends[:-1]][: len(computed)], name
            assert (ends[-1] if ends else n) == len(prompt), name
        stats = sched.stats().prefix_cache
        assert sched.prefix_cache.referenced() == 0
    assert stats.lookups == 6 and stats.hits == 5
    assert stats.tokens_reused == sum(want_loaded.values())


def test_a_repeated_prompt_computes_nothing_and_samples_the_same_tokens():
    """The same prompt again: every node loads, the last with its logits; no prefill runs, and
    greedy and seeded sampled output equal the first run's."""
    runner = CachingFakeRunner(max_batch=1, prefill_chunk_tokens=G)
    prompt = runner.tokenizer.encode("a prompt sent twice")  # 20 tokens: the tail is a granule
    sampled = SamplingParams(max_tokens=8, temperature=1.0, top_k=20, seed=7, ignore_eos=True)
    with Scheduler(runner, prefix_cache_mb=1) as sched:
        firsts = [run_one(sched, prompt).ids, run_one(sched, prompt[:-2]).ids]
        for params in (sampled, sampled):
            c = Collector()
            sched.submit(prompt, params, c)
            firsts.append(c.wait(30).ids)
        runner.log.clear()
        again = [run_one(sched, prompt).ids, run_one(sched, prompt[:-2]).ids]
        stats = sched.stats()
    assert prefills(runner) == []
    assert again == firsts[:2] and firsts[2] == firsts[3]
    assert loads(runner) == [(0, k * G) for k in range(5)] + [(0, k * G) for k in range(5)]
    assert stats.prefix_cache.hits == 5 and stats.prompt_tokens_total == 4 * 20 + 2 * 18


def test_references_are_given_back_however_a_request_ends():
    """Finished, cancelled mid-prefill, failed mid-prefill, and still prefilling at close: no node
    keeps a reference, and the slots are free."""
    bad = FakeRunner().tokenizer.encode("!", add_special_tokens=False)[0]
    runner = CachingFakeRunner(max_batch=2, prefill_chunk_tokens=G, fail_on_prompt_token=bad)
    tok = runner.tokenizer
    prompt = tok.encode("a shared prefix for all of them, then more")
    go = {"on": False}
    sched = Scheduler(runner, prefix_cache_mb=1, prefill_token_budget=G)
    # the 5th prefill call waits for the test (or for close)
    runner.prefill_gate = lambda: go["on"] or sched._stopping or len(prefills(runner)) < 5
    sched.start()
    try:
        run_one_async = Collector()
        handle = sched.submit(prompt, greedy(3), run_one_async)
        wait_until(lambda: len(prefills(runner)) >= 5, what="the gate")
        assert sched.prefix_cache.referenced() > 0  # the prefilling request holds its path
        handle.cancel()
        go["on"] = True
        run_one_async.wait(30)
        assert run_one_async.last.finish_reason == "abort"
        assert sched.prefix_cache.referenced() == 0
        failing = Collector()
        sched.submit(
            prompt[:30] + tok.encode("boom!", add_special_tokens=False), greedy(3), failing
        )
        failing.wait(30)
        assert failing.last.finish_reason == "error"
        assert sched.prefix_cache.referenced() == 0
        assert sched.stats().prefix_cache.hits == 1
        go["on"] = False
        runner.log.clear()
        sched.submit(
            prompt + tok.encode(" again", add_special_tokens=False), greedy(3), Collector()
        )
        wait_until(lambda: len(prefills(runner)) >= 5, what="the gate")
    finally:
        sched.close()
    assert sched.prefix_cache.referenced() == 0
    assert runner.ctx == {}


def test_metrics_show_the_cache_figures():
    runner = CachingFakeRunner(max_batch=1, prefill_chunk_tokens=G)
    prompt = runner.tokenizer.encode("twelve token")
    with Scheduler(runner, prefix_cache_mb=1) as sched:
        run_one(sched, prompt)
        run_one(sched, prompt)
        registry = CollectorRegistry()
        registry.register(SchedulerCollector(sched))
        values = scraped(registry)
    assert values["roofline_prefix_cache_lookups_total"] == 2
    assert values["roofline_prefix_cache_hits_total"] == 1
    # 13 tokens: 3 granules and the 1-token tail with the logits of the prompt's last token
    assert values["roofline_prefix_cache_tokens_reused_total"] == 13
    logits_bytes = 4 * runner.config.vocab_size
    assert values["roofline_prefix_cache_bytes"] == 3 * NODE_BYTES + 8 + logits_bytes
    assert values["roofline_prefix_cache_entries"] == 4
    assert values["roofline_prefix_cache_evictions_total"] == 0
    assert values["roofline_prefix_cache_budget_bytes"] == 2**20


def scraped(registry) -> dict[str, float]:
    """Unlabelled samples of a registry's exposition, by name."""
    text = generate_latest(registry).decode()
    lines = [ln.split() for ln in text.splitlines() if ln and ln[0] != "#" and "{" not in ln]
    return {name: float(value) for name, value in lines}


def test_no_cache_by_default_and_with_zero_budget():
    runner = CachingFakeRunner(max_batch=1, prefill_chunk_tokens=G)
    assert Scheduler(runner).prefix_cache is None
    assert Scheduler(runner, prefix_cache_mb=0).prefix_cache is None
    assert Scheduler(FakeRunner(prefill_chunk_tokens=G), prefix_cache_mb=1).prefix_cache is None
    registry = CollectorRegistry()
    registry.register(SchedulerCollector(Scheduler(runner)))
    assert scraped(registry)["roofline_prefix_cache_budget_bytes"] == 0


def test_serve_flags_default_to_the_engines_values():
    from roofline.cli import serve
    from roofline.engine.runtime import prefill_chunks, prefix_cache
    from roofline.engine.serve.options import ServeOptions

    o = ServeOptions()
    assert (
        serve.DEFAULT_PREFIX_CACHE_MB == o.prefix_cache_mb == prefix_cache.DEFAULT_PREFIX_CACHE_MB
    )
    assert o.prefill_chunk_ms == serve.DEFAULT_PREFILL_CHUNK_MS
    assert o.prefill_chunk_ms == prefill_chunks.DEFAULT_PREFILL_CHUNK_MS
    assert o.prefill_granule == serve.DEFAULT_PREFILL_CHUNK_TOKENS
    assert o.prefill_granule == prefill_chunks.DEFAULT_PREFILL_CHUNK_TOKENS
    assert o.max_body_bytes == serve.DEFAULT_MAX_BODY_BYTES
