"""`roofline tune --predict` on a tiny random model through the embedded engine: the baseline alone
runs, predicted.json holds every model-free proposer setting of the space, and the replayed n-gram
steps equal the engine's own pass and draft counts for the same setting (greedy: by construction,
with the adaptive budget off); on a text-only engine `--predict` says so in one line (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tune_helpers import fake_tune_argv, marker, wait_gone, write_profile, write_space

from roofline.bench.engines import EMBEDDED, start_engine
from roofline.engine import SamplingParams, generate, load_runner
from roofline.engine.runtime.speculate import proposer_factory
from roofline.engine.runtime.speculate.adaptive import DraftBudget
from roofline.engine.runtime.speculate.step import speculation_factory
from roofline.speculation import SpecOptions
from roofline.tune.predict import PassCosts, replay
from roofline.tune.predict_run import MEASURED, PredictedLadder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from fixtures import write_tiny_gguf  # tests/engine: the writer of tiny models

pytestmark = pytest.mark.slow

SPACE = """
[baseline]
dtype = "fp32"
[knobs.spec]
choices = ["none", "ngram", "trie", "draft"]
default = "none"
[knobs.spec_k]
choices = [2, 4]
default = 4
when = { spec = ["ngram", "draft"] }
[knobs.prompt_lookup_min]
choices = [1]
default = 2
required = true
when = { spec = "ngram" }
[knobs.max_bfs_breadth]
choices = [2, 4]
default = 10
when = { spec = "trie" }
[knobs.adaptive]
choices = [false]
default = false
required = true
when = { spec = ["ngram", "trie", "draft"] }
"""
PROMPTS = [
    ("count", "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,"),
    ("abc", "a b c a b c a b c a"),
    ("fox", "The quick brown fox jumps over the lazy dog. The quick brown"),
]
N = 24


def test_predict_runs_the_baseline_only_and_replays_the_engines_own_counts(tmp_path):
    model = write_tiny_gguf(tmp_path / "model", tensor_type="F32", seed=0)
    cache = tmp_path / "cache"
    write_profile(cache, 30e9)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in PROMPTS), encoding="utf-8"
    )
    mark = marker()
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "tune",
        "--predict",
        "--model",
        str(model),
        "--space",
        str(write_space(tmp_path, SPACE)),
        "--prompts",
        str(prompts),
        "--max-tokens",
        str(N),
        "--reps",
        "1",
        "--runs",
        str(tmp_path / "runs"),
        "--engine-arg",
        "threads=1",
        f"--engine-arg=--served-model-name={mark}",
        "--no-report",
    ]
    env = {**os.environ, "ROOFLINE_CACHE_DIR": str(cache)}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "predicted ladder" in p.stdout
    (run,) = (tmp_path / "runs").iterdir()
    trials = [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines()]
    assert [t["slot"]["kind"] for t in trials] == ["baseline"]  # nothing else launched
    # the run as asked: --resume measures the rest, the baseline kept
    assert json.loads((run / "tune-config.json").read_text())["trials"] is None
    ladder = PredictedLadder.from_json(json.loads((run / "predicted.json").read_text()))
    # ngram: k 2|4 x lookup min 1|2 (the default, which the ladder's ngram trial runs); trie:
    # breadth 2|4|10 (the default); draft loads a model: not replayed
    assert sorted(
        (p.setting["spec"], p.setting.get("spec_k"), p.setting.get("prompt_lookup_min"))
        for p in ladder.predictions
        if p.setting["spec"] == "ngram"
    ) == [("ngram", 2, 1), ("ngram", 2, 2), ("ngram", 4, 1), ("ngram", 4, 2)]
    assert sorted(
        p.setting.get("max_bfs_breadth") for p in ladder.predictions if p.setting["spec"] == "trie"
    ) == [2, 4, 10]
    assert {p.setting["spec"] for p in ladder.predictions} == {"ngram", "trie"}
    assert ladder.pass_costs.source.startswith("measured")  # the engine's own, from /v1/models
    assert 0 < ladder.pass_costs.one_row_s < 1.0  # and the seconds of its one-row pass
    assert all(set(p.prompts) == {i for i, _ in PROMPTS} for p in ladder.predictions)
    greedy = json.loads((run / "trials" / "000" / "greedy.json").read_text())
    assert all(g["prompt_token_ids"] and g["token_ids"] for g in greedy)

    # the engine itself at predicted settings of both proposers, the same greedy requests
    def pick(spec, knob, value):
        return next(
            p
            for p in ladder.predictions
            if p.setting["spec"] == spec
            and p.setting.get(knob) == value
            and p.setting.get("prompt_lookup_min") in (None, 1)
        )

    full = [g["prompt_id"] for g in greedy if len(g["token_ids"]) == N]
    assert full, "every output stopped early: no stream to compare"
    for predicted in (pick("ngram", "spec_k", 4), pick("trie", "max_bfs_breadth", 4)):
        reported = _engine_answers(model, predicted.setting, tmp_path / "log")
        for g in greedy:
            r = reported[g["prompt_id"]]
            assert r["choices"][0]["token_ids"] == g["token_ids"]  # speculation changes no token
            assert r["prompt_token_ids"] == g["prompt_token_ids"]
        for i in full:  # an output cut by EOS may have had drafts accepted past it in the engine
            mine, theirs = predicted.prompts[i], reported[i]["roofline"]
            assert (mine.passes, mine.drafted, mine.accepted) == (
                theirs["passes"],
                theirs["drafted_tokens"],
                theirs["accepted_tokens"],
            ), (predicted.setting, i)
        assert sum(predicted.prompts[i].accepted for i in full) > 0  # something to predict
    assert wait_gone(mark) == []


def _engine_answers(model: Path, setting: dict, log: Path) -> dict[str, dict]:
    """Each prompt's greedy response from the embedded engine run with `setting`."""
    config = {"threads": 1, "dtype": "fp32", **setting}
    out = {}
    with start_engine(EMBEDDED, model=str(model), config=config, log_path=log) as s:
        for i, text in PROMPTS:
            body = {
                "messages": [{"role": "user", "content": text}],
                "max_tokens": N,
                "temperature": 0.0,
                "return_token_ids": True,
            }
            out[i] = httpx.post(s.url + "/v1/chat/completions", json=body, timeout=120).json()
    return out


def test_predict_on_a_text_only_engine_says_so_in_one_line(tmp_path):
    space = write_space(tmp_path, "[baseline]\nspeed = 80\n[knobs.speed]\nchoices = [60, 80]\n")
    p = subprocess.run(
        fake_tune_argv("--predict", "--space", str(space), "--runs", str(tmp_path / "runs")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert "error: no prediction:" in p.stderr and "no token ids" in p.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert len((run / "trials.jsonl").read_text().splitlines()) == 1  # the baseline alone
    assert not (run / "predicted.json").exists()


@pytest.mark.parametrize(
    "options",
    [SpecOptions("ngram", k=4, prompt_lookup_min=1), SpecOptions("trie", max_bfs_breadth=4)],
    ids=["ngram", "trie"],
)
def test_replay_follows_the_adaptive_budget_on_the_engines_own_costs(tmp_path, options):
    """The adaptive budget on: given the runner's own measured pass costs, the replay cuts every
    draft as the engine did (the budget is deterministic given the costs)."""
    model = write_tiny_gguf(tmp_path, tensor_type="F32", seed=0)
    runner = load_runner(str(model), max_seq_len=256, threads=1)
    runner.measure_pass_costs()
    costs = PassCosts(tuple(sorted(runner.pass_costs.items())), MEASURED)
    make = speculation_factory(options, runner)
    tok = runner.tokenizer
    cut = 0
    for _, text in PROMPTS:
        ids = tok.encode(text)
        spec = make()
        gen = generate(
            runner,
            ids,
            SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True),
            speculation=spec,
        )
        out = list(gen)
        stats = replay(
            proposer_factory(options),
            ids,
            out,
            budget=lambda: DraftBudget(costs, adaptive=True),
            max_tokens=N,
        )
        assert (stats.passes, stats.drafted, stats.accepted) == (
            gen.timings.passes,
            spec.stats.drafted,
            spec.stats.accepted,
        ), text
        plain = replay(proposer_factory(options), ids, out, max_tokens=N)
        cut += plain.drafted - stats.drafted
    assert cut > 0  # the budget did cut drafts: the test saw it work
