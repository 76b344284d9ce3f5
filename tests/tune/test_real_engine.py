"""A short real ladder: `roofline tune` launches `roofline serve` on the default model through the
launcher registry, and the exactness gate refuses int8 weights (lossy) while an exact change is
kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tune_helpers import marker, wait_gone, write_profile, write_space

from roofline.tune.ladder import ladder_steps
from roofline.tune.options import TuneOptions
from roofline.tune.result import build_result
from roofline.tune.slots import Rule
from roofline.tune.space import Space
from roofline.tune.trial_result import TrialResult

pytestmark = pytest.mark.slow

SPACE = """
[baseline]
dtype = "fp32"
[knobs.dtype]
choices = ["fp32", "int8"]
default = "stored"
[knobs.max_batch]
choices = [1]
"""


def test_short_real_ladder_rejects_int8_and_keeps_only_exact_steps(tmp_path):
    cache = tmp_path / "cache"
    write_profile(cache, 30e9)  # a measured machine, so the tuner needs no probe
    mark = marker()
    space = write_space(tmp_path, SPACE)
    # one thread: two spin at a barrier and crawl when a neighbour takes a core (ENVIRONMENT.md),
    # and a test checks correctness, not speed
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "tune",
        "--space",
        str(space),
        "--max-tokens",
        "24",
        "--reps",
        "2",
        "--runs",
        str(tmp_path / "runs"),
        "--engine-arg",
        "threads=1",
        f"--engine-arg=--served-model-name={mark}",
        "--json",
    ]
    p = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ROOFLINE_CACHE_DIR": str(cache)},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout)
    trials = {
        (t["slot"]["kind"], t["slot"]["knob"]): TrialResult.from_json(t) for t in result["trials"]
    }
    assert set(trials) == {
        ("baseline", None),
        ("incumbent", "dtype"),
        ("ladder", "dtype"),
        ("incumbent", "max_batch"),
        ("ladder", "max_batch"),
    }
    base, int8, one = (
        trials[("baseline", None)],
        trials[("ladder", "dtype")],
        trials[("ladder", "max_batch")],
    )
    # the incumbent is measured again next to its challengers, unless it ran just before: step 1
    # follows the baseline; step 2 follows int8, so the baseline runs again and pairs with max_batch
    first, second = trials[("incumbent", "dtype")], trials[("incumbent", "max_batch")]
    assert first.status == "skipped" and second.status == "ok"
    assert second.config == base.config and second.number == one.number - 1
    assert set(second.units) == set(one.units) and len(one.units) == 8  # 4 prompts x 2 reps

    assert (
        base.status == "ok" and base.exactness.basis == "token_ids" and base.exactness.compared == 4
    )
    assert (
        base.argv[1:4] == ("-m", "roofline", "serve") and f"--served-model-name={mark}" in base.argv
    )
    # --engine-arg knob=value: every trial; the baseline is the fp32 reference (the engine's default
    # is stored)
    assert base.config == {"threads": 1, "dtype": "fp32"} and "--threads" in base.argv
    # int8 weights decode other tokens: recorded with where they diverge, never chosen
    assert int8.config == {"threads": 1, "dtype": "int8"} and int8.status == "inexact"
    assert int8.exactness.first_prompt in ("reasoning", "code", "table", "prose")
    assert 0 <= int8.exactness.first_position < 24
    assert "--dtype" in int8.argv and "int8" in int8.argv
    # a one-sequence batch changes nothing in the arithmetic: the same tokens
    assert one.status == "ok" and one.exactness.exact is True and "--max-batch" in one.argv

    best = TrialResult.from_json(result["best"])
    assert best.status == "ok" and best.number in (base.number, one.number)
    assert result["best_command"] == list(best.argv)
    # every trial is held against the ceiling: the server's bytes per token over the read bandwidth
    # measured right before that trial's bench (not the profile's 30 GB/s, taken minutes -- here:
    # never -- earlier)
    assert 1e8 < result["ceiling"]["bandwidth_bytes_per_s"] < 1e14
    assert result["ceiling"]["bandwidth_bytes_per_s"] != 30e9
    assert all(t.metrics.percent_of_ceiling for t in (base, int8, one))
    for t in (base, int8, one):
        c = t.metrics.ceiling
        assert t.metrics.percent_of_ceiling == pytest.approx(
            100
            * t.metrics.output_speed_median_tok_per_s
            * c.bytes_per_token
            / c.bandwidth_bytes_per_s
        )
    assert int8.metrics.bytes_per_token < base.metrics.bytes_per_token
    assert [s["knob"] for s in result["ladder"]] == ["dtype", "max_batch"]
    assert result["ladder"][0]["kept"] is False
    step = result["ladder"][1]
    assert step["remeasured"] == second.number and step["paired"]["pairs"] == 8
    p = step["paired"]
    assert p["low"] <= p["ratio"] <= p["high"]
    # kept only when the whole interval clears the tie threshold
    assert step["kept"] is (p["low"] > 1.02)

    # the same trials, had the user passed --allow-inexact: int8 becomes eligible (it is faster)
    all_trials = [TrialResult.from_json(t) for t in result["trials"]]
    options = TuneOptions(space=result["space"], allow_inexact=True)
    allowed = build_result(options, Space.from_json(result["space"]), tmp_path, all_trials, {})
    # the ladder's best is where its climb ended, now that int8 may be kept
    _, steps = ladder_steps(Space.from_json(result["space"]), all_trials, Rule(allow_inexact=True))
    climbed = [s.kept for s in steps if s.kept is not None]
    assert allowed.best == (climbed[-1] if climbed else base)
    assert int8.value > base.value and allowed.best.status in ("inexact", "ok")
    assert wait_gone(mark) == []
