"""One request's decoding state: the tokens so far, when to stop, and the text that is final.

Text is released only when it can no longer change: a UTF-8 character split across tokens waits
until complete; text that could begin a stop string waits until it cannot (a stop string, once
seen, is cut off with everything after it).

A request needs `prompt_tokens + max_tokens <= max_seq_len` KV positions (the last sampled token is
never written back): `fit_to_context` refuses prompts that leave no room and trims `max_tokens`.
"""

from __future__ import annotations

import codecs
import dataclasses
from collections.abc import Sequence as Seq

import numpy as np

from roofline.engine.runtime.sampling import SamplingParams


def context_error(prompt_tokens: int, max_tokens: int | None, max_seq_len: int) -> str | None:
    """Why a request cannot fit the context (None when it fits). At least one new token must fit."""
    if prompt_tokens < 1:
        return "the prompt is empty after tokenization; send at least one token"
    if prompt_tokens >= max_seq_len:
        return (
            f"this model's maximum context length is {max_seq_len} tokens, but the prompt has "
            f"{prompt_tokens} tokens, which leaves no room to generate; shorten the prompt"
        )
    if max_tokens is not None and prompt_tokens + max_tokens > max_seq_len:
        return (
            f"this model's maximum context length is {max_seq_len} tokens, "
            f"but {prompt_tokens + max_tokens} were requested "
            f"({prompt_tokens} in the prompt, {max_tokens} to generate); "
            f"lower max_tokens to at most {max_seq_len - prompt_tokens} or shorten the prompt"
        )
    return None


class ContextLengthError(ValueError):
    """The prompt (plus max_tokens) does not fit the runner's context."""


def fit_to_context(prompt_tokens: int, params: SamplingParams, max_seq_len: int) -> SamplingParams:
    """`params` with max_tokens trimmed to the context the prompt leaves; ContextLengthError when it
    leaves none."""
    err = context_error(prompt_tokens, None, max_seq_len)
    if err:
        raise ContextLengthError(err)
    room = max_seq_len - prompt_tokens
    return params if params.max_tokens <= room else dataclasses.replace(params, max_tokens=room)


def _held_back_chars(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:n]):
                longest = n
                break
    return longest


class Sequence:
    """Decoding state of one request, independent of the runner that computes its logits."""

    def __init__(self, prompt_ids: Seq[int], params: SamplingParams, tokenizer) -> None:
        self.prompt_ids: list[int] = [int(t) for t in prompt_ids]
        self.output_ids: list[int] = []
        self.params = params
        self.finish_reason: str | None = None
        self.rng = np.random.default_rng(params.seed)
        self._tokenizer = tokenizer
        self._stop_ids = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else tokenizer.eos_ids
        )
        self._hidden_ids = frozenset(getattr(tokenizer, "special_ids", ()))
        # Incremental UTF-8: keeps the bytes of an unfinished character between tokens.
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded text not yet released (a stop string may be forming in it)
        if params.max_tokens == 0:
            self.finish_reason = "length"

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def append(self, token_id: int) -> str:
        """Record a sampled token; return the text that became final with it."""
        if self.done:
            raise RuntimeError("append() on a finished sequence")
        token_id = int(token_id)
        self.output_ids.append(token_id)
        if token_id in self._stop_ids:
            self.finish_reason = "stop"  # the stop/EOS token itself is not part of the text
            return ""
        if token_id not in self._hidden_ids:  # special tokens (chat markers) are not text
            self._pending += self._utf8.decode(self._tokenizer.token_bytes(token_id))
        released = self._release()
        if not self.done and len(self.output_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
        return released

    def _release(self) -> str:
        """Cut at the earliest stop string, or release all but a possible stop-string prefix."""
        stops = self.params.stop
        if not stops:
            out, self._pending = self._pending, ""
            return out
        hits = [i for i in (self._pending.find(s) for s in stops) if i >= 0]
        if hits:
            out = self._pending[: min(hits)]
            self._pending = ""
            self._utf8.reset()  # bytes after the stop string are dropped too
            self.finish_reason = "stop"
            return out
        keep = _held_back_chars(self._pending, stops)
        cut = len(self._pending) - keep
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out

    def flush(self) -> str:
        """Held-back text once the sequence is done (empty after a stop string: it and what follows
        are dropped)."""
        if not self.done:
            return ""
        out = self._pending + self._utf8.decode(b"", final=True)
        self._pending = ""
        return out
