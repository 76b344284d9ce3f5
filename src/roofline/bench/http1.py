"""HTTP/1.1 response framing for the measuring client, and the one-shot fetch for discovery.

`httptools` (llhttp) parses; this module adds what it leaves to its caller, so every body-length
rule of RFC 9112 section 6.3 holds, applied once at the headers and once at the end:

1. HEAD, 1xx, 204 and 304 responses end with their headers (1xx but 101 is interim);
2. Transfer-Encoding ending in chunked: chunked framing, extensions, trailers (llhttp); with
   Content-Length too, Transfer-Encoding wins and the connection is not reused;
3. other Transfer-Encoding, or no length: the body runs to the server's close; httptools has no
   end-of-input call, so the close completes the response (`ends_at_close`);
4. Content-Length: exactly that many bytes (llhttp).

A connection is reused only when `should_keep_alive` allows it and the body's end was framed. A
bare LF line terminator is accepted (section 2.2).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import httptools

from roofline.bench.api import Endpoint, http_request_bytes

# The one failure class the client acts on (it resends once on a fresh connection). A failure's
# kind is an open set (http_<status> among them), written as the request's error_kind: text, not
# an enum.
CLOSED_BEFORE_RESPONSE = "closed_before_response"


class Failure(Exception):
    """A request that ended without a usable response: `kind` names the failure class."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class FetchError(Exception):
    """A discovery or health request that got no HTTP answer."""


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once (no Nagle): with delayed ACKs a held request or SSE event waits ~40
    ms."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def response_parser(protocol: Any) -> Any:
    """An llhttp response parser calling protocol's on_* methods, lenient only where the RFC
    allows."""
    parser = httptools.HttpResponseParser(protocol)
    # TE + CL: Transfer-Encoding overrides (RFC 9112 6.3 item 3); LF alone ends a line (2.2)
    parser.set_dangerous_leniencies(lenient_chunked_length=True, lenient_optional_cr_before_lf=True)
    return parser


def is_interim(status: int) -> bool:
    """A 1xx response that a final response follows (101 switches protocols: it is final)."""
    return 100 <= status < 200 and status != 101


def ends_at_close(status: int, method: str, headers: dict[bytes, bytes]) -> bool:
    """True when this response's body is delimited by the connection closing (RFC 9112 6.3 items 4,
    7). `headers` has lower-case names."""
    if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return False
    te = headers.get(b"transfer-encoding")
    if te is not None:
        return te.rsplit(b",", 1)[-1].strip().lower() != b"chunked"
    return b"content-length" not in headers


def reuse_forbidden(headers: dict[bytes, bytes]) -> bool:
    """Both Transfer-Encoding and Content-Length: honoured, but the connection is not reused (6.3
    item 3)."""
    return b"transfer-encoding" in headers and b"content-length" in headers


def clean_close(exc: BaseException | None) -> bool:
    """A close that completes a close-delimited body: the peer's FIN (or a TLS end without
    close_notify, which many servers send); a reset or any other error is a cut."""
    return exc is None or isinstance(exc, ssl.SSLEOFError)


class _Fetch(asyncio.Protocol):
    """A one-shot request (discovery, health checks): collects status, headers and body."""

    def __init__(self, waiter: asyncio.Future, method: str) -> None:
        self.waiter = waiter
        self.method = method
        self.parser = response_parser(self)
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    def data_received(self, data: bytes) -> None:
        if self.waiter.done():
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            if not self.waiter.done():
                self.waiter.set_exception(Failure("malformed_http", str(e)))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter.done():
            return
        if (
            self.status
            and ends_at_close(self.status, self.method, self.headers)
            and clean_close(exc)
        ):
            self._done()
        else:
            self.waiter.set_exception(
                Failure(CLOSED_BEFORE_RESPONSE, f"connection closed ({exc or 'EOF'})")
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # trailer fields do not replace header fields
            self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if not is_interim(status):
            self.status = status
            if self.method == "HEAD":
                self._done()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        if not self.status:  # the end of an interim (1xx) response: the final one follows
            self.headers = {}
            return
        self._done()

    def _done(self) -> None:
        if not self.waiter.done():
            self.waiter.set_result((self.status, self.headers, self.body))


async def fetch(
    endpoint: Endpoint, path: str, *, timeout_s: float = 5.0, method: str = "GET"
) -> tuple[int, dict[bytes, bytes], bytes]:
    """`method` path on its own connection: (status, headers, body); raises `FetchError` on any
    failure."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    transport = None
    try:
        ssl_ctx = ssl.create_default_context() if endpoint.scheme == "https" else None
        transport, _ = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Fetch(waiter, method),
                endpoint.host,
                endpoint.port,
                ssl=ssl_ctx,
                server_hostname=endpoint.host if ssl_ctx else None,
            ),
            timeout_s,
        )
        transport.write(http_request_bytes(endpoint, method, path, close=True))
        return await asyncio.wait_for(waiter, timeout_s)
    except Failure as f:
        raise FetchError(str(f)) from None
    except TimeoutError:
        raise FetchError(
            f"no answer from {endpoint.host}:{endpoint.port}{path} within {timeout_s:g}s"
        ) from None
    except ConnectionRefusedError:
        raise FetchError(f"connection refused by {endpoint.host}:{endpoint.port}") from None
    except socket.gaierror as e:
        raise FetchError(f"cannot resolve host {endpoint.host!r} ({e.strerror})") from None
    except ssl.SSLError as e:
        raise FetchError(
            f"TLS handshake with {endpoint.host}:{endpoint.port} failed ({e.reason or e})"
        ) from None
    except OSError as e:
        raise FetchError(
            f"cannot connect to {endpoint.host}:{endpoint.port} ({e.strerror or e})"
        ) from None
    finally:
        if transport is not None:
            transport.close()
