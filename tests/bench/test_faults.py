"""Every fault becomes a failed request with its reason; the run completes; exit code 1 only when
nothing succeeded."""

import subprocess
import sys

from bench_helpers import measured, nullserver, run

from roofline.bench.launch import free_port
from roofline.bench.loadgen import Scenario
from roofline.bench.results import read_requests
from roofline.bench.workloads import Prompt

FAULT_KINDS = {
    "http_400": "http_400",
    "http_429": "http_429",
    "http_500": "http_500",
    "http_503": "http_503",
    "hang": "timeout",
    "cut": "stream_cut",
    "malformed": "malformed_sse",
    "stream_error": "stream_error",
    "no_done": "stream_cut",
    "empty": "no_tokens",
}


def test_each_fault_is_recorded_and_counted(tmp_path):
    prompts = [Prompt(f, f"[fault:{f}] hi") for f in FAULT_KINDS] + [Prompt("fine", "hello")]
    with nullserver("--ttft", "5ms", "--gap", "1ms", "--tokens", "6") as url:
        outcome = run(
            url,
            [Scenario("concurrency", concurrency=4, num_requests=2 * len(prompts))],
            tmp_path / "run",
            prompts=prompts,
            reps=2,
            warmup=0,
            timeout_s=1.0,
            usage="per-chunk",
        )
    s = outcome.summary.scenarios[0]
    assert s.requests.measured == 2 * len(prompts)
    assert s.requests.ok == 2  # the two "fine" ones
    failures = s.requests.failures
    expected: dict[str, int] = {}
    for kind in FAULT_KINDS.values():
        expected[kind] = expected.get(kind, 0) + 2
    assert {k: v.count for k, v in failures.items()} == expected
    assert "Retry-After" in failures["http_429"].example
    by_prompt = {ln.prompt: ln for ln in measured(read_requests(tmp_path / "run")[0])}
    for fault, kind in FAULT_KINDS.items():
        assert by_prompt[fault].error_kind == kind and by_prompt[fault].error
    # a stream cut mid-way keeps the chunks that did arrive, with their times
    assert by_prompt["cut"].chunk_ns and by_prompt["cut"].output_tokens == 2
    assert (tmp_path / "run" / "summary.json").exists()


def test_refused_connection(tmp_path):
    port = free_port()  # nothing listens there
    outcome = run(
        f"http://127.0.0.1:{port}",
        [Scenario("sequential", num_requests=3)],
        tmp_path / "run",
        warmup=0,
        usage="per-chunk",
    )
    s = outcome.summary.scenarios[0]
    assert s.requests.failed == 3
    assert list(s.requests.failures) == ["connection_refused"]


def test_unresolvable_host_is_a_failed_request(tmp_path, monkeypatch):
    import socket

    def no_such_host(*a, **k):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    outcome = run(
        "http://no-such-host.invalid:8000",
        [Scenario("sequential", num_requests=2)],
        tmp_path / "run",
        warmup=0,
        usage="per-chunk",
    )
    s = outcome.summary.scenarios[0]
    assert list(s.requests.failures) == ["unresolvable_host"] and s.requests.failed == 2


def test_cli_exit_codes(tmp_path):
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "bench",
        f"http://127.0.0.1:{port}",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--out",
        str(tmp_path / "a"),
    ]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr  # no server there: one line before the run (bench.preflight)
    assert "connection refused" in p.stderr and not (tmp_path / "a").exists()
    with nullserver(
        "--ttft", "2ms", "--gap", "1ms", "--tokens", "3", "--faults", "http_500"
    ) as url:
        p = subprocess.run(
            [*cmd[:4], url, *cmd[5:-1], str(tmp_path / "c")],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 1, p.stderr  # a server, but nothing succeeded
    assert "http_500" in p.stdout
    with nullserver(
        "--ttft", "2ms", "--gap", "1ms", "--tokens", "3", "--faults", "ok,http_500"
    ) as url:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "roofline",
                "bench",
                url,
                "--reps",
                "1",
                "--warmup",
                "0",
                "--out",
                str(tmp_path / "b"),
                "--json",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 0, p.stderr  # some succeeded, some failed
    import json

    summary = json.loads(p.stdout)
    assert summary["scenarios"][0]["requests"]["failures"]["http_500"]["count"] == 2
