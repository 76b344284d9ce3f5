"""A null OpenAI-compatible server: no model, tokens streamed on an exactly known schedule.

It exists to measure the measuring client (`roofline bench --calibrate`, the tests, and
`benchmarks/client_overhead.py`). Every event carries `roofline_t_ns`, the server's own
perf_counter_ns when it wrote the event; on one machine that is the client's clock too, so the
client's error can be split from the server's own lateness.

Emission is driven by one timer heap per process rather than a sleep per stream: the loop wakes
~1.5 ms early (epoll rounds timeouts up to whole ms) and sleeps the rest precisely, then writes
every event that is due. Several processes can share the port (`--workers`).

`--hold-after N` answers the first N completion requests (per process) and holds every later one
open after its first token, never finishing it, printing `holding request #K` as it does: a test
that interrupts a run gets one that cannot have finished, whatever the speed of the machine.

    python -m roofline.bench.nullserver --port 0 --ttft 20ms --gap 5ms \\
        --tokens 100 --tokens-per-chunk 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import json
import os
import signal
import socket
import sys
import time
from time import perf_counter_ns

import httptools

from roofline.bench import faultserver
from roofline.bench.client import set_nodelay
from roofline.bench.schedule import Schedule
from roofline.bench.server_wire import DONE_AND_END, http_response

_SPIN_NS = 1_500_000  # wake this early and sleep the rest precisely
_HEAD_SSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Server: roofline-nullserver\r\nTransfer-Encoding: chunked\r\n\r\n"
)
TOKEN_TEXT = " tok"  # every token is this word (one token for a whitespace word-level tokenizer)


class Emitter:
    """A timer heap of plans (lists of (due_ns, callback, args)): runs each callback as close to its
    due time as it can, in plan order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list = []
        self.seq = itertools.count()
        self.handle: asyncio.Handle | None = None
        self.wake_ns = 0

    def play(self, plan: list[tuple[int, object, tuple]]) -> None:
        """Run a plan [(due_ns, fn, args)] in order: one heap entry per plan at a time, so the heap
        holds one entry per active stream, not one per event."""
        self._push(plan[0][0], plan, 0)

    def _push(self, due_ns: int, plan: list, index: int) -> None:
        heapq.heappush(self.heap, (due_ns, next(self.seq), plan, index))
        if self.handle is None or due_ns < self.wake_ns:
            if self.handle is not None:
                self.handle.cancel()
            self.handle = self.loop.call_soon(self.tick)
            self.wake_ns = 0

    def tick(self) -> None:
        self.handle = None
        heap = self.heap
        if not heap:
            return
        now = perf_counter_ns()
        due = heap[0][0]
        if due - now > _SPIN_NS:
            self.wake_ns = due - _SPIN_NS
            self.handle = self.loop.call_later((self.wake_ns - now) / 1e9, self.tick)
            return
        if due > now:
            time.sleep((due - now) / 1e9)  # at most _SPIN_NS, precise to ~0.1 ms
        now = perf_counter_ns()
        while heap and heap[0][0] <= now:
            _, _, plan, i = heapq.heappop(heap)
            _, fn, args = plan[i]
            fn(*args)
            if i + 1 < len(plan):
                heapq.heappush(heap, (plan[i + 1][0], next(self.seq), plan, i + 1))
        if heap:  # give the loop a turn (new requests, reads) before the next batch
            self.wake_ns = 0
            self.handle = self.loop.call_soon(self.tick)


class NullProtocol(asyncio.Protocol):
    def __init__(self, server: NullServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body = b""
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        set_nodelay(transport)

    def connection_lost(self, exc) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(http_response(400, b'{"error":{"message":"bad HTTP"}}'))
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body, self.recv_ns = b"", b"", 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.recv_ns = perf_counter_ns()
        self.server.handle(self, self.parser.get_method(), self.url.split(b"?")[0], self.body)

    # -- used by the plan's callbacks ------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def send_event(self, template: bytes) -> None:
        """Write an event whose JSON ends with the send stamp (filled in now)."""
        if not self.closed:
            payload = b"data: %s%d}\n\n" % (template, perf_counter_ns())
            self.transport.write(b"%x\r\n%s\r\n" % (len(payload), payload))

    def abort(self) -> None:
        if not self.closed:
            self.transport.abort()


class NullServer:
    def __init__(
        self,
        schedule: Schedule,
        *,
        model: str = "null",
        faults: list[str] | None = None,
        bytes_per_token: int | None = None,
        strict: bool = False,
        file_bytes_per_token: int | None = None,
    ) -> None:
        self.schedule = schedule
        self.model = model
        self.faults = faults or []
        self.bytes_per_token = bytes_per_token
        self.file_bytes_per_token = file_bytes_per_token
        self.strict = strict  # reject stream_options.continuous_usage_stats, like OpenAI's own API
        self.hold_after: int | None = (
            None  # completion requests answered; later ones are held open (None: all)
        )
        self.count = itertools.count()
        self.emitter: Emitter | None = None
        self.templates: dict[tuple, list[tuple[int, bytes]]] = {}

    def handle(self, conn: NullProtocol, method: bytes, path: bytes, body: bytes) -> None:
        if path in (b"/health", b"/v1/health"):
            conn.send(http_response(200, b"ok", b"text/plain"))
        elif path == b"/version":
            conn.send(http_response(200, b'{"version":"roofline-nullserver"}'))
        elif path == b"/v1/models":
            conn.send(http_response(200, json.dumps(self.models_json()).encode()))
        elif method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            self.completion(conn, path.endswith(b"chat/completions"), body)
        else:
            conn.send(http_response(404, b'{"error":{"message":"not found"}}'))

    def models_json(self) -> dict:
        m: dict = {"id": self.model, "object": "model", "owned_by": "roofline"}
        if self.bytes_per_token:
            m["roofline"] = {
                "bytes_per_token": self.bytes_per_token,
                "dtype": "fp32",
                "path": "null",
            }
            if self.file_bytes_per_token:
                m["roofline"]["file_bytes_per_token"] = self.file_bytes_per_token
        return {"object": "list", "data": [m]}

    def completion(self, conn: NullProtocol, chat: bool, body: bytes) -> None:
        try:
            req = json.loads(body)
            assert isinstance(req, dict)
        except (ValueError, AssertionError):
            conn.send(http_response(400, b'{"error":{"message":"body is not a JSON object"}}'))
            return
        opts = req.get("stream_options") or {}
        if self.strict and set(opts) - {"include_usage"}:
            conn.send(http_response(400, b'{"error":{"message":"unknown stream_options field"}}'))
            return
        index = next(self.count)
        fault = faultserver.fault_for(req, self.faults, index)
        if fault and faultserver.respond_at_once(fault, conn):
            return
        held = self.hold_after is not None and index >= self.hold_after
        if held:
            print(f"holding request #{index + 1}", flush=True)
        n = self.schedule.output_tokens(req.get("max_tokens") or req.get("max_completion_tokens"))
        if not req.get("stream"):
            if not held:
                conn.send(http_response(200, json.dumps(self.whole_answer(chat, n)).encode()))
            return
        key = (chat, n, bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")))
        events = self.templates.get(key)
        if events is None:  # the same for every request with these options: built once
            events = self.templates[key] = self.stream_events(*key)
        plan = [(conn.recv_ns, conn.send, (_HEAD_SSE,))] + [
            (conn.recv_ns + off, conn.send_event, (tpl,)) for off, tpl in events
        ]
        plan.append((plan[-1][0], conn.send, (DONE_AND_END,)))
        if fault:
            plan = faultserver.alter_plan(fault, plan, conn)
        if held:  # the head and the first token (after the role event of a chat), then nothing
            plan = plan[: 3 if chat else 2]
        self.emitter.play(plan)

    def stream_events(
        self, chat: bool, n: int, usage: bool, per_chunk: bool
    ) -> list[tuple[int, bytes]]:
        """(offset_ns, JSON template without its closing `roofline_t_ns` value) for every event."""
        s = self.schedule
        offsets, tokens = s.chunk_offsets_ns(n), s.chunk_tokens(n)
        kind = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": "null", "object": kind, "created": 0, "model": self.model}

        def template(choice: dict | None, done: int, with_usage: bool) -> bytes:
            obj = dict(head, choices=[choice] if choice else [])
            if with_usage:
                obj["usage"] = {
                    "prompt_tokens": 8,
                    "completion_tokens": done,
                    "total_tokens": 8 + done,
                }
            return json.dumps(obj, separators=(",", ":")).encode()[:-1] + b',"roofline_t_ns":'

        def choice(text: str | None, finish: str | None) -> dict:
            if chat:
                delta = {"role": "assistant", "content": ""} if text is None else {"content": text}
                return {"index": 0, "delta": delta, "finish_reason": finish}
            return {"index": 0, "text": text or "", "finish_reason": finish}

        out = []
        if chat:  # the role-only first event that OpenAI-style servers send at once
            out.append((0, template(choice(None, None), 0, per_chunk)))
        done = 0
        for j, (off, k) in enumerate(zip(offsets, tokens)):
            done += k
            finish = "length" if j == len(offsets) - 1 else None
            out.append((off, template(choice(TOKEN_TEXT * k, finish), done, per_chunk)))
        if usage:
            out.append((offsets[-1], template(None, done, True)))
        return out

    def whole_answer(self, chat: bool, n: int) -> dict:
        text = TOKEN_TEXT * n
        choice = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            if chat
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        return {
            "id": "null",
            "object": "chat.completion" if chat else "text_completion",
            "model": self.model,
            "choices": [choice],
            "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
        }


def listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def serve_socket(sock: socket.socket, server: NullServer) -> None:
    """Run one process's event loop on an already listening socket, forever."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server.emitter = Emitter(loop)
        srv = await loop.create_server(lambda: NullProtocol(server), sock=sock, backlog=4096)
        async with srv:
            await srv.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def main(argv: list[str] | None = None) -> None:
    from roofline.units import parse_seconds

    ap = argparse.ArgumentParser(
        prog="python -m roofline.bench.nullserver", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    ap.add_argument("--ttft", default="50ms", help="request received -> first token chunk")
    ap.add_argument(
        "--gap",
        default="10ms",
        help="time between tokens (a chunk of k tokens comes k gaps after the last)",
    )
    ap.add_argument(
        "--tokens", type=int, default=32, help="output tokens per request (capped by max_tokens)"
    )
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--model", default="null")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    ap.add_argument(
        "--faults",
        default="",
        help=f"comma list cycled over requests: {', '.join(faultserver.FAULTS)}",
    )
    ap.add_argument(
        "--bytes-per-token",
        type=int,
        default=None,
        help="advertise a roofline.bytes_per_token in /v1/models",
    )
    ap.add_argument(
        "--file-bytes-per-token",
        type=int,
        default=None,
        help=(
            "with --bytes-per-token: advertise a roofline.file_bytes_per_token (the file's own) too"
        ),
    )
    ap.add_argument(
        "--strict", action="store_true", help="reject stream_options other than include_usage"
    )
    ap.add_argument(
        "--hold-after",
        type=int,
        default=None,
        metavar="N",
        help="answer N completion requests (per process), then hold each later one open after "
        "its first token and print 'holding request #K' (for tests that interrupt a run)",
    )
    a = ap.parse_args(argv)
    schedule = Schedule(parse_seconds(a.ttft), parse_seconds(a.gap), a.tokens, a.tokens_per_chunk)
    faults = [f.strip() for f in a.faults.split(",") if f.strip()]
    for f in faults:
        if f not in faultserver.FAULTS:
            ap.error(f"unknown fault {f!r}; known: {', '.join(faultserver.FAULTS)}")
    server = NullServer(
        schedule,
        model=a.model,
        faults=faults,
        bytes_per_token=a.bytes_per_token,
        strict=a.strict,
        file_bytes_per_token=a.file_bytes_per_token,
    )
    server.hold_after = a.hold_after
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the finally below stops the workers
    sock = listening_socket(a.host, a.port)
    print(f"listening on http://{a.host}:{sock.getsockname()[1]}", flush=True)
    children = []
    for _ in range(a.workers - 1):
        pid = os.fork()
        if pid == 0:
            serve_socket(sock, server)
            os._exit(0)
        children.append(pid)
    try:
        serve_socket(sock, server)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
