"""Starting and stopping a local server: ready on /health, stopped always, no orphan left."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace

import pytest
from bench_helpers import wait_for_output

from roofline.bench.driver import Progress
from roofline.bench.engines import LAUNCHERS
from roofline.bench.launch import (
    LocalServer,
    ServerDied,
    command_from_template,
    free_port,
)
from roofline.bench.loadgen import Scenario
from roofline.bench.plan import BenchPlan
from roofline.bench.session import EngineSpec, run_session
from roofline.bench.workloads import Prompt

# The command launcher with the embedded engine's traits: bench treats it as the embedded engine
# (held against this machine's profile) while it runs a null server. Traits, not the name, decide.
EMBEDDED = LAUNCHERS["embedded"]
EMBEDDED_STAND_IN = replace(
    LAUNCHERS["command"],
    name="embedded-stand-in",
    reports_bytes_per_token=EMBEDDED.reports_bytes_per_token,
    usage_per_chunk=EMBEDDED.usage_per_chunk,
    default_hardware=EMBEDDED.default_hardware,
)


def processes_with(marker: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        with open(f"/proc/{pid}/stat") as s:
                            if s.read().split(")")[-1].split()[0] != "Z":
                                out.append(int(pid))
            except OSError:
                pass
    return out


def wait_gone(marker: str, timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes_with(marker)


def null_template(marker: str, *extra: str) -> str:
    return (
        "{python} -m roofline.bench.nullserver --host {host} --port {port} "
        "--ttft 5ms --gap 1ms --tokens 4 "
        f"--model {marker} " + " ".join(extra)
    )


def test_local_server_starts_answers_and_stops(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    port = free_port()
    server = LocalServer(
        command_from_template(null_template(marker, "--workers", "2"), port, "127.0.0.1"),
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "server.log",
        ready_timeout_s=20,
    )
    with server:
        assert server._healthy()
        assert len(processes_with(marker)) == 2  # the server and its second worker, one group
    assert wait_gone(marker) == []
    assert server.proc.returncode is not None


def test_server_that_dies_reports_its_log_tail(tmp_path):
    argv = [
        sys.executable,
        "-c",
        "import sys; print('loading weights... failed: no such file'); sys.exit(3)",
    ]
    server = LocalServer(
        argv,
        host="127.0.0.1",
        port=free_port(),
        log_path=tmp_path / "server.log",
        ready_timeout_s=20,
    )
    with pytest.raises(ServerDied) as e, server:
        pass
    assert "code 3" in str(e.value) and "no such file" in e.value.tail


def test_server_that_never_gets_ready_times_out_and_is_stopped(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", f"import time; time.sleep(60)  # {marker}"]
    server = LocalServer(
        argv, host="127.0.0.1", port=free_port(), log_path=tmp_path / "s.log", ready_timeout_s=0.5
    )
    with pytest.raises(ServerDied, match="did not answer"), server:
        pass
    assert wait_gone(marker) == []


def test_cli_engine_cmd_with_server_reported_bytes_per_token(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "bench",
        "--engine-cmd",
        null_template(marker, "--bytes-per-token", "1000000"),
        "--hardware",
        "1GB/s",
        "--reps",
        "1",
        "--json",
        "--out",
        str(tmp_path / "run"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["ceiling"]["tok_per_s"] == pytest.approx(1000.0)  # 1 GB/s over 1 MB per token
    v = summary["scenarios"][0]["vs_ceiling"]
    assert v["percent_of_ceiling"] == pytest.approx(100 * v["measured_tok_per_s"] / 1000.0)
    assert v["effective_bandwidth_bytes_per_s"] == pytest.approx(v["measured_tok_per_s"] * 1e6)
    assert summary["provenance"]["served_model"] == marker
    assert (tmp_path / "run" / "server.log").exists() and (tmp_path / "run" / "summary.md").exists()
    assert wait_gone(marker) == []


def test_sigterm_to_bench_stops_the_engine(tmp_path):
    marker = f"m{uuid.uuid4().hex}"
    # the engine answers the two warm-up requests, then holds the next one open: the run cannot end
    # by itself
    template = null_template(marker, "--hold-after", "2")
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "bench",
        "--engine-cmd",
        template,
        "--reps",
        "5",
        "--out",
        str(tmp_path / "run"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "run" / "requests.jsonl"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_bytes().count(b"\n") >= 2):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the run wrote too few lines"
        time.sleep(0.05)
    # a request is in flight
    wait_for_output(tmp_path / "run" / "server.log", "holding request #", proc=proc)
    assert processes_with(marker)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert wait_gone(marker) == []


def _write_profile(read_median: float = 2e9) -> None:
    from roofline.hardware.profile import profile_path

    stats = {"median": read_median, "min": read_median, "max": read_median, "runs": [read_median]}
    profile_path().parent.mkdir(parents=True)
    profile_path().write_text(
        json.dumps(
            {
                "name": "local",
                "cpu": "test cpu",
                "threads": 2,
                "memory_bytes": 2**34,
                "bandwidth_bytes_per_s": {"read": stats, "copy": stats, "triad": stats},
                "flops": {},
            }
        )
    )


def fake_bandwidth(*values: tuple[float, str]):
    """A stand-in for the short probe: the given (bytes/s, kernel) in turn, and the number of
    calls."""
    calls = []

    def measure() -> tuple[float, str]:
        calls.append(1)
        return values[len(calls) - 1]

    return measure, calls


def test_embedded_engine_is_held_against_the_bandwidth_window_of_its_run(tmp_path, monkeypatch):
    """--engine embedded with no --hardware: the ceiling is the server's bytes over this machine's
    read bandwidth measured right before and right after the run, the higher of the two (not the
    profile's 2 GB/s of minutes ago)."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    _write_profile(2e9)
    marker = f"m{uuid.uuid4().hex}"
    plan = BenchPlan(
        url="",
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=2)],
        warmup=0,
        usage="per-chunk",
        timeout_s=20,
    )
    engine = EngineSpec(
        EMBEDDED_STAND_IN,
        template=null_template(marker, "--bytes-per-token", "4000000"),
        ready_timeout_s=20,
    )
    measure, calls = fake_bandwidth((3e9, "simd-sum"), (5e9, "gemv"))
    outcome = run_session(plan, tmp_path / "run", Progress(), engine, measure_bandwidth=measure)
    assert len(calls) == 2
    c = outcome.summary.ceiling
    assert c.hardware == "local" and c.bandwidth_bytes_per_s == 5e9
    assert c.tok_per_s == pytest.approx(5e9 / 4e6)
    assert any(
        a.startswith("bandwidth 5.0 GB/s")
        and "before 3.0 GB/s (simd-sum)" in a
        and "drifted 40%" in a
        for a in c.assumptions
    )
    window = json.loads((tmp_path / "run" / "provenance.json").read_text())["local_bandwidth"]
    assert (
        window["before_bytes_per_s"] == 3e9
        and window["after_bytes_per_s"] == 5e9
        and window["drift_is_large"]
    )
    v = outcome.summary.scenarios[0].vs_ceiling
    assert v.bandwidth_bytes_per_s == 5e9 and v.ceiling_tok_per_s == pytest.approx(1250.0)
    assert outcome.summary.scenarios[0].requests.ok == 2
    assert wait_gone(marker) == []


def test_hardware_local_against_a_url_is_held_against_the_window_too(
    null_url, tmp_path, monkeypatch
):
    """bench URL --model M --hardware local: the model's bytes per token over the window's higher
    figure."""
    from roofline.bounds.analysis import ceiling_for

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    _write_profile(2e9)
    plan = BenchPlan(
        url=null_url,
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=2)],
        warmup=0,
        usage="per-chunk",
        timeout_s=20,
        model="openai/gpt-oss-120b",
        hardware="local",
    )
    measure, calls = fake_bandwidth((40e9, "gemv"), (38e9, "gemv"))
    outcome = run_session(plan, tmp_path / "run", Progress(), measure_bandwidth=measure)
    c = outcome.summary.ceiling
    assert len(calls) == 2 and c.hardware == "local" and c.bandwidth_bytes_per_s == 40e9
    assert c.bytes_per_token == pytest.approx(
        ceiling_for("openai/gpt-oss-120b", "b200").bytes_per_token
    )
    # the profile's 2 GB/s line is gone
    assert sum(a.startswith("bandwidth ") for a in c.assumptions) == 1
    assert not any("drift" in a for a in c.assumptions)  # 5%: not worth a word


def test_catalogue_model_and_hardware_give_the_ceiling(null_url, tmp_path):
    from roofline.bounds.analysis import ceiling_for

    plan = BenchPlan(
        url=null_url,
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=2)],
        warmup=0,
        usage="per-chunk",
        timeout_s=20,
        model="openai/gpt-oss-120b",
        hardware="b200",
    )
    outcome = run_session(plan, tmp_path / "run", Progress())
    expected = ceiling_for("openai/gpt-oss-120b", "b200")
    c = outcome.summary.ceiling
    assert c.tok_per_s == pytest.approx(expected.tok_per_s)
    assert 1500 < c.tok_per_s < 1700  # the B200 study's worked example: about 1,610 tok/s
    v = outcome.summary.scenarios[0].vs_ceiling
    assert v.percent_of_ceiling == pytest.approx(100 * v.measured_tok_per_s / expected.tok_per_s)


def test_unknown_hardware_is_a_user_error_before_anything_is_sent(null_url, tmp_path):
    from roofline.errors import UserError

    plan = BenchPlan(
        url=null_url,
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=2)],
        warmup=0,
        usage="per-chunk",
        model="openai/gpt-oss-120b",
        hardware="abacus",
    )
    with pytest.raises(UserError):
        run_session(plan, tmp_path / "run", Progress())
    assert not (tmp_path / "run" / "requests.jsonl").exists()


def test_embedded_engine_measures_the_machine_when_no_profile_exists(tmp_path, monkeypatch):
    """The main job on a fresh machine: no `roofline probe` yet, so bench measures (a small probe
    here), saves the profile, and holds the result against it."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    import roofline.hardware.probe as probe
    from roofline.hardware.profile import load_local_profile

    real = probe.measure_profile
    monkeypatch.setattr(
        probe,
        "measure_profile",
        lambda: real(size_bytes=8 * 2**20, repeats=2, warmup=1, matmul_n=64, use_cuda=False),
    )
    assert load_local_profile() is None
    marker = f"m{uuid.uuid4().hex}"
    plan = BenchPlan(
        url="",
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=1)],
        warmup=0,
        usage="per-chunk",
        timeout_s=20,
    )
    engine = EngineSpec(
        EMBEDDED_STAND_IN,
        template=null_template(marker, "--bytes-per-token", "4000000"),
        ready_timeout_s=20,
    )
    measure, _ = fake_bandwidth((3e9, "gemv"), (3e9, "gemv"))
    outcome = run_session(plan, tmp_path / "run", Progress(), engine, measure_bandwidth=measure)
    profile = load_local_profile()
    assert profile is not None
    assert profile["bandwidth_bytes_per_s"]["read"]["median"] > 0
    # the run itself is held against the bandwidth measured in its window
    c = outcome.summary.ceiling
    assert (
        c.hardware == "local"
        and c.bandwidth_bytes_per_s == 3e9
        and c.tok_per_s == pytest.approx(3e9 / 4e6)
    )
    assert wait_gone(marker) == []
