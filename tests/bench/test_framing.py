"""Every message-body framing of RFC 9112 section 6.3 ends a response correctly.

A tiny raw-socket server (a thread of this process) answers every request in one framing:
Content-Length (an SSE body, or a whole non-streamed JSON answer), chunked (chunk extensions,
trailer fields, an event split across chunks), close-delimited (HTTP/1.1 with `Connection: close`
and no length), HTTP/1.0, and the odd ones (an interim 100 before the answer, Transfer-Encoding
together with Content-Length, bare LF line ends). Each measured request must be recorded ok with the
right token counts, and a connection is reused exactly when the response allows it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from bench_helpers import measured, run

from roofline.bench.api import parse_endpoint
from roofline.bench.client import FetchError, fetch
from roofline.bench.http1 import ends_at_close
from roofline.bench.loadgen import Scenario
from roofline.bench.results import read_requests

# (content, cumulative completion_tokens) per event: 1 + 2 + 1 tokens after a role-only event
EVENTS = [("", 0), ("a", 1), (" b c", 3), (" d", 4)]
TOKENS = [1, 2, 1]


def sse_events(cut: bool = False) -> list[bytes]:
    out = []
    for i, (text, done) in enumerate(EVENTS):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": text}
        finish = "stop" if i == len(EVENTS) - 1 and not cut else None
        obj = {
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": done},
        }
        out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    if cut:
        return out[:2]
    return [*out, b"data: [DONE]\n\n"]


WHOLE_JSON = json.dumps(
    {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "a b c d"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


def chunk(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), ext, data)


def answer(mode: str, path: str) -> tuple[list[bytes], bool]:
    """The response parts (sent with a pause between them) and whether to close the connection
    after."""
    sse = b"Content-Type: text/event-stream\r\n"
    if path.endswith("/models"):
        body = MODELS
    elif mode == "length_json":
        return [
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(WHOLE_JSON),
            WHOLE_JSON[:20],
            WHOLE_JSON[20:],
        ], False
    elif mode == "length_sse":
        body = b"".join(sse_events())
        return [
            b"HTTP/1.1 200 OK\r\n" + sse + b"Content-Length: %d\r\n\r\n" % len(body),
            *sse_events(),
        ], False
    elif mode in ("chunked", "interim", "te_and_cl"):
        events = sse_events()
        head = b"HTTP/1.1 200 OK\r\n" + sse + b"Transfer-Encoding: chunked\r\n"
        if mode == "te_and_cl":
            head += b"Content-Length: 7\r\n"
        parts = [
            head + b"\r\n",
            chunk(events[0], b";ext=1"),
            chunk(events[1][:9]),
            chunk(events[1][9:] + events[2], b';name="v"'),
            *(chunk(e) for e in events[3:]),
            b"0\r\nX-Trailer: done\r\nContent-Type: text/plain\r\n\r\n",
        ]
        if mode == "interim":
            parts.insert(0, b"HTTP/1.1 100 Continue\r\n\r\n")
        return parts, False
    elif mode == "close":
        return [b"HTTP/1.1 200 OK\r\n" + sse + b"Connection: close\r\n\r\n", *sse_events()], True
    elif mode == "http10":
        return [b"HTTP/1.0 200 OK\r\n" + sse + b"\r\n", *sse_events()], True
    elif mode == "close_cut":  # closed after two events: no finish_reason, no [DONE]
        return [
            b"HTTP/1.1 200 OK\r\n" + sse + b"Connection: close\r\n\r\n",
            *sse_events(cut=True),
        ], True
    elif mode == "bare_lf":
        body = b"".join(sse_events())
        return [
            b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nContent-Length: %d\n\n" % len(body),
            body,
        ], False
    else:
        raise AssertionError(mode)
    # discovery answers in the same framing family
    if mode in ("close", "close_cut", "http10"):
        version = b"HTTP/1.0" if mode == "http10" else b"HTTP/1.1"
        return [
            version + b" 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
            body,
        ], True
    return [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(body),
        body,
    ], False


class RawServer:
    """Accepts connections on loopback; answers each request with `answer(mode, path)`; counts the
    POST requests each connection carried."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.posts_per_connection: list[int] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self.lock:
            index = len(self.posts_per_connection)
            self.posts_per_connection.append(0)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ")
                length = next(
                    (
                        int(v)
                        for k, _, v in (ln.partition(": ") for ln in lines[1:])
                        if k.lower() == "content-length"
                    ),
                    0,
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                if method == "POST":
                    with self.lock:
                        self.posts_per_connection[index] += 1
                parts, close = answer(self.mode, path)
                for part in parts:
                    conn.sendall(part)
                    time.sleep(0.002)  # separate reads: events, chunks and headers arrive apart
                if close:
                    conn.shutdown(socket.SHUT_WR)
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(request):
    s = RawServer(request.param)
    yield s
    s.close()


KEEP_ALIVE = ("length_sse", "length_json", "chunked", "interim", "bare_lf")
CLOSING = ("close", "http10", "te_and_cl")


@pytest.mark.parametrize("server", KEEP_ALIVE + CLOSING, indirect=True)
def test_every_framing_is_a_complete_response(server, tmp_path):
    outcome = run(
        server.url,
        [Scenario("sequential", num_requests=3)],
        tmp_path / "run",
        usage="per-chunk",
        warmup=1,
    )
    lines = measured(read_requests(tmp_path / "run")[0])
    assert len(lines) == 3
    for ln in lines:
        assert ln.ok, (server.mode, ln.error_kind, ln.error)
        assert ln.output_tokens == 4 and ln.finish_reason == "stop"
        if server.mode == "length_json":  # not streamed: all tokens in one event
            assert ln.chunk_tokens == [4] and ln.text == "a b c d"
        else:
            assert ln.chunk_tokens == TOKENS and ln.text == "a b c d"
        assert ln.prompt_tokens == 3 and not ln.retried
    assert outcome.summary.scenarios[0].requests.ok == 3
    # discovery read the same framing
    assert outcome.summary.provenance["server"]["models"] == ["m"]
    posts = [n for n in server.posts_per_connection if n]
    assert sum(posts) == 4  # the warm-up and three measured requests
    if server.mode in KEEP_ALIVE:
        assert max(posts) >= 2  # the connection was reused
    else:
        assert max(posts) == 1  # never reused after a close-delimited or TE+CL response


@pytest.mark.parametrize("server", ["close_cut"], indirect=True)
def test_close_delimited_stream_without_an_end_is_cut(server, tmp_path):
    run(
        server.url,
        [Scenario("sequential", num_requests=2)],
        tmp_path / "run",
        usage="per-chunk",
        warmup=0,
    )
    lines = measured(read_requests(tmp_path / "run")[0])
    assert [ln.error_kind for ln in lines] == ["stream_cut", "stream_cut"]
    assert all(ln.output_tokens == 1 for ln in lines)  # what did arrive is kept


def test_body_length_rules():
    cl, te = {b"content-length": b"5"}, {b"transfer-encoding": b"chunked"}
    assert not ends_at_close(200, "POST", cl) and not ends_at_close(200, "POST", te)
    assert not ends_at_close(200, "POST", {b"transfer-encoding": b"gzip, chunked"})
    assert ends_at_close(200, "POST", {b"transfer-encoding": b"chunked, gzip"})  # chunked not last
    assert ends_at_close(200, "POST", {}) and ends_at_close(500, "GET", {b"connection": b"close"})
    for status in (100, 103, 204, 304):
        assert not ends_at_close(status, "GET", {})
    assert not ends_at_close(200, "HEAD", {})


def _raw_once(
    response: bytes, keep_open: threading.Event | None = None
) -> tuple[socket.socket, int]:
    """A server for one request that answers `response`, then closes the connection (with keep_open:
    only once the test sets that event)."""
    sock = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = sock.accept()
        conn.recv(65536)
        conn.sendall(response)
        if keep_open is not None:
            keep_open.wait(120)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return sock, sock.getsockname()[1]


def test_fetch_head_and_no_body_statuses_end_at_the_headers():
    for method, response in (
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"),
        ("GET", b"HTTP/1.1 204 No Content\r\n\r\n"),
        ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"),
    ):
        release = threading.Event()
        sock, port = _raw_once(response, keep_open=release)  # open until fetch has returned
        try:
            # a fetch that waited for the close (or for the body the header announces) would time
            # out, which raises FetchError: returning at all means it ended at the headers
            status, _, body = asyncio.run(
                fetch(parse_endpoint(f"127.0.0.1:{port}"), "/x", method=method, timeout_s=30)
            )
        finally:
            release.set()
        assert body == b""
        assert status == int(response.split()[1])
        sock.close()


def test_fetch_close_delimited_and_reset():
    sock, port = _raw_once(b"HTTP/1.0 200 OK\r\n\r\nhello")
    assert asyncio.run(fetch(parse_endpoint(f"127.0.0.1:{port}"), "/x"))[2] == b"hello"
    sock.close()
    sock, port = _raw_once(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel")
    with pytest.raises(FetchError):  # closed before the announced length: not a response
        asyncio.run(fetch(parse_endpoint(f"127.0.0.1:{port}"), "/x"))
    sock.close()
