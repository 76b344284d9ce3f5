"""Live knobs on the real engine (a tiny random model): trials run on one `roofline serve` give the
greedy outputs and exactness verdicts of trials that each start their own."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from tune_helpers import marker, wait_gone

from roofline.bench.driver import Progress
from roofline.bench.engines.launchers import EMBEDDED
from roofline.bench.workloads import Prompt
from roofline.tune.objectives import OBJECTIVES, ObjectiveSettings
from roofline.tune.servers import Servers
from roofline.tune.settings import TrialSettings
from roofline.tune.slots import Slot
from roofline.tune.trial import run_trial

pytestmark = pytest.mark.slow

CONFIGS = [
    {"threads": 1},
    {"threads": 1, "spec": "trie", "max_bfs_breadth": 4, "adaptive": False},
    {"spec": "ngram", "spec_k": 3, "prompt_lookup_min": 1},  # threads: the server's own choice
    {"threads": 1, "spec": "suffix", "spec_tree": False, "kernels": "default"},
    {"threads": 1, "dtype": "int8"},  # a restart knob: a server of its own
]
PROMPTS = [
    Prompt("count", prompt="1, 2, 3, 4, 1, 2, 3, 4, 1, 2,"),
    Prompt("abc", prompt="a b c a b c a b"),
    Prompt("code", prompt="def fib(n):"),
]


def _tiny_gguf(folder: Path) -> Path:
    where = Path(__file__).parents[1] / "engine" / "fixtures.py"
    spec = importlib.util.spec_from_file_location("engine_fixtures", where)
    fixtures = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fixtures  # its dataclasses look their module up
    spec.loader.exec_module(fixtures)
    return fixtures.write_tiny_gguf(folder / "tiny.gguf")


def test_live_trials_equal_relaunched_ones_on_the_tiny_model(tmp_path):
    mark = marker()
    settings = TrialSettings(
        launcher=EMBEDDED,
        model=str(_tiny_gguf(tmp_path)),
        objective=OBJECTIVES["speed"],
        objective_settings=ObjectiveSettings(),
        prompts=PROMPTS,
        reps=1,
        max_tokens=16,
        extra_args=(f"--served-model-name={mark}",),
        ready_timeout_s=120,
        request_timeout_s=60,
    )

    def run(servers: Servers | None, name: str) -> list:
        out, baseline = [], None
        for i, config in enumerate(CONFIGS):
            result, outputs = run_trial(
                settings,
                i,
                Slot("baseline" if i == 0 else "grid"),
                config,
                tmp_path / name / f"{i:03d}",
                baseline,
                Progress(),
                servers=servers,
            )
            assert result.status in ("ok", "inexact"), result.error
            baseline = baseline if baseline is not None else outputs
            out.append((result, outputs))
        return out

    with Servers(settings) as servers:
        live = run(servers, "live")
        assert servers.launches == 2  # the baseline's, then int8's
    relaunched = run(None, "relaunched")
    assert wait_gone(mark) == []
    assert [r.launched for r, _ in live] == [True, False, False, False, True]
    assert live[1][0].live == {
        "roofline_speculation": {"method": "trie", "max_bfs_breadth": 4, "adaptive": False},
        "roofline_threads": 1,
    }
    assert live[2][0].live == {
        "roofline_speculation": {"method": "ngram", "k": 3, "prompt_lookup_min": 1}
    }
    # the server was started without the live knobs; the trial's command carries them as flags
    assert "--spec" in live[1][0].argv and "--spec" not in live[0][0].argv
    assert "--threads" in live[0][0].argv and "--threads" not in live[2][0].argv
    assert live[3][0].live["roofline_kernels"] == "default" and not live[3][0].launched
    for (a, a_out), (b, b_out) in zip(live, relaunched):
        assert a.status == b.status and a.exactness == b.exactness, a.config
        assert [o.token_ids for o in a_out] == [o.token_ids for o in b_out], a.config
    assert all(r.status == "ok" for r, _ in live[:4])  # speculation never changes greedy ids
    assert live[1][0].metrics.to_json() is not None


BLOCK_SPACE = """
[baseline]
dtype = "fp32"
[knobs.spec]
choices = ["none", "ngram", "trie"]
default = "none"
"""


def test_a_proposer_step_runs_as_one_block_on_the_tiny_model(tmp_path, monkeypatch):
    """`roofline tune`'s ladder on the real engine: the proposer step (live values) runs on the
    baseline's server as one paired block, every value exact, paired with the incumbent."""
    from tune_helpers import write_profile, write_space

    from roofline.tune.options import TuneOptions
    from roofline.tune.space import load_space_file
    from roofline.tune.tuner import Display, run_tune

    cache = tmp_path / "cache"
    write_profile(cache, 30e9)
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(cache))
    mark = marker()
    space = load_space_file(write_space(tmp_path, BLOCK_SPACE), EMBEDDED)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": p.id, "prompt": p.prompt}) + "\n" for p in PROMPTS)
    )
    opts = TuneOptions(
        model=str(_tiny_gguf(tmp_path)),
        prompts=str(prompts),
        space=space.to_json(),
        max_tokens=16,
        reps=2,
        extra_args=(f"--served-model-name={mark}",),
        ready_timeout_s=120,
        request_timeout_s=60,
    )
    result = run_tune(opts, tmp_path / "run", Display())
    assert wait_gone(mark) == []
    ran = [r for r in result.trials if r.status != "skipped"]
    assert [r.slot.kind for r in ran] == ["baseline", "incumbent", "ladder", "ladder"]
    assert [r.launched for r in ran] == [True, False, False, False]
    assert all(r.status == "ok" for r in ran)  # speculation never changes greedy ids
    assert [r.live for r in ran[2:]] == [
        {"roofline_speculation": {"method": m}} for m in ("ngram", "trie")
    ]
    (step,) = result.ladder
    # paired units: a request whose tokens all arrive in one read has no speed (this model is
    # that fast), so not every prompt x repetition pairs here; tests/tune/test_live.py counts them
    assert step.remeasured == ran[1].number and step.paired is not None
