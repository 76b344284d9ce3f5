"""Paired ratios: the geometric mean of per-unit ratios and its bootstrap interval."""

from __future__ import annotations

import math
import random

import pytest

from roofline.bench.records import Phase, RequestRecord
from roofline.tune.paired import TIE_RATIO, PairedRatio, paired_ratio, t975, unit_values


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
    # (request, the value it gives) each
    lines = [
        (RequestRecord(0, "s", prompt="a", rep=0), 10.0),
        (RequestRecord(1, "s", prompt="a", rep=1), 12.0),
        (RequestRecord(2, "s", prompt="b", rep=0), 30.0),
        (RequestRecord(3, "s", prompt="b", rep=0, phase=Phase.WARMUP), 1e9),
        (RequestRecord(4, "s", prompt="c", rep=0), None),
    ]
    v = {r.id: value for r, value in lines}
    lines = [r for r, _ in lines]

    def total(group):
        vs = [v[r.id] for r in group]
        return None if None in vs else sum(vs)

    assert unit_values(lines, total, per_request=True) == {"a#0": 10.0, "a#1": 12.0, "b#0": 30.0}
    assert unit_values(lines[:4], total, per_request=False) == {"rep 0": 40.0, "rep 1": 12.0}


def _simulated_step(gain: float, seed: int, paired: bool = True) -> str:
    """One ladder step as tune runs it by default (4 prompts x 2 repetitions): the host's speed
    moves by up to +-30% from one repetition block to the next, each request has 3% noise of its
    own, and the candidate is `gain` faster. Paired: candidate and incumbent share each block;
    unpaired: the candidate's blocks are drawn apart from the incumbent's."""
    rng = random.Random(seed)
    speed = {p: rng.uniform(40.0, 120.0) for p in range(4)}  # prompts differ 3x

    def block() -> float:
        return 1.0 + rng.uniform(-0.30, 0.30)

    incumbent, candidate = {}, {}
    for rep in range(2):
        host = block()
        other = host if paired else block()
        for p in range(4):
            incumbent[f"{p}#{rep}"] = speed[p] * host * rng.lognormvariate(0.0, 0.03)
            candidate[f"{p}#{rep}"] = speed[p] * other * (1 + gain) * rng.lognormvariate(0.0, 0.03)
    return paired_ratio(candidate, incumbent, seed=seed).verdict


def test_a_ten_percent_gain_under_thirty_percent_drift_is_kept_and_no_gain_is_a_tie():
    kept = sum(_simulated_step(0.10, seed) == "better" for seed in range(100))
    ties = sum(_simulated_step(0.0, seed) == "tie" for seed in range(100))
    assert kept >= 95 and ties >= 95, (kept, ties)
    # what the pairing buys: the same drift between unpaired blocks decides wrongly far more often
    wrong = sum(_simulated_step(0.0, seed, paired=False) != "tie" for seed in range(100))
    assert wrong > 20, wrong


def test_the_small_sample_interval_is_wider_than_the_plain_percentiles():
    # Student's t at 97.5%: 12.706 (1), 2.365 (7), 2.042 (30), 1.984 (100 degrees of freedom)
    for df, t in ((1, 12.706), (7, 2.365), (30, 2.042), (100, 1.984)):
        assert t975(df) == pytest.approx(t, rel=1e-3)
    # coverage: with 8 pairs of 5% noise and no true gain, the 95% interval holds 1 in about 95%
    # of runs (the plain percentile interval: 88% in this simulation)
    hits = 0
    for seed in range(400):
        rng = random.Random(seed)
        incumbent = {f"p{i}#0": 100.0 for i in range(8)}
        candidate = {k: 100.0 * math.exp(rng.gauss(0.0, 0.05)) for k in incumbent}
        pr = paired_ratio(candidate, incumbent, seed=seed, resamples=500)
        hits += pr.low <= 1.0 <= pr.high
    assert hits >= 0.93 * 400, hits
    assert paired_ratio({"a#0": 2.0}, {"a#0": 1.0}).verdict == "tie"  # one pair proves nothing


def test_prompts_are_the_workload_so_only_their_repetitions_are_noise():
    # a proposer 1.6x on two prompts and 1.0x on two (acceptance is fixed per prompt under greedy
    # decoding), 2% timing noise: the repetitions of each prompt agree, so the gain is certain;
    # resampled as one pool the prompts' spread would read as noise
    rng = random.Random(3)
    gains = {"list": 1.6, "prose": 1.0, "code": 1.6, "story": 1.0}
    incumbent, candidate = {}, {}
    for p, g in gains.items():
        for rep in range(2):
            incumbent[f"{p}#{rep}"] = 100.0 * rng.lognormvariate(0.0, 0.02)
            candidate[f"{p}#{rep}"] = 100.0 * g * rng.lognormvariate(0.0, 0.02)
    pr = paired_ratio(candidate, incumbent)
    assert pr.ratio == pytest.approx(math.sqrt(1.6), rel=0.03)
    assert pr.verdict == "better" and pr.high / pr.low < 1.15
    one_rep = {k: v for k, v in candidate.items() if k.endswith("#0")}
    wide = paired_ratio(one_rep, incumbent)  # one repetition: the prompts' spread is the noise
    assert wide.pairs == 4 and wide.verdict == "tie"


def test_clearly_worse_needs_every_prompt_slower_and_a_large_gap():
    from roofline.tune.paired import clearly_worse

    base = {f"p{i}#0": 100.0 for i in range(4)}
    slow = {f"p{i}#0": 57.0 + i for i in range(4)}
    assert clearly_worse(slow, base).ratio == pytest.approx(0.585, abs=0.01)
    # 10% slower: worse, but not clearly enough to stop measuring
    assert clearly_worse({k: 90.0 + i for i, k in enumerate(base)}, base) is None
    # one prompt faster (a proposer that pays on one prompt): the interval reaches above 1
    mixed = slow | {"p3#0": 160.0}
    assert clearly_worse(mixed, base) is None
    # minimize: a higher cost is the worse one
    assert clearly_worse({k: 2 * v for k, v in base.items()}, base, maximize=False) is not None
    assert clearly_worse({k: v / 2 for k, v in base.items()}, base, maximize=False) is None
