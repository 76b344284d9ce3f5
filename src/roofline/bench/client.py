"""The measuring client: HTTP/1.1 over asyncio protocols, streaming SSE, one timestamp per read.

So that the client is not what is measured: connections open before the measured requests and stay
alive; a request is one prebuilt `write`; `httptools` (C) parses inside `data_received`, so a read
costs one timestamp, the SSE split and two appends, no task switch; JSON and token counting wait
for the stream's end and run in the background (`recorder`), so streams ending together do not
delay the others. Times are `perf_counter_ns()`, the machine-wide monotonic clock. Framing is
`http1`'s; a server ignoring `"stream": true` is one event (TTFT = E2E). Every failure ends as a
record with `error_kind` and a reason.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from time import perf_counter_ns
from typing import Any

import httptools

from roofline.bench.api import Endpoint, http_request_bytes
from roofline.bench.http1 import (
    CLOSED_BEFORE_RESPONSE,
    FetchError,
    clean_close,
    ends_at_close,
    fetch,
    is_interim,
    response_parser,
    reuse_forbidden,
    set_nodelay,
)
from roofline.bench.http1 import Failure as _Failure
from roofline.bench.records import RequestRecord
from roofline.bench.sse import SSEParser

__all__ = ["Client", "FetchError", "fetch", "set_nodelay"]

_ERR_BODY_LIMIT = 4096
_DONE = b"[DONE]"


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False
        self._reset()

    def _reset(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.parser: Any = None
        self.method = "POST"
        self.until_close = False  # the body ends when the server closes the connection
        self.no_reuse = False
        self.sse: SSEParser | None = None
        self.now = 0
        self.first_byte_ns = 0
        self.status = 0
        self.streaming = False
        self.headers: dict[bytes, bytes] = {}
        self.events_ns: list[int] = []
        self.payloads: list[bytes] = []
        self.saw_done = False
        self.err_body = b""
        # a 200 JSON answer (the server did not stream): kept whole, one event
        self.whole_json = False
        self.complete = False
        self.keep_alive = False

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.now = t = perf_counter_ns()
        if self.waiter is None:
            return  # bytes outside a request (a server's stray output): ignored
        if not self.first_byte_ns:
            self.first_byte_ns = t
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail("malformed_http", f"invalid HTTP response: {e}")
            self.transport.abort()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            if self.until_close and clean_close(exc):  # a close-delimited body: the close ends it
                self.now = perf_counter_ns()
                self._complete(keep_alive=False)
            elif not self.first_byte_ns:
                self._fail(
                    "closed_before_response",
                    f"connection closed before any response ({exc or 'EOF'})",
                )
            elif self.streaming and self.status == 200:
                self._fail(
                    "stream_cut",
                    f"connection closed mid-stream after {len(self.payloads)} events "
                    f"({exc or 'EOF'})",
                )
            else:
                self._fail(
                    "closed_mid_response",
                    f"connection closed before the response ended ({exc or 'EOF'})",
                )

    # -- httptools callbacks ---------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # trailer fields do not replace header fields
            self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if is_interim(status):  # 100 Continue, 103 Early Hints: the final response follows
            return
        self.status = status
        ctype = self.headers.get(b"content-type", b"")
        self.streaming = status == 200 and b"event-stream" in ctype
        self.whole_json = status == 200 and not self.streaming and b"json" in ctype
        self.until_close = ends_at_close(status, self.method, self.headers)
        self.no_reuse = reuse_forbidden(self.headers)
        if self.method == "HEAD":  # no body, whatever the headers announce
            self._complete(keep_alive=self.parser.should_keep_alive() and not self.no_reuse)

    def on_body(self, body: bytes) -> None:
        if not self.streaming:
            if self.whole_json:
                self.err_body += body
            elif len(self.err_body) < _ERR_BODY_LIMIT:
                self.err_body += body[: _ERR_BODY_LIMIT - len(self.err_body)]
            return
        now = self.now
        for payload in self.sse.feed(body):
            if payload == _DONE:
                self.saw_done = True
            else:
                self.events_ns.append(now)
                self.payloads.append(payload)

    def on_message_complete(self) -> None:
        if not self.status:  # the end of an interim response
            self.headers = {}
            return
        # llhttp forgets keep-alive once this callback returns
        self._complete(keep_alive=self.parser.should_keep_alive() and not self.no_reuse)

    def _complete(self, keep_alive: bool) -> None:
        if self.complete:
            return
        if self.streaming:
            for payload in self.sse.close():  # an event the server did not close with a blank line
                if payload == _DONE:
                    self.saw_done = True
                else:
                    self.events_ns.append(self.now)
                    self.payloads.append(payload)
        self.complete = True
        self.keep_alive = keep_alive
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    # -- driving one request ---------------------------------------------------------------------
    def begin(self, request: bytes, waiter: asyncio.Future, method: str = "POST") -> int:
        """Send a prebuilt request; return the send time."""
        self._reset()
        self.used = True
        self.method = method
        self.waiter = waiter
        self.parser = response_parser(self)
        self.sse = SSEParser()
        self.transport.write(request)
        return perf_counter_ns()

    def _fail(self, kind: str, message: str) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(_Failure(kind, message))

    def abort(self, kind: str, message: str) -> None:
        self._fail(kind, message)
        if self.transport is not None:
            self.transport.abort()
        self.closed = True

    @property
    def reusable(self) -> bool:
        return not self.closed and self.complete and self.keep_alive


class Client:
    """A pool of keep-alive connections to one endpoint and the request loop that measures them."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._ssl = ssl.create_default_context() if endpoint.scheme == "https" else None
        self.server_header: str | None = None

    async def open(self, n: int) -> str | None:
        """Open n connections ahead of the measured requests; the first failure's reason, or
        None."""
        results = await asyncio.gather(*(self._connect() for _ in range(n)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in results:
            if isinstance(r, _Conn):
                self._idle.append(r)
        return str(errors[0]) if errors else None

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    _Conn,
                    self.endpoint.host,
                    self.endpoint.port,
                    ssl=self._ssl,
                    server_hostname=self.endpoint.host if self._ssl else None,
                ),
                self.connect_timeout_s,
            )
        except ConnectionRefusedError as e:
            raise _Failure(
                "connection_refused",
                f"connection refused by {self.endpoint.host}:{self.endpoint.port} ({e.strerror})",
            ) from None
        except socket.gaierror as e:
            raise _Failure(
                "unresolvable_host", f"cannot resolve host {self.endpoint.host!r} ({e.strerror})"
            ) from None
        except TimeoutError:
            raise _Failure(
                "connect_timeout",
                f"no connection to {self.endpoint.host}:{self.endpoint.port} "
                f"within {self.connect_timeout_s:g}s",
            ) from None
        except ssl.SSLError as e:
            raise _Failure("tls_error", f"TLS handshake failed: {e}") from None
        except OSError as e:
            raise _Failure(
                "unreachable",
                f"cannot reach {self.endpoint.host}:{self.endpoint.port} ({e.strerror or e})",
            ) from None
        self._all.add(conn)
        return conn

    async def _acquire(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                return conn
            self._all.discard(conn)
        return await self._connect()

    def _release(self, conn: _Conn) -> None:
        if conn.reusable:
            conn.waiter = None
            self._idle.append(conn)
        else:
            if conn.transport is not None and not conn.transport.is_closing():
                conn.transport.close()
            self._all.discard(conn)

    async def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)

    async def stream(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        """Send one streamed request; fill rec (times, chunks, tokens, or the failure). Never
        raises, except CancelledError, after marking rec cancelled."""
        request = http_request_bytes(self.endpoint, "POST", self.endpoint.stream_path, body)
        conn: _Conn | None = None
        try:
            for attempt in (0, 1):
                conn = await self._acquire()
                reused = conn.used
                try:
                    await self._exchange(conn, rec, request)
                    break
                except _Failure as f:
                    # a keep-alive connection the server had already closed: resend on a fresh one
                    if attempt == 0 and reused and f.kind == CLOSED_BEFORE_RESPONSE:
                        rec.retried = True
                        continue
                    raise
        except _Failure as f:
            rec.error_kind, rec.error = f.kind, str(f)
            rec.end_ns = rec.end_ns or perf_counter_ns()
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort("cancelled", "cancelled")
            rec.error_kind, rec.error = (
                "cancelled",
                "cancelled before the response ended (run interrupted or stopped)",
            )
            rec.end_ns = perf_counter_ns()
            raise
        finally:
            if conn is not None:
                self._release(conn)
        return rec

    async def _exchange(self, conn: _Conn, rec: RequestRecord, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        rec.sent_ns = conn.begin(request, waiter)
        timer = loop.call_later(
            self.timeout_s,
            conn.abort,
            "timeout",
            f"no complete response within {self.timeout_s:g}s",
        )
        try:
            await waiter
        except _Failure:
            rec.first_byte_ns = conn.first_byte_ns
            rec.http_status = conn.status
            rec.end_ns = perf_counter_ns()
            if conn.payloads:  # keep what did arrive: its times are real
                rec.raw_events_ns, rec.raw_payloads, rec.saw_done = (
                    conn.events_ns,
                    conn.payloads,
                    conn.saw_done,
                )
            raise
        finally:
            timer.cancel()
        rec.end_ns = conn.now
        rec.first_byte_ns = conn.first_byte_ns
        rec.http_status = conn.status
        if self.server_header is None:
            self.server_header = conn.headers.get(b"server", b"").decode("latin-1") or ""
        if conn.status != 200:
            raise _Failure(f"http_{conn.status}", _http_error_message(conn))
        if conn.whole_json:
            # A server that answers the whole completion at once: one event, at the time the body
            # ended (TTFT = E2E, as the user of such a server sees it); decoded like a stream event.
            rec.raw_events_ns, rec.raw_payloads, rec.saw_done = [conn.now], [conn.err_body], True
            return
        if not conn.streaming:
            ctype = conn.headers.get(b"content-type", b"?").decode("latin-1")
            raise _Failure(
                "not_streaming", f"HTTP 200 with content-type {ctype!r}, not an event stream"
            )
        # decoded later, off the hot path (recorder.Recorder)
        rec.raw_events_ns, rec.raw_payloads, rec.saw_done = (
            conn.events_ns,
            conn.payloads,
            conn.saw_done,
        )


def _http_error_message(conn: _Conn) -> str:
    text = conn.err_body.decode("utf-8", "replace").strip().replace("\n", " ")
    retry = conn.headers.get(b"retry-after")
    extra = f" (Retry-After: {retry.decode('latin-1')})" if retry else ""
    return f"HTTP {conn.status}{extra}: {text[:200]}"
