"""Paired ratios: the geometric mean of per-unit ratios and its bootstrap interval."""

from __future__ import annotations

import math

import pytest

from roofline.tune.paired import TIE_RATIO, PairedRatio, paired_ratio, unit_values


def test_ratio_is_the_geometric_mean_of_the_pairs_and_prompt_speeds_cancel():
    incumbent = {"a#0": 50.0, "b#0": 200.0, "c#0": 100.0}
    candidate = {"a#0": 100.0, "b#0": 100.0, "c#0": 100.0, "extra#0": 1e6}  # unpaired: ignored
    pr = paired_ratio(candidate, incumbent)
    # 2x, 0.5x, 1x: the geometric mean is 1
    assert pr.pairs == 3 and pr.ratio == pytest.approx(1.0)
    assert pr.low <= pr.ratio <= pr.high and pr.low < 1.0 < pr.high
    assert pr.verdict == "tie"


def test_a_uniform_gain_has_a_point_interval_and_is_better():
    incumbent = {f"p{i}#0": 40.0 + 10 * i for i in range(8)}
    candidate = {k: 1.1 * v for k, v in incumbent.items()}
    pr = paired_ratio(candidate, incumbent)
    assert pr.ratio == pytest.approx(1.1) and pr.low == pytest.approx(1.1)
    assert pr.high == pytest.approx(1.1) and pr.verdict == "better"


def test_minimize_turns_the_ratio_so_above_one_is_better():
    incumbent = {"rep 0": 2.0, "rep 1": 2.2}  # $/Mtok
    candidate = {"rep 0": 1.0, "rep 1": 1.1}
    assert paired_ratio(candidate, incumbent, maximize=False).ratio == pytest.approx(2.0)
    assert paired_ratio(candidate, incumbent, maximize=True).ratio == pytest.approx(0.5)
    assert paired_ratio(candidate, incumbent, maximize=True).verdict == "worse"


def test_the_interval_repeats_with_its_seed_and_the_threshold_decides():
    incumbent = {f"p{i}#{r}": 100.0 for i in range(4) for r in range(2)}
    candidate = {k: 100.0 * (1.03 + 0.02 * math.sin(7 * n)) for n, k in enumerate(incumbent)}
    a, b = paired_ratio(candidate, incumbent, seed=5), paired_ratio(candidate, incumbent, seed=5)
    assert a == b
    assert (a.verdict == "better") == (a.low > 1 + TIE_RATIO)
    assert paired_ratio({"x#0": 1.0}, {"y#0": 1.0}) is None


def test_round_trip():
    pr = PairedRatio(1.2, 1.1, 1.3, 8)
    assert PairedRatio.from_json(pr.to_json()) == pr and PairedRatio.from_json(None) is None


def test_units_group_by_request_or_by_repetition_and_skip_warm_up():
    lines = [
        {"prompt": "a", "rep": 0, "v": 10.0},
        {"prompt": "a", "rep": 1, "v": 12.0},
        {"prompt": "b", "rep": 0, "v": 30.0},
        {"prompt": "b", "rep": 0, "v": 1e9, "phase": "warmup"},
        {"prompt": "c", "rep": 0, "v": None},
    ]

    def total(group):
        vs = [ln["v"] for ln in group]
        return None if None in vs else sum(vs)

    assert unit_values(lines, total, per_request=True) == {"a#0": 10.0, "a#1": 12.0, "b#0": 30.0}
    assert unit_values(lines[:4], total, per_request=False) == {"rep 0": 40.0, "rep 1": 12.0}
