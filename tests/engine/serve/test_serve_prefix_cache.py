"""Across server processes, as tune's exactness gate compares them: `roofline serve` with its
prefix cache on (the default) gives the token ids of a server with it off, for requests sharing a
long prefix sent one by one and four at a time; its /metrics show the reuse."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import metrics, serve

pytestmark = pytest.mark.slow

SHARED = (
    "Attention is computed over keys and values; the KV cache keeps them. "
    "The quick brown fox jumps over the lazy dog. "
    "Paris is the capital of France; Berlin is the capital of Germany. "
) * 2
SUFFIXES = ["hello world", "def add(a, b):", "In 2024 there were", "tokens merge", "42 of them"]


def token_ids(url: str, prompt: str) -> list[int]:
    body = {
        "prompt": prompt,
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def run(url: str) -> list[list[int]]:
    prompts = [SHARED + s for s in SUFFIXES]
    one_by_one = [token_ids(url, p) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: token_ids(url, p), prompts[::-1]))
    return one_by_one + together[::-1]


def test_serve_with_the_prefix_cache_gives_a_cold_servers_ids(tiny_gguf):
    flags = ("-m", str(tiny_gguf), "--max-batch", "4", "--prefill-granule", "32")
    with serve(*flags, "--prefix-cache-mb", "0") as cold:
        want = run(cold.url)
        off = metrics(cold.url)
    with serve(*flags, "--prefill-chunk-ms", "50") as cached:
        got = run(cached.url)
        on = metrics(cached.url)
    assert got == want
    assert off["roofline_prefix_cache_budget_bytes"] == 0
    assert off["roofline_prefix_cache_hits_total"] == 0
    assert on["roofline_prefix_cache_budget_bytes"] == 512 * 2**20
    assert on["roofline_prefix_cache_lookups_total"] == 2 * len(SUFFIXES)
    assert on["roofline_prefix_cache_hits_total"] >= 2 * len(SUFFIXES) - 1
    assert on["roofline_prefix_cache_tokens_reused_total"] >= 32 * (2 * len(SUFFIXES) - 1)
    assert 0 < on["roofline_prefix_cache_bytes"] <= on["roofline_prefix_cache_budget_bytes"]
