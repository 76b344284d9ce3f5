"""Fake engines for the launcher tests: one small stdlib script, written into the test's folder,
that behaves as told (serve, crash, hang, ignore SIGTERM, print garbage, die mid-run, fork a child
into its own process group, flip a token only when requests share the server). Each process it
starts appends its pid to a file, so a test can check the process table afterwards. It answers
streamed requests too (one SSE event per character, sent whole), so bench can measure it."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

SCRIPT = r"""
import json, os, signal, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode, pidfile, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
port, host = int(rest[rest.index("--port") + 1]), rest[rest.index("--host") + 1]
flip = int(rest[rest.index("--flip") + 1]) if "--flip" in rest else None


def note_pid():
    with open(pidfile, "a") as f:
        f.write(f"{os.getpid()}\n")


note_pid()
print(f"fake engine: {mode} on {host}:{port}", flush=True)
if mode == "crash":
    print("loading weights... RuntimeError: CUDA out of memory", flush=True)
    sys.exit(3)
if mode == "crash_child":  # dies, leaving a child in its process group
    if os.fork() == 0:
        note_pid()
        while True:
            time.sleep(1)
    while len(open(pidfile).read().split()) < 2:
        time.sleep(0.01)
    sys.exit(3)
if mode in ("hang", "ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "hang":
    while True:
        time.sleep(1)
if mode == "garbage":
    sys.stdout.buffer.write(bytes(range(256)) + b"\n")
    sys.stdout.flush()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen()
    while True:
        conn, _ = srv.accept()
        conn.sendall(b"\x00\xff\xfe not HTTP at all \r\n\r\n")
        conn.close()
if mode == "fork_group" and os.fork() == 0:
    os.setpgid(0, 0)
    note_pid()
    while True:
        time.sleep(1)


state = threading.Condition()
counts = {"in": 0, "arrived": 0}


def enter():
    # did another request share this one's time in the server? Mode batched holds each request up
    # to 0.3 s for company, so requests sent together always meet and one sent alone never does
    # (arrivals only grow: no race with a neighbour that already left)
    with state:
        before = counts["in"] > 0
        counts["in"] += 1
        counts["arrived"] += 1
        me = counts["arrived"]
        state.notify_all()
        if mode != "batched":
            return before
        return state.wait_for(lambda: counts["arrived"] > me, timeout=0.3) or before


def leave():  # before the answer is sent: the client never sees a request still counted
    with state:
        counts["in"] -= 1


def answer(content, max_tokens, shared=False):
    ids = [ord(c) for c in content][:max_tokens]
    if flip is not None and flip < len(ids) and (mode != "batched" or shared):
        ids[flip] += 1
    return "".join(chr(i) for i in ids), ids


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path in ("/health", "/v1/models"):
            self.send(200, {"object": "list", "data": [{"id": "fake-model"}]})
        else:
            self.send(404, {"error": {"message": "not found"}})

    def stream(self, text):
        events = [{"choices": [{"index": 0, "delta": {"content": c}}]} for c in text]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if mode == "exit_mid":
            print("segfault in the decode loop", flush=True)
            os._exit(7)
        if self.path == "/v1/chat/completions":
            if mode == "strict" and "return_token_ids" in req:
                return self.send(400, {"error": {"message": "unknown field return_token_ids"}})
            shared = enter()
            text, ids = answer(req["messages"][-1]["content"], req["max_tokens"], shared)
            leave()
            if req.get("stream"):
                return self.stream(text)
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            if req.get("return_token_ids") and mode not in ("noids", "strict"):
                choice["token_ids"] = ids
            return self.send(200, {"model": req.get("model"), "choices": [choice]})
        if mode == "llama" and self.path == "/apply-template":
            return self.send(200, {"prompt": "<|user|>" + req["messages"][-1]["content"]})
        if mode == "llama" and self.path == "/completion":
            text, ids = answer(req["prompt"].removeprefix("<|user|>"), req["n_predict"])
            tokens = ids if req.get("return_tokens") else []
            return self.send(200, {"content": text, "tokens": tokens})
        self.send(404, {"error": {"message": "not found"}})


ThreadingHTTPServer((host, port), Handler).serve_forever()
"""


def fake_engine(tmp_path: Path, mode: str, *options: str) -> tuple[str, Path]:
    """(command template for the `command` launcher, the file the fake's processes write their pids
    to)."""
    script = tmp_path / "fake_engine.py"
    script.write_text(SCRIPT)
    pidfile = tmp_path / f"{mode}.pids"
    words = [
        shlex.quote(str(script)),
        mode,
        shlex.quote(str(pidfile)),
        "--port",
        "{port}",
        "--host",
        "{host}",
        *map(shlex.quote, options),
    ]
    return "{python} " + " ".join(words), pidfile


def pids_in(pidfile: Path, count: int = 1, timeout_s: float = 30.0) -> list[int]:
    """The pids written so far, waiting until there are `count` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []
        if len(pids) >= count or time.monotonic() > deadline:
            return pids
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def survivors(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """The pids still running after up to timeout_s."""
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def fake_llama_server(
    folder: Path, help_text: str, version_line: str = "version: 7000 (abc1234)"
) -> Path:
    """An executable `llama-server` in `folder` that prints help_text for --help and version_line
    for --version (the launcher reads both without starting a server)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "help.txt").write_text(help_text)
    exe = folder / "llama-server"
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "{version_line}" >&2; exit 0; fi\n'
        f'cat "$(dirname "$0")/help.txt"\n'
    )
    exe.chmod(0o755)
    return exe


def own_group(pid: int) -> bool:
    """True when pid leads its own process group."""
    return os.getpgid(pid) == pid
