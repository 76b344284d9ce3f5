"""Llama 4 Scout and Maverick: a shared expert beside top-1 routing, interleaved MoE layers, chunked
attention, and the language model nested under text_config. Counted by hand from the published
configs."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from roofline.errors import UserError
from roofline.modelspec.budget import token_budget
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.components import active_params, components, total_params
from roofline.modelspec.formats import parse_format
from roofline.modelspec.kv import kv_bytes_at_context, kv_bytes_per_token
from roofline.modelspec.parse import spec_from_config
from roofline.modelspec.quant import resolve_formats

BF16 = parse_format("bf16")


def _published(experts: int, step: int, use_qk_norm: bool, max_positions: int) -> dict:
    """meta-llama/Llama-4-{Scout-17B-16E,Maverick-17B-128E}-Instruct config.json, the keys that
    shape the language model (vision_config trimmed to its type)."""
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "boi_token_index": 200080,
        "eoi_token_index": 200081,
        "image_token_index": 200092,
        "text_config": {
            "attention_bias": False,
            "attention_chunk_size": 8192,
            "head_dim": 128,
            "hidden_act": "silu",
            "hidden_size": 5120,
            "interleave_moe_layer_step": step,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "max_position_embeddings": max_positions,
            "model_type": "llama4_text",
            "no_rope_layers": [],
            "num_attention_heads": 40,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "num_local_experts": experts,
            "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "torch_dtype": "bfloat16",
            "use_qk_norm": use_qk_norm,
            "vocab_size": 202048,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vision_config": {"model_type": "llama4_vision_model"},
    }


SCOUT = _published(16, 1, True, 10_485_760)
MAVERICK = _published(128, 2, False, 1_048_576)

h, L, H, K, d, V, I_EXPERT, I_DENSE = 5120, 48, 40, 8, 128, 202_048, 8192, 16384
ATTENTION = h * H * d + 2 * h * K * d + H * d * h  # q, k, v, o per layer: 62,914,560
EXPERT = 3 * h * I_EXPERT  # gate, up, down of one expert (the shared expert is the same shape)
DENSE = 3 * h * I_DENSE
HEAD = V * h  # lm_head, untied; the embedding table is as big


def _counts(moe_layers: int, experts: int) -> dict[str, int]:
    dense_layers = L - moe_layers
    return {
        "attention": L * ATTENTION,
        "mlp": dense_layers * DENSE,
        "experts_stored": moe_layers * experts * EXPERT,
        "experts_read": moe_layers * 1 * EXPERT,  # top-1
        "shared_experts": moe_layers * EXPERT,
        "router": moe_layers * h * experts,
        "lm_head": HEAD,
        "norms": L * 2 * h
        + h,  # two RMSNorms per layer and the final one; the q/k L2 norm has no weights
    }


@pytest.mark.parametrize(
    "cfg, moe_layers, experts", [(SCOUT, 48, 16), (MAVERICK, 24, 128)], ids=["scout", "maverick"]
)
def test_hand_count_from_the_published_config(cfg: dict, moe_layers: int, experts: int) -> None:
    spec = spec_from_config(cfg, name="llama4")
    c = _counts(moe_layers, experts)
    got = {x.key: x for x in components(spec)}
    assert got["attention"].params_active == c["attention"]
    assert (
        got["experts"].params_total == c["experts_stored"]
        and got["experts"].params_active == c["experts_read"]
    )
    assert (
        got["shared_experts"].params_active
        == got["shared_experts"].params_total
        == c["shared_experts"]
    )
    assert got["router"].params_total == c["router"] and got["router"].small
    assert got["lm_head"].params_active == got["lm_head"].params_total == c["lm_head"]
    assert got["norms"].params_total == c["norms"]
    if c["mlp"]:
        assert got["mlp"].params_active == c["mlp"]
    else:
        assert "mlp" not in got
    read = c["attention"] + c["mlp"] + c["experts_read"] + c["shared_experts"] + c["lm_head"]
    budget = token_budget(spec, resolve_formats(spec, None))
    assert budget.weight_bytes == 2 * read  # bf16: the active bytes one decoded token reads
    total = (
        c["attention"]
        + c["mlp"]
        + c["experts_stored"]
        + c["shared_experts"]
        + c["router"]
        + 2 * HEAD
        + c["norms"]
    )
    assert total_params(spec) == total


def test_against_the_published_parameter_counts() -> None:
    """Meta: Scout 17B active / 109B total, Maverick 17B active / 400B total. Both figures count the
    whole embedding table as active and the total includes the vision encoder (~0.9B), which a text
    decode never reads; within 1.5% once the embedding table is added back."""
    for cfg, active_b, total_b in ((SCOUT, 17, 109), (MAVERICK, 17, 400)):
        spec = spec_from_config(cfg)
        assert (active_params(spec) + V * h) / 1e9 == pytest.approx(active_b, rel=0.015)
        assert total_params(spec) / 1e9 == pytest.approx(total_b, rel=0.015)
    scout, maverick = spec_from_config(SCOUT), spec_from_config(MAVERICK)
    assert (
        round(total_params(scout) / 1e9, 2) == 107.77
        and round(total_params(maverick) / 1e9, 2) == 400.71
    )
    assert (
        round(active_params(scout) / 1e9, 2) == 16.14
        and round(active_params(maverick) / 1e9, 2) == 16.15
    )


def test_interleaved_moe_layers() -> None:
    assert spec_from_config(SCOUT).moe.moe_layers == tuple(range(48))
    # every 2nd, from layer 1
    assert spec_from_config(MAVERICK).moe.moe_layers == tuple(range(1, 48, 2))
    named = copy.deepcopy(MAVERICK)
    # an explicit list wins; indices past the model are ignored
    named["text_config"]["moe_layers"] = [0, 47, 99]
    assert spec_from_config(named).moe.moe_layers == (0, 47)


def test_chunked_attention_caps_the_kv_read() -> None:
    spec = spec_from_config(SCOUT)
    # RoPE layers attend in 8,192-token chunks; every 4th layer (NoPE) is global.
    assert spec.layer_windows == tuple(None if (i + 1) % 4 == 0 else 8192 for i in range(48))
    per_layer_token = 2 * K * d * 2  # K and V, bf16
    assert kv_bytes_per_token(spec, BF16) == L * per_layer_token == 196_608
    # under a chunk: all layers
    assert kv_bytes_at_context(spec, 4096, BF16) == L * 4096 * per_layer_token
    # At 32k: 36 chunked layers read min(32768, 8192), the 12 global ones all 32,768.
    assert (
        kv_bytes_at_context(spec, 32_768, BF16)
        == per_layer_token * (36 * 8192 + 12 * 32_768)
        == 2_818_572_288
    )
    unchunked = copy.deepcopy(SCOUT)
    unchunked["text_config"]["attention_chunk_size"] = None
    assert (
        kv_bytes_at_context(spec_from_config(unchunked), 32_768, BF16)
        == L * 32_768 * per_layer_token
    )
    explicit = copy.deepcopy(SCOUT)
    explicit["text_config"]["no_rope_layers"] = [1, 0] * 24  # odd layers NoPE (global)
    assert spec_from_config(explicit).layer_windows == (8192, None) * 24
    typed = copy.deepcopy(SCOUT)
    typed["text_config"]["layer_types"] = ["chunked_attention", "full_attention"] * 24
    assert spec_from_config(typed).layer_windows == (8192, None) * 24


def test_nesting_and_bare_text_config_agree_and_catalogue_entries_match() -> None:
    nested = spec_from_config(SCOUT, name="x")
    bare = spec_from_config({**SCOUT["text_config"]}, name="x")
    wrapper_typed = copy.deepcopy(SCOUT)
    wrapper_typed["text_config"]["model_type"] = (
        "llama4"  # some copies repeat the wrapper's type inside
    )
    assert nested == spec_from_config(wrapper_typed, name="x")
    assert dataclasses.replace(bare, notes=()) == dataclasses.replace(nested, notes=())
    assert nested.architecture == "llama4_text" and nested.max_position_embeddings == 10_485_760
    for name, cfg in (("llama-4-scout", SCOUT), ("llama-4-maverick", MAVERICK)):
        entry = load_spec(name)
        assert dataclasses.replace(entry, name="x") == spec_from_config(cfg, name="x"), name


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("interleave_moe_layer_step", 0, "interleave_moe_layer_step"),
        ("moe_layers", "all", "moe_layers"),
        ("no_rope_layers", [1, 0], "no_rope_layers"),
        ("attention_chunk_size", -5, "attention_chunk_size"),
        ("no_rope_layer_interval", 0, "no_rope_layer_interval"),
    ],
)
def test_bad_llama4_keys_are_one_line(key: str, value, match: str) -> None:
    cfg = copy.deepcopy(SCOUT)
    cfg["text_config"][key] = value
    if key == "no_rope_layer_interval":
        cfg["text_config"]["no_rope_layers"] = []
    with pytest.raises(UserError, match=match):
        spec_from_config(cfg)
