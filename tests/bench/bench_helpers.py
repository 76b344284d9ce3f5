"""Small builders shared by the bench tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from roofline.bench.driver import Progress, run_bench
from roofline.bench.loadgen import Scenario
from roofline.bench.plan import BenchPlan
from roofline.bench.records import RequestRecord
from roofline.bench.workloads import Prompt


def plan(url: str, scenarios: list[Scenario], **kw) -> BenchPlan:
    kw.setdefault("prompts", [Prompt("p", "hello")])
    kw.setdefault("warmup", 1)
    kw.setdefault("timeout_s", 20.0)
    kw.setdefault("max_tokens", 1000)
    return BenchPlan(url=url, scenarios=scenarios, **kw)


def run(url: str, scenarios: list[Scenario], out: Path, **kw):
    return run_bench(plan(url, scenarios, **kw), out, Progress())


def measured(lines: list[RequestRecord]) -> list[RequestRecord]:
    return [ln for ln in lines if ln.phase == "measured"]


@contextlib.contextmanager
def nullserver(*args: str, log: Path | None = None):
    """Start `python -m roofline.bench.nullserver --port 0 ARGS`; yield its URL; stop it. With
    `log`, what the server prints goes to that file (`--hold-after` prints a line per request it
    holds: see `wait_for_output`)."""
    out = open(log, "w") if log else subprocess.PIPE  # noqa: SIM115 -- closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "roofline.bench.nullserver", "--port", "0", *args],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if log:
            wait_for_output(log, "listening on ", proc=proc)
            line = next(ln for ln in log.read_text().splitlines() if ln.startswith("listening on "))
        else:
            line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"null server did not start: {line!r} {proc.stderr.read()}")
        yield line.split()[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


def wait_for_output(
    path: Path,
    text: str,
    count: int = 1,
    *,
    proc: subprocess.Popen | None = None,
    timeout_s: float = 60.0,
) -> None:
    """Wait until `count` lines of the file at `path` start with `text` (a server's log: its
    `listening on` line, the `holding request #K` lines of a null server run with `--hold-after`).
    Fails after timeout_s, or at once when `proc` (what writes the file, or what must still run
    meanwhile) has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        if sum(ln.startswith(text) for ln in lines) >= count:
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"exited (code {proc.returncode}) before {count} line(s) {text!r} in {path}: "
                f"{lines[-5:]} {proc.stderr.read() if proc.stderr else ''}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{count} line(s) {text!r} not in {path} after {timeout_s:g} s: {lines[-5:]}"
            )
        time.sleep(0.02)
