"""The speculation cost model kept in the user cache (`ModelRunner.measure_pass_costs(cached=True)`,
what a server start calls): measured once, read back while the key matches, measured again when
it does not; a corrupt or foreign file is ignored with a warning. Without `cached`, it is measured
every time."""

from __future__ import annotations

import json

import pytest

from roofline.engine import load_runner
from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE
from roofline.engine.runtime import model_runner
from roofline.engine.runtime.kernel_choice import KernelChoice
from roofline.engine.runtime.pass_timing import PassCosts

ROWS = (1, 2, 3)


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """The user cache in tmp_path; the list of runners whose costs were measured (for real)."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = model_runner.measure_pass_costs

    def measure(runner, rows, reps):
        calls.append(runner)
        return real(runner, rows, reps)

    monkeypatch.setattr(model_runner, "measure_pass_costs", measure)
    return calls


def _runner(path, threads=1):
    return load_runner(path, dtype="fp32", threads=threads, max_seq_len=32)


def _costs_file(tmp_path):
    (path,) = (tmp_path / "cache" / "pass-costs").glob("*.json")
    return path


def test_a_second_runner_reads_the_table_the_first_measured(tiny_gguf, measured):
    first = _runner(tiny_gguf)
    first.measure_pass_costs(ROWS, reps=1, cached=True)
    second = _runner(tiny_gguf)
    second.measure_pass_costs(ROWS, reps=1, cached=True)
    assert measured == [first]
    assert second.pass_costs == first.pass_costs and set(second.pass_costs) == set(ROWS)
    assert second.one_row_pass_s == first.one_row_pass_s > 0
    third = _runner(tiny_gguf)
    third.measure_pass_costs(ROWS, reps=1)  # not cached: timed, whatever the cache holds
    assert measured == [first, third]


@pytest.mark.parametrize("change", ["threads", "kernels", "rows"])
def test_a_changed_key_is_measured_again(tiny_gguf, measured, change):
    _runner(tiny_gguf).measure_pass_costs(ROWS, reps=1, cached=True)
    other = _runner(tiny_gguf, threads=2 if change == "threads" else 1)
    if change == "kernels":
        shape = DEFAULT_SHAPE._replace(unit_bytes=8192)
        other.kernels = KernelChoice(shape, shape, "measured")
    other.measure_pass_costs((1, 2) if change == "rows" else ROWS, reps=1, cached=True)
    assert len(measured) == 2


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d["key"].update(cpu="Another CPU\nfpu"),  # copied from another machine
        lambda d: d["costs"].update(one_row_s=-1.0),
        lambda d: d["costs"]["table"].update({"1": 0.5}),  # not relative to one row
        lambda d: d["costs"]["table"].update({"two": 1.2}),
        lambda d: d.pop("costs"),
    ],
)
def test_a_foreign_or_malformed_table_is_ignored_with_a_warning(
    tiny_gguf, measured, tmp_path, spoil
):
    _runner(tiny_gguf).measure_pass_costs(ROWS, reps=1, cached=True)
    path = _costs_file(tmp_path)
    d = json.loads(path.read_text(encoding="utf-8"))
    spoil(d)
    path.write_text(json.dumps(d), encoding="utf-8")
    again = _runner(tiny_gguf)
    with pytest.warns(UserWarning, match="ignoring the pass-cost cache"):
        again.measure_pass_costs(ROWS, reps=1, cached=True)
    assert len(measured) == 2 and set(again.pass_costs) == set(ROWS)


def test_a_corrupt_file_is_ignored_and_rewritten(tiny_gguf, measured, tmp_path):
    _runner(tiny_gguf).measure_pass_costs(ROWS, reps=1, cached=True)
    path = _costs_file(tmp_path)
    path.write_text('{"key": {"cpu": "tru', encoding="utf-8")
    with pytest.warns(UserWarning, match="ignoring the pass-cost cache"):
        _runner(tiny_gguf).measure_pass_costs(ROWS, reps=1, cached=True)
    _runner(tiny_gguf).measure_pass_costs(ROWS, reps=1, cached=True)  # rewritten whole
    assert len(measured) == 2


def test_pass_costs_round_trip_through_json():
    costs = PassCosts({1: 1.0, 2: 1.25, 8: 3.5}, 0.007)
    assert PassCosts.from_json(json.loads(json.dumps(costs.to_json()))) == costs
    with pytest.raises(ValueError):
        PassCosts.from_json(PassCosts().to_json())  # not measured: nothing to keep
