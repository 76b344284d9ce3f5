"""Before a run against a URL: nothing there stops it with one line (exit 2); a server whose
/v1/models entry carries its bytes per token holds the run against the ceiling without
--model/--hardware."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from typing import Self

import pytest
from bench_helpers import nullserver, plan

from roofline.bench.driver import Progress
from roofline.bench.launch import free_port
from roofline.bench.loadgen import Scenario
from roofline.bench.preflight import (
    ServerFacts,
    bytes_per_token_of,
    ceiling_hardware,
    is_this_machine,
    preflight,
)
from roofline.bench.session import run_session
from roofline.errors import UserError


class ModelsServer:
    """Answers every request with one fixed HTTP response (a /v1/models listing), then closes."""

    def __init__(self, status: int, body: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.response = (
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (status, len(body), body)
        )
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(self.response)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def listing(roofline: dict | None, model: str = "served-model") -> bytes:
    entry = {"id": model, "object": "model"}
    if roofline is not None:
        entry["roofline"] = roofline
    return json.dumps({"object": "list", "data": [entry]}).encode()


def test_unreachable_url_is_one_user_error():
    port = free_port()  # nothing listens there
    with pytest.raises(UserError) as e:
        preflight(plan(f"http://127.0.0.1:{port}", [Scenario("sequential")]))
    msg = str(e.value)
    assert "\n" not in msg and f"127.0.0.1:{port}" in msg and "refused" in msg.lower()


def test_unreachable_url_exits_2_before_the_run(tmp_path):
    port = free_port()
    out = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "roofline",
            "bench",
            f"http://127.0.0.1:{port}",
            "--reps",
            "1",
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], p.stderr
    assert not out.exists()  # nothing was run


def test_any_http_answer_counts_as_a_server():
    with ModelsServer(404, b'{"error": "no such route"}') as s:
        p = plan(s.url, [Scenario("sequential")])
        assert preflight(p) == p


def test_entry_with_bytes_per_token_holds_the_run_against_this_machine():
    notes: list[str] = []
    with ModelsServer(
        200, listing({"bytes_per_token": 4_000_000, "hardware": "local", "dtype": "fp32"})
    ) as s:
        p = preflight(plan(s.url, [Scenario("sequential")]), notes.append)
    assert p.hardware == "local" and p.model is None
    assert p.provenance_extra["ceiling_from_server"]["bytes_per_token"] == 4_000_000
    assert any("4.0 MB per token" in n for n in notes)


def test_explicit_model_or_hardware_is_left_alone():
    with ModelsServer(200, listing({"bytes_per_token": 4_000_000, "hardware": "local"})) as s:
        for kw in ({"hardware": "h100-sxm"}, {"model": "smollm2-135m"}):
            p = plan(s.url, [Scenario("sequential")], **kw)
            assert preflight(p) == p


def test_entry_without_bytes_per_token_changes_nothing():
    for entry in (
        None,
        {"dtype": "fp32"},
        {"bytes_per_token": True},
        {"bytes_per_token": -5},
        {"bytes_per_token": "4e6"},
    ):
        with ModelsServer(200, listing(entry)) as s:
            p = plan(s.url, [Scenario("sequential")])
            assert preflight(p) == p


def test_bytes_per_token_must_be_a_plausible_number():
    assert bytes_per_token_of({"bytes_per_token": 538_000_000}) == 538e6
    assert bytes_per_token_of({"bytes_per_token": 2.5e6}) == 2.5e6
    for bad in (0, -1, True, None, "538000000", float("nan"), float("inf"), 10**400, [1], {"a": 1}):
        assert bytes_per_token_of({"bytes_per_token": bad}) is None
    assert bytes_per_token_of(None) is None


def test_where_the_server_runs_decides_what_to_measure():
    assert is_this_machine("127.0.0.1") and is_this_machine("localhost") and is_this_machine("::1")
    assert not is_this_machine("192.0.2.1")  # TEST-NET-1: never an address of this machine
    remote = ServerFacts(
        url="http://192.0.2.1:8000/v1",
        status=200,
        bytes_per_token=4e6,
        hardware="local",
        local=False,
    )
    hardware, note = ceiling_hardware(remote)
    assert hardware is None and "--hardware" in note
    assert ceiling_hardware(replace(remote, local=True))[0] == "local"
    assert ceiling_hardware(replace(remote, local=True, hardware=None))[0] == "local"
    named = ServerFacts(url="u", status=200, bytes_per_token=4e6, hardware="8TB/s", local=False)
    assert ceiling_hardware(named)[0] == "8TB/s"
    unknown = ServerFacts(
        url="u", status=200, bytes_per_token=4e6, hardware="no-such-chip", local=True
    )
    hardware, note = ceiling_hardware(unknown)
    assert hardware is None and "no-such-chip" in note
    assert ceiling_hardware(ServerFacts(url="u", status=200)) == (None, "")


def test_run_against_a_server_reporting_bytes_per_token_is_held_against_the_ceiling(tmp_path):
    """A stand-in for `roofline serve`: the null server advertising 4 MB per token; the bandwidth
    measured before and after the run is given (20 and 18 GB/s: the higher is the bound), so the
    ceiling is 20e9 / 4e6 = 5000 tok/s."""
    measured = iter([(20e9, "fake-before"), (18e9, "fake-after")])
    with nullserver(
        "--ttft", "5ms", "--gap", "2ms", "--tokens", "6", "--bytes-per-token", "4000000"
    ) as url:
        p = preflight(
            plan(url, [Scenario("sequential", num_requests=2)], warmup=0, usage="per-chunk")
        )
        outcome = run_session(
            p, tmp_path / "run", Progress(), measure_bandwidth=lambda: next(measured)
        )
    ceiling = outcome.summary.ceiling
    assert ceiling is not None
    assert ceiling.bytes_per_token == 4e6 and ceiling.bandwidth_bytes_per_s == pytest.approx(20e9)
    vs = outcome.summary.scenarios[0].vs_ceiling
    assert vs.ceiling_tok_per_s == pytest.approx(5000.0)
    assert 0 < vs.percent_of_ceiling < 100  # ~500 tok/s against 5000
