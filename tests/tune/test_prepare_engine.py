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
    assert notes[-1] == "preparing the engine failed (exit 1): speed 13" and len(notes) == 2


def test_the_embedded_engine_prepares_each_dtype_with_serve_prepare():
    cmds = EMBEDDED.prepare_commands("m.gguf", {"dtype": ["fp32", "stored", "fp32"], "spec": []})
    assert [c[c.index("--dtype") + 1] for c in cmds] == ["fp32", "stored"]
    assert all(c[2:5] == ["roofline", "serve", "--prepare"] and "m.gguf" in c for c in cmds)
    assert EMBEDDED.prepare_commands(None, {}) == [
        [sys.executable, "-m", "roofline", "serve", "--prepare"]
    ]
    assert FAKE.prepare_commands(None, {"speed": [1]}) == []
