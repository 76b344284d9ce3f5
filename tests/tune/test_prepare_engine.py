"""The launcher's once-per-install preparation runs before the study's clock, per knob value."""

import sys
from dataclasses import dataclass

from tune_helpers import FAKE, FakeLauncher, tune_options, write_space

from roofline.bench.engines.launchers import EMBEDDED
from roofline.tune.space import load_space_file
from roofline.tune.tuner import prepare_engine


@dataclass(frozen=True)
class Preparing(FakeLauncher):
    """Prepares once per value of `speed`: a command that prints it (or fails for 13)."""

    def prepare_commands(self, model, values):
        return [
            [sys.executable, "-c", f"import sys; print('speed {v}'); sys.exit({int(v == 13)})"]
            for v in values.get("speed", [])
        ]


def test_every_value_of_the_space_is_prepared_and_a_failure_is_told(tmp_path, monkeypatch):
    from roofline.bench import engines

    launcher = Preparing(name="preparing", knobs=FAKE.knobs)
    monkeypatch.setitem(engines.LAUNCHERS, launcher.name, launcher)
    body = "[baseline]\nspeed = 50\n[knobs.speed]\nchoices = [100, 200]\ndefault = 100\n"
    space = load_space_file(write_space(tmp_path, body), launcher)
    notes: list[str] = []
    opts = tune_options(space, "m", engine=launcher.name)
    assert prepare_engine(opts, notes.append) >= 0
    assert notes == [f"prepared the engine: speed {v}" for v in (100, 200, 50)]
    notes.clear()
    prepare_engine(opts, notes.append, baseline_only=True)  # --predict launches the baseline
    assert notes == ["prepared the engine: speed 50"]
    bad = load_space_file(write_space(tmp_path, body.replace("200", "13"), "bad.toml"), launcher)
    notes.clear()
    prepare_engine(tune_options(bad, "m", engine=launcher.name), notes.append)
    # each command is told, the failed one too, and the others still run
    assert notes == [
        "prepared the engine: speed 100",
        "preparing the engine failed (exit 1): speed 13",
        "prepared the engine: speed 50",
    ]


@dataclass(frozen=True)
class Meeting(FakeLauncher):
    """Two commands that each wait for the other to have started: they pass only side by side."""

    folder: str = ""

    def prepare_commands(self, model, values):
        wait = (
            "import pathlib, sys, time\n"
            "d = pathlib.Path(sys.argv[1]); (d / sys.argv[2]).touch()\n"
            "end = time.monotonic() + 60\n"
            "while not (d / sys.argv[3]).exists():\n"
            "    if time.monotonic() > end: sys.exit(1)\n"
            "    time.sleep(0.01)\n"
            "print('met', sys.argv[2])\n"
        )
        return [
            [sys.executable, "-c", wait, self.folder, a, b] for a, b in (("a", "b"), ("b", "a"))
        ]


def test_the_commands_run_side_by_side_one_a_core(tmp_path, monkeypatch):
    from roofline.bench import engines
    from roofline.hardware import machine

    monkeypatch.setattr(machine, "usable_cpu_count", lambda: 2)
    launcher = Meeting(name="meeting", knobs=FAKE.knobs, folder=str(tmp_path))
    monkeypatch.setitem(engines.LAUNCHERS, launcher.name, launcher)
    space = load_space_file(write_space(tmp_path, "[knobs.speed]\nchoices = [1]\n"), launcher)
    notes: list[str] = []
    prepare_engine(tune_options(space, "m", engine=launcher.name), notes.append)
    assert notes == ["prepared the engine: met a", "prepared the engine: met b"]


def test_the_embedded_engine_prepares_each_dtype_with_serve_prepare():
    cmds = EMBEDDED.prepare_commands("m.gguf", {"dtype": ["fp32", "stored", "fp32"], "spec": []})
    assert [c[c.index("--dtype") + 1] for c in cmds] == ["fp32", "stored"]
    assert all(c[2:5] == ["roofline", "serve", "--prepare"] and "m.gguf" in c for c in cmds)
    assert EMBEDDED.prepare_commands(None, {}) == [
        [sys.executable, "-m", "roofline", "serve", "--prepare", "--kernels", "default"]
    ]
    assert FAKE.prepare_commands(None, {"speed": [1]}) == []


def test_the_files_ceiling_comes_before_anything_is_compiled():
    """A fresh run's first figure: the file's bytes per token over the bandwidth, from the file's
    header alone (the shipped default: 96.6 MB a token); none for a model with no local file."""
    from types import SimpleNamespace

    from roofline.cli.tune import file_ceiling_line

    options = SimpleNamespace(engine="embedded", model=None, hardware="26.4GB/s")
    line = file_ceiling_line(options)
    assert line.startswith("the file's ceiling on 26.4GB/s: 273.4 tok/s = 26.4 GB/s / 96.6 MB")
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in line
    assert (
        file_ceiling_line(SimpleNamespace(**{**vars(options), "model": "nobody/nothing"})) is None
    )
    assert file_ceiling_line(SimpleNamespace(**{**vars(options), "hardware": None})) is None
