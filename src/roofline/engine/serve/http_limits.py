"""What one HTTP request may cost the server (header and body sizes, time to send the body; each
default's reason beside it) and the socket options every connection gets.

Connections are uvicorn's h11 protocol plus TCP_NODELAY: else Nagle's algorithm holds a response's
last small write until the client's delayed ACK (~40 ms on Linux), in every latency the bench
measures. h11 rather than httptools: it answers HTTP/1.0 clients close-delimited, bounds the
header block, and reports a malformed request through an error we can answer in JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from roofline.engine.serve.protocol import APIError

# A 128k-token prompt is ~0.5 MB of text (~4 bytes a token), twice that JSON-escaped, and 128k
# token ids ~0.9 MB: room for every real request, while a far larger body is refused before it is
# parsed and tokenized (which blocks the event loop and takes GBs of RSS).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# h11's default buffer (nginx allows 4 x 8 KiB); the openai SDK sends ~15 fields
DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_HEADER_COUNT = 100
# 4 MiB at 1 Mbit/s; a client slower than that holds a connection for nothing
DEFAULT_BODY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S


def set_nodelay(sock) -> None:
    """Turn Nagle's algorithm off on a TCP socket (no-op for other kinds)."""
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # already closed by the peer
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 connection with TCP_NODELAY set when accepted, and a JSON body (431 for an
    oversized header block) on the requests h11 refuses to parse."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._refusal_status = 400
        next_event = self.conn.next_event

        def remembering_next_event():
            try:
                return next_event()
            except h11.RemoteProtocolError as e:
                self._refusal_status = (
                    e.error_status_hint if e.error_status_hint in (400, 414, 431) else 400
                )
                raise

        self.conn.next_event = remembering_next_event

    def connection_made(self, transport) -> None:  # type: ignore[override]
        set_nodelay(transport.get_extra_info("socket"))
        super().connection_made(transport)

    def send_400_response(self, msg: str) -> None:
        status = self._refusal_status
        why = "the request headers are too large" if status == 431 else "malformed HTTP request"
        body = json.dumps(APIError(status, why, code="bad_http_request").body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            for event in (
                h11.Response(status_code=status, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # the peer broke the exchange past the point of answering
            pass
        self.transport.close()


def check_headers(headers: list[tuple[bytes, bytes]], limits: Limits) -> None:
    """A 431 for too many header fields or too many header bytes. (h11 bounds the bytes it buffers
    of a header block still incomplete; one that arrives whole in a single read is measured
    here.)"""
    if len(headers) > limits.max_header_count:
        raise APIError(
            431,
            f"too many request headers ({len(headers)}; at most {limits.max_header_count})",
            code="headers_too_large",
        )
    size = sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"
    if size > limits.max_header_bytes:
        raise APIError(
            431,
            f"the request headers take {size} bytes; at most {limits.max_header_bytes}",
            code="headers_too_large",
        )


async def read_body(request, limits: Limits) -> bytes:
    """The request body, refused with a 413 once it passes max_body_bytes (before reading any of it
    when Content-Length says so) and with a 408 when it takes longer than body_timeout_s to
    arrive."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise _too_large(int(declared), limits)
    parts: list[bytes] = []
    size = 0

    async def receive() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise _too_large(size, limits)
            parts.append(chunk)

    try:
        await asyncio.wait_for(receive(), limits.body_timeout_s)
    except TimeoutError:
        raise APIError(
            408,
            f"the request body did not arrive within {limits.body_timeout_s:g} s",
            code="request_timeout",
        ) from None
    return b"".join(parts)


def _too_large(size: int, limits: Limits) -> APIError:
    return APIError(
        413,
        f"the request body has {size} bytes or more; this server takes at most "
        f"{limits.max_body_bytes} (--max-body-bytes)",
        code="request_too_large",
    )
