"""The help texts that name choices are built from the registries: a strategy, an objective, an
arrival process or an SLO key added to its registry shows in `--help` with no edit to the CLI."""

from __future__ import annotations

from dataclasses import replace

import pytest
import typer

from roofline.bench import api, loadgen, metrics
from roofline.cli import bench as bench_cli
from roofline.cli import tune as tune_cli
from roofline.cli.output import listed
from roofline.tune import objectives, search


def _help(register, command: str) -> dict[str, str]:
    """Each option's help text of `command`, from a fresh app built by `register`."""
    app = typer.Typer()
    register(app)

    @app.callback()
    def _group() -> None:
        pass

    cmd = typer.main.get_command(app).commands[command]
    return {p.opts[0]: p.help or "" for p in cmd.params if p.opts}


def test_listed():
    assert listed([]) == "none"
    assert listed(["a"]) == "a"
    assert listed(["a", "b", "c"]) == "a, b or c"


def test_tune_help_lists_the_registered_strategies_and_objectives(monkeypatch):
    strategy = replace(search.STRATEGIES["tpe"], name="odd", help="a test strategy")
    monkeypatch.setitem(search.STRATEGIES, "odd", replace(strategy, default_budget=7))
    objective = replace(objectives.OBJECTIVES["speed"], name="odd", help="a test objective")
    monkeypatch.setitem(objectives.OBJECTIVES, "odd", objective)
    helps = _help(tune_cli.register, "tune")
    assert "odd (a test strategy)" in helps["--strategy"]
    for name in search.STRATEGIES:
        assert name in helps["--strategy"]
    assert "odd (a test objective)" in helps["--objective"]
    assert "7 for odd" in helps["--trials"] and "20 for tpe" in helps["--trials"]
    assert "the whole ladder or grid" in helps["--trials"]


@pytest.mark.parametrize(
    ("flag", "module", "name", "value"),
    [
        ("--arrivals", loadgen, "ARRIVALS", (*loadgen.ARRIVALS, "odd")),
        ("--slo", metrics, "SLO_METRICS", {**metrics.SLO_METRICS, "odd": "odd_s"}),
        ("--usage", api, "USAGE_LEVELS", (*api.USAGE_LEVELS, "odd")),
    ],
)
def test_bench_help_lists_the_registered_choices(monkeypatch, flag, module, name, value):
    monkeypatch.setattr(module, name, value)
    helps = _help(bench_cli.register, "bench")
    assert "odd" in helps[flag]
    for choice in getattr(module, name):
        assert choice in helps[flag]
