"""Prefill turns sized by time: a turn runs whole granules while they fit the target (predicted
from measured prefill times), a request's granules in one call cut at granule boundaries; a
prompt's logits are the same whatever the budget; and a short request's first token, like a running
request's next decode step, waits about one turn behind a long prompt.

The timing tests run the fake runner on a fake clock that each prefill advances by its tokens'
cost: what the scheduler decides from the clock is exact, however busy the machine."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from runner_helpers import CHUNK, PROMPT_LEN, make_runner, prompt_ids
from scheduler_helpers import Collector, FakeRunner, fake_greedy_ids, greedy, wait_until

from roofline.engine.runtime.scheduler import Scheduler


class CallTap:
    """A runner whose prefill calls are logged as (slot, start, tokens, logits or None)."""

    def __init__(self, runner):
        self._runner = runner
        self.calls: list[tuple[int, int, int, np.ndarray | None]] = []

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def prefill(self, slot, token_ids, *, start=0, logits=True):
        out = self._runner.prefill(slot, token_ids, start=start, logits=logits)
        self.calls.append((slot, start, len(token_ids), None if out is None else out.copy()))
        return out


@pytest.mark.parametrize(
    "budget",
    [
        {"prefill_token_budget": CHUNK},
        {"prefill_token_budget": 8 * CHUNK},
        {"prefill_chunk_ms": 1e-3},
        {"prefill_chunk_ms": 1e6},
    ],
    ids=["1 granule", "8 granules", "tiny target", "huge target"],
)
def test_a_prompts_logits_do_not_depend_on_the_turn_budget(tiny_gguf, budget):
    """A 150-token prompt (granules of 32) served beside a running request and a short one, under
    budgets of one granule a turn up to the whole prompt: the calls cover it in order, one granule
    a call under the smallest budgets, several under the larger, each ending at a granule boundary
    or the prompt's end, and the last one's logits equal `ModelRunner.prefill` of the prompt
    alone."""
    runner = make_runner(tiny_gguf, "fp32", max_batch=3)
    long_prompt = prompt_ids(PROMPT_LEN, seed=50)
    alone = runner.prefill(0, long_prompt).copy()
    runner.release(0)
    tap = CallTap(runner)
    with Scheduler(tap, **budget) as sched:
        running, long_one, short = Collector(), Collector(), Collector()
        sched.submit(prompt_ids(9, seed=51), greedy(40, ignore_eos=True), running)
        assert running.first.wait(30)
        sched.submit(long_prompt, greedy(4, ignore_eos=True), long_one)
        sched.submit(prompt_ids(5, seed=52), greedy(4, ignore_eos=True), short)
        for c in (running, long_one, short):
            c.wait(60)
    long_slot = next(slot for slot, _, n, _ in tap.calls if n >= 22)
    long_calls = [(start, n) for slot, start, n, _ in tap.calls if slot == long_slot]
    ends = [start + n for start, n in long_calls]
    assert [start for start, _ in long_calls] == [0, *ends[:-1]] and ends[-1] == PROMPT_LEN
    assert all(end % CHUNK == 0 for end in ends[:-1])
    if budget in ({"prefill_token_budget": CHUNK}, {"prefill_chunk_ms": 1e-3}):
        assert long_calls == [(0, 32), (32, 32), (64, 32), (96, 32), (128, 22)]
    if budget == {"prefill_chunk_ms": 1e6}:  # once the first granule timed, the rest at once
        assert long_calls in ([(0, PROMPT_LEN)], [(0, 32), (32, PROMPT_LEN - 32)])
    last = next(out for slot, _, _, out in reversed(tap.calls) if slot == long_slot)
    assert np.array_equal(last, alone)


class FakeClock:
    """Seconds that pass only when a fake prefill says so."""

    def __init__(self):
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class ClockedRunner(FakeRunner):
    """The fake runner whose prefill costs `seconds_per_token` of the fake clock; decode calls are
    logged with the clock's time."""

    def __init__(self, clock: FakeClock, seconds_per_token: float, **kw):
        super().__init__(**kw)
        self.clock, self.seconds_per_token = clock, seconds_per_token
        self.decode_times: list[float] = []

    def prefill(self, slot, token_ids, *, start=0, logits=True):
        out = super().prefill(slot, token_ids, start=start, logits=logits)
        self.clock.advance(self.seconds_per_token * len(token_ids))
        return out

    def decode(self, slots, token_ids):
        self.decode_times.append(self.clock())
        return super().decode(slots, token_ids)


def long_prefills(runner: FakeRunner, slot: int) -> list[int]:
    return [e[3] for e in runner.log if e[0] == "prefill" and e[1] == slot]


TARGET_S = 0.1
GRANULE = 4
PER_TOKEN_S = 0.01  # a granule: 40 ms of the fake clock; two fit a 100 ms turn


def test_a_short_requests_first_token_waits_at_most_one_turn_behind_a_long_prompt():
    clock = FakeClock()
    runner = ClockedRunner(clock, PER_TOKEN_S, max_batch=2, prefill_chunk_tokens=GRANULE)
    tok = runner.tokenizer
    long_prompt, short_prompt = tok.encode("L" * 199), tok.encode("ab")  # 50 granules; 3 tokens
    submitted = threading.Event()
    # the long prompt's 8th granule waits, once logged, for the short request's submit
    runner.prefill_gate = lambda: submitted.is_set() or len(long_prefills(runner, 0)) < 8
    first_token_at: list[float] = []
    short = Collector()

    def sink(event):
        if not first_token_at and event.token_ids:
            first_token_at.append(clock())
        short(event)

    with Scheduler(runner, prefill_chunk_ms=TARGET_S * 1000, clock=clock) as sched:
        long_one = Collector()
        sched.submit(long_prompt, greedy(3, ignore_eos=True), long_one)
        wait_until(lambda: len(long_prefills(runner, 0)) >= 8, what="the long prompt's 8th granule")
        sent_at = clock()
        sched.submit(short_prompt, greedy(3, ignore_eos=True), sink)
        submitted.set()
        short.wait(30)
        long_one.wait(30)
    waited = first_token_at[0] - sent_at
    granule_s = GRANULE * PER_TOKEN_S
    assert waited <= TARGET_S + granule_s + 1e-9, f"waited {waited:.3f} s of the fake clock"
    assert short.ids == fake_greedy_ids(tok, short_prompt, 3, ignore_eos=True)
    assert long_one.ids == fake_greedy_ids(tok, long_prompt, 3, ignore_eos=True)


def test_a_turn_runs_the_granules_that_fit_the_target_between_decode_steps():
    """A running request decodes while a 200-token prompt prefills: once the rate is measured, each
    turn runs two 40 ms granules (a third would end at 120 ms > 100 ms) in one call, and no decode
    step waits more than a turn plus a granule."""
    clock = FakeClock()
    runner = ClockedRunner(clock, PER_TOKEN_S, max_batch=2, prefill_chunk_tokens=GRANULE)
    tok = runner.tokenizer
    long_prompt = tok.encode("L" * 199)
    submitted = threading.Event()
    # the running request's decode steps wait for the long prompt (else they could all be over)
    runner.decode_gate = submitted.is_set
    with Scheduler(runner, prefill_chunk_ms=TARGET_S * 1000, clock=clock) as sched:
        running, long_one = Collector(), Collector()
        sched.submit(tok.encode("a"), greedy(200, ignore_eos=True), running)
        assert running.first.wait(30)
        sched.submit(long_prompt, greedy(3, ignore_eos=True), long_one)
        submitted.set()
        long_one.wait(30)
        running.wait(60)
    # two granules a call (the running request's prefill measured the rate)
    assert long_prefills(runner, 1) == list(range(0, 200, 2 * GRANULE))
    kinds = "".join(
        "p" if e[0] == "prefill" else "d"
        for e in runner.log
        if e[0] == "decode" or (e[0] == "prefill" and e[1] == 1)
    )
    turns = kinds[kinds.index("p") : kinds.rindex("p") + 1].split("d")
    assert {len(turn) for turn in turns if turn} == {1}, kinds
    gaps = np.diff(runner.decode_times)
    assert gaps.max() <= TARGET_S + GRANULE * PER_TOKEN_S + 1e-9


class CachingRunner(ClockedRunner):
    """The clocked fake runner with K/V to cache: a slot's "K/V" are its tokens, and each load
    costs `load_s` of the fake clock."""

    def __init__(self, clock: FakeClock, seconds_per_token: float, load_s: float, **kw):
        super().__init__(clock, seconds_per_token, **kw)
        self.load_s = load_s

    def save_kv(self, slot, start, end):
        ids = np.array(self.ctx[slot][start:end], dtype=np.int64)
        return ids, ids.copy()

    def load_kv(self, slot, start, kv, rows=None):
        self.log.append(("load", slot, start))
        self.clock.advance(self.load_s)
        self.ctx[slot] = self.ctx.get(slot, [])[:start] + kv[0][:rows].tolist()
        self.prompt_len[slot] = len(self.ctx[slot])


def test_granules_loaded_from_the_prefix_cache_count_against_the_turns_time():
    """Six requests arrive at once with a prompt the cache holds whole (two granules and a tail,
    60 ms of the fake clock to load each): a turn loads new requests' granules while its time is
    under the 100 ms target, and the head of the prefills in progress gets one granule whatever
    the time, so the running request's decode steps wait at most the target and two loads, not all
    18 loads (1.08 s, as one turn took before loads counted); the six get a cold run's ids."""
    clock = FakeClock()
    load_s = 0.06
    runner = CachingRunner(clock, PER_TOKEN_S, load_s, max_batch=8, prefill_chunk_tokens=GRANULE)
    tok = runner.tokenizer
    shared = tok.encode("S" * 10)  # 11 tokens: granules 0-3, 4-7 and a 3-token tail
    submitted = threading.Event()
    runner.decode_gate = lambda: submitted.is_set() or not runner.decode_times
    with Scheduler(
        runner, prefill_chunk_ms=TARGET_S * 1000, prefix_cache_mb=1.0, clock=clock
    ) as sched:
        first = Collector()
        sched.submit(shared, greedy(1, ignore_eos=True), first)
        first.wait(30)
        running = Collector()
        sched.submit(tok.encode("a"), greedy(120, ignore_eos=True), running)
        assert running.first.wait(30)
        wait_until(lambda: runner.decode_times, what="the running request's first decode step")
        copies = [Collector() for _ in range(6)]
        for c in copies:  # all queued while the decode step waits for the gate
            sched.submit(shared, greedy(3, ignore_eos=True), c)
        submitted.set()
        for c in copies:
            c.wait(30)
        running.wait(60)
    loads = [e for e in runner.log if e[0] == "load"]
    # the running request's first row (its BOS, shared with the cached prompt's first granule),
    # then every copy's whole prompt: nothing recomputed
    assert len(loads) == 1 + 18, loads
    gaps = np.diff(runner.decode_times)
    assert gaps.max() <= TARGET_S + 2 * load_s + 1e-9, f"a decode step waited {gaps.max():.3f} s"
    for c in copies:
        assert c.ids == fake_greedy_ids(tok, shared, 3, ignore_eos=True)
