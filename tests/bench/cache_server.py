"""A null server with a fake prefix cache behind a Prometheus `/metrics` (roofline's names).

Every completion request is one lookup; the words it shares at the start with the longest-matching
earlier prompt are the tokens it reuses (a hit when there are any); each prompt adds 1000 bytes
to the cache. Run it as a script: it prints `listening on URL` as the null server does.
"""

from __future__ import annotations

import argparse
import json

from roofline.bench.nullserver import NullServer, listening_socket, serve_socket
from roofline.bench.schedule import Schedule
from roofline.bench.server_wire import http_response

BYTES_PER_PROMPT = 1000


def prompt_words(req: dict) -> list[str]:
    """The prompt's words as the completions route joins a chat's messages."""
    if "prompt" in req:
        return str(req["prompt"]).split()
    return "\n\n".join(str(m.get("content", "")) for m in req.get("messages") or []).split()


def shared_words(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class CacheServer(NullServer):
    def __init__(self, schedule: Schedule) -> None:
        super().__init__(schedule)
        self.seen: list[list[str]] = []
        self.hits = self.lookups = self.reused = 0

    def handle(self, conn, method: bytes, path: bytes, body: bytes) -> None:
        if path == b"/metrics":
            conn.send(http_response(200, self.metrics_text().encode(), b"text/plain"))
            return
        if method == b"POST" and path.endswith(b"completions"):
            self.look_up(json.loads(body))
        super().handle(conn, method, path, body)

    def look_up(self, req: dict) -> None:
        words = prompt_words(req)
        best = max((shared_words(words, w) for w in self.seen), default=0)
        self.lookups += 1
        self.hits += best > 0
        self.reused += best
        self.seen.append(words)

    def metrics_text(self) -> str:
        p = "roofline_prefix_cache"
        return (
            f"# HELP {p}_hits_total lookups that found a prefix\n# TYPE {p}_hits_total counter\n"
            f"{p}_hits_total {self.hits}.0\n{p}_lookups_total {self.lookups}.0\n"
            f'{p}_tokens_reused_total{{model="null"}} {self.reused}.0\n'
            f"{p}_bytes {BYTES_PER_PROMPT * len(self.seen)}.0\n{p}_evictions_total 0.0\n"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    sock = listening_socket("127.0.0.1", a.port)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    serve_socket(sock, CacheServer(Schedule(0.005, 0.001, 4, 1)))


if __name__ == "__main__":
    main()
