"""After a stream ends: decode its events and count the output tokens each one carried.

Once per request, off the hot path, from the best source the server allows (the record names it):
- `usage_per_chunk`: cumulative `usage.completion_tokens` in every event (vLLM/SGLang
  `continuous_usage_stats`); event i carried usage_i - usage_(i-1);
- `tokenizer`: the text encoded once, each token credited to the event holding its first
  character (a split token counts once); scaled to a server total if any (`usage_total+tokenizer`);
- `usage_total`: 1 per text event when the total equals their number, else shared by characters
  (`usage_total+chars`);
- `chunks`: 1 per text event (undercounts multi-token chunks).
Fields read are checked for type and range (counts 0..2**31 - 1, stamps 0..2**63 - 1): a wrong
shape fails only its request (`malformed_event`), a payload that is not a JSON object is
`malformed_sse`.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

from roofline.bench.records import RequestRecord

_TEXT_KEYS = ("content", "reasoning_content", "reasoning")
# a token or pass count beyond this is nonsense (and overflows float arithmetic)
_MAX_COUNT = 2**31 - 1
_MAX_STAMP_NS = 2**63 - 1  # a perf_counter_ns() stamp


class MalformedEvent(ValueError):
    """An event that is a JSON object but not of the shape an OpenAI-compatible stream sends."""


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split an integer total in proportion to weights (largest remainder): the parts sum to
    total."""
    s = float(sum(weights))
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    exact = [total * w / s for w in weights]
    parts = [int(x) for x in exact]
    short = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)
    for i in order[:short]:
        parts[i] += 1
    return parts


def decode_events(payloads: Sequence[bytes]) -> list[dict] | str:
    """All events' JSON objects, parsed in one call; or why one of them is unusable."""
    try:
        objs = json.loads(b"[" + b",".join(payloads) + b"]")
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        objs = None  # find the culprit below
    if objs is not None and len(objs) == len(payloads) and all(o.__class__ is dict for o in objs):
        return objs
    for i, payload in enumerate(payloads):
        try:
            obj = json.loads(payload)
        except (ValueError, RecursionError) as e:
            return f"event {i} is not JSON ({_reason(e)}): {payload[:80]!r}"
        if obj.__class__ is not dict:
            return f"event {i} is not a JSON object: {payload[:80]!r}"
    return "events could not be decoded together"  # e.g. an event holding two JSON values


def _reason(e: BaseException) -> str:
    return "nested too deep" if isinstance(e, RecursionError) else str(e).split(":")[0][:80]


def describe(value: object, limit: int = 60) -> str:
    """A short description of any JSON value for an error message; never raises (huge ints, deep
    nesting)."""
    if value.__class__ is int and value.bit_length() > 40:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = json.dumps(value, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _count(value: object, what: str) -> int | None:
    """A count field: None when absent or null, the int when in range; MalformedEvent otherwise."""
    if value is None:
        return None
    if value.__class__ is int and 0 <= value <= _MAX_COUNT:
        return value
    raise MalformedEvent(f"{what} is {describe(value)}, not a count from 0 to {_MAX_COUNT}")


def _text(value: object, what: str) -> str:
    if value is None or value.__class__ is str:
        return value or ""
    raise MalformedEvent(f"{what} is {describe(value)}, not a string")


def _obj(value: object, what: str) -> dict | None:
    if value is None or value.__class__ is dict:
        return value
    raise MalformedEvent(f"{what} is {describe(value)}, not an object")


def _list(value: object, what: str) -> list:
    if value is None:
        return []
    if value.__class__ is list:
        return value
    raise MalformedEvent(f"{what} is {describe(value)}, not a list")


def _event_text(obj: dict) -> tuple[str, str | None]:
    """Output text of one chat or completions event, and its finish_reason if it has one."""
    choices = obj.get("choices")
    if choices.__class__ is list and len(choices) == 1 and choices[0].__class__ is dict:
        # the common case, one choice with a plain content delta: no loops
        choice = choices[0]
        delta = choice.get("delta")
        if delta.__class__ is dict and len(delta) == 1 and delta.get("content").__class__ is str:
            finish = choice.get("finish_reason")
            if finish is None or finish.__class__ is str:
                return delta["content"], finish or None
    text = ""
    finish = None
    for choice in _list(choices, "choices"):
        if choice.__class__ is not dict:
            raise MalformedEvent(f"a choice is {describe(choice)}, not an object")
        delta = _obj(choice.get("delta"), "delta")
        if delta is None:  # a whole (non-streamed) answer carries a message instead
            delta = _obj(choice.get("message"), "message")
        if delta is not None:
            for key in _TEXT_KEYS:
                text += _text(delta.get(key), f"delta.{key}")
            for call in _list(delta.get("tool_calls"), "delta.tool_calls"):
                if call.__class__ is not dict:
                    raise MalformedEvent(f"a tool call is {describe(call)}, not an object")
                fn = _obj(call.get("function"), "tool_calls[].function")
                if fn is not None:
                    text += _text(fn.get("arguments"), "tool_calls[].function.arguments")
        text += _text(choice.get("text"), "text")
        reason = _text(choice.get("finish_reason"), "finish_reason")
        if reason:
            finish = reason
    return text, finish


def _passes(obj: dict) -> int | None:
    """Weight passes (verify steps) when a server reports them: SGLang's `spec_verify_ct`, or
    ours."""
    for holder in (obj.get("usage"), obj.get("meta_info"), obj.get("roofline")):
        if holder.__class__ is dict:
            for key in ("spec_verify_ct", "passes"):
                passes = _count(holder.get(key), key)
                if passes is not None:
                    return passes
    return None


def _ids(value: object, what: str) -> list[int] | None:
    """A token id list (`return_token_ids`): None when absent; MalformedEvent unless a list of
    ids from 0 to _MAX_COUNT."""
    if value is None:
        return None
    if value.__class__ is list and all(t.__class__ is int and 0 <= t <= _MAX_COUNT for t in value):
        return value
    raise MalformedEvent(f"{what} is {describe(value)}, not a list of token ids")


def _event_ids(obj: dict, ids: list[int] | None) -> tuple[list[int] | None, list[int] | None]:
    """The event's token ids added to `ids` (the stream's so far; None: none seen), and the
    prompt's ids if the event carries them (top level in a chat, in the choice of a
    completion)."""
    prompt = _ids(obj.get("prompt_token_ids"), "prompt_token_ids")
    choices = obj.get("choices")
    for choice in choices if choices.__class__ is list else ():
        if choice.__class__ is not dict:
            continue
        got = _ids(choice.get("token_ids"), "choices[].token_ids")
        if got is not None:
            ids = (ids or []) + got
        if prompt is None:
            prompt = _ids(choice.get("prompt_token_ids"), "choices[].prompt_token_ids")
    return ids, prompt


def _stamp(value: object) -> int | None:
    """A server's send stamp (`roofline_t_ns`), or None when absent."""
    if value is None or (value.__class__ is int and 0 <= value <= _MAX_STAMP_NS):
        return value
    raise MalformedEvent(f"roofline_t_ns is {describe(value)}, not a clock reading in ns")


def _error_message(err: object) -> str:
    msg = err.get("message", err) if err.__class__ is dict else err
    return msg[:200] if msg.__class__ is str else describe(msg, 200)


def finalize(
    rec: RequestRecord,
    events_ns: Sequence[int],
    payloads: Sequence[bytes],
    saw_done: bool,
    tokenizer: Any = None,
) -> None:
    """Fill rec's chunks, token counts, text and finish reason; mark it failed if the stream was
    bad. Never raises: whatever the server sent, the outcome is this one request's record."""
    try:
        _finalize(rec, events_ns, payloads, saw_done, tokenizer)
    except MalformedEvent as e:
        _fail(rec, "malformed_event", str(e))
    except Exception as e:
        _fail(
            rec,
            "malformed_event",
            f"events could not be decoded ({type(e).__name__}: {describe(str(e), 160)})",
        )


def _fail(rec: RequestRecord, kind: str, reason: str) -> None:
    rec.error_kind, rec.error = kind, reason
    rec.chunk_ns, rec.chunk_tokens, rec.output_tokens, rec.server_chunk_ns = [], [], 0, None


def _finalize(
    rec: RequestRecord,
    events_ns: Sequence[int],
    payloads: Sequence[bytes],
    saw_done: bool,
    tokenizer: Any,
) -> None:
    objs = decode_events(payloads)
    if isinstance(objs, str):
        rec.error_kind, rec.error = "malformed_sse", objs
        return
    texts: list[str] = []
    cum: list[int | None] = []  # cumulative completion_tokens per event, when given
    stamps: list[int | None] = []
    final_usage: dict | None = None
    finish_reason = rec.finish_reason
    passes = None
    ids: list[int] | None = None  # output token ids, when the stream carries them
    prompt_ids: list[int] | None = None
    for i, obj in enumerate(objs):
        try:
            if obj.get("error") is not None:
                rec.error_kind = "stream_error"
                rec.error = (
                    f"server error in stream after {i} events: {_error_message(obj['error'])}"
                )
                return
            text, finish = _event_text(obj)
            if finish:
                finish_reason = finish
            usage = obj.get("usage")
            if usage.__class__ is dict:
                done = usage.get("completion_tokens")
                if not (done.__class__ is int and 0 <= done <= _MAX_COUNT):
                    done = _count(done, "usage.completion_tokens")
                cum.append(done)
                if done is not None:
                    final_usage = usage
            elif usage is None:
                cum.append(None)
            else:
                raise MalformedEvent(f"usage is {describe(usage)}, not an object")
            if (
                "meta_info" in obj
                or "roofline" in obj
                or (usage is not None and ("spec_verify_ct" in usage or "passes" in usage))
            ):
                found = _passes(obj)
                if found is not None:
                    passes = found
            stamp = obj.get("roofline_t_ns")
            if stamp is not None and not (stamp.__class__ is int and 0 <= stamp <= _MAX_STAMP_NS):
                _stamp(stamp)  # raises
            stamps.append(stamp)
            if b'token_ids"' in payloads[i]:  # token_ids or prompt_token_ids, somewhere
                ids, prompt = _event_ids(obj, ids)
                prompt_ids = prompt if prompt is not None else prompt_ids
        except MalformedEvent as e:
            raise MalformedEvent(f"event {i}: {e}") from None
        texts.append(text)
    prompt_tokens = (
        _count(final_usage.get("prompt_tokens"), "usage.prompt_tokens") if final_usage else None
    )

    counts, source = _counts(texts, cum, final_usage, tokenizer)
    keep = [i for i, k in enumerate(counts) if k > 0]
    rec.finish_reason = finish_reason
    if passes is not None:
        rec.passes = passes
    rec.chunk_ns = [events_ns[i] for i in keep]
    rec.chunk_tokens = [counts[i] for i in keep]
    rec.output_tokens = sum(rec.chunk_tokens)
    rec.token_source = source
    rec.text = "".join(texts)
    if prompt_tokens is not None:
        rec.prompt_tokens = prompt_tokens
    rec.token_ids, rec.prompt_token_ids = ids, prompt_ids
    if any(stamps[i] is not None for i in keep):
        rec.server_chunk_ns = [stamps[i] or 0 for i in keep]
    if not saw_done and rec.finish_reason is None:
        rec.error_kind = "stream_cut"
        rec.error = f"stream ended after {len(payloads)} events without a finish_reason or [DONE]"
    elif not rec.chunk_ns:
        rec.error_kind = "no_tokens"
        rec.error = f"stream finished ({rec.finish_reason or '[DONE]'}) without any output token"


def _counts(
    texts: list[str], cum: list[int | None], final_usage: dict | None, tokenizer: Any
) -> tuple[list[int], str]:
    # Per-event usage: every event that carries text reports the running count.
    if any(c is not None for c in cum) and all(c is not None for c, t in zip(cum, texts) if t):
        counts, prev = [], 0
        for c in cum:
            counts.append(max(c - prev, 0) if c is not None else 0)
            prev = c if c is not None else prev
        if sum(counts) > 0:
            return counts, "usage_per_chunk"
    total = final_usage["completion_tokens"] if final_usage else None
    if tokenizer is not None:
        counts = tokens_per_text_piece(tokenizer, texts)
        if total is not None and sum(counts) != total:
            return apportion(total, counts), "usage_total+tokenizer"
        return counts, "tokenizer"
    text_events = [1 if t else 0 for t in texts]
    if total is not None:
        if total == sum(text_events):
            return text_events, "usage_total"
        return apportion(total, [len(t) for t in texts]), "usage_total+chars"
    return text_events, "chunks"


def tokens_per_text_piece(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Tokens of the joined text credited to the piece where each token's first character lies."""
    joined = "".join(texts)
    counts = [0] * len(texts)
    if not joined:
        return counts
    ends, pos = [], 0
    for t in texts:
        pos += len(t)
        ends.append(pos)
    for start, _end in tokenizer.encode(joined, add_special_tokens=False).offsets:
        counts[min(bisect.bisect_right(ends, start), len(texts) - 1)] += 1
    return counts


def load_tokenizer(path: str) -> Any:
    """A `tokenizers` tokenizer from a local tokenizer.json (imported only when one is asked
    for)."""
    from roofline.errors import UserError

    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(
            "--tokenizer needs the `tokenizers` package: pip install tokenizers"
        ) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:
        raise UserError(
            f"cannot load tokenizer {path!r} ({e}); give a local tokenizer.json"
        ) from None
