"""After a stream ends: decode its events and count the output tokens each one carried.

Done once per request, after the last byte, never per chunk on the hot path. The count per event
comes from the best source the server allows, and the record says which one was used:

- `usage_per_chunk`: the server put cumulative `usage.completion_tokens` in every event
  (vLLM/SGLang `stream_options.continuous_usage_stats`); tokens of event i = usage_i - usage_(i-1).
- `tokenizer`: the model's tokenizer, given by the user. The whole text is encoded once and each
  token is credited to the event in which its first character arrived (token offsets), so a token
  split across two events is counted once. When the server also gave a total, the counts are scaled
  to it (`usage_total+tokenizer`).
- `usage_total`: only the final total; if it equals the number of text-bearing events, 1 each,
  otherwise the total is shared out in proportion to each event's characters (`usage_total+chars`).
- `chunks`: nothing better: 1 token per text-bearing event (undercounts multi-token chunks).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

from roofline.bench.records import RequestRecord

_TEXT_KEYS = ("content", "reasoning_content", "reasoning")


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split an integer total in proportion to weights (largest remainder): the parts sum to total."""
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
    except ValueError:
        objs = None  # find the culprit below
    if objs is not None and len(objs) == len(payloads) and all(o.__class__ is dict for o in objs):
        return objs
    for i, payload in enumerate(payloads):
        try:
            obj = json.loads(payload)
        except ValueError:
            return f"event {i} is not JSON: {payload[:80]!r}"
        if not isinstance(obj, dict):
            return f"event {i} is not a JSON object: {payload[:80]!r}"
    return "events could not be decoded together"  # e.g. an event holding two JSON values


def _event_text(obj: dict) -> tuple[str, str | None]:
    """Output text of one chat or completions event, and its finish_reason if it has one."""
    choices = obj.get("choices")
    if choices.__class__ is list and len(choices) == 1 and choices[0].__class__ is dict:
        # the common case, one choice with a plain content delta: no loops
        choice = choices[0]
        delta = choice.get("delta")
        if delta.__class__ is dict and len(delta) == 1 and delta.get("content").__class__ is str:
            finish = choice.get("finish_reason")
            return delta["content"], str(finish) if finish else None
    text = ""
    finish = None
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in _TEXT_KEYS:
                piece = delta.get(key)
                if isinstance(piece, str):
                    text += piece
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    text += fn["arguments"]
        elif isinstance(choice.get("text"), str):
            text += choice["text"]
        if choice.get("finish_reason"):
            finish = str(choice["finish_reason"])
    return text, finish


def _passes(obj: dict) -> int | None:
    """Weight passes (verify steps) when a server reports them: SGLang's `spec_verify_ct`, or ours."""
    for holder in (obj.get("usage"), obj.get("meta_info"), obj.get("roofline")):
        if isinstance(holder, dict):
            for key in ("spec_verify_ct", "passes"):
                if isinstance(holder.get(key), int):
                    return holder[key]
    return None


def finalize(
    rec: RequestRecord,
    events_ns: Sequence[int],
    payloads: Sequence[bytes],
    saw_done: bool,
    tokenizer: Any = None,
) -> None:
    """Fill rec's chunks, token counts, text and finish reason; mark it failed if the stream was bad."""
    objs = decode_events(payloads)
    if isinstance(objs, str):
        rec.error_kind, rec.error = "malformed_sse", objs
        return
    texts: list[str] = []
    cum: list[int | None] = []  # cumulative completion_tokens per event, when given
    stamps: list[int | None] = []
    final_usage: dict | None = None
    for i, obj in enumerate(objs):
        if "error" in obj and obj["error"] is not None:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            rec.error_kind = "stream_error"
            rec.error = f"server error in stream after {i} events: {str(msg)[:200]}"
            return
        text, finish = _event_text(obj)
        if finish:
            rec.finish_reason = finish
        usage = obj.get("usage")
        if usage.__class__ is dict and usage.get("completion_tokens").__class__ is int:
            final_usage = usage
            cum.append(usage["completion_tokens"])
            if ("spec_verify_ct" in usage or "passes" in usage) and (passes := _passes(obj)) is not None:
                rec.passes = passes
        else:
            cum.append(None)
        if "meta_info" in obj or "roofline" in obj:
            if (passes := _passes(obj)) is not None:
                rec.passes = passes
        stamp = obj.get("roofline_t_ns")
        stamps.append(stamp if stamp.__class__ is int else None)
        texts.append(text)

    counts, source = _counts(texts, cum, final_usage, tokenizer)
    keep = [i for i, k in enumerate(counts) if k > 0]
    rec.chunk_ns = [events_ns[i] for i in keep]
    rec.chunk_tokens = [counts[i] for i in keep]
    rec.output_tokens = sum(rec.chunk_tokens)
    rec.token_source = source
    rec.text = "".join(texts)
    if final_usage is not None and isinstance(final_usage.get("prompt_tokens"), int):
        rec.prompt_tokens = final_usage["prompt_tokens"]
    if any(stamps[i] is not None for i in keep):
        rec.server_chunk_ns = [stamps[i] or 0 for i in keep]
    if not saw_done and rec.finish_reason is None:
        rec.error_kind = "stream_cut"
        rec.error = f"stream ended after {len(payloads)} events without a finish_reason or [DONE]"
    elif not rec.chunk_ns:
        rec.error_kind = "no_tokens"
        rec.error = f"stream finished ({rec.finish_reason or '[DONE]'}) without any output token"


def _counts(texts: list[str], cum: list[int | None], final_usage: dict | None, tokenizer: Any) -> tuple[list[int], str]:
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
    """A `tokenizers` tokenizer from a local tokenizer.json (imported only when one is asked for)."""
    from roofline.errors import UserError

    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError("--tokenizer needs the `tokenizers` package: pip install tokenizers") from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise UserError(f"cannot load tokenizer {path!r} ({e}); give a local tokenizer.json") from None
