"""Adding an engine is its launcher plus one registry entry: a launcher defined here and put into
LAUNCHERS from the test is benchmarked and tuned through the normal CLI path, its traits (not its
name) deciding the ceiling's hardware and the token accounting, and no other file knows of it."""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass

import pytest

from roofline.bench import engines
from roofline.bench.api import USAGE_PER_CHUNK
from roofline.bench.engines.base import Knob, Launcher, flag, knob_table
from roofline.cli.main import app
from roofline.tune.options import TuneOptions
from roofline.tune.tuner import trial_settings

BYTES_PER_TOKEN = 4_000_000  # what the null server says it reads per token
BANDWIDTH = "8TB/s"  # the test engine's own hardware for the ceiling


@dataclass(frozen=True)
class NullLauncher(Launcher):
    """roofline's null server as an engine: knob `tokens=N` -> `--tokens N`."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        out = [
            sys.executable,
            "-m",
            "roofline.bench.nullserver",
            "--host",
            host,
            "--port",
            str(port),
        ]
        out += ["--ttft", "5ms", "--gap", "1ms", "--bytes-per-token", str(BYTES_PER_TOKEN)]
        out += ["--model", model or "null-test"]
        for knob, value in self.settings(config):
            out += [flag(knob.name), str(value)]
        return out + list(extra_args)

    def version(self) -> str | None:
        return "null 1.0"


NULL = NullLauncher(
    name="null-test",
    knobs=knob_table(
        Knob("tokens", "int", help="output tokens per request", minimum=1),
        Knob("tokens_per_chunk", "int", help="tokens per streamed chunk", minimum=1),
    ),
    reports_bytes_per_token=True,
    usage_per_chunk=True,
    default_hardware=BANDWIDTH,
    live_knobs=frozenset(),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(engines.LAUNCHERS, NULL.name, NULL)
    return NULL


def test_bench_starts_a_launcher_registered_from_a_test(registered, tmp_path):
    mark = f"m{uuid.uuid4().hex}"
    run = tmp_path / "run"
    app(
        [
            "bench",
            "--engine",
            NULL.name,
            "--engine-arg",
            "tokens=3",
            "--engine-arg",
            f"--model={mark}",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--engine-timeout",
            "30s",
            "--out",
            str(run),
            "--no-report",
            "--json",
        ],
        standalone_mode=False,
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scenarios"][0]["requests"]["ok"] == 4  # the four built-in prompts, once
    engine = json.loads((run / "provenance.json").read_text())["engine"]
    assert engine["name"] == NULL.name and engine["version"] == "null 1.0"
    assert engine["config"] == {"tokens": 3} and f"--model={mark}" in engine["argv"]
    # no --hardware: the launcher's own, over the bytes per token its server reports
    ceiling = summary["ceiling"]
    assert ceiling["bandwidth_bytes_per_s"] == pytest.approx(8e12)
    assert ceiling["tok_per_s"] == pytest.approx(8e12 / BYTES_PER_TOKEN)


def test_the_tuner_reads_the_traits_of_a_registered_launcher(registered, monkeypatch):
    s = trial_settings(TuneOptions(engine=NULL.name, model="some-model"))
    assert s.launcher is NULL and s.usage == USAGE_PER_CHUNK and s.ceiling_model is None
    plain = Launcher(name="plain-test")
    monkeypatch.setitem(engines.LAUNCHERS, plain.name, plain)
    s = trial_settings(TuneOptions(engine=plain.name, model="some-model"))
    assert s.usage == "auto" and s.ceiling_model == "some-model"


def test_tune_runs_a_launcher_registered_from_a_test(registered, tmp_path):
    space = tmp_path / "space.toml"
    space.write_text(
        'source = "test"\ndate = "2026-12-02"\n[knobs.tokens_per_chunk]\nchoices = [1, 2]\n'
        "default = 1\n",
        encoding="utf-8",
    )
    app(
        [
            "tune",
            "--engine",
            NULL.name,
            "--space",
            str(space),
            "--reps",
            "1",
            "--max-tokens",
            "8",
            "--runs",
            str(tmp_path),
            "--engine-timeout",
            "30s",
            "--no-report",
            "--json",
        ],
        standalone_mode=False,
    )
    (run,) = [d for d in tmp_path.iterdir() if (d / "tune.json").exists()]
    result = json.loads((run / "tune.json").read_text())
    assert result["engine"] == NULL.name
    # the ladder's incumbent slot is skipped (the baseline ran just before its challenger)
    trials = sorted(
        (t for t in result["trials"] if t["slot"]["kind"] != "incumbent"), key=lambda t: t["number"]
    )
    why = [(t["status"], t.get("error"), t.get("log_tail")) for t in trials]
    assert [t["status"] for t in trials] == ["ok", "ok"], why
    assert [t["config"].get("tokens_per_chunk") for t in trials] == [None, 2]
    options = json.loads((run / "tune-config.json").read_text())
    assert options["hardware"] == BANDWIDTH  # the launcher's default hardware


def test_live_knobs_must_be_knobs():
    with pytest.raises(ValueError, match="live knobs"):
        Launcher(name="x", live_knobs=frozenset({"threads"}))
    # only the embedded engine takes knobs per request (its speculation options)
    live = {name for name, la in engines.LAUNCHERS.items() if la.live_knobs}
    assert live == {"embedded"}
    assert all(la.live_body({}) is None for la in engines.LAUNCHERS.values() if not la.live_knobs)


def test_the_shipped_launchers_traits():
    traits = {
        name: (la.reports_bytes_per_token, la.usage_per_chunk, la.default_hardware)
        for name, la in engines.LAUNCHERS.items()
    }
    assert traits["embedded"] == (True, True, "local")
    assert all(t == (False, False, None) for name, t in traits.items() if name != "embedded")
    assert [name for name, la in engines.LAUNCHERS.items() if la.takes_template] == ["command"]
    assert NULL.default_model() is None and engines.LAUNCHERS["vllm"].default_model() is None


def test_the_embedded_precisions_come_from_roofline_dtypes():
    """One home for the engine's precisions: the dtype knob, the draft's and the CLI's choices
    are roofline.dtypes' names, and the knob's help says which round the file's values."""
    from roofline import dtypes, speculation
    from roofline.cli.generate import DTYPES

    knob = engines.LAUNCHERS["embedded"].knobs["dtype"]
    assert knob.choices == dtypes.DTYPE_NAMES == speculation.DRAFT_DTYPES == DTYPES
    assert [d.name for d in dtypes.DTYPES.values() if d.exact] == ["stored", "fp32"]
    for d in dtypes.DTYPES.values():
        assert (f"{d.name} ({d.description}, lossy)" in knob.help) == d.lossy
