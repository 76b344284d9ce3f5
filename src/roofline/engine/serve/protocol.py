"""The OpenAI wire format: request models (validated with pydantic) and errors; the responses and
chunks a request gets back are built in response_builder.py.

Validation is strict about types (a string where a number belongs is a 400, not a silent cast) and
lenient about fields it does not use (clients such as the `openai` SDK send extras). Every error
leaves the server as OpenAI does: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roofline import speculation
from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.sequence import context_error
from roofline.kernel_modes import KernelsMode
from roofline.speculation import SpecOptions


class APIError(Exception):
    """An error with its HTTP status and OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = (
            status,
            message,
            type,
            code,
            param,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Strict):
    include_usage: bool = False


class _SamplingFields(_Strict):
    prompt_field: ClassVar[str]
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)  # 0 or -1 (vLLM's spelling) = off
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM extension
    ignore_eos: bool = False  # vLLM extension
    # vLLM extension: each choice (each chunk) carries its output token ids
    return_token_ids: bool = False
    speculative: bool = True  # roofline extension: false = decode this request without drafts
    # roofline extension: this request's speculation options (SpecOptions fields) instead of the
    # server's; see spec_options
    roofline_speculation: dict[str, Any] | None = None
    # roofline extension: at most this many threads for the passes that hold this request (the
    # fewest any live request asks wins; results do not depend on it). None: the server's choice
    roofline_threads: int | None = Field(default=None, ge=1)
    # roofline extension: the kernel shapes of the passes that hold this request, this CPU's
    # measured ones or the defaults (when every live request that asks names the same; results do
    # not depend on it). None: the server's --kernels
    roofline_kernels: KernelsMode | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None

    def spec_options(self) -> SpecOptions | None:
        """The request's own speculation options (None: the server's). Fields left out take
        SpecOptions' defaults, not the server's: a request names its whole configuration. A 400 for
        an unknown field, a bad value or a field only the server's owner sets (a file path)."""
        given = self.roofline_speculation
        if given is None:
            return None
        param = "roofline_speculation"
        known = set(speculation.options())
        for name in given:
            if name not in known:
                raise APIError(
                    400,
                    f"{param}: unknown option {name!r}; options: {', '.join(sorted(known))}",
                    param=f"{param}.{name}",
                    code="invalid_value",
                )
            if name in speculation.SERVER_ONLY:
                raise APIError(
                    400,
                    f"{param}: {name} is set when the server starts, not per request",
                    param=f"{param}.{name}",
                    code="invalid_value",
                )
        try:
            return SpecOptions(**given)
        except (TypeError, ValueError) as e:
            raise APIError(400, f"{param}: {e}", param=param, code="invalid_value") from None

    def stop_strings(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(s == "" for s in stops):
            raise APIError(
                400, "stop strings must not be empty", param="stop", code="invalid_value"
            )
        return tuple(stops)

    def wanted_max_tokens(self) -> int | None:
        return self.max_tokens

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ContentPart(_Strict):
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for p in self.content:
            if p.type != "text" or p.text is None:
                raise APIError(
                    400,
                    f"only text content parts are supported, got {p.type!r}",
                    param="messages",
                    code="invalid_value",
                )
            parts.append(p.text)
        return "".join(parts)


class ChatCompletionRequest(_SamplingFields):
    prompt_field: ClassVar[str] = "messages"  # names the prompt in errors
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def wanted_max_tokens(self) -> int | None:
        # The newer name wins when both are sent, as in OpenAI's API.
        return (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )

    def template_messages(self) -> list[dict[str, str]]:
        # "developer" is the newer name of "system"; chat templates only know the latter.
        return [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in self.messages
        ]


class CompletionRequest(_SamplingFields):
    prompt_field: ClassVar[str] = "prompt"
    prompt: str | list[int] | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's legacy default for completions

    def single_prompt(self) -> str | list[int]:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            if len(self.prompt) != 1:
                raise APIError(
                    400,
                    "only one prompt per request is supported",
                    param="prompt",
                    code="invalid_value",
                )
            return self.prompt[0]
        if isinstance(self.prompt, list) and not self.prompt:
            raise APIError(400, "prompt must not be empty", param="prompt", code="invalid_value")
        return self.prompt


MAX_JSON_DEPTH = 64  # a request body nests 5 levels; anything this deep is an attack or a bug
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NESTS = frozenset({dict, list})  # json.loads makes exactly these types
_TEXTS = frozenset({str, dict, list})
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def parse_json_body(raw: bytes) -> Any:
    """The body as JSON; a 400 for bad JSON, nesting deeper than MAX_JSON_DEPTH (naming the
    top-level field that nests) and strings with a lone UTF-16 surrogate (`"\\ud800"`, which no
    tokenizer can take)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise APIError(
            400, f"the request body is not valid JSON: {e}", code="invalid_json"
        ) from None
    except RecursionError:
        data = None
    # Cheap tests on the raw text first (a body of 800k token ids is walked for nothing otherwise):
    # fewer brackets than the depth limit cannot nest that deep, and a lone surrogate can only come
    # from an escape.
    deep_enough = raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
    where = (_too_deep(data) if data is not None else _too_deep_raw(raw)) if deep_enough else None
    if where is not None:
        raise APIError(
            400,
            f"{where or 'the request body'}: JSON nested deeper than {MAX_JSON_DEPTH} levels",
            param=where or None,
            code="invalid_json",
        )
    where = _lone_surrogate_path(data) if _SURROGATE_ESCAPE.search(raw) else None
    if where is not None:
        raise APIError(
            400,
            f"{where or 'the request body'}: a string holds a lone UTF-16 surrogate, which is not "
            "text; send valid Unicode",
            param=where or None,
            code="invalid_value",
        )
    return data


def _too_deep(data: Any) -> str | None:
    """The top-level key (or "" for the body itself) under which `data` nests deeper than
    MAX_JSON_DEPTH."""
    stack = [(data, 1, "")]
    while stack:
        node, depth, top = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return top
        if isinstance(node, dict):
            stack += [
                (v, depth + 1, top if depth > 1 else str(k))
                for k, v in node.items()
                if type(v) in _NESTS
            ]
        elif isinstance(node, list):
            stack += [(v, depth + 1, top) for v in node if type(v) in _NESTS]
    return None


def _too_deep_raw(raw: bytes) -> str:
    """The top-level key under which unparsable-deep JSON first passes MAX_JSON_DEPTH (scanned, not
    parsed)."""
    text = raw.decode("utf-8", "replace")
    depth, key, last_string, i = 0, "", "", 0
    while i < len(text):
        c = text[i]
        if c == '"':
            m = _JSON_STRING.match(text, i)
            if m is None:
                break
            last_string, i = m.group(1), m.end()
            continue
        if c in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return key
        elif c in "]}":
            depth -= 1
        elif c == ":" and depth == 1:
            key = last_string
        i += 1
    return key


def _lone_surrogate_path(data: Any) -> str | None:
    """Dotted path of the first string (value or key) with a lone surrogate; "" = the body
    itself."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _LONE_SURROGATE.search(node):
                return path
        elif isinstance(node, dict):
            for k, v in node.items():
                sub = f"{path}.{k}" if path else str(k)
                if _LONE_SURROGATE.search(k):
                    return sub
                stack.append((v, sub))
        # a list of token ids is the long case: skip its numbers without a path
        elif isinstance(node, list):
            stack += [
                (v, f"{path}.{i}" if path else str(i))
                for i, v in enumerate(node)
                if type(v) in _TEXTS
            ]
    return None


_UNSUPPORTED = (
    "logprobs",
    "top_logprobs",
    "echo",
    "best_of",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "tools",
    "suffix",
)


def _is_union_tag(loc_part: Any) -> bool:
    return isinstance(loc_part, str) and (
        "[" in loc_part or loc_part in {"str", "int", "float", "bool", "list", "dict"}
    )


def parse_request(model_cls: type[_SamplingFields], data: Any) -> _SamplingFields:
    """Validate one request body; the first problem becomes a 400 naming the field."""
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        req = model_cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        # pydantic names the union member that failed ("stop.str"); the client only needs the field
        # path.
        where = ".".join(str(x) for x in err["loc"] if not _is_union_tag(x)) or None
        raise APIError(
            400,
            f"{where}: {err['msg']}" if where else err["msg"],
            param=where,
            code="missing_field"
            if err["type"] == "missing"
            else "invalid_type"
            if err["type"].endswith("_type")
            else "invalid_value",
        ) from None
    if req.n != 1:
        raise APIError(400, "only n=1 is supported", param="n", code="invalid_value")
    req.spec_options()  # a 400 before anything runs
    for name in _UNSUPPORTED:  # better a clear 400 than a silently ignored option
        if data.get(name) and not (name == "best_of" and data[name] == 1):
            raise APIError(
                400,
                f"{name} is not supported by this server; leave it out",
                param=name,
                code="unsupported_parameter",
            )
    return req


def sampling_params(req: _SamplingFields, prompt_tokens: int, max_seq_len: int) -> SamplingParams:
    """SamplingParams for a validated request; a 400 when prompt + max_tokens overflow the context.

    When max_tokens is not given the request may use all the context the prompt leaves."""
    wanted = req.wanted_max_tokens()
    err = context_error(prompt_tokens, wanted, max_seq_len)
    if err:
        if prompt_tokens == 0:
            raise APIError(400, err, param=req.prompt_field, code="invalid_value")
        raise APIError(
            400,
            err,
            param="max_tokens" if prompt_tokens < max_seq_len else req.prompt_field,
            code="context_length_exceeded",
        )
    return SamplingParams(
        max_tokens=wanted if wanted is not None else max_seq_len - prompt_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=max(req.top_k, 0),
        seed=req.seed,
        stop=req.stop_strings(),
        stop_token_ids=tuple(req.stop_token_ids or ()),
        ignore_eos=req.ignore_eos,
    )
