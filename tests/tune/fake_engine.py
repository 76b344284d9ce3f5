"""A fake OpenAI-compatible engine for the tuner's tests (stdlib only, run as a script).

    python fake_engine.py --host H --port P --mode MODE --speed TOK_PER_S --shift N [anything else]

Modes: ok (serve), crash (exit at start with an error), crash_mid (serve /health, die on the first
completion), hang (never listen, ignore SIGTERM), garbage (print bytes, answer completions with
nonsense), ignore_term (serve, ignore SIGTERM). Greedy answers carry `token_ids` derived from the
prompt (a stream that asks `return_token_ids` too, chunk by chunk); --shift N changes every token
from the fourth on and doubles the speed (an inexact configuration that is faster, like lossy int8
weights). Unknown arguments (a marker for the process table) are ignored. A request's
`fake_live` field ({"shift": N, "speed": S, "mode": "crash_mid"}) overrides those flags for that
request (a launcher's live knobs).

--gate DIR: each engine started records its start as DIR/start-N (N = 0, 1, ...; the file holds the
pid of the process that started it); every engine but the first holds each completion request until
DIR/release exists, so a test can stop or interrupt the tuner while a trial surely runs.

--memory 1: the engine remembers across requests, as a server with a shared draft trie does: its
/v1/models entry says so (`roofline.cross_request_memory`) and it streams a prompt it has answered
before four times as fast.
"""

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--mode", default="ok")
ap.add_argument("--speed", type=float, default=500.0)
ap.add_argument("--shift", type=int, default=0)
ap.add_argument("--gate", default=None)
ap.add_argument("--memory", type=int, default=0)
args, _ = ap.parse_known_args()

print(f"fake engine: {args.mode} at {args.speed:g} tok/s on {args.host}:{args.port}", flush=True)
if args.mode == "crash":
    print("loading weights... RuntimeError: out of memory", flush=True)
    sys.exit(3)
if args.mode in ("hang", "ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.mode == "hang":
    while True:
        time.sleep(1)
if args.mode == "garbage":
    sys.stdout.buffer.write(bytes(range(256)) + b"\n")
    sys.stdout.flush()


def record_start(gate: str) -> int:
    """This engine's start number: the first free DIR/start-N, claimed atomically (a link fails if
    it exists)."""
    os.makedirs(gate, exist_ok=True)
    tmp = os.path.join(gate, f"tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(str(os.getppid()))
    n = 0
    while True:
        try:
            os.link(tmp, os.path.join(gate, f"start-{n}"))
            break
        except FileExistsError:
            n += 1
    os.unlink(tmp)
    return n


START = record_start(args.gate) if args.gate else 0
SEEN: set[str] = set()  # --memory: the prompts answered so far


def wait_for_release() -> None:
    if args.gate and START >= 1:
        while not os.path.exists(os.path.join(args.gate, "release")):
            time.sleep(0.02)


def token_ids(body: dict) -> list[int]:
    text = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
    h = int(hashlib.sha256(text.encode()).hexdigest()[:6], 16)
    n = int(body.get("max_tokens") or 16)
    shift = live(body, "shift", args.shift)
    return [(h + 7 * i) % 1000 + (shift if i >= 3 else 0) for i in range(n)]


def live(body: dict, knob: str, started: int) -> int:
    """A knob's value for this request: the request's `fake_live` field, else the command line's."""
    return (body.get("fake_live") or {}).get(knob, started)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # one token, one packet
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a):
        pass

    def reply(self, status: int, obj) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"ok")
        elif self.path == "/v1/models":
            card = {"id": "fake", "object": "model"}
            if args.memory:
                card["roofline"] = {"cross_request_memory": True}
            self.reply(200, {"object": "list", "data": [card]})
        else:
            self.reply(404, {"error": {"message": "not found"}})

    def chunk(self, obj) -> None:
        payload = (
            b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        )
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        wait_for_release()
        if live(body, "mode", args.mode) == "crash_mid":
            print("segmentation fault (core dumped)", flush=True)
            os._exit(139)
        if args.mode == "garbage":
            self.reply(200, b"\x00\x01 GARBAGE {{{")
            return
        ids = token_ids(body)
        # the order of measured requests (tests of paired blocks) and of whole answers (greedy
        # passes)
        kind = "stream" if body.get("stream") else "whole"
        print(kind, json.dumps(body.get("fake_live") or {}, sort_keys=True), flush=True)
        seen = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
        speed = live(body, "speed", args.speed) * (2 if live(body, "shift", args.shift) else 1)
        speed *= 4 if args.memory and seen in SEEN else 1
        SEEN.add(seen)
        text = "".join(f" t{t}" for t in ids)
        usage = {"prompt_tokens": 8, "completion_tokens": len(ids), "total_tokens": 8 + len(ids)}
        if not body.get("stream"):
            time.sleep(len(ids) / speed)
            self.reply(
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "fake",
                    "usage": usage,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "length",
                            "token_ids": ids,
                        }
                    ],
                },
            )
            return
        opts = body.get("stream_options") or {}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        head = {"id": "x", "object": "chat.completion.chunk", "model": "fake"}
        with_ids = bool(body.get("return_token_ids"))  # ids per chunk (not the prompt's)
        first = {
            **head,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ],
        }
        self.chunk(first)
        for i, t in enumerate(ids):
            time.sleep(1.0 / speed)
            ev = {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": f" t{t}"},
                        "finish_reason": "length" if i == len(ids) - 1 else None,
                    }
                ],
            }
            if with_ids:
                ev["choices"][0]["token_ids"] = [t]
            if opts.get("continuous_usage_stats"):
                ev["usage"] = {
                    "prompt_tokens": 8,
                    "completion_tokens": i + 1,
                    "total_tokens": 9 + i,
                }
            self.chunk(ev)
        if opts.get("include_usage"):
            self.chunk({**head, "choices": [], "usage": usage})
        self.chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
