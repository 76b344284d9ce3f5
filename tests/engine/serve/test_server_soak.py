"""A bounded soak of `roofline serve` (under a minute of wall time): 32 clients stream completions
of random lengths against a real server process on the tiny model, a fifth of them hanging up
part-way. Nothing may be lost (every request not hung up completes with exactly its usage), the
usage the clients saw and the server's /metrics must agree, and the server's memory must stay flat
after warm-up."""

from __future__ import annotations

import json
import random
import threading
import time

import httpx
import pytest
from server_helpers import ServeProcess, metrics

from roofline.engine.loading import load_checkpoint

pytestmark = pytest.mark.slow

CLIENTS = 32
WARMUP_S = 5.0
SOAK_S = 20.0
MIN_REQUESTS = (
    2  # per client, however slow the machine: the soak's volume does not depend on its speed
)
PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "def add(a, b):",
    "Hello",
    "1, 2, 3, 4,",
    "Attention is computed over keys and values",
]


def _client(
    url: str, seed: int, warm_until: float, stop_at: float, log: list, lock: threading.Lock
) -> None:
    try:
        _requests(url, seed, warm_until, stop_at, log, lock)
    except Exception as e:
        with lock:
            log.append({"exception": repr(e), "hung_up": False})


def _requests(
    url: str, seed: int, warm_until: float, stop_at: float, log: list, lock: threading.Lock
) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120) as client:
        made = 0
        while time.monotonic() < stop_at or made < MIN_REQUESTS:
            made += 1
            prompt, max_tokens = rng.choice(PROMPTS), rng.randint(1, 120)
            hang_up_after = rng.randint(1, 6) if rng.random() < 0.2 else None
            body = {
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            record = {
                "prompt": prompt,
                "max_tokens": max_tokens,
                "hung_up": False,
                "warm": time.monotonic() < warm_until,
            }
            with client.stream("POST", "/v1/completions", json=body) as r:
                record["status"] = r.status_code
                events = []
                for line in r.iter_lines():
                    if not line:
                        continue
                    events.append(line)
                    if (
                        hang_up_after is not None
                        and len(events) >= hang_up_after
                        and line != "data: [DONE]"
                    ):
                        record["hung_up"] = True
                        break
            if not record["hung_up"]:
                record["done"] = events[-1] == "data: [DONE]"
                chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
                record["usage"] = chunks[-1]["usage"]
                record["finish"] = [
                    c["choices"][0]["finish_reason"] for c in chunks if c["choices"]
                ][-1]
                record["errors"] = [c for c in chunks if "error" in c]
            with lock:
                log.append(record)


def test_32_streams_with_hang_ups_lose_nothing_and_memory_stays_flat(tiny_gguf):
    tok = load_checkpoint(tiny_gguf).tokenizer
    prompt_tokens = {p: len(tok.encode(p)) for p in PROMPTS}
    server = ServeProcess("-m", str(tiny_gguf), "--max-batch", "8")
    try:
        log: list[dict] = []
        lock = threading.Lock()
        t0 = time.monotonic()
        warm_until, stop_at = t0 + WARMUP_S, t0 + WARMUP_S + SOAK_S
        threads = [
            threading.Thread(
                target=_client, args=(server.url, i, warm_until, stop_at, log, lock), daemon=True
            )
            for i in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(max(0.0, warm_until - time.monotonic()))
        rss_warm = server.rss_bytes()
        for t in threads:
            t.join(stop_at - time.monotonic() + 120)
        assert not any(t.is_alive() for t in threads), "a client never finished"
        deadline = time.monotonic() + 30
        while (m := metrics(server.url))["roofline_requests_running"] or m[
            "roofline_requests_queued"
        ]:
            assert time.monotonic() < deadline, "requests left running after every client finished"
            time.sleep(0.05)
        rss_end = server.rss_bytes()
    finally:
        assert server.stop() == 0, server.stderr
    assert not [r for r in log if "exception" in r], [r for r in log if "exception" in r][:3]
    completed = [r for r in log if not r["hung_up"]]
    hung = [r for r in log if r["hung_up"]]
    # the seeds' first 2 requests per client hang up 15 times
    assert len(log) >= MIN_REQUESTS * CLIENTS and len(hung) >= 3, (len(log), len(hung))
    for r in completed:
        assert r["status"] == 200 and r["done"] and not r["errors"] and r["finish"] == "length", r
        assert r["usage"]["completion_tokens"] == r["max_tokens"], r
        assert r["usage"]["prompt_tokens"] == prompt_tokens[r["prompt"]], r
    finished = (
        m["roofline_requests_finished_total{finish_reason=length}"]
        + m["roofline_requests_finished_total{finish_reason=stop}"]
    )
    assert m["roofline_requests_total"] == len(log)
    assert m["roofline_requests_failed_total"] == 0
    assert finished + m["roofline_requests_cancelled_total"] == len(log)
    assert len(completed) <= finished and m["roofline_requests_cancelled_total"] <= len(hung)
    done_tokens = sum(r["usage"]["completion_tokens"] for r in completed)
    assert (
        done_tokens
        <= m["roofline_generation_tokens_total"]
        <= done_tokens + sum(r["max_tokens"] for r in hung)
    )
    done_prompt = sum(r["usage"]["prompt_tokens"] for r in completed)
    assert (
        done_prompt
        <= m["roofline_prompt_tokens_total"]
        <= done_prompt + sum(prompt_tokens[r["prompt"]] for r in hung)
    )
    growth = rss_end - rss_warm
    print(
        f"soak: {len(log)} requests ({len(hung)} hung up), "
        f"{done_tokens} tokens streamed to completion, "
        f"{m['roofline_requests_cancelled_total']:.0f} cancelled; "
        f"RSS {rss_warm / 1e6:.0f} MB after warm-up, {growth / 1e6:+.1f} MB at the end"
    )
    assert growth < 50e6, (
        f"server RSS grew {growth / 1e6:.1f} MB after warm-up ({rss_warm / 1e6:.0f} MB then)"
    )
