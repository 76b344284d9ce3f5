"""Shared by the tuner's tests: a fake launcher around fake_engine.py, spaces, process-table
checks."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from roofline.bench.engines.base import Knob, Launcher, flag, knob_table

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")
FAKE_TUNE = Path(__file__).with_name("fake_tune.py")


@dataclass(frozen=True)
class FakeLauncher(Launcher):
    """Starts fake_engine.py; knob k=v -> --k v."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        out = [sys.executable, str(FAKE_ENGINE), "--host", host, "--port", str(port)]
        for knob, value in self.settings(config):
            out += [flag(knob.name), str(value)]
        return out + list(extra_args)

    def version(self) -> str | None:
        return "fake 1.0"

    def learns_speed(self, config) -> bool:
        return bool(config.get("memory"))  # --memory 1: repeats are faster


FAKE = FakeLauncher(
    name="fake",
    stream_token_ids=True,
    knobs=knob_table(
        Knob("mode", "choice", ("ok", "crash", "crash_mid", "hang", "garbage", "ignore_term")),
        Knob("speed", "int", minimum=1),
        Knob("shift", "int"),
        Knob("memory", "int"),
    ),
)


def register_fake(monkeypatch) -> None:
    from roofline.bench import engines

    monkeypatch.setitem(engines.LAUNCHERS, "fake", FAKE)


def tune_options(space, mark: str, **kw):
    """TuneOptions for a fake engine (`engine`, default "fake"): short requests and timeouts, the
    process marker `mark` as its last argument, 2 repetitions unless `reps` says otherwise."""
    from roofline.tune.options import TuneOptions

    kw.setdefault("engine", "fake")
    kw.setdefault("reps", 2)
    return TuneOptions(
        space=space.to_json(),
        max_tokens=12,
        extra_args=(mark,),
        ready_timeout_s=3,
        request_timeout_s=5,
        stop_grace_s=1,
        **kw,
    )


def write_space(folder: Path, body: str, name: str = "space.toml") -> Path:
    path = folder / name
    path.write_text('source = "test"\ndate = "2026-12-02"\n' + body, encoding="utf-8")
    return path


def write_profile(cache: Path, read_bytes_per_s: float = 30e9) -> None:
    """A measured-machine profile, so tests on the embedded engine skip the probe."""
    stats = {
        "median": read_bytes_per_s,
        "min": read_bytes_per_s,
        "max": read_bytes_per_s,
        "runs": [read_bytes_per_s],
    }
    path = cache / "hardware" / "local.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
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


def marker() -> str:
    return f"m{uuid.uuid4().hex}"


def processes_with(text: str) -> list[int]:
    """Live (not zombie) processes whose command line contains text."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/stat") as s:
                if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(int(pid))
        except OSError:
            pass
    return out


def wait_gone(text: str, timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while processes_with(text) and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes_with(text)


def fake_tune_argv(*args: str) -> list[str]:
    return [sys.executable, str(FAKE_TUNE), "tune", "--engine", "fake", *args]


def gate_arg(gate: Path) -> str:
    """The --engine-arg that makes every fake engine after the first hold its completions until
    `release(gate)` (fake_engine.py --gate), so the tuner cannot finish a second trial before the
    test acts."""
    return f"--engine-arg=--gate={gate}"


def wait_for_engine_start(gate: Path, n: int, proc, timeout_s: float = 60.0) -> int:
    """Wait until the fake engine started n-th (from 0) is up; the pid of the process that started
    it. Fails when `proc` (the tuner) exits first, or after timeout_s."""
    path = gate / f"start-{n}"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"fake engine #{n} did not start within {timeout_s:g} s"
        time.sleep(0.02)
    return int(path.read_text())


def release(gate: Path) -> None:
    """Let every fake engine started with `gate_arg(gate)` answer."""
    gate.mkdir(parents=True, exist_ok=True)
    (gate / "release").touch()
