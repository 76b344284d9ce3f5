"""Continuous-batching scheduler, driven by a small deterministic fake runner (fast unit tests).

The fake (`FakeRunner`, also used by the server tests) implements the ModelRunner interface with a
character-level tokenizer; its next token depends on the slot's whole context, so a scheduler that
feeds the wrong token, mixes up slots or reuses a slot without a prefill produces different text.
"""

from __future__ import annotations

import asyncio
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.scheduler import Event, Scheduler, asyncio_sink
from roofline.engine.runtime.scheduler_stats import Histogram
from roofline.engine.runtime.sequence import ContextLengthError, context_error

SCRIPT = "the quick brown fox jumps over the lazy dog. "


class FakeTokenizer:
    """Characters as tokens; 0 = BOS, 1 = EOS (both special, skipped when decoding)."""

    CHARS = string.ascii_letters + string.digits + " .,!?:;'-\n<>|/"

    def __init__(self):
        self.bos_id, self.eos_ids, self.add_bos, self.special_ids = (
            0,
            frozenset({1}),
            True,
            frozenset({0, 1}),
        )
        self.vocab_size = 2 + len(self.CHARS)
        self._ids = {c: i + 2 for i, c in enumerate(self.CHARS)}

    def encode(self, text, add_special_tokens=True):
        ids = [self._ids.get(c, self._ids["?"]) for c in text]
        return [self.bos_id, *ids] if add_special_tokens and self.add_bos else ids

    def decode(self, ids, skip_special_tokens=True):
        specials = {0: "<s>", 1: "</s>"}
        return "".join(
            self.CHARS[i - 2] if i >= 2 else ("" if skip_special_tokens else specials[i])
            for i in ids
        )

    def token_bytes(self, token_id):
        return self.decode([token_id]).encode()

    def apply_chat_template(self, messages, add_generation_prompt=True):
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages)
        return text + ("<|assistant|>" if add_generation_prompt else "")


def fake_next_token(tok: FakeTokenizer, ctx: list[int], prompt_len: int) -> int:
    """The fake model: EOS right after a generated '.', else a script character chosen by the
    context."""
    if len(ctx) > prompt_len and ctx[-1] == tok.encode(".", add_special_tokens=False)[0]:
        return 1
    return tok.encode(SCRIPT[(sum(ctx) * 7 + len(ctx)) % len(SCRIPT)], add_special_tokens=False)[0]


def fake_greedy_ids(
    tok: FakeTokenizer, prompt_ids: list[int], max_tokens: int, ignore_eos: bool = False
) -> list[int]:
    """What greedy decoding of the fake model must produce (computed independently of the
    scheduler)."""
    ctx, out = list(prompt_ids), []
    while len(out) < max_tokens:
        t = fake_next_token(tok, ctx, len(prompt_ids))
        out.append(t)
        if t in tok.eos_ids and not ignore_eos:
            break
        ctx.append(t)
    return out


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 60.0, what: str = "the test's signal"
) -> None:
    """Poll `condition` until it holds; fail after timeout_s (a test's gate, never a bet on how fast
    work is)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(0.001)


@dataclass(frozen=True)
class FakeConfig:
    vocab_size: int
    max_seq_len: int
    name: str = "fake-model"


class FakeRunner:
    """ModelRunner interface over `fake_next_token`; checks the scheduler's use of slots and
    positions.

    A test that must act while work is still under way (cancel, close, stop) sets `prefill_gate` or
    `decode_gate`: each prefill / decode call, once logged, waits until the gate returns True, so
    the work cannot finish before the test's signal however fast or slow the machine is."""

    prefill_gate: Callable[[], bool] | None = None
    decode_gate: Callable[[], bool] | None = None

    def __init__(
        self,
        *,
        max_batch=2,
        max_seq_len=256,
        decode_seconds=0.0,
        fail_on_prompt_token=None,
        prefill_chunk_tokens=None,
        prefill_seconds_per_token=0.0,
    ):
        self.tokenizer = FakeTokenizer()
        self.config = FakeConfig(self.tokenizer.vocab_size, max_seq_len)
        self.name, self.dtype, self.path = "fake-model", "fp32", "fake/path.gguf"
        self.max_batch, self.max_seq_len, self.bytes_per_token = max_batch, max_seq_len, 12345
        self.file_bytes_per_token = 2345  # the file stores a smaller format than the engine reads
        self.decode_seconds = decode_seconds
        self.fail_on_prompt_token = fail_on_prompt_token
        self.ctx: dict[int, list[int]] = {}
        self.prompt_len: dict[int, int] = {}
        self.prefill_chunk_tokens = (
            prefill_chunk_tokens  # None: the scheduler prefills a prompt in one call
        )
        self.prefill_seconds_per_token = prefill_seconds_per_token
        self.log: list[
            tuple
        ] = []  # ("prefill", slot, n, start) | ("decode", slots) | ("release", slot)
        self.thread_ids: set[int] = set()

    def _logits(self, slot: int) -> np.ndarray:
        # Smooth around the target so sampled decoding has choices; argmax is the target.
        target = fake_next_token(self.tokenizer, self.ctx[slot], self.prompt_len[slot])
        return (-0.3 * np.abs(np.arange(self.config.vocab_size) - target)).astype(np.float32)

    def prefill(self, slot, token_ids, *, start=0, logits=True):
        """token_ids at positions start..: start 0 takes a free slot, a later start continues that
        slot's prompt where it ends; a chunked prefill ends at a multiple of the chunk size, or at
        the prompt's end (the call that wants logits)."""
        self.thread_ids.add(threading.get_ident())
        assert 0 <= slot < self.max_batch and len(token_ids) > 0
        if start == 0:
            assert slot not in self.ctx, f"slot {slot} busy"
        else:
            assert len(self.ctx.get(slot, ())) == start, (
                f"slot {slot}: continuing at {start}, holds {self.ctx.get(slot)}"
            )
        if self.prefill_chunk_tokens:
            c = self.prefill_chunk_tokens
            assert (start + len(token_ids)) % c == 0 or logits, (
                f"chunk {start}+{len(token_ids)} not cut at a multiple of {c}"
            )
        assert start + len(token_ids) < self.max_seq_len
        if self.fail_on_prompt_token is not None and self.fail_on_prompt_token in token_ids:
            raise RuntimeError("fake prefill failure")
        self.log.append(("prefill", slot, len(token_ids), start))
        if self.prefill_gate is not None:
            wait_until(self.prefill_gate)
        if self.prefill_seconds_per_token:
            time.sleep(self.prefill_seconds_per_token * len(token_ids))
        self.ctx[slot] = self.ctx.get(slot, [])[:start] + list(token_ids)
        self.prompt_len[slot] = len(self.ctx[slot])
        return self._logits(slot) if logits else None

    def decode(self, slots, token_ids):
        self.thread_ids.add(threading.get_ident())
        assert len(slots) == len(set(slots)) <= self.max_batch
        self.log.append(("decode", tuple(slots)))
        if self.decode_gate is not None:
            wait_until(self.decode_gate)
        if self.decode_seconds:
            time.sleep(self.decode_seconds)
        rows = []
        for s, t in zip(slots, token_ids):
            assert s in self.ctx, f"decode on free slot {s}"
            assert len(self.ctx[s]) < self.max_seq_len, "decode past the context"
            self.ctx[s].append(int(t))
            rows.append(self._logits(s))
        return np.stack(rows)

    def step(self, batch):
        """Chains only (what the scheduler sends a runner without tree proposers): row i sees rows
        0..i."""
        assert all(parents is None for _, _, parents in batch)
        if all(len(ids) == 1 for _, ids, _ in batch):
            return list(
                self.decode([s for s, _, _ in batch], [ids[0] for _, ids, _ in batch])[:, None, :]
            )
        out = []
        for s, ids, _ in batch:
            rows = []
            for t in ids:
                self.ctx[s].append(int(t))
                rows.append(self._logits(s))
            out.append(np.stack(rows))
        return out

    def keep(self, slot, start, rows):
        assert list(rows) == list(range(len(rows))), "a chain keeps a prefix"
        del self.ctx[slot][start + len(rows) :]

    def position(self, slot):
        return len(self.ctx.get(slot, ()))

    def release(self, slot):
        self.log.append(("release", slot))
        self.ctx.pop(slot, None)
        self.prompt_len.pop(slot, None)


class Collector:
    """A thread-safe sink that remembers every event and signals the final one."""

    def __init__(self):
        self.events: list[Event] = []
        self.done = threading.Event()
        self.first = threading.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.first.set()
        if event.final:
            self.done.set()

    def wait(self, timeout=10.0) -> Collector:
        assert self.done.wait(timeout), "request did not finish"
        return self

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)

    @property
    def ids(self) -> list[int]:
        return [t for e in self.events for t in e.token_ids]

    @property
    def last(self) -> Event:
        return self.events[-1]


def greedy(max_tokens=64, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw)


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


def prefills(runner: FakeRunner) -> list[tuple[int, int, int]]:
    """(slot, start, tokens) of every prefill call, in order."""
    return [(e[1], e[3], e[2]) for e in runner.log if e[0] == "prefill"]


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
