"""Continuous-batching scheduler, driven by a small deterministic fake runner (fast unit tests).

The fake (`FakeRunner`, also used by the server tests) implements the ModelRunner interface with a
character-level tokenizer; its next token depends on the slot's whole context, so a scheduler that
feeds the wrong token, mixes up slots or reuses a slot without a prefill produces different text.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from scheduler_helpers import (
    Collector,
    FakeRunner,
    FakeTokenizer,
    fake_greedy_ids,
    greedy,
    prefills,
    wait_until,
)

from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.scheduler import Scheduler, asyncio_sink
from roofline.engine.runtime.scheduler_stats import Histogram
from roofline.engine.runtime.sequence import ContextLengthError, context_error

PROMPTS = ["Hello there", "Why is the sky blue?", "abc", "Count: 1, 2, 3", "zzz top"]


def test_single_request_matches_the_model_and_reports_usage():
    runner = FakeRunner()
    prompt = runner.tokenizer.encode(PROMPTS[1])
    expected = fake_greedy_ids(runner.tokenizer, prompt, 200)
    with Scheduler(runner) as sched:
        c = Collector()
        sched.submit(prompt, greedy(200), c)
        c.wait()
    assert c.ids == expected
    assert c.text == runner.tokenizer.decode(expected)
    assert c.last.finish_reason == ("stop" if expected[-1] == 1 else "length")
    assert c.last.usage.prompt_tokens == len(prompt) and c.last.usage.completion_tokens == len(
        expected
    )
    assert [e.final for e in c.events].count(True) == 1
    assert runner.ctx == {}, "the slot was not released"
    assert len(runner.thread_ids) == 1 and threading.get_ident() not in runner.thread_ids


def test_max_tokens_gives_length():
    runner = FakeRunner()
    prompt = runner.tokenizer.encode("Hello")
    with Scheduler(runner) as sched:
        c = Collector()
        sched.submit(prompt, greedy(3, ignore_eos=True), c)
        c.wait()
    assert (
        len(c.ids) == 3 and c.last.finish_reason == "length" and c.last.usage.completion_tokens == 3
    )


def test_batched_requests_equal_solo_runs_and_share_decode_steps():
    runner = FakeRunner(max_batch=3)
    tok = runner.tokenizer
    prompts = [tok.encode(p) for p in PROMPTS]
    expected = [fake_greedy_ids(tok, p, 40, ignore_eos=True) for p in prompts]
    collectors = [Collector() for _ in prompts]
    with Scheduler(runner) as sched:
        for p, c in zip(prompts, collectors):
            sched.submit(p, greedy(40, ignore_eos=True), c)
        for c in collectors:
            c.wait()
        stats = sched.stats()
    assert [c.ids for c in collectors] == expected
    batches = [len(e[1]) for e in runner.log if e[0] == "decode"]
    assert max(batches) == 3, "decode steps were not batched up to max_batch"
    assert stats.finished == {"length": 5} and stats.generation_tokens_total == 5 * 40
    assert stats.decode_batch_total == sum(batches) and stats.decode_steps == len(batches)
    assert stats.prompt_tokens_total == sum(map(len, prompts))
    assert stats.running == 0 and stats.queued == 0 and runner.ctx == {}


def test_cancel_frees_the_slot_for_the_next_request():
    runner = FakeRunner(max_batch=1, decode_seconds=0.005)
    cancelled = threading.Event()
    runner.decode_gate = cancelled.is_set  # the long request cannot finish before the cancel
    tok = runner.tokenizer
    with Scheduler(runner) as sched:
        long_one, queued = Collector(), Collector()
        h = sched.submit(tok.encode("Hello"), greedy(200, ignore_eos=True), long_one)
        sched.submit(tok.encode("abc"), greedy(5, ignore_eos=True), queued)
        assert long_one.first.wait(30)
        assert not queued.first.is_set(), "one slot: the second request must wait"
        h.cancel()
        cancelled.set()
        long_one.wait()
        queued.wait()
        stats = sched.stats()
    assert long_one.last.finish_reason == "abort" and len(long_one.ids) < 200
    assert queued.ids == fake_greedy_ids(tok, tok.encode("abc"), 5, ignore_eos=True)
    assert stats.cancelled == 1 and stats.finished == {"length": 1}
    assert runner.log.count(("release", 0)) == 2 and runner.ctx == {}


def test_cancel_while_queued_never_prefills():
    runner = FakeRunner(max_batch=1, decode_seconds=0.002)
    cancelled = threading.Event()
    # the first request holds the one slot until the second is cancelled
    runner.decode_gate = cancelled.is_set
    tok = runner.tokenizer
    with Scheduler(runner) as sched:
        first, second = Collector(), Collector()
        sched.submit(tok.encode("Hello"), greedy(30, ignore_eos=True), first)
        h = sched.submit(tok.encode("abc"), greedy(30, ignore_eos=True), second)
        h.cancel()
        cancelled.set()
        first.wait()
        second.wait()
    assert second.last.finish_reason == "abort" and second.ids == []
    assert [e for e in runner.log if e[0] == "prefill"] == [
        ("prefill", 0, len(tok.encode("Hello")), 0)
    ]


def test_context_limit_rejects_long_prompts_and_trims_max_tokens():
    runner = FakeRunner(max_seq_len=24)
    tok = runner.tokenizer
    with Scheduler(runner) as sched:
        with pytest.raises(ContextLengthError, match="24 tokens"):
            sched.submit(tok.encode("x" * 23), greedy(1), Collector())
        c = Collector()
        prompt = tok.encode("x" * 9)  # 10 tokens with BOS: 14 left
        sched.submit(prompt, greedy(1000, ignore_eos=True), c)
        c.wait()
    assert c.last.finish_reason == "length" and len(c.ids) == 24 - 10
    assert context_error(10, 15, 24) is not None and context_error(10, 14, 24) is None
    assert context_error(0, None, 24) is not None


def test_one_long_prefill_per_step_keeps_decodes_going():
    runner = FakeRunner(max_batch=4, decode_seconds=0.001)
    tok = runner.tokenizer
    collectors = [Collector() for _ in range(3)]
    sched = Scheduler(runner, prefill_token_budget=8)
    short = tok.encode("ab")  # 3 tokens: fits the budget
    long_prompt = tok.encode("a long prompt here")  # 19 tokens: over the budget
    # Queue everything before the thread starts, so the first step sees all three.
    sched.submit(long_prompt, greedy(5, ignore_eos=True), collectors[0])
    sched.submit(long_prompt, greedy(5, ignore_eos=True), collectors[1])
    sched.submit(short, greedy(5, ignore_eos=True), collectors[2])
    with sched:
        for c in collectors:
            c.wait()
    kinds = [e[0] for e in runner.log if e[0] != "release"]
    # step 1: the first long prompt alone (over the budget, but first) and a decode; step 2: the
    # second long prompt (the short one does not fit what it left) and a decode; step 3: the short
    # one.
    assert kinds[:6] == ["prefill", "decode", "prefill", "decode", "prefill", "decode"], kinds
    assert [e[2] for e in runner.log if e[0] == "prefill"] == [
        len(long_prompt),
        len(long_prompt),
        len(short),
    ]


def test_chunked_prefill_cuts_at_fixed_positions_between_decode_steps():
    """A 19-token prompt in chunks of 4 under a budget of 6 (not a multiple of 4): the chunks start
    at 0, 4, 8, 12, 16 whatever the budget had left, a decode step of the running request comes
    between any two of them, and the output is the model's."""
    # The running request's decode steps wait until the long prompt is in: without that gate it
    # could finish all 200 of them before the second submit, leaving no decode to interleave.
    runner = FakeRunner(max_batch=2, prefill_chunk_tokens=4, decode_seconds=0.005)
    submitted = threading.Event()
    runner.decode_gate = submitted.is_set
    tok = runner.tokenizer
    running, long_one = Collector(), Collector()
    long_prompt = tok.encode("a long prompt here")  # 19 tokens
    with Scheduler(runner, prefill_token_budget=6) as sched:
        sched.submit(tok.encode("ab"), greedy(200, ignore_eos=True), running)
        assert running.first.wait(30)
        sched.submit(long_prompt, greedy(5, ignore_eos=True), long_one)
        submitted.set()
        long_one.wait()
        running.wait()
        stats = sched.stats()
    chunks = [(start, n) for slot, start, n in prefills(runner)[1:]]
    assert chunks == [(0, 4), (4, 4), (8, 4), (12, 4), (16, 3)]
    calls = [e[0] for e in runner.log if e[0] != "release"]
    between = "".join("p" if k == "prefill" else "d" for k in calls[calls.index("prefill", 1) :])
    assert "pp" not in between[: between.rindex("p") + 1], f"two chunks in one step: {between}"
    assert long_one.ids == fake_greedy_ids(tok, long_prompt, 5, ignore_eos=True)
    assert stats.prefill_chunks == 6 and stats.prefill_seconds.count == 2
    assert stats.prompt_tokens_total == len(long_prompt) + 3


def test_a_new_request_is_prefilled_before_the_next_chunk_of_a_long_one():
    """Both queued before the first step, chunk = budget = 4: step 1 runs the long prompt's first
    chunk; step 2 the short prompt first (new requests go first), then the long one's next chunk
    (the head of the prefills in progress always gets one). The short request's first token comes
    after one chunk of the long one."""
    runner = FakeRunner(max_batch=2, prefill_chunk_tokens=4)
    tok = runner.tokenizer
    long_prompt, short = tok.encode("x" * 39), tok.encode("ab")  # 40 tokens: 10 chunks; 3 tokens
    long_one, short_one = Collector(), Collector()
    sched = Scheduler(runner, prefill_token_budget=4)
    sched.submit(long_prompt, greedy(3, ignore_eos=True), long_one)
    sched.submit(short, greedy(3, ignore_eos=True), short_one)
    with sched:
        long_one.wait()
        short_one.wait()
    assert prefills(runner)[:3] == [(0, 0, 4), (1, 0, 3), (0, 4, 4)]
    first_decode = next(i for i, e in enumerate(runner.log) if e[0] == "decode")
    long_chunks_before = sum(
        1 for e in runner.log[:first_decode] if e[0] == "prefill" and e[1] == 0
    )
    assert long_chunks_before == 2 and runner.log[first_decode] == ("decode", (1,))
    assert long_one.ids == fake_greedy_ids(tok, long_prompt, 3, ignore_eos=True)
    assert short_one.ids == fake_greedy_ids(tok, short, 3, ignore_eos=True)


def test_prefills_in_progress_take_turns():
    """Two long prompts under a one-chunk budget progress alternately (neither waits for the other's
    whole prompt), and each slot's chunks come in order."""
    runner = FakeRunner(max_batch=2, prefill_chunk_tokens=4)
    tok = runner.tokenizer
    prompts = [tok.encode("a" * 23), tok.encode("b" * 23)]  # 24 tokens: 6 chunks each
    cs = [Collector(), Collector()]
    sched = Scheduler(runner, prefill_token_budget=4)
    for p, c in zip(prompts, cs):
        sched.submit(p, greedy(2, ignore_eos=True), c)
    with sched:
        for c in cs:
            c.wait()
    order = [slot for slot, _, _ in prefills(runner)]
    assert order[:6] == [0, 1, 0, 1, 0, 1], order
    for slot in (0, 1):
        assert [start for s, start, _ in prefills(runner) if s == slot] == list(range(0, 24, 4))
    assert [c.ids for c in cs] == [fake_greedy_ids(tok, p, 2, ignore_eos=True) for p in prompts]


def test_cancel_during_a_chunked_prefill_frees_the_slot_before_the_prompt_is_done():
    # 20 ms a chunk
    runner = FakeRunner(max_batch=1, prefill_chunk_tokens=4, prefill_seconds_per_token=0.005)
    cancel_sent = threading.Event()
    # the third waits for the cancel
    runner.prefill_gate = lambda: len(prefills(runner)) <= 2 or cancel_sent.is_set()
    tok = runner.tokenizer
    long_prompt = tok.encode("y" * 199)  # 200 tokens: 50 chunks, 1 s
    with Scheduler(runner) as sched:
        cancelled, queued = Collector(), Collector()
        h = sched.submit(long_prompt, greedy(5), cancelled)
        sched.submit(tok.encode("abc"), greedy(4, ignore_eos=True), queued)
        wait_until(lambda: len(prefills(runner)) >= 2, what="two chunks of the long prompt")
        h.cancel()
        cancel_sent.set()
        cancelled.wait()
        queued.wait()
        stats = sched.stats()
    chunks = [start for slot, start, n in prefills(runner) if n == 4]
    assert cancelled.last.finish_reason == "abort" and cancelled.ids == []
    assert 2 <= len(chunks) < 10, f"{len(chunks)} of 50 chunks ran after the cancel"
    assert queued.ids == fake_greedy_ids(tok, tok.encode("abc"), 4, ignore_eos=True)
    assert stats.cancelled == 1 and stats.prompt_tokens_total == 4 and runner.ctx == {}


def test_short_prompts_are_admitted_together():
    runner = FakeRunner(max_batch=3)
    tok = runner.tokenizer
    sched = Scheduler(runner, prefill_token_budget=64)
    cs = [Collector() for _ in range(3)]
    for p, c in zip(["ab", "cd", "ef"], cs):
        sched.submit(tok.encode(p), greedy(4, ignore_eos=True), c)
    with sched:
        for c in cs:
            c.wait()
    kinds = [e[0] for e in runner.log if e[0] != "release"]
    assert kinds[:4] == ["prefill", "prefill", "prefill", "decode"]


def test_a_failing_request_does_not_take_the_others_down():
    runner = FakeRunner(
        max_batch=2, fail_on_prompt_token=FakeTokenizer().encode("!", add_special_tokens=False)[0]
    )
    tok = runner.tokenizer
    with Scheduler(runner) as sched:
        bad, good = Collector(), Collector()
        sched.submit(tok.encode("boom!"), greedy(5), bad)
        sched.submit(tok.encode("fine"), greedy(5, ignore_eos=True), good)
        bad.wait()
        good.wait()
        stats = sched.stats()
    assert bad.last.finish_reason == "error" and "fake prefill failure" in bad.last.error
    assert good.ids == fake_greedy_ids(tok, tok.encode("fine"), 5, ignore_eos=True)
    assert stats.failed == 1 and runner.ctx == {}


def test_seeded_sampling_is_reproducible_and_batch_independent():
    runner = FakeRunner(max_batch=3)
    tok = runner.tokenizer
    params = SamplingParams(max_tokens=30, temperature=1.0, top_k=20, seed=1234, ignore_eos=True)
    with Scheduler(runner) as sched:
        alone = Collector()
        sched.submit(tok.encode("seed"), params, alone)
        alone.wait()
        together = [Collector() for _ in range(3)]
        for c in together:
            sched.submit(tok.encode("seed"), params, c)
        for c in together:
            c.wait()
    assert all(c.ids == alone.ids for c in together)
    assert alone.ids != fake_greedy_ids(tok, tok.encode("seed"), 30, ignore_eos=True)


def test_close_fails_pending_requests_and_refuses_new_ones():
    runner = FakeRunner(max_batch=1, decode_seconds=0.01)
    tok = runner.tokenizer
    sched = Scheduler(runner).start()
    # the running request cannot finish before close() is called
    runner.decode_gate = lambda: sched._stopping
    running, waiting = Collector(), Collector()
    sched.submit(tok.encode("a"), greedy(100, ignore_eos=True), running)
    sched.submit(tok.encode("b"), greedy(5), waiting)
    assert running.first.wait(30)
    sched.close()
    assert not sched.alive
    assert (
        running.wait().last.finish_reason == "error"
        and waiting.wait().last.finish_reason == "error"
    )
    assert runner.ctx == {}
    with pytest.raises(RuntimeError):
        sched.submit(tok.encode("c"), greedy(5), Collector())


def test_asyncio_sink_delivers_events_on_the_loop():
    runner = FakeRunner()
    prompt = runner.tokenizer.encode("Hello")

    async def main():
        sink, queue = asyncio_sink(asyncio.get_running_loop())
        with Scheduler(runner) as sched:
            sched.submit(prompt, greedy(6, ignore_eos=True), sink)
            events = []
            while not (events and events[-1].final):
                events.append(await asyncio.wait_for(queue.get(), 10))
        return events

    events = asyncio.run(main())
    assert [t for e in events for t in e.token_ids] == fake_greedy_ids(
        runner.tokenizer, prompt, 6, ignore_eos=True
    )


def test_histogram_is_cumulative():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 2.0):
        h.observe(v)
    assert h.counts == [1, 2] and h.count == 3 and h.sum == pytest.approx(2.55)


def test_loading_builds_the_runner_on_the_thread_that_steps_it():
    """`Scheduler.loading`: the load and every runner call happen on one thread (torch and numba
    keep per-thread OpenMP teams; splitting load and decode across threads halved decode speed)."""
    loaded_on = []

    def load():
        loaded_on.append(threading.get_ident())
        return FakeRunner()

    sched = Scheduler.loading(load)
    try:
        prompt = sched.runner.tokenizer.encode(PROMPTS[0])
        c = Collector()
        sched.submit(prompt, greedy(20), c)
        c.wait()
        assert c.ids == fake_greedy_ids(sched.runner.tokenizer, prompt, 20)
        assert sched.alive
    finally:
        sched.close()
    assert sched.runner.thread_ids == set(loaded_on)
    assert threading.get_ident() not in loaded_on


def test_loading_reraises_what_the_load_raised():
    from roofline.errors import UserError

    def load():
        raise UserError("no such model")

    with pytest.raises(UserError, match="no such model"):
        Scheduler.loading(load)
