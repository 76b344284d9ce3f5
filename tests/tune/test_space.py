"""Search spaces: parsed, made discrete, and refused (naming the knob) before anything launches."""

from __future__ import annotations

import tomllib

import pytest

from roofline.bench.engines import LAUNCHERS, get_launcher
from roofline.errors import UserError
from roofline.tune.space import Space, load_preset, parse_space, preset_names

EMBEDDED = get_launcher("embedded")
HEAD = 'source = "test"\ndate = "2026-12-02"\n'


def space(body: str, launcher=EMBEDDED) -> Space:
    return parse_space(HEAD + body, launcher, name="t")


def test_choices_ranges_conditions_and_defaults():
    s = space("""
[baseline]
threads = 2
[knobs.spec]
choices = ["none", "ngram", "trie"]
default = "none"
[knobs.spec_k]
low = 2
high = 8
step = 2
default = 4
unless = { spec = "none" }
[knobs.max_bfs_breadth]
low = 2
high = 48
log = true
points = 4
when = { spec = ["trie"] }
""")
    assert [d.name for d in s.dimensions] == ["spec", "spec_k", "max_bfs_breadth"]
    assert s.dimension("spec_k").values() == (2, 4, 6, 8)
    # geometric, rounded to whole numbers
    assert s.dimension("max_bfs_breadth").values() == (
        2,
        6,
        17,
        48,
    )
    assert s.baseline == {"threads": 2}
    assert s.effective({}) == {"spec": "none", "spec_k": 4}
    # a knob whose condition fails is dropped, and so are those that depend on it
    assert s.resolve({"spec": "none", "spec_k": 6, "max_bfs_breadth": 6}) == {"spec": "none"}
    assert s.resolve({"spec": "trie", "spec_k": 6, "max_bfs_breadth": 6}) == {
        "spec": "trie",
        "spec_k": 6,
        "max_bfs_breadth": 6,
    }
    assert Space.from_json(s.to_json()) == s


def test_short_int_ranges_are_tried_value_by_value_and_floats_get_points():
    launcher = get_launcher("sglang")
    s = space(
        """
[knobs.stream_interval]
low = 1
high = 4
[knobs.mem_fraction_static]
low = 0.5
high = 0.9
""",
        launcher,
    )
    assert s.dimension("stream_interval").values() == (1, 2, 3, 4)
    assert s.dimension("mem_fraction_static").values() == (0.5, 0.6, 0.7, 0.8, 0.9)


def test_required_knob_is_set_to_its_default_when_it_turns_on():
    s = space(
        """
[knobs.speculative_method]
choices = ["none", "ngram"]
default = "none"
[knobs.num_speculative_tokens]
choices = [2, 4]
default = 4
required = true
when = { speculative_method = "ngram" }
""",
        get_launcher("vllm"),
    )
    assert s.resolve({"speculative_method": "ngram"}) == {
        "speculative_method": "ngram",
        "num_speculative_tokens": 4,
    }
    assert s.resolve({}) == {}


@pytest.mark.parametrize(
    "body, words",
    [
        # unknown knob: its name, and the known ones
        (
            "[knobs.spec_kk]\nchoices = [1]\n",
            ["'spec_kk'", "spec_k"],
        ),
        ("[knobs.threads]\nlow = 4\nhigh = 2\n", ["'threads'", "low must be below high"]),
        ("[knobs.threads]\nlow = 1\nhigh = 4.5\n", ["'threads'", "whole number"]),
        ("[knobs.threads]\nlow = 0\nhigh = 4\n", ["'threads'", "at least 1"]),
        ("[knobs.threads]\nlow = 1\nhigh = 8\nstep = 2\nlog = true\n", ["'threads'", "not both"]),
        ("[knobs.threads]\nlow = 1\nhigh = 8\nstep = -1\n", ["'threads'", "step must be positive"]),
        ("[knobs.threads]\nlow = 1\n", ["'threads'", "both low and high"]),
        ("[knobs.dtype]\nlow = 1\nhigh = 2\n", ["'dtype'", "choice knob"]),
        ('[knobs.dtype]\nchoices = ["fp32", "fp8"]\n', ["'dtype'", "fp8"]),
        ("[knobs.dtype]\nchoices = []\n", ["'dtype'", "non-empty"]),
        ('[knobs.dtype]\nchoices = ["fp32"]\nlow = 1\nhigh = 2\n', ["'dtype'", "not both"]),
        ('[knobs.dtype]\nchoices = ["fp32"]\nstride = 2\n', ["'dtype'", "stride"]),
        (
            '[knobs.spec_k]\nchoices = [2]\nwhen = { spec = "ngram" }\n',
            ["'spec_k'", "'spec'", "not an earlier knob"],
        ),
        (
            '[knobs.spec]\nchoices = ["none", "ngram"]\n'
            '[knobs.spec_k]\nchoices = [2]\nwhen = { spec = "bogus" }\n',
            ["'spec'", "bogus"],
        ),
        (
            '[knobs.spec_k]\nchoices = [2]\ndefault = 4\nrequired = "yes"\n',
            ["'spec_k'", "required"],
        ),
        ("[knobs.spec_k]\nchoices = [2]\nrequired = true\n", ["'spec_k'", "needs a default"]),
        ('[baseline]\nspec_k = 4\n[knobs.dtype]\nchoices = ["fp32"]\n', ["spec_k", "needs spec"]),
        ('[baseline]\nthreadz = 4\n[knobs.dtype]\nchoices = ["fp32"]\n', ["'threadz'"]),
        ('colour = 1\n[knobs.dtype]\nchoices = ["fp32"]\n', ["colour"]),
        ('engine = "vllm"\n[knobs.dtype]\nchoices = ["fp32"]\n', ["--engine vllm"]),
        ('[knobs.dtype]\nchoices = ["fp32"]\ninexact = ["int8"]\n', ["'dtype'", "inexact"]),
        (
            '[knobs.dtype]\nchoices = ["fp32", "int8"]\ndefault = "int8"\ninexact = ["int8"]\n',
            ["'dtype'", "default 'int8' cannot be inexact"],
        ),
        ("", ["at least one [knobs.NAME]"]),
        ("[knobs.dtype\n", ["not valid TOML"]),
    ],
)
def test_bad_spaces_are_refused_naming_the_knob(body, words):
    with pytest.raises(UserError) as e:
        space(body)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_names_its_source_and_date_and_fits_its_engine(name):
    from importlib import resources

    text = (
        resources.files("roofline").joinpath(f"data/spaces/{name}.toml").read_text(encoding="utf-8")
    )
    first = text.splitlines()[:2]
    assert first[0].startswith("source = ") and first[1].startswith("date = ")
    engine = tomllib.loads(text)["engine"]
    assert engine in LAUNCHERS
    s = load_preset(name, get_launcher(engine))
    assert s.dimensions and all(d.values() for d in s.dimensions)


def test_presets_cover_the_issue():
    assert {"embedded", "vllm-ngram", "llamacpp", "b200-ladder"} <= set(preset_names())
    b200 = load_preset("b200-ladder", get_launcher("sglang"))
    breadth = b200.dimension("speculative_ngram_max_bfs_breadth").values()
    assert min(breadth) == 2 and max(breadth) == 48 and 24 in breadth
    with pytest.raises(UserError, match="unknown preset"):
        load_preset("nope", EMBEDDED)


def test_a_fixed_knob_is_set_in_every_trial_and_no_longer_searched():
    space = load_preset("embedded", get_launcher("embedded"))
    fixed = space.with_baseline({"threads": 1})
    assert fixed.baseline["threads"] == 1
    assert [d.name for d in fixed.dimensions] == [
        d.name for d in space.dimensions if d.name != "threads"
    ]


def test_inexact_choices_are_left_out_unless_inexact_results_are_allowed():
    from roofline.tune.space_records import Space as Records

    full = load_preset("embedded", EMBEDDED)
    assert full.dimension("dtype").choices == ("fp32", "stored", "bf16", "int8")
    exact = full.exact_only()
    dtype = exact.dimension("dtype")
    assert dtype.values() == ("fp32", "stored") and dtype.left_out() == ("bf16", "int8")
    assert full.dimension("dtype").left_out() == ()
    assert exact.dimension("spec").choices == full.dimension("spec").choices
    assert Records.from_json(exact.to_json()) == exact  # the run's space keeps what it left out
