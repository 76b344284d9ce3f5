"""Stopping `roofline serve` with streams open: SIGTERM stops accepting, late requests get a JSON
503, running requests finish within the grace period, the rest end with an SSE error event and
[DONE], and the process says so and exits 0. A real server process on the tiny model, and the grace
timer in-process."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from scheduler_helpers import FakeRunner
from server_helpers import ServeProcess, metrics

from roofline.engine.serve.server import bind_socket, create_app, uvicorn_server


def _stream(url: str, max_tokens: int, out: dict, started: threading.Event) -> None:
    lines = []
    try:
        body = {
            "prompt": "Once upon a time",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                    started.set()
    except httpx.HTTPError as e:
        out["error"] = repr(e)
    out["lines"] = lines
    out["ended"] = time.monotonic()


def test_sigterm_lets_streams_finish_and_a_second_ctrl_c_ends_the_rest(tiny_gguf):
    """Max batch 1, 17 streams of 240 tokens, grace 60 s. SIGTERM: a request on a kept-alive
    connection gets a JSON 503, a new connection is refused, the stream running at the signal
    finishes normally. Then Ctrl-C: every stream still open ends with an error event and [DONE]. The
    process says it stopped and exits 0, with no traceback. (The grace timer itself: the in-process
    test below.)"""
    s = ServeProcess("-m", str(tiny_gguf), "--max-batch", "1", "--grace-seconds", "60")
    try:
        keep = httpx.Client(base_url=s.url, timeout=10)
        assert keep.get("/health").status_code == 200
        results = [{} for _ in range(17)]
        started = [threading.Event() for _ in results]
        threads = [
            threading.Thread(target=_stream, args=(s.url, 240, out, ev), daemon=True)
            for out, ev in zip(results, started)
        ]
        threads[0].start()
        assert started[0].wait(30)
        for t in threads[1:]:
            t.start()
        deadline = time.monotonic() + 30
        # every stream is in before the signal
        while metrics(s.url)["roofline_requests_total"] < len(threads):
            assert time.monotonic() < deadline, "streams did not arrive"
            time.sleep(0.02)
        signalled = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while (h := keep.get("/health")).status_code == 200:
            assert time.monotonic() < deadline, "never started stopping"
            time.sleep(0.02)
        assert h.status_code == 503 and h.json() == {"status": "stopping"}
        late = keep.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
        assert late.status_code == 503 and late.json()["error"]["code"] == "shutting_down"
        with pytest.raises(httpx.ConnectError):
            httpx.get(s.url + "/health", timeout=5)
        deadline = time.monotonic() + 60
        # the one running at the signal
        while not any(out.get("ended", 0) > signalled for out in results):
            assert time.monotonic() < deadline, "no stream finished in the grace period"
            time.sleep(0.02)
        s.proc.send_signal(signal.SIGINT)
        for t in threads:
            t.join(30)
        code = s.proc.wait(30)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    ends = [_stream_end(out) for out in results]
    assert any(end == "length" and out["ended"] > signalled for end, out in zip(ends, results)), (
        ends
    )
    assert ends.count("shutting_down") >= 1, ends
    assert set(ends) <= {"length", "shutting_down"}, ends
    err = s.stderr
    assert code == 0, err
    assert "roofline serve: stopped" in err and "ended early" in err
    assert "Traceback" not in err and "CancelledError" not in err, err


def _stream_end(out: dict) -> str:
    """How a stream ended: its finish reason, or the error code of its error event; always then
    [DONE]."""
    assert "error" not in out, out["error"]
    lines = out["lines"]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    last = json.loads(lines[-2][len("data: ") :])
    return last["error"]["code"] if "error" in last else last["choices"][0]["finish_reason"]


def test_grace_period_expiry_ends_open_streams_in_process():
    """The grace timer: a fake model at 10 ms a token, max batch 1, grace 1.5 s. The running
    20-token stream finishes (0.2 s), the next 300-token one is ended when the grace runs out, as is
    the queued one; a non-streamed request still waiting gets a JSON 503."""
    runner = FakeRunner(max_batch=1, max_seq_len=512, decode_seconds=0.01)
    server = uvicorn_server(create_app(runner, grace_s=1.5))
    # past the first stream's 20 tokens and a few of the second's, decode steps wait for the stop:
    # the 300-token stream is still running when it comes (and needs ~3 s more, twice the grace)
    runner.decode_gate = lambda: (
        server.should_exit or sum(e[0] == "decode" for e in runner.log) < 25
    )
    sock = bind_socket("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    results = [{} for _ in range(3)]
    started = [threading.Event() for _ in results]
    threads = [
        threading.Thread(target=_stream, args=(url, n, out, ev), daemon=True)
        for n, out, ev in zip((20, 300, 300), results, started)
    ]
    waiting: dict = {}

    def non_streamed() -> None:
        waiting["r"] = httpx.post(
            url + "/v1/completions",
            json={"prompt": "a", "max_tokens": 300, "ignore_eos": True},
            timeout=30,
        )

    threads.append(threading.Thread(target=non_streamed, daemon=True))
    threads[0].start()
    assert started[0].wait(10)
    for t in threads[1:]:
        t.start()
    while metrics(url)["roofline_requests_total"] < 4:
        assert time.monotonic() < deadline + 10
        time.sleep(0.01)
    t0 = time.monotonic()
    server.should_exit = True  # what SIGTERM does
    for t in threads:
        t.join(30)
    thread.join(30)
    sock.close()
    assert not thread.is_alive()
    assert [_stream_end(out) for out in results] == ["length", "shutting_down", "shutting_down"]
    assert (
        waiting["r"].status_code == 503 and waiting["r"].json()["error"]["code"] == "shutting_down"
    )
    assert 1.5 <= results[1]["ended"] - t0 < 5
    assert server.drain.ended_early == 3 and runner.ctx == {}
