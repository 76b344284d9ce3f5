"""Speculation under continuous batching, and on the default model's real prompts: requests that
speculate and requests that do not share decode passes, outputs stay those of plain greedy decoding,
usage counts stay exact, and the pass / draft counts reach the responses and /metrics. Sampling
keeps the target distribution."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fixtures import greedy_ids
from server_helpers import metrics, sdk, serving

from roofline.engine import SamplingParams, generate, load_runner
from roofline.engine.runtime.sampling import probabilities
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import speculation_factory
from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.engine.runtime.speculate.verify import accept
from roofline.response_stats import ServerStats

PROMPTS = [
    "1, 2, 3, 4, 1, 2, 3, 4, 1, 2,",
    "The capital of France is",
    "a b c a b c a b",
    "def fib(n):",
    "Hello",
    "x = [1, 2, 3]; y = [1, 2, 3]; z = [1,",
]
N = 24


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("trie", {}),
        ("ngram", {}),
        ("draft", {}),
        ("suffix", {}),
        ("suffix", {"suffix_scope": "shared", "tree": False}),
    ],
    ids=["trie", "ngram", "draft", "suffix", "suffix-shared-chain"],
)
def test_server_mixed_speculating_and_plain_requests(tiny_gguf, method, extra):
    reference = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=128)
    tok = reference.tokenizer
    expected = [greedy_ids(reference, tok.encode(p), N) for p in PROMPTS]

    runner = load_runner(str(tiny_gguf), max_batch=4, max_seq_len=128)
    options = SpecOptions(method, k=4, prompt_lookup_min=1, adaptive=False, **extra)
    scheduler = Scheduler(runner, speculation=speculation_factory(options, runner))
    with serving(None, scheduler=scheduler) as url:
        name = sdk(url).models.list().data[0].id

        def run(i: int) -> dict:
            body = {
                "model": name,
                "prompt": PROMPTS[i],
                "max_tokens": N,
                "temperature": 0,
                "ignore_eos": True,
                "return_token_ids": True,
                "speculative": i % 2 == 0,
            }
            return httpx.post(url + "/v1/completions", json=body, timeout=60).json()

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            results = list(pool.map(run, range(len(PROMPTS))))
        m = metrics(url)
        card = httpx.get(url + "/v1/models").json()["data"][0]["roofline"]
    for i, r in enumerate(results):
        assert r["choices"][0]["token_ids"] == expected[i], PROMPTS[i]
        assert r["usage"]["completion_tokens"] == N
        stats = r["roofline"]
        if i % 2:  # opted out: one token per pass after the prefill, nothing drafted
            assert stats == {"passes": N, "drafted_tokens": 0, "accepted_tokens": 0}
        else:
            # each pass: accepted drafts + one own token
            assert stats["passes"] + stats["accepted_tokens"] == N
    assert sum(r["roofline"]["drafted_tokens"] for r in results) > 0
    assert m["roofline_spec_draft_tokens_total"] == sum(
        r["roofline"]["drafted_tokens"] for r in results
    )
    assert m["roofline_spec_accepted_tokens_total"] == sum(
        r["roofline"]["accepted_tokens"] for r in results
    )
    # drafts shared passes
    assert m["roofline_decode_rows_total"] > m["roofline_decode_batch_tokens_total"]
    # per draft position: the accepted path's depths add up to the accepted tokens
    survived = {k: v for k, v in m.items() if k.startswith("roofline_spec_position_survived_total")}
    assert survived and all(f"proposer={method}" in k for k in survived)
    assert sum(survived.values()) == m["roofline_spec_accepted_tokens_total"]
    stats = ServerStats.from_json(card)
    # each request's own structure, unless a shared scope carries one request's text to the next
    shared = "shared" in (extra.get("suffix_scope"), extra.get("trie_scope"))
    assert stats.cross_request_memory is shared
    assert sum(r.survived for r in stats.position_acceptance) == sum(survived.values())
    assert all(r.offered >= r.survived for r in stats.position_acceptance)


def test_a_shared_scope_says_it_remembers_across_requests(tiny_gguf):
    runner = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=64)
    shared = SpecOptions("trie", trie_scope="shared", adaptive=False)
    assert speculation_factory(shared, runner).cross_request is True
    assert speculation_factory(SpecOptions("trie", adaptive=False), runner).cross_request is False
    suffix = SpecOptions("suffix", suffix_scope="shared", adaptive=False)
    assert speculation_factory(suffix, runner).cross_request is True
    assert speculation_factory(SpecOptions("suffix", adaptive=False), runner).cross_request is False


def test_streamed_tokens_and_usage_with_speculation(tiny_gguf):
    runner = load_runner(str(tiny_gguf), max_batch=2, max_seq_len=128)
    prompt = PROMPTS[0]
    want = greedy_ids(runner, runner.tokenizer.encode(prompt), N)
    scheduler = Scheduler(
        runner,
        speculation=speculation_factory(
            SpecOptions("ngram", k=4, prompt_lookup_min=1, adaptive=False), runner
        ),
    )
    with serving(None, scheduler=scheduler) as url:
        client = sdk(url)
        chunks = list(
            client.completions.create(
                model=client.models.list().data[0].id,
                prompt=prompt,
                max_tokens=N,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )
        )
    ids = [
        t for c in chunks if c.choices for t in (c.choices[0].model_extra.get("token_ids") or [])
    ]
    assert ids == want
    assert chunks[-1].usage.completion_tokens == N
    assert any(
        len(c.choices[0].model_extra.get("token_ids") or []) > 1 for c in chunks if c.choices
    ), "no event carried several accepted tokens"


def test_sampling_keeps_the_target_distribution():
    """Deterministic guesses accepted with probability p(guess), residual otherwise: the first
    emitted token is distributed as p, for a chain and for two sibling guesses."""
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    params = SamplingParams(temperature=1.0)
    p = probabilities(logits, params)
    rows = np.stack([logits] * 4)
    for tree in (DraftTree.chain([1, 2, 3]), DraftTree([3, 0, 4], [-1, -1, 0])):
        rng = np.random.default_rng(0)
        counts = np.zeros(5)
        for _ in range(20000):
            counts[accept(tree, rows, params, rng)[1][0]] += 1
        assert np.allclose(counts / counts.sum(), p, atol=0.012), (tree, counts / counts.sum(), p)


@pytest.fixture(scope="module", params=["stored", "fp32", "bf16", "int8"])
def default_runner(request):
    return load_runner(None, dtype=request.param, max_seq_len=512)


def test_default_model_real_prompts_identical(default_runner):
    runner, tok = default_runner, default_runner.tokenizer
    prompts = [
        "List the first six even numbers, then repeat that list twice.",
        "Why is the sky blue?",
    ]
    makers = [
        speculation_factory(options, runner)
        for options in (
            SpecOptions("ngram", k=6, adaptive=False),
            SpecOptions("trie", adaptive=False),
            SpecOptions("suffix", adaptive=False),
            SpecOptions("suffix", suffix_scope="shared", tree=False, adaptive=False),
            SpecOptions("draft", k=4),
        )
    ]
    for text in prompts:
        ids = tok.encode(
            tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False
        )
        params = SamplingParams(max_tokens=40, temperature=0)
        want = list(generate(runner, ids, params))
        for make in makers:
            options = make().proposer
            got = list(generate(runner, ids, params, speculation=make()))
            i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
            assert got == want, (
                f"{type(options).__name__} at {runner.dtype}: first divergent position {i}"
            )
