"""The shipped Q4_1 file computed on as stored, in kernel shapes a host may choose, gives the fp32
reference's tokens: alone, and served under four concurrent streams with and without speculation
(the server batches their rows into one weight pass, and the draft tree's rows into the same
pass)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fixtures import greedy_ids
from server_helpers import serving

from roofline.engine import load_runner
from roofline.engine.kernels.kernel_shapes import KNOBS, KernelShape
from roofline.engine.runtime.kernel_choice import KernelChoice
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import speculation_factory

pytestmark = pytest.mark.slow

PROMPTS = [
    "List the first six even numbers, then repeat that list twice:",
    "Why is the sky blue?",
    "def fib(n):\n    if n < 2:\n        return n\n",
    "The capital of France is",
]
N = 64
LEAST = KernelShape(**{k.field: min(k.values) for k in KNOBS})
MOST = KernelShape(**{k.field: max(k.values) for k in KNOBS})


def test_the_shipped_file_stored_gives_the_fp32_tokens_alone_and_under_four_streams():
    reference = load_runner(None, dtype="fp32", max_seq_len=256)
    ids = [reference.tokenizer.encode(p) for p in PROMPTS]
    want = [greedy_ids(reference, p, N) for p in ids]
    del reference
    runner = load_runner(None, dtype="stored", max_batch=4, max_seq_len=256)
    assert runner.bytes_per_token == runner.file_bytes_per_token == 96_577_380
    # kernel shapes a host may choose (`kernel_shapes.KNOBS`) at their ends, not the defaults:
    # every pass below, one row and many, runs in a tuned shape
    runner.kernels = KernelChoice(LEAST, MOST, "measured")
    assert [greedy_ids(runner, p, N) for p in ids] == want
    for options in (
        None,
        SpecOptions("trie", adaptive=False),
        SpecOptions("ngram", k=4, adaptive=False),
        SpecOptions("suffix", suffix_scope="shared", adaptive=False),
    ):
        speculation = speculation_factory(options, runner) if options else None
        with serving(None, scheduler=Scheduler(runner, speculation=speculation)) as url:
            name = httpx.get(url + "/v1/models").json()["data"][0]["id"]

            def run(i: int, name: str = name) -> list[int]:
                body = {
                    "model": name,
                    "prompt": PROMPTS[i],
                    "max_tokens": N,
                    "temperature": 0,
                    "ignore_eos": True,
                    "return_token_ids": True,
                }
                r = httpx.post(url + "/v1/completions", json=body, timeout=120).json()
                return r["choices"][0]["token_ids"]

            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(run, range(4)))
        for i, (g, w) in enumerate(zip(got, want)):
            first = next((j for j, (a, b) in enumerate(zip(g, w)) if a != b), None)
            assert g == w, f"{options}: prompt {i} differs from fp32 at token {first}"
