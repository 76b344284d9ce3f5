"""The config parser meets random and mutated configs: a ModelSpec or a UserError, never anything else."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.errors import UserError
from roofline.spec.budget import token_budget
from roofline.spec.catalogue import catalogue_models
from roofline.spec.parse import spec_from_config
from roofline.spec.quant import resolve_formats

REAL = [m.config for m in catalogue_models()]
KEYS = sorted({k for cfg in REAL for k in cfg} | {"text_config", "sliding_window_pattern", "n_shared_experts"})

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def _parse_all_the_way(cfg) -> None:
    """Parse, then price every component: the parts of a spec that downstream code touches."""
    try:
        spec = spec_from_config(cfg, name="fuzz")
        budget = token_budget(spec, resolve_formats(spec, None), context_tokens=4096)
        assert budget.bytes_per_token >= 0 and budget.resident_weight_bytes >= 0
    except UserError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), json_value, max_size=12))
def test_random_dicts(cfg) -> None:
    _parse_all_the_way(cfg)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(range(len(REAL))),
    st.lists(st.tuples(st.sampled_from(KEYS), json_value, st.booleans()), min_size=1, max_size=4),
)
def test_mutated_real_configs(index: int, edits) -> None:
    cfg = copy.deepcopy(REAL[index])
    for key, value, delete in edits:
        if delete:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    _parse_all_the_way(cfg)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(REAL))), st.sampled_from(KEYS),
       st.integers(min_value=-3, max_value=10**12))
def test_real_configs_with_odd_integers(index: int, key: str, value: int) -> None:
    cfg = copy.deepcopy(REAL[index])
    cfg[key] = value
    _parse_all_the_way(cfg)
