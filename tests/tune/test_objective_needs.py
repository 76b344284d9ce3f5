"""Each objective says what it needs from the settings (a trait, not a name check): a missing
setting is one UserError that names the flag, and a registered objective is asked the same way."""

from __future__ import annotations

import pytest

from roofline.errors import UserError
from roofline.tune import objectives
from roofline.tune.objectives import OBJECTIVES, ObjectiveSettings, get_objective


@pytest.mark.parametrize(("name", "flag"), [("goodput", "--slo"), ("cost", "--price-per-hour")])
def test_a_missing_setting_names_its_flag(name, flag):
    with pytest.raises(UserError, match=f"--objective {name} needs {flag}"):
        get_objective(name, ObjectiveSettings())


def test_given_settings_satisfy_them():
    s = ObjectiveSettings(slo_s={"ttft": 2.0}, price_per_hour=3.6)
    assert [get_objective(n, s).name for n in OBJECTIVES] == list(OBJECTIVES)


def test_a_registered_objective_is_asked_what_it_needs(monkeypatch):
    from dataclasses import replace

    picky = replace(OBJECTIVES["speed"], name="picky", missing=lambda s: "--something")
    monkeypatch.setitem(objectives.OBJECTIVES, "picky", picky)
    with pytest.raises(UserError, match="--objective picky needs --something"):
        get_objective("picky", ObjectiveSettings())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"reps": 0}, "--reps must be positive"),
        ({"timeout": "0s"}, "--timeout must be a positive time"),
        ({"repeat_policy": "once"}, "--repeat-policy must be one of"),
        ({"objective": "cost"}, "--objective cost needs --price-per-hour"),
        ({"space": "a.toml", "preset": "embedded"}, "give --space or --preset, not both"),
    ],
)
def test_tune_checks_its_options_itself(given, message):
    """tune, not its CLI, checks what a user gives: one UserError before anything starts."""
    from pathlib import Path

    from roofline.tune.options import TuneArgs, options_from_args

    if "space" in given:
        given = {**given, "space": Path(given["space"])}
    with pytest.raises(UserError, match=message):
        options_from_args(TuneArgs(**given))


@pytest.mark.parametrize("allow_inexact", [False, True])
def test_the_lossy_formats_are_tried_only_when_inexact_results_may_win(allow_inexact):
    from roofline.tune.options import TuneArgs, options_from_args
    from roofline.tune.space_records import Space

    opts = options_from_args(TuneArgs(allow_inexact=allow_inexact))
    dtype = Space.from_json(opts.space).dimension("dtype")
    lossy = ("bf16", "int8")
    assert dtype.values() == (("fp32", "stored", *lossy) if allow_inexact else ("fp32", "stored"))
    assert dtype.left_out() == (() if allow_inexact else lossy)
