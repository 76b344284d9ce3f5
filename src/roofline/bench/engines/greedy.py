"""Greedy outputs on a fixed prompt set, and whether two sets of them are the same.

This is the exactness gate's evidence: a faster configuration is only a win if it decodes the same
tokens. Token ids are compared where the engine returns them (the embedded server, vLLM and newer
SGLang answer `"return_token_ids": true` with `choices[i].token_ids`; llama-server's native
`/completion` answers `"return_tokens": true` with `tokens`); otherwise the text is, which hides a
different tokenization of the same text but nothing a user would read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roofline.bench.api import parse_endpoint
from roofline.bench.workloads import Prompt
from roofline.errors import UserError

TIMEOUT_S = 600.0  # one greedy request; CPU engines take seconds, a loaded GPU engine much less
_PIECE_TOKENS = 4  # tokens shown on each side of a divergence
_PIECE_CHARS = 24


class GreedyRequestFailed(UserError):
    """An engine did not answer a greedy request (HTTP error, refused connection, timeout)."""


@dataclass(frozen=True)
class GreedyOutput:
    prompt_id: str
    text: str
    token_ids: tuple[int, ...] | None  # None when the engine gave text only
    # the prompt as the engine tokenized it (chat template applied), when it says (vLLM and the
    # embedded server answer `return_token_ids` with them): what a replay of speculation needs
    prompt_token_ids: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        out = {
            "prompt_id": self.prompt_id,
            "text": self.text,
            "token_ids": None if self.token_ids is None else list(self.token_ids),
        }
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = list(self.prompt_token_ids)
        return out

    @classmethod
    def from_json(cls, d: dict) -> GreedyOutput:
        ids, prompt = d.get("token_ids"), d.get("prompt_token_ids")
        return cls(
            prompt_id=str(d["prompt_id"]),
            text=str(d.get("text", "")),
            token_ids=None if ids is None else tuple(int(t) for t in ids),
            prompt_token_ids=None if prompt is None else tuple(int(t) for t in prompt),
        )


@dataclass(frozen=True)
class Exactness:
    exact: bool
    compared: int  # prompts compared
    basis: str  # "token_ids" | "text"
    first_prompt: str | None = None  # first divergent prompt id
    first_position: int | None = None  # token index (or character index when basis == "text")
    baseline_piece: str = ""  # a few tokens/characters around the divergence, for the report
    candidate_piece: str = ""
    streams: int = 1  # requests in flight when the candidate's output was taken

    def to_json(self) -> dict:
        return {
            "exact": self.exact,
            "compared": self.compared,
            "basis": self.basis,
            "first_prompt": self.first_prompt,
            "first_position": self.first_position,
            "baseline_piece": self.baseline_piece,
            "candidate_piece": self.candidate_piece,
            "streams": self.streams,
        }

    @classmethod
    def from_json(cls, d: dict) -> Exactness:
        return cls(
            exact=bool(d["exact"]),
            compared=int(d["compared"]),
            basis=str(d["basis"]),
            first_prompt=d.get("first_prompt"),
            first_position=d.get("first_position"),
            baseline_piece=str(d.get("baseline_piece", "")),
            candidate_piece=str(d.get("candidate_piece", "")),
            streams=int(d.get("streams", 1)),
        )


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """The first index where a and b differ (a length difference counts at the shorter's end)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _piece(seq: Sequence, at: int, basis: str) -> str:
    if basis == "token_ids":
        return " ".join(str(t) for t in seq[max(0, at - _PIECE_TOKENS) : at + _PIECE_TOKENS])
    return str(seq[max(0, at - _PIECE_CHARS) : at + _PIECE_CHARS])


def compare_outputs(
    baseline: Sequence[GreedyOutput], candidate: Sequence[GreedyOutput]
) -> Exactness:
    """Same greedy output for every baseline prompt? Token ids when both sides have them for every
    prompt, else text. A prompt the candidate lacks diverges at position 0."""
    by_id = {c.prompt_id: c for c in candidate}
    pairs = [(b, by_id.get(b.prompt_id)) for b in baseline]
    with_ids = all(
        c is not None and b.token_ids is not None and c.token_ids is not None for b, c in pairs
    )
    basis = "token_ids" if with_ids and pairs else "text"
    for b, c in pairs:
        if c is None:
            return Exactness(
                False,
                len(pairs),
                basis,
                b.prompt_id,
                0,
                _piece(b.token_ids if basis == "token_ids" else b.text, 0, basis),
                "(no output)",
            )
        x, y = (b.token_ids, c.token_ids) if basis == "token_ids" else (b.text, c.text)
        at = first_difference(x, y)
        if at is not None:
            return Exactness(
                False,
                len(pairs),
                basis,
                b.prompt_id,
                at,
                _piece(x, at, basis),
                _piece(y, at, basis),
            )
    return Exactness(True, len(pairs), basis)


def messages_of(p: Prompt) -> list[dict]:
    """The chat messages a prompt stands for (a bare prompt is one user message, as bench sends
    it)."""
    return p.messages if p.messages is not None else [{"role": "user", "content": p.prompt or ""}]


def token_ids_of(value: Any) -> tuple[int, ...] | None:
    """A list of token ids as a tuple; None for anything else (absent, empty, not all ints)."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    ):
        return tuple(value)
    return None


def _roots(url: str) -> tuple[str, str]:
    """(server root, OpenAI base ending in /v1) of a URL in any form bench accepts."""
    ep = parse_endpoint(url)
    root = f"{ep.scheme}://{ep.host_header}{ep.root_path}"
    return root, f"{ep.scheme}://{ep.host_header}{ep.base_path}"


async def _post(session, url: str, body: dict) -> tuple[int, Any]:
    import aiohttp

    try:
        async with session.post(url, json=body) as r:
            text = await r.text()
    except (TimeoutError, aiohttp.ClientError) as e:
        raise GreedyRequestFailed(f"no answer from {url} ({type(e).__name__}: {e})") from None
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


async def _first_model(session, base: str) -> str | None:
    """The first model GET /v1/models lists (None when it lists none or does not answer)."""
    import aiohttp

    try:
        async with session.get(f"{base}/models") as r:
            data = await r.json(content_type=None)
        return next(
            (
                m["id"]
                for m in data.get("data") or ()
                if isinstance(m, dict) and isinstance(m.get("id"), str)
            ),
            None,
        )
    except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
        return None


def _failed(what: str, prompt: Prompt, status: int, data: Any) -> GreedyRequestFailed:
    shown = data if isinstance(data, str) else json.dumps(data)
    return GreedyRequestFailed(
        f"greedy request for prompt {prompt.id!r} to {what} answered HTTP {status}: {shown[:300]}"
    )


def _session(timeout_s: float):
    import aiohttp

    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))


async def openai_greedy(
    url: str,
    model_id: str | None,
    prompts: Sequence[Prompt],
    max_tokens: int,
    *,
    timeout_s: float = TIMEOUT_S,
    extra_body: Mapping[str, Any] | None = None,
) -> list[GreedyOutput]:
    """Non-streamed chat completions at temperature 0 asking for `return_token_ids`; a server that
    refuses the field (400/422) is asked again without it, for text. extra_body: fields added to
    every request."""
    _, base = _roots(url)
    out = []
    async with _session(timeout_s) as session:
        model = model_id or await _first_model(session, base)
        ask_ids = True
        for p in prompts:
            body: dict[str, Any] = {
                **(extra_body or {}),
                "messages": messages_of(p),
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "stream": False,
            }
            if model:
                body["model"] = model
            status, data = await _post(
                session,
                f"{base}/chat/completions",
                {**body, "return_token_ids": True} if ask_ids else body,
            )
            if ask_ids and status in (400, 422):
                ask_ids = False
                status, data = await _post(session, f"{base}/chat/completions", body)
            if status != 200 or not isinstance(data, dict) or not data.get("choices"):
                raise _failed(f"{base}/chat/completions", p, status, data)
            choice = data["choices"][0]
            text = (choice.get("message") or {}).get("content") or choice.get("text") or ""
            prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
            out.append(
                GreedyOutput(
                    p.id, text, token_ids_of(choice.get("token_ids")), token_ids_of(prompt_ids)
                )
            )
    return out


async def llamacpp_greedy(
    url: str,
    model_id: str | None,
    prompts: Sequence[Prompt],
    max_tokens: int,
    *,
    timeout_s: float = TIMEOUT_S,
) -> list[GreedyOutput]:
    """llama-server: the chat template applied by the server (POST /apply-template), then its native
    POST /completion with `return_tokens`. A server without these routes (llama-cpp-python's) is
    asked through the OpenAI chat route instead, for text."""
    root, _ = _roots(url)
    out = []
    async with _session(timeout_s) as session:
        for p in prompts:
            status, data = await _post(
                session, f"{root}/apply-template", {"messages": messages_of(p)}
            )
            if status == 404 and not out:
                return await openai_greedy(url, model_id, prompts, max_tokens, timeout_s=timeout_s)
            if (
                status != 200
                or not isinstance(data, dict)
                or not isinstance(data.get("prompt"), str)
            ):
                raise _failed(f"{root}/apply-template", p, status, data)
            body = {
                "prompt": data["prompt"],
                "n_predict": max_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "return_tokens": True,
                "cache_prompt": False,
                "stream": False,
            }
            status, data = await _post(session, f"{root}/completion", body)
            if status != 200 or not isinstance(data, dict):
                raise _failed(f"{root}/completion", p, status, data)
            out.append(
                GreedyOutput(p.id, str(data.get("content", "")), token_ids_of(data.get("tokens")))
            )
    return out
