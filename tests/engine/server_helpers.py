"""Servers on loopback for the serve tests, in-process (`serving`) or as a process
(`ServeProcess`), and their clients."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import psutil
from prometheus_client.parser import text_string_to_metric_families

from roofline.engine.serve.server import bind_socket, create_app, uvicorn_server


@contextlib.contextmanager
def serving(runner, **app_kw):
    """Serve `runner` on 127.0.0.1:<free port> from a thread; yields the base URL."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn_server(create_app(runner, **app_kw))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "server did not stop"


def sdk(url: str, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0, timeout=30)


def metrics(url: str) -> dict[str, float]:
    """Scrape /metrics into {sample name (+ labels): value}."""
    text = httpx.get(url + "/metrics").text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


class ServeProcess:
    """`python -m roofline serve ARGS --port 0` with its URL, pid, and the stderr it wrote."""

    def __init__(self, *args: str, startup_s: float = 120.0):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "roofline", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._err: list[str] = []
        threading.Thread(target=lambda: self._err.extend(self.proc.stderr), daemon=True).start()
        line, deadline = "", time.monotonic() + startup_s
        while "listening on" not in line:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise AssertionError(f"roofline serve did not start: {self.stderr}")
            line = self.proc.stdout.readline()
        self.url = re.search(r"http://\S+/v1", line).group(0)[: -len("/v1")]
        self.port = int(self.url.rsplit(":", 1)[1])

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def stop(self, sig=signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def rss_bytes(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss


@contextlib.contextmanager
def serve(*args: str):
    server = ServeProcess(*args)
    try:
        yield server
    finally:
        server.stop()
