"""`roofline tune` as a user runs it (in a subprocess, with the fake engine registered): refusing
bad input before anything launches, and resuming a study after the tuner was killed."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter

import pytest
from tune_helpers import (
    fake_tune_argv,
    gate_arg,
    marker,
    release,
    wait_for_engine_start,
    wait_gone,
    write_space,
)

pytestmark = pytest.mark.slow

GRID = """
[baseline]
speed = 80
[knobs.speed]
choices = [60, 80, 100, 120, 240]  # the best twice the next: clear even on a busy machine
default = 80
[knobs.shift]
choices = [0]
default = 0
"""


def test_a_bad_space_is_refused_before_anything_launches(tmp_path):
    space = write_space(tmp_path, "[knobs.speed]\nlow = 10\nhigh = 5\n")
    p = subprocess.run(
        fake_tune_argv("--space", str(space), "--runs", str(tmp_path / "runs")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "knob 'speed'" in p.stderr and "low must be below high" in p.stderr
    assert not (tmp_path / "runs").exists()
    p = subprocess.run(
        fake_tune_argv("--space", str(space), "--objective", "cost"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "--price-per-hour" in p.stderr


def test_resume_after_a_kill_reruns_only_the_interrupted_trial(tmp_path):
    space = write_space(tmp_path, GRID)
    mark = marker()
    # the second trial's engine holds its requests: the kill surely interrupts that trial
    gate = tmp_path / "gate"
    args = [
        "--space",
        str(space),
        "--strategy",
        "grid",
        "--reps",
        "2",
        "--max-tokens",
        "24",
        "--runs",
        str(tmp_path / "runs"),
        gate_arg(gate),
        "--engine-arg",
        mark,
        "--engine-timeout",
        "10s",
        "--json",
    ]
    proc = subprocess.Popen(
        fake_tune_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    run_dir = None
    while time.monotonic() < deadline:
        found = list((tmp_path / "runs").glob("*/trials.jsonl"))
        # the first trial is recorded and the second one has started
        if (
            found
            and found[0].read_text().count("\n") >= 1
            and (found[0].parent / "trials" / "001").exists()
        ):
            run_dir = found[0].parent
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    assert run_dir is not None, "the first trial was never recorded"
    wait_for_engine_start(gate, 1, proc)  # the second trial's engine is up, holding its requests
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_gone(mark) == []  # the engine died with its tuner (parent-death signal)
    before = [json.loads(ln) for ln in (run_dir / "trials.jsonl").read_text().splitlines()]

    release(gate)  # the resumed run's engines answer
    p = subprocess.run(
        fake_tune_argv("--resume", str(run_dir), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "re-running interrupted trial(s)" in p.stderr
    result = json.loads(p.stdout)
    trials = result["trials"]
    ok = [t for t in trials if t["status"] == "ok"]
    speeds = Counter(t["config"]["speed"] for t in ok)
    assert speeds == Counter({60: 1, 80: 1, 100: 1, 120: 1, 240: 1})  # every point once, none twice
    interrupted = [t for t in trials if t["status"] == "failed"]
    assert len(interrupted) == 1 and interrupted[0]["error"].startswith("interrupted")
    # what finished before the kill was not run again
    after = [json.loads(ln) for ln in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert after[: len(before)] == before
    assert {t["number"] for t in after[len(before) :]}.isdisjoint({t["number"] for t in before})
    assert result["best"]["config"]["speed"] == 240 and result["best_command"][-1] == mark
    assert (
        result["study"]["trials"].get("waiting", 0) == 0
        and result["study"]["trials"].get("running", 0) == 0
    )
    assert wait_gone(mark) == []


def test_ctrl_c_stops_the_engine_keeps_the_study_and_says_how_to_resume(tmp_path):
    space = write_space(tmp_path, GRID)
    mark = marker()
    # the second trial's engine holds its requests: the signal surely finds it running
    gate = tmp_path / "gate"
    proc = subprocess.Popen(
        fake_tune_argv(
            "--space",
            str(space),
            "--strategy",
            "grid",
            "--max-tokens",
            "16",
            "--runs",
            str(tmp_path / "runs"),
            gate_arg(gate),
            "--engine-arg",
            mark,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list((tmp_path / "runs").glob("*/trials/001/server.log")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the second trial never started"
        time.sleep(0.02)
    wait_for_engine_start(gate, 1, proc)  # its engine is up (and cannot finish the trial)
    proc.send_signal(signal.SIGTERM)  # what Ctrl-C does, without a terminal
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run_dir = next((tmp_path / "runs").glob("*"))
    assert f"roofline tune --resume {run_dir}" in err
    assert wait_gone(mark) == []
    saved = json.loads((run_dir / "tune.json").read_text())
    assert saved["interrupted"] is True
    assert saved["study"]["trials"]["waiting"] >= 1  # the interrupted trial went back in the queue
