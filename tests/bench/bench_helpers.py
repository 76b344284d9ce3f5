"""Small builders shared by the bench tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from roofline.bench.load import Scenario
from roofline.bench.plan import BenchPlan
from roofline.bench.runner import Progress, run_bench
from roofline.bench.workloads import Prompt


def plan(url: str, scenarios: list[Scenario], **kw) -> BenchPlan:
    kw.setdefault("prompts", [Prompt("p", "hello")])
    kw.setdefault("warmup", 1)
    kw.setdefault("timeout_s", 20.0)
    kw.setdefault("max_tokens", 1000)
    return BenchPlan(url=url, scenarios=scenarios, **kw)


def run(url: str, scenarios: list[Scenario], out: Path, **kw):
    return run_bench(plan(url, scenarios, **kw), out, Progress())


def measured(lines: list[dict]) -> list[dict]:
    return [ln for ln in lines if ln["phase"] == "measured"]


@contextlib.contextmanager
def nullserver(*args: str):
    """Start `python -m roofline.bench.nullserver --port 0 ARGS`; yield its URL; stop it."""
    proc = subprocess.Popen([sys.executable, "-m", "roofline.bench.nullserver", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
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
