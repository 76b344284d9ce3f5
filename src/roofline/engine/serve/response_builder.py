"""The OpenAI wire format's response side: whole responses, stream chunks and the usage chunk of
one request (`ResponseBuilder`), and their server-sent-event framing (`sse`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from roofline.engine.runtime.scheduler import Usage


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


class ResponseBuilder:
    """Builds the response objects of one request: same id, creation time and model on every
    chunk. prompt_token_ids: the prompt's ids, sent when the request asked for token ids (as vLLM
    does: top level in a chat, in the choice of a completion), in a whole response or in a
    stream's first chunk."""

    def __init__(self, model: str, *, chat: bool, prompt_token_ids: list[int] | None = None):
        self.chat = chat
        self.prompt_token_ids = prompt_token_ids
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def full(
        self,
        text: str,
        finish_reason: str,
        usage: Usage,
        *,
        token_ids: list[int] | None = None,
        stats: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """The whole response; token_ids when the request asked for them; stats = the request's
        weight passes and draft counts (`"roofline"`: passes, drafted_tokens, accepted_tokens)."""
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
            obj = "text_completion"
        if token_ids is not None:
            choice["token_ids"] = token_ids
        out = {**self._head(obj), "choices": [choice], "usage": usage_dict(usage)}
        if token_ids is not None and self.prompt_token_ids is not None:
            (out if self.chat else choice)["prompt_token_ids"] = self.prompt_token_ids
        if stats is not None:
            out["roofline"] = stats
        return out

    def chunk(
        self,
        *,
        text: str | None = None,
        role: bool = False,
        finish_reason: str | None = None,
        with_usage_field: bool = False,
        token_ids: list[int] | None = None,
        stats: dict[str, int] | None = None,
        prompt_ids: bool = False,
    ) -> dict[str, Any]:
        """One stream chunk; prompt_ids: with the prompt's ids (the first chunk of a stream that
        asked for token ids)."""
        if self.chat:
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {
                "index": 0,
                "text": text or "",
                "finish_reason": finish_reason,
                "logprobs": None,
            }
            out = {**self._head("text_completion"), "choices": [choice]}
        if token_ids is not None:
            choice["token_ids"] = token_ids
        if prompt_ids and self.prompt_token_ids is not None:
            (out if self.chat else choice)["prompt_token_ids"] = self.prompt_token_ids
        if stats is not None:
            out["roofline"] = stats
        # OpenAI sends "usage": null on every chunk but the last when asked for usage
        if with_usage_field:
            out["usage"] = None
        return out

    def usage_chunk(self, usage: Usage, stats: dict[str, int] | None = None) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = {**self._head(obj), "choices": [], "usage": usage_dict(usage)}
        if stats is not None:
            out["roofline"] = stats
        return out


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    payload = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {payload}\n\n".encode()
