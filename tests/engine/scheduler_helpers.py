"""A fake runner and the sinks and waits the scheduler, prefix-cache and server tests share."""

from __future__ import annotations

import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.scheduler import Event, Scheduler

SCRIPT = "the quick brown fox jumps over the lazy dog. "
N = 8


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


@dataclass(frozen=True)
class FakeConfig:
    vocab_size: int
    max_seq_len: int
    name: str = "fake-model"
    moe: bool = False


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
        self.decode_passes = 0  # `step` calls, as ModelRunner counts its decode passes
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
        self.decode_passes += 1
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


def prefills(runner: FakeRunner) -> list[tuple[int, int, int]]:
    """(slot, start, tokens) of every prefill call, in order."""
    return [(e[1], e[3], e[2]) for e in runner.log if e[0] == "prefill"]


class LogitsScheduler(Scheduler):
    """A scheduler that keeps the logits each request's first token is sampled from (computed by
    its last prefill chunk, or loaded with a cached tail)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.accepted: list[np.ndarray] = []
        accept = self.output.accept  # the planner hands every finished prompt to this one object

        def keep(w, logits):
            self.accepted.append(np.array(logits, copy=True))
            accept(w, logits)

        self.output.accept = keep


def serve_all(sched, prompts, n=N) -> list[list[int]]:
    """Submit all prompts at once; their greedy ids."""
    collectors = [Collector() for _ in prompts]
    for p, c in zip(prompts, collectors):
        sched.submit(p, greedy(n, ignore_eos=True), c)
    return [c.wait(60).ids for c in collectors]


def other_token(t: int) -> int:
    return 3 + (t + 1 - 3) % 290
