"""roofline.speculation is the one declaration of the speculation options: the engine's registry,
the embedded launcher's knobs and the TOML preset agree with it."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from importlib import resources

from roofline import speculation
from roofline.bench.engines.launchers import EMBEDDED
from roofline.engine.runtime import speculate
from roofline.speculation import SpecOptions


def test_every_proposer_has_an_engine_factory_and_reads_real_options():
    for name in speculation.PROPOSERS:
        assert callable(speculate.factory_of(name)), name
    for traits in speculation.PROPOSERS.values():
        assert set(traits.reads) <= {f.name for f in fields(SpecOptions)}


def test_launcher_knobs_are_the_options():
    knobs = {opt.knob: name for name, opt in speculation.options().items()}
    assert [k for k in EMBEDDED.knobs if k in knobs] == list(knobs)
    for knob, name in knobs.items():
        k = EMBEDDED.knobs[knob]
        assert k.choices == speculation.option_choices(name)
        assert k.minimum == speculation.options()[name].minimum
    assert EMBEDDED.knobs["spec"].choices == ("none", *speculation.PROPOSERS)


def test_embedded_preset_agrees_with_the_options():
    text = (resources.files("roofline") / "data" / "spaces" / "embedded.toml").read_text()
    knobs = tomllib.loads(text)["knobs"]
    by_knob = {opt.knob: name for name, opt in speculation.options().items()}
    defaults = SpecOptions()
    checked = 0
    for knob, entry in knobs.items():
        name = by_knob.get(knob)
        if name is None:
            continue  # not a speculation knob (dtype, threads)
        checked += 1
        if "default" in entry:
            assert entry["default"] == getattr(defaults, name), knob
        for value in entry["choices"]:
            SpecOptions(**{name: value})  # each value is valid on its own
            if speculation.option_choices(name):
                assert value in speculation.option_choices(name), (knob, value)
        when = entry.get("when", {}).get(speculation.options()["method"].knob)
        if when is not None:  # asked only for proposers that read the option
            for method in [when] if isinstance(when, str) else when:
                assert name in speculation.PROPOSERS[method].reads, (knob, method)
    assert checked >= 5
    assert knobs["spec"]["choices"] == list(speculation.methods())  # every proposer is tried


def test_float_options_are_float_knobs_and_flags():
    """A float option (suffix's factor, offset, cutoff) is a "float" launcher knob passed on as
    its flag; the knob takes what SpecOptions takes."""
    knob = EMBEDDED.knobs["spec_max_factor"]
    assert knob.kind == "float" and knob.parse("1.5") == 1.5 and knob.problem(-1.0)
    assert EMBEDDED.knobs["spec_offset"].problem(-2.0) is None  # an offset may be negative
    args = EMBEDDED.argv(
        model=None,
        port=8000,
        host="127.0.0.1",
        config={"spec": "suffix", "spec_max_factor": 1.5, "spec_min_prob": 0.2},
    )
    i = args.index("--spec-max-factor")
    assert args[i + 1] == "1.5" and args[args.index("--spec-min-prob") + 1] == "0.2"
    assert SpecOptions("suffix", spec_max_factor=float(args[i + 1])).spec_max_factor == 1.5
