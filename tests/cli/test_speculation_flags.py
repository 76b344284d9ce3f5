"""`roofline generate` and `roofline serve` take one flag per roofline.speculation option, generated
from it: the flags, their defaults and the errors that name the flag."""

from __future__ import annotations

import inspect

import pytest
import typer
from typer.testing import CliRunner

from roofline.cli.main import app
from roofline.cli.speculation_flags import spec_options, speculation_flags
from roofline.errors import UserError
from roofline.speculation import SpecOptions, options


@pytest.mark.parametrize("name", ["generate", "serve"])
def test_every_option_is_a_flag_with_its_default(name):
    command = typer.main.get_command(app).commands[name]
    by_name = {p.name: p for p in command.params}
    assert "speculation" not in inspect.signature(command.callback).parameters
    defaults = SpecOptions()
    for field, opt in options().items():
        p = by_name["speculation_" + field]
        assert p.opts == ["--" + opt.flag] and p.default == getattr(defaults, field), field
    assert by_name["speculation_tree"].secondary_opts == ["--spec-chain"]
    assert by_name["speculation_adaptive"].secondary_opts == ["--no-adaptive"]


def test_a_flag_below_its_minimum_is_a_usage_error():
    result = CliRunner().invoke(app, ["generate", "hi", "--max-trie-depth", "1"])
    assert result.exit_code == 2 and "--max-trie-depth" in result.output


def test_a_float_flag_takes_a_fraction_and_its_minimum_holds():
    result = CliRunner().invoke(app, ["generate", "hi", "--spec-max-factor", "-0.5"])
    assert result.exit_code == 2 and "--spec-max-factor" in result.output
    with pytest.raises(UserError, match=r"^--spec-min-prob: spec_min_prob must be <= 1"):
        spec_options(method="suffix", spec_min_prob=1.5)
    assert spec_options(method="suffix", spec_max_factor=0.5).spec_max_factor == 0.5


def test_the_wrapper_passes_one_spec_options():
    seen = []

    @speculation_flags
    def command(x: int = 1, speculation: SpecOptions = SpecOptions(), y: int = 2):
        seen.append((x, speculation, y))

    flags = {f"speculation_{n}": getattr(SpecOptions(), n) for n in options()}
    command(x=3, y=4, **{**flags, "speculation_method": "trie", "speculation_tree": False})
    assert seen == [(3, SpecOptions("trie", tree=False), 4)]


@pytest.mark.parametrize(
    ("values", "flag"),
    [
        ({"method": "bogus"}, "--spec: method must be one of none, ngram, trie, suffix, draft"),
        ({"prompt_lookup_min": 5, "prompt_lookup_max": 3}, "--prompt-lookup-min: "),
        ({"k": 0}, "--spec-k: k must be >= 1"),
        ({"draft_dtype": "fp16"}, "--draft-dtype: draft_dtype must be one of"),
    ],
)
def test_errors_name_the_flag(values, flag):
    with pytest.raises(UserError) as e:
        spec_options(**values)
    assert str(e.value).startswith(flag)
