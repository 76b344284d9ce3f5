"""An interrupted or killed run keeps every request that ended, as valid JSONL.

The null server answers a few requests and then holds every later one open after its first token
(`--hold-after`), so the run cannot end before the test's signal, on a fast host or a slow one."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from bench_helpers import nullserver, wait_for_output


def start_bench(url, out, *extra):
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "bench",
        url,
        "--concurrency",
        "4",
        "--num-requests",
        "60",
        "--warmup",
        "0",
        "--out",
        str(out),
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_shell,
    )


def _as_from_a_shell() -> None:
    """The bench starts as from a terminal: SIGINT and SIGTERM delivered and at their defaults. A
    child inherits ignored or blocked signals from its parent, and the test process's state after
    other tests is not a user's shell (in whole-suite runs Ctrl-C never reached the bench)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def wait_for_lines(path, n, proc, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError("the run wrote too few lines")


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line must parse


def children(pid):
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out |= {int(x) for x in f.read().split()}
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


ANSWERED = 8  # requests the server answers (~0.3 s each); it holds every later one open, unfinished


@pytest.fixture
def held_server(tmp_path):
    """(URL, server log) of a null server that answers ANSWERED requests, then holds the rest
    open."""
    log = tmp_path / "server.log"
    with nullserver(
        "--ttft", "10ms", "--gap", "25ms", "--tokens", "12", "--hold-after", str(ANSWERED), log=log
    ) as url:
        yield url, log


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigkill_loses_nothing_that_ended(held_server, tmp_path, workers):
    url, server_log = held_server
    proc = start_bench(url, tmp_path / "run", "--workers", workers)
    log = tmp_path / "run" / "requests.jsonl"
    wait_for_lines(log, 6, proc)
    wait_for_output(server_log, "holding request #", proc=proc)  # in flight, and the run cannot end
    kids = children(proc.pid)
    proc.kill()
    proc.wait()
    lines = read_lines(log)
    assert len(lines) >= 6
    # workers outlive the parent by a moment: their parent-death signal makes them write what was
    # in flight as cancelled; everything else ended complete
    assert all(
        (ln["ok"] and ln["output_tokens"] == 12) or ln["error_kind"] == "cancelled" for ln in lines
    )
    assert sum(ln["ok"] for ln in lines) >= 6 - 4
    assert len({ln["id"] for ln in lines}) == len(lines)
    assert (tmp_path / "run" / "provenance.json").exists()
    deadline = time.monotonic() + 30
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(k) for k in kids), "worker processes outlived a killed bench"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_writes_cancelled_requests_and_a_summary(held_server, tmp_path, sig):
    url, server_log = held_server
    proc = start_bench(url, tmp_path / "run")
    log = tmp_path / "run" / "requests.jsonl"
    wait_for_lines(log, 4, proc)
    # all 4 streams in flight, none can end
    wait_for_output(server_log, "holding request #", 4, proc=proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    lines = read_lines(log)
    done = [ln for ln in lines if ln["ok"] and ln["phase"] == "measured"]
    cancelled = [ln for ln in lines if ln["error_kind"] == "cancelled"]
    assert len(done) >= 4 and 1 <= len(cancelled) <= 4  # the ones in flight when it stopped
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    s = summary["scenarios"][0]
    assert s["requests"]["ok"] == len(done) and s["requests"]["failures"]["cancelled"][
        "count"
    ] == len(cancelled)
    assert summary["provenance"]["interrupted"] is True
    assert "latency" in out  # the partial summary is still printed
