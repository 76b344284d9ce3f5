"""Run folders for the report tests, made by the real commands: `roofline bench` against the null
server (which reports its bytes per token, so the run has a ceiling) and `roofline tune` on the fake
engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import (
    BANDWIDTH,
    BYTES_PER_TOKEN,
    FILE_BYTES_PER_TOKEN,
    fake_tune_argv,
    marker,
    nullserver,
    write_space,
)


def bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "roofline",
            "bench",
            url,
            "--hardware",
            BANDWIDTH,
            "--reps",
            "2",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="session")
def bench_run(tmp_path_factory) -> tuple[Path, str]:
    """A load sweep (1 and 2 streams) over the four built-in prompts, 2 reps; (folder, bench's
    stderr). The server reports the bytes it reads per token and the bytes its model file stores, a
    quarter of them."""
    out = tmp_path_factory.mktemp("bench") / "run"
    with nullserver(
        "--ttft",
        "20ms",
        "--gap",
        "2ms",
        "--tokens",
        "8",
        "--bytes-per-token",
        str(BYTES_PER_TOKEN),
        "--file-bytes-per-token",
        str(FILE_BYTES_PER_TOKEN),
    ) as url:
        p = bench(url, out, "--concurrency", "1,2")
    return out, p.stderr


@pytest.fixture(scope="session")
def slower_bench_run(tmp_path_factory) -> Path:
    """The same workload against a server twice as slow between tokens."""
    out = tmp_path_factory.mktemp("bench_slow") / "run"
    with nullserver(
        "--ttft", "20ms", "--gap", "4ms", "--tokens", "8", "--bytes-per-token", str(BYTES_PER_TOKEN)
    ) as url:
        bench(url, out, "--concurrency", "1,2", "--no-report")
    return out


TUNE_SPACE = """
[baseline]
speed = 200
[knobs.speed]
choices = [100, 200, 400]
default = 200
"""


@pytest.fixture(scope="session")
def tune_run(tmp_path_factory) -> tuple[Path, str]:
    """A ladder over the fake engine's speed (100, 200, 400 tok/s), held against SmolLM2-135M on a
    B200."""
    base = tmp_path_factory.mktemp("tune")
    space = write_space(base, TUNE_SPACE)
    p = subprocess.run(
        fake_tune_argv(
            "--space",
            str(space),
            "--runs",
            str(base / "runs"),
            "--reps",
            "2",
            "--max-tokens",
            "12",
            "--model",
            "smollm2-135m-instruct",
            "--hardware",
            "b200",
            "--engine-timeout",
            "20s",
            "--timeout",
            "20s",
            f"--engine-arg={marker()}",
        ),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in (base / "runs").iterdir() if d.is_dir()]
    assert json.loads((run / "tune.json").read_text())["trials"]
    return run, p.stderr
