"""The OpenAI-compatible server over the fake runner, exercised with the official `openai` SDK (and
httpx where the SDK cannot send the request: malformed JSON, raw bodies). A real uvicorn serves on a
free loopback port from a thread of this process."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from scheduler_helpers import FakeRunner, fake_greedy_ids
from server_helpers import metrics, sdk, serving

from roofline.engine.serve.server import bind_socket


def wait_for(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def runner():
    return FakeRunner(max_batch=4, max_seq_len=256)


@pytest.fixture(scope="module")
def url(runner):
    with serving(runner) as u:
        yield u


MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Why is the sky blue?"},
]


def chat_expected(runner, messages, max_tokens, ignore_eos=False) -> tuple[str, int, int, str]:
    """(text, prompt tokens, completion tokens, finish reason) the fake model must give, computed
    directly."""
    tok = runner.tokenizer
    prompt = tok.encode(tok.apply_chat_template(messages), add_special_tokens=False)
    ids = fake_greedy_ids(tok, prompt, max_tokens, ignore_eos)
    reason = "stop" if ids[-1] in tok.eos_ids and not ignore_eos else "length"
    return tok.decode(ids), len(prompt), len(ids), reason


def test_health_and_models(url, runner):
    assert httpx.get(url + "/health").status_code == 200
    models = sdk(url).models.list().data
    assert [m.id for m in models] == ["fake-model"]
    extra = models[0].model_extra["roofline"]
    assert extra == {
        "bytes_per_token": 12345,
        "file_bytes_per_token": 2345,
        "dtype": "fp32",
        "hardware": "local",
        "max_batch": 4,
        "max_seq_len": 256,
        "cross_request_memory": False,  # no speculation: nothing learnt across requests
        "decode_passes": 0,  # a dense model: no expert counts
    }
    assert "fake/path" not in httpx.get(url + "/v1/models").text
    assert sdk(url).models.retrieve("fake-model").id == "fake-model"


def test_chat_completion_text_finish_and_usage(url, runner):
    r = sdk(url).chat.completions.create(
        model="fake-model", messages=MESSAGES, temperature=0, max_tokens=60
    )
    text, n_prompt, n_out, reason = chat_expected(runner, MESSAGES, 60)
    assert r.choices[0].message.content == text and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == reason
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (
        n_prompt,
        n_out,
        n_prompt + n_out,
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_stream_with_include_usage(url, runner):
    chunks = list(
        sdk(url).chat.completions.create(
            model="fake-model",
            messages=MESSAGES,
            temperature=0,
            max_completion_tokens=30,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    text, n_prompt, n_out, _ = chat_expected(runner, MESSAGES, 30, ignore_eos=True)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n_out == 30
    assert chunks[-1].usage.prompt_tokens == n_prompt
    assert all(c.usage is None for c in chunks[:-1])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_without_usage_has_no_usage_chunk(url):
    chunks = list(
        sdk(url).chat.completions.create(
            model="fake-model", messages=MESSAGES, temperature=0, max_tokens=5, stream=True
        )
    )
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason is not None


def test_completions_plain_streamed_and_token_ids(url, runner):
    tok, client = runner.tokenizer, sdk(url)
    prompt_ids = tok.encode("Count: 1, 2, 3")
    expected = tok.decode(fake_greedy_ids(tok, prompt_ids, 25, ignore_eos=True))
    r = client.completions.create(
        model="fake-model",
        prompt="Count: 1, 2, 3",
        max_tokens=25,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert (
        r.choices[0].text == expected
        and r.usage.completion_tokens == 25
        and r.choices[0].finish_reason == "length"
    )
    r2 = client.completions.create(
        model="fake-model",
        prompt=prompt_ids,
        max_tokens=25,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r2.choices[0].text == expected and r2.usage.prompt_tokens == len(prompt_ids)
    chunks = list(
        client.completions.create(
            model="fake-model",
            prompt="Count: 1, 2, 3",
            max_tokens=25,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected
    assert chunks[-1].usage.total_tokens == len(prompt_ids) + 25


@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_a_stream_with_token_ids_gives_the_whole_answers_ids_and_the_prompts_first(url, route):
    """`return_token_ids` on a stream: the chunks' ids join into the whole response's, the prompt's
    ids come once, in the first chunk; bench's record of the stream holds both."""
    from roofline.bench.records import RequestRecord
    from roofline.bench.sse import SSEParser
    from roofline.bench.tokens import finalize

    body = {"model": "fake-model", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    body |= {"return_token_ids": True}
    if route == "chat/completions":
        body["messages"] = MESSAGES
    else:
        body["prompt"] = "Count: 1, 2, 3"
    whole = httpx.post(f"{url}/v1/{route}", json=body, timeout=60).json()
    want_ids = whole["choices"][0]["token_ids"]
    holder = whole if route == "chat/completions" else whole["choices"][0]
    want_prompt = holder["prompt_token_ids"]
    parser, payloads = SSEParser(), []
    with httpx.stream("POST", f"{url}/v1/{route}", json=body | {"stream": True}) as r:
        for piece in r.iter_bytes():
            payloads += [p for p in parser.feed(piece) if p != b"[DONE]"]
    events = [json.loads(p) for p in payloads]
    with_prompt = [
        i
        for i, e in enumerate(events)
        if "prompt_token_ids" in e or "prompt_token_ids" in (e["choices"] or [{}])[0]
    ]
    assert with_prompt == [0]
    ids = [t for e in events for c in e["choices"] for t in c.get("token_ids", [])]
    assert len(want_ids) == 12 and ids == want_ids
    rec = RequestRecord(id=0, scenario="t")
    finalize(rec, list(range(len(payloads))), payloads, True)
    assert rec.ok and rec.token_ids == want_ids and rec.prompt_token_ids == want_prompt
    assert rec.to_json(0)["token_ids"] == want_ids


def test_stop_strings(url, runner):
    text, *_ = chat_expected(runner, MESSAGES, 60, ignore_eos=True)
    stop = text[10:13]
    cut = text[: text.index(stop)]
    client = sdk(url)
    for stop_arg in (stop, ["\u2603never", stop]):
        r = client.chat.completions.create(
            model="fake-model",
            messages=MESSAGES,
            temperature=0,
            max_tokens=60,
            stop=stop_arg,
            extra_body={"ignore_eos": True},
        )
        assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model="fake-model",
        messages=MESSAGES,
        temperature=0,
        max_tokens=60,
        stop=stop,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == cut


def test_seed_makes_sampling_reproducible(url):
    client = sdk(url)
    kw = dict(
        model="fake-model",
        messages=MESSAGES,
        temperature=1.0,
        top_p=0.9,
        max_tokens=20,
        seed=7,
        extra_body={"top_k": 10, "ignore_eos": True},
    )
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def post(url, path, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(
        url + path,
        content=data,
        headers={"Content-Type": "application/json", **kw.pop("headers", {})},
        timeout=30,
        **kw,
    )


def chat_body(**kw):
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], **kw}


@pytest.mark.parametrize(
    "body, param, code",
    [
        (chat_body(max_tokens=0), "max_tokens", "invalid_value"),
        (chat_body(max_tokens=-5), "max_tokens", "invalid_value"),
        (chat_body(max_completion_tokens=0), "max_completion_tokens", "invalid_value"),
        (chat_body(max_tokens=1000), "max_tokens", "context_length_exceeded"),
        (chat_body(max_tokens="ten"), "max_tokens", "invalid_type"),
        (chat_body(temperature="hot"), "temperature", "invalid_type"),
        (chat_body(temperature=2.5), "temperature", "invalid_value"),
        (chat_body(top_p=0), "top_p", "invalid_value"),
        (chat_body(top_k=-2), "top_k", "invalid_value"),
        (chat_body(n=2), "n", "invalid_value"),
        (chat_body(stop=[""]), "stop", "invalid_value"),
        (chat_body(stop=3), "stop", "invalid_type"),
        (chat_body(stream="yes"), "stream", "invalid_type"),
        (chat_body(messages=[]), "messages", "invalid_value"),
        (
            chat_body(messages=[{"role": "wizard", "content": "hi"}]),
            "messages.0.role",
            "invalid_value",
        ),
        (
            chat_body(messages=[{"role": "user", "content": "x" * 300}]),
            "messages",
            "context_length_exceeded",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "model": 5}, "model", "invalid_type"),
        ({"model": "fake-model"}, "messages", "missing_field"),
        (chat_body(logprobs=True), "logprobs", "unsupported_parameter"),
        (chat_body(presence_penalty=0.5), "presence_penalty", "unsupported_parameter"),
    ],
)
def test_validation_errors_are_openai_style_400s(url, body, param, code):
    r = post(url, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"] == code
    assert err["message"]


def test_completion_errors(url):
    assert (
        post(url, "/v1/completions", {"model": "fake-model", "prompt": ["a", "b"]}).json()["error"][
            "param"
        ]
        == "prompt"
    )
    assert (
        post(url, "/v1/completions", {"model": "fake-model", "prompt": [1, 10**6]}).status_code
        == 400
    )
    r = post(url, "/v1/completions", {"model": "fake-model", "prompt": "y" * 300})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["param"] == "prompt"
    assert "256" in r.json()["error"]["message"]


def test_malformed_json_and_non_object_bodies(url):
    for body in (b'{"model": "fake-model", "messages": [', b"\xff\xfe", b"[1, 2]", b"null"):
        r = post(url, "/v1/chat/completions", body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json", body


def test_unknown_model_and_unknown_route(url):
    with pytest.raises(openai.NotFoundError) as e:
        sdk(url).chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert e.value.body["code"] == "model_not_found" and "fake-model" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        sdk(url).chat.completions.create(model="fake-model", messages=MESSAGES, max_tokens=0)
    r = httpx.get(url + "/v1/nothing-here")
    assert r.status_code == 404 and "error" in r.json()


def test_api_key():
    with serving(FakeRunner(), api_key="s3cret", served_model_name="named") as u:
        with pytest.raises(openai.AuthenticationError) as e:
            sdk(u, "wrong").chat.completions.create(model="named", messages=MESSAGES, max_tokens=3)
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        r = httpx.post(u + "/v1/completions", json={"prompt": "a"})  # no Authorization header
        assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
        assert httpx.get(u + "/v1/models").status_code == 401
        ok = sdk(u, "s3cret").chat.completions.create(
            model="named", messages=MESSAGES, max_tokens=3
        )
        assert ok.model == "named" and ok.usage.completion_tokens >= 1
        assert (
            httpx.get(u + "/health").status_code == 200
            and httpx.get(u + "/metrics").status_code == 200
        )


def test_client_disconnect_frees_the_slot():
    runner = FakeRunner(max_batch=1, decode_seconds=0.01)
    # decode steps the fake may run before it waits: the request cannot finish before the client
    # goes away, however long the test takes to read and hang up; once it has, the server has 2 s of
    # decoding to notice
    budget = [5]
    runner.decode_gate = lambda: sum(e[0] == "decode" for e in runner.log) <= budget[0]
    with serving(runner) as u:
        body = chat_body(max_tokens=200, ignore_eos=True, stream=True)
        with httpx.stream("POST", u + "/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert all(not line or line.startswith("data: ") for line in got)
            assert metrics(u)["roofline_requests_running"] == 1
        budget[0] = 10**9
        wait_for(lambda: metrics(u)["roofline_requests_cancelled_total"] == 1)
        m = metrics(u)
        assert m["roofline_requests_running"] == 0 and m["roofline_generation_tokens_total"] < 200
        assert runner.ctx == {}
        # Non-streaming: the client gives up (timeout) and the request is cancelled too. Its decode
        # steps wait until the client has given up.
        budget[0] = sum(e[0] == "decode" for e in runner.log)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                u + "/v1/chat/completions",
                json=chat_body(max_tokens=200, ignore_eos=True),
                timeout=0.3,
            )
        budget[0] = 10**9
        wait_for(lambda: metrics(u)["roofline_requests_cancelled_total"] == 2)
        # The single slot is free again: a new request completes.
        r = sdk(u).chat.completions.create(model="fake-model", messages=MESSAGES, max_tokens=3)
        assert r.usage.completion_tokens >= 1


def test_concurrent_streams_equal_solo_results_and_are_batched():
    runner = FakeRunner(max_batch=4, decode_seconds=0.002)
    prompts = [
        "Why is the sky blue?",
        "Hello",
        "Count: 1, 2, 3",
        "zzz top",
        "abc",
        "Tell me a story",
    ]
    with serving(runner) as u:
        client = sdk(u)

        def run(p: str) -> str:
            stream = client.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": p}],
                temperature=0,
                max_tokens=40,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            return "".join(c.choices[0].delta.content or "" for c in stream)

        solo = [run(p) for p in prompts]
        before = metrics(u)
        with ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(run, prompts))
        after = metrics(u)
    assert together == solo
    steps = after["roofline_decode_steps_total"] - before["roofline_decode_steps_total"]
    rows = (
        after["roofline_decode_batch_tokens_total"] - before["roofline_decode_batch_tokens_total"]
    )
    assert rows / steps > 1.5, "concurrent requests were not decoded together"


def test_metrics_count_requests_and_tokens():
    runner = FakeRunner()
    with serving(runner) as u:
        client = sdk(u)
        for _ in range(2):
            client.completions.create(
                model="fake-model", prompt="abc", max_tokens=7, extra_body={"ignore_eos": True}
            )
        # rejected before the scheduler
        post(u, "/v1/completions", {"prompt": "abc", "max_tokens": 0})
        m = metrics(u)
        text = httpx.get(u + "/metrics").text
    assert (
        m["roofline_requests_total"] == 2
        and m["roofline_requests_finished_total{finish_reason=length}"] == 2
    )
    assert (
        m["roofline_generation_tokens_total"] == 14 and m["roofline_prompt_tokens_total"] == 2 * 4
    )
    assert m["roofline_requests_running"] == 0 and m["roofline_requests_queued"] == 0
    # 7 tokens a request: the prefill's token and the first decode share a step, so 6 steps each.
    assert m["roofline_step_seconds_count"] == 12 == m["roofline_step_seconds_bucket{le=+Inf}"]
    assert m["roofline_prefill_seconds_count"] == 2
    assert "# TYPE roofline_step_seconds histogram" in text


def test_serve_command_refuses_a_busy_port_in_one_line():
    import subprocess

    with contextlib.closing(bind_socket("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "roofline", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
