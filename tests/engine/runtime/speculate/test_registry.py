"""SpecOptions validation and the proposer registry."""

from __future__ import annotations

import pytest

from roofline.engine.runtime.speculate import DraftTree, SpecOptions, factory_of, proposer_factory
from roofline.speculation import PROPOSERS

REPEATING = [5, 6, 7, 8, 9, 10, 11, 12] * 4 + [5, 6, 7]


def test_defaults_are_valid():
    options = SpecOptions()
    assert options.method == "none"
    assert (options.max_bfs_breadth, options.min_bfs_breadth, options.max_trie_depth) == (10, 1, 18)
    assert options.num_draft_tokens == 12 and options.trie_scope == "request" and options.tree


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("method", "bogus", "method must be one of none, ngram, trie, suffix, draft"),
        ("k", 0, "k must be >= 1"),
        ("k", True, "k must be an int"),
        ("k", 2.0, "k must be an int"),
        ("prompt_lookup_min", 0, "prompt_lookup_min must be >= 1"),
        ("prompt_lookup_max", 1, "prompt_lookup_min must be <= prompt_lookup_max"),
        ("min_bfs_breadth", 0, "min_bfs_breadth must be >= 1"),
        ("max_bfs_breadth", 0, "min_bfs_breadth must be <= max_bfs_breadth"),
        ("max_trie_depth", 1, "max_trie_depth must be >= 2"),
        ("num_draft_tokens", 0, "num_draft_tokens must be >= 1"),
        ("trie_capacity", 170, "trie_capacity must be >= .* = 171"),
        ("trie_scope", "global", "trie_scope must be one of request, shared"),
        ("tree", 1, "tree must be a bool"),
        ("adaptive", None, "adaptive must be a bool"),
        ("draft_dtype", "fp16", "draft_dtype must be one of stored, fp32, bf16, int8"),
        ("draft_model", "", "draft_model must be None or a non-empty string"),
        ("spec_max_factor", -0.5, "spec_max_factor must be >= 0"),
        ("spec_max_factor", True, "spec_max_factor must be a finite number"),
        ("spec_offset", float("nan"), "spec_offset must be a finite number"),
        ("spec_offset", "1", "spec_offset must be a finite number"),
        ("spec_min_prob", -0.1, "spec_min_prob must be >= 0"),
        ("spec_min_prob", 1.5, "spec_min_prob must be <= 1"),
        ("suffix_max_depth", 1, "suffix_max_depth must be >= 2"),
        ("suffix_scope", "global", "suffix_scope must be one of request, shared"),
        ("suffix_cache_requests", 0, "suffix_cache_requests must be >= 1"),
    ],
)
def test_invalid_options_name_the_option(field, value, message):
    with pytest.raises(ValueError, match=message):
        SpecOptions(**{field: value})


def test_related_limits_accept_equal_values():
    SpecOptions(
        prompt_lookup_min=3,
        prompt_lookup_max=3,
        min_bfs_breadth=4,
        max_bfs_breadth=4,
        max_trie_depth=2,
        trie_capacity=3,
        draft_model="some/dir",
    )


def test_float_options_take_ints_and_store_floats():
    options = SpecOptions("suffix", spec_max_factor=2, spec_offset=-1, spec_min_prob=0)
    assert (options.spec_max_factor, options.spec_offset, options.spec_min_prob) == (2.0, -1.0, 0.0)
    assert all(type(v) is float for v in (options.spec_max_factor, options.spec_offset))
    defaults = SpecOptions()
    assert (defaults.spec_max_factor, defaults.spec_offset, defaults.spec_min_prob) == (
        1.0,
        0.0,
        0.1,
    )
    assert (defaults.suffix_max_depth, defaults.suffix_scope) == (24, "request")


def test_none_makes_no_proposer():
    assert proposer_factory(SpecOptions()) is None


def test_registry_names():
    assert set(PROPOSERS) == {"ngram", "trie", "suffix", "draft"}
    assert SpecOptions(method="draft").method == "draft"
    with pytest.raises(TypeError):
        PROPOSERS["other"] = PROPOSERS["ngram"]  # entries are added in the module's one literal


def test_every_factory_named_by_the_registry_is_found():
    for method in PROPOSERS:
        assert callable(factory_of(method)), method


# "draft" needs a target model to load; its own tests cover it.
@pytest.mark.parametrize("method", sorted(set(PROPOSERS) - {"draft"}))
def test_every_registered_proposer_works(method):
    make = proposer_factory(SpecOptions(method=method, prompt_lookup_min=1), None)
    proposer = make()
    tree = proposer.propose(REPEATING, 3)
    assert isinstance(tree, DraftTree)
    assert 1 <= len(tree) <= 3
    assert tree.best_path().tokens[0] == 8
    proposer.accepted([*REPEATING, 8, 9])
    assert proposer.propose([*REPEATING, 8, 9], 0) == DraftTree.empty()
    assert len(make().propose([1], 4)) == 0
