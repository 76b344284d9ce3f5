"""The config parser meets random and mutated configs: a ModelSpec or a UserError, never anything
else.

Configs of every registered family (so every family's defaults and layer rules are walked), values
of every JSON type including integers far past Python's 4,300-digit str limit, wrapped under
text_config, and as raw JSON text read from a file the way the CLI reads it.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.errors import UserError
from roofline.modelspec.budget import context_warning, token_budget
from roofline.modelspec.catalogue import catalogue_models, load_spec
from roofline.modelspec.components import active_params, components
from roofline.modelspec.families import known_types
from roofline.modelspec.parse import spec_from_config
from roofline.modelspec.quant import resolve_formats

REAL = [m.config for m in catalogue_models()]
TEXT = [cfg["text_config"] for cfg in REAL if isinstance(cfg.get("text_config"), dict)]
FAMILY_KEYS = {
    "text_config",
    "sliding_window_pattern",
    "n_shared_experts",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "moe_layers",
    "no_rope_layers",
    "no_rope_layer_interval",
    "interleave_moe_layer_step",
    "intermediate_size_mlp",
    "attention_chunk_size",
    "layer_types",
    "use_sliding_window",
    "max_window_layers",
    "mlp_only_layers",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "max_position_embeddings",
    "head_dim",
    "vocab_size",
    "num_experts",
    "shared_expert_intermediate_size",
}
KEYS = sorted({k for cfg in REAL + TEXT for k in cfg} | FAMILY_KEYS)

huge_int = st.integers(min_value=4000, max_value=6000).map(lambda n: 10**n - 1) | st.integers(
    min_value=30, max_value=400
).map(lambda n: -(10**n))
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    huge_int,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["sliding_attention", "chunked_attention", "full_attention", "bfloat16", "mxfp4"]
    ),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _parse_all_the_way(cfg) -> None:
    """Parse, then price every component: the parts of a spec that downstream code touches."""
    try:
        spec = spec_from_config(cfg, name="fuzz")
        for context in (0, 4096, 10**7):
            budget = token_budget(spec, resolve_formats(spec, None), context_tokens=context)
            assert budget.bytes_per_token >= 0 and budget.resident_weight_bytes >= 0
            line = context_warning(spec, context)
            assert line is None or "\n" not in line
        assert active_params(spec) >= 0 and all(c.params_active >= 0 for c in components(spec))
    except UserError as e:
        assert "\n" not in str(e)  # one line, whatever the config held


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
@given(
    st.sampled_from(range(len(REAL))),
    st.sampled_from(KEYS),
    st.integers(min_value=-3, max_value=10**12),
)
def test_real_configs_with_odd_integers(index: int, key: str, value: int) -> None:
    cfg = copy.deepcopy(REAL[index])
    cfg[key] = value
    _parse_all_the_way(cfg)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(known_types()), st.dictionaries(st.sampled_from(KEYS), json_value, max_size=8)
)
def test_every_family_with_random_keys(model_type: str, rest) -> None:
    """Each family's defaults fill what is left out; whatever is put in is read or refused in one
    line."""
    _parse_all_the_way({**rest, "model_type": model_type})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(range(len(REAL))),
    st.sampled_from(["gemma3", "llama4", "mistral3", "llava", None]),
    st.lists(st.tuples(st.sampled_from(KEYS), json_value, st.booleans()), max_size=4),
)
def test_real_configs_wrapped_under_text_config(index: int, wrapper, edits) -> None:
    inner = copy.deepcopy(REAL[index].get("text_config", REAL[index]))
    for key, value, delete in edits:
        if delete:
            inner.pop(key, None)
        else:
            inner[key] = value
    _parse_all_the_way({"model_type": wrapper, "text_config": inner, "torch_dtype": "bfloat16"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(range(len(REAL))),
    st.sampled_from(KEYS),
    st.integers(min_value=4301, max_value=20000),
    st.booleans(),
)
def test_config_files_with_enormous_integers(
    index: int, key: str, digits: int, nested: bool
) -> None:
    """Read from a file as the CLI does: json.loads itself refuses such integers; that is a
    UserError too."""
    cfg = copy.deepcopy(REAL[index])
    target = cfg["text_config"] if nested and isinstance(cfg.get("text_config"), dict) else cfg
    target[key] = "HUGE"
    text = json.dumps(cfg).replace('"HUGE"', "7" * digits)
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            load_spec(path)
        except UserError as e:
            assert "\n" not in str(e)
        else:
            raise AssertionError("a config with a number of thousands of digits was accepted")
    finally:
        os.unlink(path)


quant_value = st.one_of(json_leaf, st.lists(json_leaf, max_size=3))
quant_config = st.fixed_dictionaries(
    {
        "quant_method": st.sampled_from(
            [
                "mxfp4",
                "fp8",
                "fbgemm_fp8",
                "gptq",
                "awq",
                "bitsandbytes",
                "modelopt",
                "compressed-tensors",
                "hqq",
            ]
        )
        | json_leaf
    },
    optional={
        k: quant_value
        for k in (
            "bits",
            "group_size",
            "w_bit",
            "q_group_size",
            "weight_block_size",
            "load_in_4bit",
            "quant_algo",
            "modules_to_not_convert",
            "ignore",
            "exclude",
        )
    }
    | {
        "config_groups": st.dictionaries(
            st.text(max_size=4),
            st.fixed_dictionaries(
                {},
                optional={
                    "weights": st.dictionaries(
                        st.sampled_from(["num_bits", "type", "group_size"]), json_leaf, max_size=3
                    )
                },
            ),
            max_size=2,
        )
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(REAL))), quant_config)
def test_quantization_configs_of_any_shape(index: int, qc) -> None:
    cfg = copy.deepcopy(REAL[index])
    cfg["quantization_config"] = qc
    _parse_all_the_way(cfg)
