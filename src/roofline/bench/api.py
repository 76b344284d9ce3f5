"""The OpenAI-compatible surface: endpoint URLs, request bodies, and what a server says about
itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from roofline.errors import UserError

CHAT = "chat"
COMPLETIONS = "completions"

# How much token accounting to ask of the server, best first. The warm-up falls back along this list
# when a strict server rejects an option (400/422), so the measured requests use what it accepts.
# stream_options {include_usage, continuous_usage_stats} (vLLM, SGLang)
USAGE_PER_CHUNK = "per-chunk"
USAGE_FINAL = "final"  # stream_options {include_usage} (OpenAI)
USAGE_NONE = "none"  # no stream_options at all
USAGE_LEVELS = (USAGE_PER_CHUNK, USAGE_FINAL, USAGE_NONE)


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str  # up to and including /v1
    api: str = CHAT  # chat | completions
    api_key: str | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.base_path}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def stream_path(self) -> str:
        return (
            f"{self.base_path}/chat/completions"
            if self.api == CHAT
            else f"{self.base_path}/completions"
        )

    @property
    def root_path(self) -> str:
        """The server's root (health and version live beside /v1, not under it)."""
        return self.base_path.removesuffix("/v1")


def parse_endpoint(url: str, *, api: str | None = None, api_key: str | None = None) -> Endpoint:
    """'http://h:8000', '.../v1' or '.../v1/chat/completions' -> Endpoint (the path picks the
    API)."""
    text = url if "://" in url else f"http://{url}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise UserError(
            f"cannot read URL {url!r} ({e}); write e.g. http://127.0.0.1:8000"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"cannot use URL {url!r}: write http://HOST:PORT or https://HOST:PORT")
    path = parts.path.rstrip("/")
    found = None
    for suffix, kind in (("/chat/completions", CHAT), ("/completions", COMPLETIONS)):
        if path.endswith(suffix):
            path, found = path[: -len(suffix)], kind
            break
    if not path.endswith("/v1"):
        path = f"{path}/v1"
    if api is not None and found is not None and api != found:
        raise UserError(f"URL {url!r} names the {found} API but --api is {api}; drop one of them")
    return Endpoint(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
        base_path=path,
        api=api or found or CHAT,
        api_key=api_key,
    )


def request_body(
    endpoint: Endpoint,
    *,
    model: str,
    prompt: str | None = None,
    messages: list[dict] | None = None,
    max_tokens: int,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    usage: str = USAGE_PER_CHUNK,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """JSON body of one streamed request. Chat takes messages (a prompt becomes one user
    message)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if endpoint.api == CHAT:
        body["messages"] = (
            messages if messages is not None else [{"role": "user", "content": prompt or ""}]
        )
    else:
        if prompt is None and messages is not None:
            prompt = "\n\n".join(str(m.get("content", "")) for m in messages)
        body["prompt"] = prompt or ""
    if usage == USAGE_PER_CHUNK:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    elif usage == USAGE_FINAL:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM, SGLang and llama.cpp honour it; others may reject it
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def http_request_bytes(
    endpoint: Endpoint, method: str, path: str, body: bytes | None = None, *, close: bool = False
) -> bytes:
    """A complete HTTP/1.1 request, built once so that sending it is one write."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {endpoint.host_header}",
        "User-Agent: roofline-bench",
    ]
    if body is not None:
        lines += [
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"Content-Length: {len(body)}",
        ]
    if endpoint.api_key:
        lines.append(f"Authorization: Bearer {endpoint.api_key}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _entries(models_json: Any) -> list[dict]:
    """The model objects of a GET /v1/models answer (anything else in `data` is skipped)."""
    data = models_json.get("data") if isinstance(models_json, dict) else None
    return [m for m in data or () if isinstance(m, dict)]


def model_ids(models_json: Any) -> list[str]:
    """Model names listed by GET /v1/models."""
    return [m["id"] for m in _entries(models_json) if isinstance(m.get("id"), str)]


def roofline_info(models_json: Any, model: str) -> dict | None:
    """The `roofline` extension of a listed model ({"bytes_per_token", "file_bytes_per_token",
    "dtype", ...}), if present."""
    for m in _entries(models_json):
        if m.get("id") == model and isinstance(m.get("roofline"), dict):
            return m["roofline"]
    return None


def choose_model(listed: list[str], wanted: str | None) -> str | None:
    """The served model name: the one asked for if listed (or if nothing is listed), else the first
    listed."""
    if listed and wanted not in listed:
        return listed[0]
    return wanted
