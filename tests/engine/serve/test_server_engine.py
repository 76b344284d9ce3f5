"""The server over the real engine: a tiny random model (written by the fixtures) in-process, and
the default model behind the real `roofline serve` command, both driven with the `openai` SDK."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from fixtures import greedy_ids
from server_helpers import metrics, sdk, serving

from roofline.engine import load_runner

PROMPTS = ["The capital of France is", "Once upon a time", "1, 2, 3, 4,", "def fib(n):", "Hello"]


def test_tiny_model_batched_greedy_equals_single_sequence_generation(tiny_gguf):
    """Several streams at once give exactly the tokens of a plain one-sequence greedy loop."""
    reference_runner = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=128)
    tok = reference_runner.tokenizer
    expected = [tok.decode(greedy_ids(reference_runner, tok.encode(p), 24)) for p in PROMPTS]

    runner = load_runner(str(tiny_gguf), max_batch=4, max_seq_len=128)
    with serving(runner) as url:
        client = sdk(url)
        name = client.models.list().data[0].id

        def run(prompt: str) -> tuple[str, int]:
            chunks = list(
                client.completions.create(
                    model=name,
                    prompt=prompt,
                    max_tokens=24,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )
            )
            return "".join(c.choices[0].text for c in chunks if c.choices), chunks[
                -1
            ].usage.completion_tokens

        solo = [run(p) for p in PROMPTS]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            together = list(pool.map(run, PROMPTS))
        m = metrics(url)
    assert [t for t, _ in solo] == expected
    assert together == solo
    assert all(n == 24 for _, n in solo)
    assert m["roofline_decode_batch_tokens_total"] > m["roofline_decode_steps_total"], (
        "never batched"
    )


def test_tiny_model_chat_and_completion_usage(tiny_gguf):
    runner = load_runner(str(tiny_gguf), max_batch=2, max_seq_len=96)
    with serving(runner, served_model_name="tiny") as url:
        client = sdk(url)
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Hi there"}],
            max_tokens=8,
            temperature=0,
        )
        assert 1 <= r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 2
        assert r.choices[0].finish_reason in ("stop", "length")
        streamed = list(
            client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "Hi there"}],
                max_tokens=8,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert (
            "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
            == r.choices[0].message.content
        )
        assert streamed[-1].usage.model_dump() == r.usage.model_dump()
        too_long = "word " * 200
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt=too_long, max_tokens=4)
        assert e.value.body["code"] == "context_length_exceeded"
        card = client.models.list().data[0].model_extra["roofline"]
        assert card["bytes_per_token"] == runner.bytes_per_token > 0 and card["max_seq_len"] == 96


def test_roofline_serve_default_model_end_to_end(tmp_path):
    """`python -m roofline serve` on the default model: ready line, a streamed SDK chat, /metrics,
    Ctrl-C."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "roofline",
            "serve",
            "--port",
            "0",
            "--max-batch",
            "2",
            "--max-seq-len",
            "512",
            "--api-key",
            "k3y",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = ""
        deadline = time.monotonic() + 240
        while "listening on" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, (
                proc.stderr.read() if proc.poll() else "slow"
            )
            line = proc.stdout.readline()
        url = re.search(r"http://\S+/v1", line).group(0)[: -len("/v1")]
        assert httpx.get(url + "/health").status_code == 200
        client = sdk(url, "k3y")
        name = client.models.list().data[0].id
        chunks = list(
            client.chat.completions.create(
                model=name,
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=12,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "Paris" in text
        m = metrics(url)
        assert m["roofline_generation_tokens_total"] == chunks[-1].usage.completion_tokens
        assert (
            m["roofline_requests_finished_total{finish_reason=length}"]
            + m["roofline_requests_finished_total{finish_reason=stop}"]
            == 1
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err
    assert "stopped" in err
