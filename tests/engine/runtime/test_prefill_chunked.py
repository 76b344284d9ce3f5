"""Chunked prefill on a real (tiny) model: a prompt cut at fixed positions gives the same logits
whoever runs its chunks and however they are interleaved; a short request gets its first token while
a long prompt is still being prefilled; a request cancelled mid-prefill frees its slot before its
prompt is done.

The tiny model runs in milliseconds, so the scheduler tests slow each chunk down (`SlowChunks`) to
make the prefill last long enough to observe; the arithmetic is the real runner's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fixtures import greedy_ids
from runner_helpers import (
    CHUNK,
    PROMPT_LEN,
    make_runner,
    prompt_ids,
    reference_logits,
    tiny_checkpoint,
)
from scheduler_helpers import Collector, greedy

from roofline.engine.runtime.model_runner import ModelRunner
from roofline.engine.runtime.prefill_chunks import chunk_bounds, chunk_end
from roofline.engine.runtime.scheduler import Scheduler


def test_chunks_are_cut_at_multiples_of_the_chunk_size():
    assert chunk_bounds(0, 150, 32) == [(0, 32), (32, 64), (64, 96), (96, 128), (128, 150)]
    assert chunk_bounds(50, 100, 32) == [(50, 64), (64, 96), (96, 100)]
    assert chunk_end(64, 150, 32) == 96 and chunk_end(140, 150, 32) == 150


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_prefill_in_pieces_equals_one_call_bit_for_bit(tiny_gguf, dtype):
    """One call, the scheduler's pieces (one chunk each) and pieces of several chunks give
    bit-identical logits and K/V caches; decoding on from each agrees too."""
    runner = make_runner(tiny_gguf, dtype)
    ids = prompt_ids(PROMPT_LEN)
    whole = runner.prefill(0, ids)
    for slot, cuts in ((1, [a for a, _ in chunk_bounds(0, PROMPT_LEN, CHUNK)]), (2, [0, 64, 128])):
        ends = [*cuts[1:], PROMPT_LEN]
        for a, b in zip(cuts, ends):
            out = runner.prefill(slot, ids[a:b], start=a, logits=b == PROMPT_LEN)
            assert (out is None) == (b < PROMPT_LEN)
        assert np.array_equal(out, whole), f"slot {slot}: logits differ from one call"
        n = PROMPT_LEN
        assert np.array_equal(
            runner.cache.k[slot][..., : n // 16 + 1, :, :],
            runner.cache.k[0][..., : n // 16 + 1, :, :],
        )
        assert np.array_equal(runner.cache.v[slot][:, :, :n], runner.cache.v[0][:, :, :n])
    rows = runner.decode([0, 1, 2], [7, 7, 7])
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])


def test_chunked_prefill_matches_the_reference_forward():
    """Chunks attending to cached K/V compute the model: logits within fp32 rounding of
    model.forward over the whole sequence (GQA and qk-norm model, five chunks)."""
    ckpt = tiny_checkpoint("qwen3")
    runner = ModelRunner(ckpt, dtype="fp32", max_batch=1, max_seq_len=256)
    runner.prefill_chunk_tokens = CHUNK
    ids = prompt_ids(PROMPT_LEN, seed=1)
    got = runner.prefill(0, ids)
    want = reference_logits(ckpt, ids, "fp32").numpy()
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_a_continued_prefill_must_start_where_the_slot_ends(tiny_gguf):
    runner = make_runner(tiny_gguf, "fp32")
    runner.prefill(0, prompt_ids(40))
    with pytest.raises(ValueError, match="holds 40 positions"):
        runner.prefill(0, prompt_ids(8), start=32)
    # where it ends, inside a granule or not, it goes on
    assert runner.prefill(0, prompt_ids(8), start=40).shape == (runner.config.vocab_size,)
    assert runner.position(0) == 48


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_scheduler_output_does_not_depend_on_what_else_runs(tiny_gguf, dtype):
    """A long prompt prefilled chunk by chunk between the decode steps of two running requests (and
    with a short one admitted mid-way) gives the greedy ids of the prompt decoded alone; so do the
    others."""
    runner = make_runner(tiny_gguf, dtype)
    prompts = [prompt_ids(20, seed=2), prompt_ids(PROMPT_LEN, seed=3), prompt_ids(6, seed=4)]
    n = 12
    alone = [greedy_ids(runner, p, n) for p in prompts]
    collectors = [Collector() for _ in prompts]
    with Scheduler(runner, prefill_token_budget=CHUNK) as sched:
        sched.submit(prompts[0], greedy(n, ignore_eos=True), collectors[0])
        assert collectors[0].first.wait(30)
        sched.submit(prompts[1], greedy(n, ignore_eos=True), collectors[1])
        sched.submit(prompts[2], greedy(n, ignore_eos=True), collectors[2])
        for c in collectors:
            c.wait(60)
        stats = sched.stats()
    assert [c.ids for c in collectors] == alone
    assert stats.prefill_chunks == 1 + len(chunk_bounds(0, PROMPT_LEN, CHUNK)) + 1


class SlowChunks:
    """A runner whose prefill chunks each take at least `seconds` (the tiny model's take ~1 ms) and
    are logged as (slot, start, tokens, time); everything else is the wrapped runner. Chunks after
    the first `free` wait, once logged, until the test sets `go`: the test acts while the long
    prefill surely is under way."""

    def __init__(self, runner: ModelRunner, seconds: float, free: int | None = None):
        self._runner, self._seconds, self._free = runner, seconds, free
        self.chunks: list[tuple[int, int, int, float]] = []
        self.chunk_ran = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def prefill(self, slot, token_ids, *, start=0, logits=True):
        self.chunks.append((slot, start, len(token_ids), time.perf_counter()))
        if self._free is not None and len(self.chunks) > self._free:
            assert self.go.wait(60), "the test never let the prefill go on"
        time.sleep(self._seconds)
        out = self._runner.prefill(slot, token_ids, start=start, logits=logits)
        self.chunk_ran.set()
        return out


def test_a_short_request_gets_its_first_token_during_a_long_prefill(tiny_gguf):
    # the long prompt's second chunk starts, then waits for the short request's submit
    runner = SlowChunks(make_runner(tiny_gguf, "fp32", max_batch=2), seconds=0.05, free=1)
    # 7 chunks of 32; one chunk
    long_prompt, short_prompt = (prompt_ids(224, seed=5), prompt_ids(5, seed=6))
    first_token_at: list[float] = []
    short = Collector()

    def sink(event):
        if not first_token_at and event.token_ids:
            first_token_at.append(time.perf_counter())
        short(event)

    with Scheduler(runner, prefill_token_budget=CHUNK) as sched:
        long_one = Collector()
        sched.submit(long_prompt, greedy(4, ignore_eos=True), long_one)
        assert runner.chunk_ran.wait(30)
        submitted = time.perf_counter()
        sched.submit(short_prompt, greedy(4, ignore_eos=True), sink)
        runner.go.set()
        short.wait(30)
        long_one.wait(30)
    # the short prompt's one chunk is 5 tokens
    long_chunks = [c for c in runner.chunks if c[2] == CHUNK]
    last_long_chunk_at = max(t for _, start, _, t in long_chunks if start == 192)
    assert first_token_at[0] < last_long_chunk_at, (
        "the short request waited for the whole long prefill"
    )
    ahead = sum(1 for _, _, n, t in long_chunks if submitted < t < first_token_at[0])
    assert ahead <= 2, (
        f"{ahead} long chunks ran between the short request's arrival and its first token"
    )
    # ~2 chunks of 50 ms here; generous for a busy machine
    assert first_token_at[0] - submitted < 3.0
    assert short.ids == greedy_ids(runner._runner, short_prompt, 4)


def test_cancelling_mid_prefill_frees_the_slot_before_the_prompt_is_done(tiny_gguf):
    # the long prompt's third chunk starts, then waits for the cancel
    runner = SlowChunks(make_runner(tiny_gguf, "fp32", max_batch=1), seconds=0.05, free=2)
    long_prompt, queued_prompt = prompt_ids(224, seed=7), prompt_ids(9, seed=8)
    with Scheduler(runner, prefill_token_budget=CHUNK) as sched:
        cancelled, queued = Collector(), Collector()
        handle = sched.submit(long_prompt, greedy(4), cancelled)
        sched.submit(queued_prompt, greedy(4, ignore_eos=True), queued)
        deadline = time.monotonic() + 60
        while len(runner.chunks) < 2:
            assert time.monotonic() < deadline, "the long prefill never ran two chunks"
            time.sleep(0.005)
        handle.cancel()
        runner.go.set()
        cancelled.wait(30)
        queued.wait(30)
        stats = sched.stats()
    long_chunks = [c for c in runner.chunks if c[2] == CHUNK]
    assert cancelled.last.finish_reason == "abort" and cancelled.ids == []
    assert 2 <= len(long_chunks) <= 4, (
        f"{len(long_chunks)} of 7 chunks ran for a request cancelled after 2"
    )
    assert queued.ids == greedy_ids(runner._runner, queued_prompt, 4)
    assert stats.cancelled == 1 and stats.running == 0
