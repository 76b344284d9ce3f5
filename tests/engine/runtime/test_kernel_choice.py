"""This host's kernel shapes (`kernel_choice`): measured once, kept in the user cache under a key
of the CPU, the build and the model, read back while the key matches, measured again when it does
not; a corrupt or foreign cache file is ignored with a warning, never trusted."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE, KNOBS, KernelShape
from roofline.engine.runtime import kernel_choice
from roofline.engine.runtime.kernel_choice import (
    KernelChoice,
    choice_key,
    choice_path,
    choose_kernels,
)

PICKED = KernelChoice(
    DEFAULT_SHAPE._replace(unit_bytes=8192), DEFAULT_SHAPE._replace(tile_bytes=65536), "measured"
)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A runner's identity (model file, dtype, threads), the user cache in tmp_path, and a
    measurement that counts its calls and picks PICKED."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    calls = []

    def measure(runner):
        calls.append(runner)
        return PICKED

    monkeypatch.setattr(kernel_choice, "measure_kernel_choice", measure)
    return SimpleNamespace(path=str(model), dtype="stored", threads=2), calls


def test_measured_once_then_read_back_while_the_key_matches(host):
    runner, calls = host
    first = choose_kernels(runner, "measured")
    assert first == PICKED and len(calls) == 1
    again = choose_kernels(runner, "measured")
    assert len(calls) == 1 and again.source == "cached"
    assert (again.one_row, again.many_rows) == (PICKED.one_row, PICKED.many_rows)
    assert "measured here before" in again.describe()


def test_default_measures_nothing_and_writes_nothing(host, tmp_path):
    runner, calls = host
    assert choose_kernels(runner, "default") == KernelChoice()
    assert not calls and not (tmp_path / "cache").exists()
    with pytest.raises(ValueError, match="kernels must be one of"):
        choose_kernels(runner, "fastest")


@pytest.mark.parametrize("change", ["cpu", "threads", "dtype", "model"])
def test_a_changed_key_is_measured_again(host, monkeypatch, change):
    runner, calls = host
    choose_kernels(runner, "measured")
    if change == "cpu":
        monkeypatch.setattr(kernel_choice, "cpu_key", lambda: "Another CPU\nfpu sse2")
    elif change == "threads":
        runner.threads = 1
    elif change == "dtype":
        runner.dtype = "fp32"
    else:
        with open(runner.path, "ab") as f:
            f.write(b"more")
    assert choose_kernels(runner, "measured").source == "measured" and len(calls) == 2


def test_a_corrupt_cache_file_is_ignored_with_a_warning(host):
    runner, calls = host
    path = choice_path(choice_key(runner.path, runner.dtype, runner.threads))
    path.parent.mkdir(parents=True)
    path.write_text('{"key": {"cpu": "tru', encoding="utf-8")
    with pytest.warns(UserWarning, match="ignoring the kernel-shape cache"):
        assert choose_kernels(runner, "measured").source == "measured"
    assert len(calls) == 1
    assert choose_kernels(runner, "measured").source == "cached"  # rewritten whole


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d["key"].update(cpu="Another CPU\nfpu"),  # copied from another machine
        lambda d: d["choice"]["one_row"].update(unit_bytes=-1),
        lambda d: d["choice"]["many_rows"].pop("tile_bytes"),
        lambda d: d["choice"].update(source="guessed"),
    ],
)
def test_a_foreign_or_malformed_choice_is_ignored_with_a_warning(host, spoil):
    runner, calls = host
    choose_kernels(runner, "measured")
    path = choice_path(choice_key(runner.path, runner.dtype, runner.threads))
    d = json.loads(path.read_text(encoding="utf-8"))
    spoil(d)
    path.write_text(json.dumps(d), encoding="utf-8")
    with pytest.warns(UserWarning, match="ignoring the kernel-shape cache"):
        assert choose_kernels(runner, "measured").source == "measured"
    assert len(calls) == 2


def test_a_choice_round_trips_through_json():
    assert KernelChoice.from_json(PICKED.to_json()) == PICKED
    assert KernelShape.from_json(DEFAULT_SHAPE.to_json()) == DEFAULT_SHAPE


def test_measuring_a_real_runner_picks_registry_values_and_leaves_it_as_it_was(tiny_gguf):
    from roofline.engine import load_runner

    runner = load_runner(tiny_gguf, dtype="fp32", threads=1, max_seq_len=32)
    passes = runner.decode_passes
    choice = kernel_choice.measure_kernel_choice(runner, rounds=1)
    assert choice.source == "measured" and choice.seconds > 0
    for shape in (choice.one_row, choice.many_rows):
        for knob in KNOBS:
            assert getattr(shape, knob.field) in knob.values
    assert choice.one_row.tile_bytes == DEFAULT_SHAPE.tile_bytes  # no tile in one-row passes
    assert runner.kernels == KernelChoice() and runner.position(0) == 0
    assert runner.decode_passes > passes


def test_a_runner_of_one_position_keeps_the_defaults(tiny_gguf, tmp_path, monkeypatch):
    from roofline.engine import load_runner

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    runner = load_runner(tiny_gguf, dtype="fp32", threads=1, max_seq_len=1, kernels="measured")
    assert (runner.kernels.one_row, runner.kernels.many_rows) == (DEFAULT_SHAPE, DEFAULT_SHAPE)
