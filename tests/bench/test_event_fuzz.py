"""No event a server sends can crash the decoder: each request ends as a record, ok or failed with a
reason, and a run against a server that sends nonsense still writes requests.jsonl and a summary."""

from __future__ import annotations

import json
import math
import socket
import threading

from bench_helpers import measured, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.bench import tokens
from roofline.bench.loadgen import Scenario
from roofline.bench.records import RequestRecord
from roofline.bench.results import read_requests
from roofline.bench.sse import SSEParser
from roofline.bench.workloads import Prompt

KEYS = [
    "choices",
    "delta",
    "message",
    "content",
    "reasoning_content",
    "reasoning",
    "text",
    "tool_calls",
    "function",
    "arguments",
    "finish_reason",
    "usage",
    "completion_tokens",
    "prompt_tokens",
    "error",
    "message",
    "roofline_t_ns",
    "meta_info",
    "roofline",
    "passes",
    "spec_verify_ct",
    "index",
    "role",
]
FAILURE_KINDS = {"", "malformed_sse", "malformed_event", "stream_error", "stream_cut", "no_tokens"}

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), kids, max_size=5)
    ),
    max_leaves=25,
)


def good_event(text: str, done: int, finish: str | None = None) -> dict:
    return {
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 2, "completion_tokens": done},
    }


# where a value can be swapped into a well-formed event
PATHS = [
    ("choices",),
    ("choices", 0),
    ("choices", 0, "delta"),
    ("choices", 0, "delta", "content"),
    ("choices", 0, "delta", "tool_calls"),
    ("choices", 0, "finish_reason"),
    ("choices", 0, "text"),
    ("choices", 0, "message"),
    ("usage",),
    ("usage", "completion_tokens"),
    ("usage", "prompt_tokens"),
    ("usage", "passes"),
    ("error",),
    ("roofline_t_ns",),
    ("meta_info",),
    ("roofline",),
]


def put(obj: dict, path: tuple, value) -> dict:
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


def encode(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def decode_strictly(payloads: list[bytes], saw_done: bool = True) -> RequestRecord:
    """The decoder without its last line of defence: only a MalformedEvent may leave it (which the
    public `finalize` turns into a failed record)."""
    rec = RequestRecord(id=0, scenario="fuzz")
    times = list(range(1, len(payloads) + 1))
    try:
        tokens._finalize(rec, times, payloads, saw_done, None)
    except tokens.MalformedEvent:
        rec = RequestRecord(id=0, scenario="fuzz")
        tokens.finalize(rec, times, payloads, saw_done)
        assert rec.error_kind == "malformed_event" and rec.error
    check(rec)
    return rec


def check(rec: RequestRecord) -> None:
    assert rec.error_kind in FAILURE_KINDS
    assert all(t.__class__ is int and 0 < t <= 2**31 for t in rec.chunk_tokens)
    assert rec.output_tokens == sum(rec.chunk_tokens) and math.isfinite(float(rec.output_tokens))
    assert rec.prompt_tokens is None or 0 <= rec.prompt_tokens < 2**31
    assert rec.passes is None or 0 <= rec.passes < 2**31
    assert isinstance(rec.text, str) and isinstance(rec.error, str)
    json.dumps(rec.to_json(0))  # the line can be written


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values, min_size=1, max_size=4))
def test_any_json_values_as_events(values):
    decode_strictly([encode(v) for v in values])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_any_value_in_any_field_of_a_well_formed_event(path, value, saw_done):
    bad = put(good_event(" x", 2), path, value)
    decode_strictly(
        [encode(good_event("a", 1)), encode(bad), encode(good_event(" z", 3, "stop"))], saw_done
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.binary(max_size=40)
        | st.sampled_from([b"NaN", b"-Infinity", b"[" * 3000, b"{" * 3000, b"1" * 5000]),
        min_size=1,
        max_size=4,
    )
)
def test_any_bytes_as_event_data(payloads):
    decode_strictly(payloads)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=6))
def test_any_byte_stream_through_the_event_parser(stream, cuts):
    parser, got, last = SSEParser(), [], 0
    for c in sorted(set(cuts)):
        got += parser.feed(stream[last:c])
        last = c
    got += parser.feed(stream[last:]) + parser.close()
    assert all(isinstance(p, bytes) for p in got)
    decode_strictly([p for p in got if p != b"[DONE]"])


NONSENSE = [
    b'{"choices": 5}',
    b'{"choices": [{"delta": {"tool_calls": 5}}]}',
    b'{"choices": [], "usage": {"completion_tokens": ' + b"9" * 400 + b"}}",
    b"[1, 2, 3]",
    b'"just a string"',
    b"NaN",
    b'{"usage": {"completion_tokens": NaN}}',
    b'{"choices": [{"delta": {"content": {"nested": [[[{"nonsense": true}]]]}}}]}',
    b"[" * 5000 + b"]" * 5000,
]


class NonsenseServer:
    """Chunked SSE over keep-alive: a request whose prompt is `bad N` gets NONSENSE[N] between two
    good events; any other prompt gets a good stream."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                if not head.startswith(b"POST"):
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                prompt = json.loads(body)["messages"][0]["content"]
                events = [encode(good_event("a", 1))]
                if prompt.startswith("bad "):
                    events.append(NONSENSE[int(prompt[4:])])
                events += [encode(good_event(" b", 2, "stop")), b"[DONE]"]
                out = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for e in events:
                    frame = b"data: " + e + b"\n\n"
                    out += b"%x\r\n%s\r\n" % (len(frame), frame)
                conn.sendall(out + b"0\r\n\r\n")


def test_a_run_against_a_nonsense_server_records_every_request(tmp_path):
    server = NonsenseServer()
    prompts = [Prompt(f"bad{i}", f"bad {i}") for i in range(len(NONSENSE))] + [
        Prompt("good", "good")
    ]
    try:
        outcome = run(
            server.url,
            [Scenario("concurrency", concurrency=3, num_requests=len(prompts))],
            tmp_path / "run",
            prompts=prompts,
            reps=1,
            warmup=0,
            usage="per-chunk",
        )
    finally:
        server.sock.close()
    lines = measured(read_requests(tmp_path / "run")[0])
    assert len(lines) == len(prompts)
    by_prompt = {ln.prompt: ln for ln in lines}
    assert by_prompt["good"].ok and by_prompt["good"].output_tokens == 2
    for i in range(len(NONSENSE)):
        ln = by_prompt[f"bad{i}"]
        assert not ln.ok and ln.error_kind in ("malformed_event", "malformed_sse") and ln.error, ln
    s = outcome.summary.scenarios[0]
    assert s.requests.ok == 1 and s.requests.failed == len(NONSENSE)
    assert (tmp_path / "run" / "summary.json").exists()
