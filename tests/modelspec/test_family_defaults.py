"""Each family's left-out keys take transformers' defaults, as transformers itself resolves them.

Three checks per family: the data file holds transformers' own class defaults; a config that leaves
those keys out prices exactly like one that writes them out; and the spec read from a sparse config
matches the configuration object transformers builds from the same dict (head_dim, vocab, kv heads,
which layers slide, experts). Then the cases the issue named: Google's gemma-3-12b-it config, and
DeepSeek-V2 with kv_lora_rank missing or null.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from importlib import resources

import pytest
from transformers import CONFIG_MAPPING

from roofline.errors import UserError
from roofline.modelspec.budget import token_budget
from roofline.modelspec.components import components, total_params
from roofline.modelspec.families import get_family
from roofline.modelspec.formats import parse_format
from roofline.modelspec.kv import kv_bytes_at_context, kv_bytes_per_token
from roofline.modelspec.parse import spec_from_config
from roofline.modelspec.quant import resolve_formats

BF16 = parse_format("bf16")
DATA = json.loads(
    (resources.files("roofline") / "data" / "family_defaults.json").read_text(encoding="utf-8")
)
FAMILIES = sorted(DATA["families"])
# Keys a family leaves null in transformers but a model of it cannot do without.
REQUIRED = {"deepseek_v2": {"num_experts_per_tok": 6}}


def _class_default(cls, key: str):
    if dataclasses.is_dataclass(cls):
        f = {f.name: f for f in dataclasses.fields(cls)}[key]
        return f.default if f.default is not dataclasses.MISSING else f.default_factory()
    # transformers 4.x: __init__ keywords
    return inspect.signature(cls.__init__).parameters[key].default


def _budget(cfg: dict, context: int = 40_000):
    spec = spec_from_config(cfg, name="t")
    return spec, token_budget(spec, resolve_formats(spec, None), context_tokens=context)


def test_the_data_names_its_source_and_covers_the_registry() -> None:
    assert DATA["transformers_version"] and DATA["read"]
    assert {
        "gemma3_text",
        "gemma2",
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "phi3",
        "deepseek_v2",
        "deepseek_v3",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "gpt_oss",
        "llama4_text",
    } <= set(FAMILIES)
    for mt in FAMILIES:
        family = get_family(mt)
        assert family is not None and family.defaults == DATA["families"][mt]["defaults"], mt
        assert (
            DATA["transformers_version"] in family.defaults_source
            and "configuration_" in family.defaults_source
        )


@pytest.mark.parametrize("mt", FAMILIES)
def test_defaults_are_transformers_own(mt: str) -> None:
    cls = CONFIG_MAPPING[mt]
    for key, value in DATA["families"][mt]["defaults"].items():
        assert _class_default(cls, key) == value, f"{mt}.{key}"


@pytest.mark.parametrize("mt", FAMILIES)
def test_left_out_prices_like_written_out(mt: str) -> None:
    written = {"model_type": mt, **DATA["families"][mt]["defaults"], **REQUIRED.get(mt, {})}
    left_out = {"model_type": mt, **REQUIRED.get(mt, {})}
    spec_w, b_w = _budget(written)
    spec_l, b_l = _budget(left_out)
    assert b_l.bytes_per_token == b_w.bytes_per_token > 0
    assert b_l.resident_weight_bytes == b_w.resident_weight_bytes
    assert b_l.kv_bytes_per_token == b_w.kv_bytes_per_token
    assert dataclasses.replace(spec_l, notes=()) == dataclasses.replace(spec_w, notes=())
    assert any("defaults" in n for n in spec_l.notes) and not any(
        "defaults" in n for n in spec_w.notes
    )


# A sparse config per family (a few keys set, the rest left to the defaults), read both ways.
SPARSE = [
    ("llama", {}),
    ("mistral", {}),
    ("mixtral", {}),
    ("granite", {}),
    ("smollm3", {}),
    ("phi3", {}),
    ("olmo", {}),
    ("olmo2", {}),
    ("cohere", {}),
    ("starcoder2", {}),
    ("gemma", {}),
    ("gemma2", {}),
    ("gemma3_text", {"num_hidden_layers": 12, "sliding_window": 1024}),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 4}),
    ("qwen2_moe", {"use_sliding_window": True, "max_window_layers": 5}),
    ("qwen3", {}),
    ("qwen3_moe", {"use_sliding_window": True}),
    ("gpt_oss", {}),
    ("deepseek_v2", {"num_experts_per_tok": 6, "first_k_dense_replace": 1}),
    ("deepseek_v3", {}),
    ("llama4_text", {"interleave_moe_layer_step": 2}),
]


def _windows_of(tc, n: int) -> tuple:
    kinds = getattr(tc, "layer_types", None)
    if kinds:
        size = {
            "sliding_attention": getattr(tc, "sliding_window", None),
            "chunked_attention": getattr(tc, "attention_chunk_size", None),
            "full_attention": None,
        }
        return tuple(size[k] for k in kinds[:n])
    return (getattr(tc, "sliding_window", None) or None,) * n


@pytest.mark.parametrize("mt, given", SPARSE, ids=[s[0] for s in SPARSE])
def test_spec_matches_what_transformers_builds(mt: str, given: dict) -> None:
    given = {"num_hidden_layers": 8, **given}
    tc = CONFIG_MAPPING[mt](**given)
    spec = spec_from_config({"model_type": mt, **given}, name="t")
    heads = tc.num_attention_heads
    assert (spec.num_layers, spec.hidden_size, spec.num_heads) == (
        tc.num_hidden_layers,
        tc.hidden_size,
        heads,
    )
    assert spec.num_kv_heads == tc.num_key_value_heads
    if spec.mla is None:
        assert spec.head_dim == (getattr(tc, "head_dim", None) or tc.hidden_size // heads)
    else:
        assert (spec.mla.kv_lora_rank, spec.mla.q_lora_rank) == (tc.kv_lora_rank, tc.q_lora_rank)
    assert spec.vocab_size == tc.vocab_size and spec.tie_word_embeddings == tc.tie_word_embeddings
    assert spec.max_position_embeddings == tc.max_position_embeddings
    assert spec.layer_windows == _windows_of(tc, spec.num_layers)
    experts = next(
        (
            getattr(tc, k)
            for k in ("num_local_experts", "n_routed_experts", "num_experts")
            if getattr(tc, k, None)
        ),
        None,
    )
    assert (spec.moe.num_experts if spec.moe else None) == experts
    if spec.moe:
        assert spec.moe.top_k == tc.num_experts_per_tok
    if mt == "llama4_text":
        assert list(spec.moe.moe_layers) == list(tc.moe_layers) == [1, 3, 5, 7]
        assert spec.intermediate_size == tc.intermediate_size_mlp


# google/gemma-3-12b-it config.json as published (the text part sets neither head_dim nor
# vocab_size).
GEMMA_3_12B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "eos_token_id": [1, 106],
    "image_token_index": 262144,
    "initializer_range": 0.02,
    "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {
        "hidden_size": 3840,
        "intermediate_size": 15360,
        "model_type": "gemma3_text",
        "num_attention_heads": 16,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}


def test_gemma_3_12b_it_hand_count() -> None:
    spec, budget = _budget(GEMMA_3_12B_IT, context=32_768)
    assert (spec.head_dim, spec.vocab_size, spec.tie_word_embeddings) == (256, 262_208, True)
    L, h, H, K, d, inter, V = 48, 3840, 16, 8, 256, 15360, 262_208
    attention = L * (h * H * d + 2 * h * K * d + H * d * h)  # q, k, v, o
    mlp = L * 3 * h * inter  # gate, up, down
    lm_head = V * h  # tied: read in full, stored once
    assert (attention, mlp, lm_head) == (2_264_924_160, 8_493_465_600, 1_006_878_720)
    assert budget.weight_bytes == 2 * (attention + mlp + lm_head) == 23_530_536_960
    norms = L * (4 * h + 2 * d) + h  # four norms per layer, q/k norms of head_dim, the final norm
    assert total_params(spec) == attention + mlp + lm_head + norms == 11_766_034_176
    # KV: 2 x 8 heads x 256 x 2 bytes per layer; 40 layers slide over 1,024 tokens, every 6th is
    # global.
    assert kv_bytes_per_token(spec, BF16) == L * 2 * K * d * 2 == 393_216
    assert spec.layer_windows.count(None) == 8 and spec.layer_windows.count(1024) == 40
    assert budget.kv_bytes == 2 * K * d * 2 * (8 * 32_768 + 40 * 1024) == 2_483_027_968
    # What hidden / heads (240) would have said: 1.2% fewer weight bytes, 6.25% less KV.
    wrong = json.loads(json.dumps(GEMMA_3_12B_IT))
    wrong["text_config"].update(head_dim=240, vocab_size=262_208)
    spec240, b240 = _budget(wrong, context=32_768)
    assert b240.weight_bytes / budget.weight_bytes == pytest.approx(1 - 0.012, abs=0.001)
    assert kv_bytes_per_token(spec240, BF16) / kv_bytes_per_token(spec, BF16) == 240 / 256
    assert any("head_dim=256" in n and "transformers" in n for n in spec.notes)


def test_gemma3_text_config_nested_or_bare_is_the_same_model() -> None:
    bare = {**GEMMA_3_12B_IT["text_config"], "torch_dtype": "bfloat16"}
    assert dataclasses.replace(spec_from_config(bare), name="x") == dataclasses.replace(
        spec_from_config(GEMMA_3_12B_IT), name="x"
    )


# deepseek-ai/DeepSeek-V2-Lite config.json (the keys roofline reads), as published.
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_shared_experts": 2,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_deepseek_v2_kv_lora_rank_missing_takes_the_default() -> None:
    written = spec_from_config(DEEPSEEK_V2_LITE)
    assert kv_bytes_per_token(written, BF16) == 27 * (512 + 64) * 2 == 31_104
    missing = {k: v for k, v in DEEPSEEK_V2_LITE.items() if k != "kv_lora_rank"}
    spec = spec_from_config(missing)
    assert spec.mla is not None and spec.mla.kv_lora_rank == 512 and spec.mla.q_lora_rank is None
    assert kv_bytes_per_token(spec, BF16) == 31_104  # not GQA's 27 x 2 x 16 x 128 x 2 = 221,184
    assert [c.params_total for c in components(spec)] == [
        c.params_total for c in components(written)
    ]


def test_deepseek_v2_kv_lora_rank_null_is_refused() -> None:
    with pytest.raises(UserError, match="kv_lora_rank=null") as e:
        spec_from_config({**DEEPSEEK_V2_LITE, "kv_lora_rank": None})
    assert "512" in str(e.value) and "\n" not in str(e.value)


def test_mla_family_without_a_default_refuses_a_missing_rank() -> None:
    kimi = {**DEEPSEEK_V2_LITE, "model_type": "kimi_k2"}
    del kimi["kv_lora_rank"]
    with pytest.raises(UserError, match="missing 'kv_lora_rank'"):
        spec_from_config(kimi)


def test_q_lora_rank_left_out_is_compressed_but_null_is_not() -> None:
    left_out = {k: v for k, v in DEEPSEEK_V2_LITE.items() if k != "q_lora_rank"}
    assert spec_from_config(left_out).mla.q_lora_rank == 1536  # DeepseekV2Config's default
    assert spec_from_config(DEEPSEEK_V2_LITE).mla.q_lora_rank is None  # V2-Lite projects q directly


def test_kv_at_context_uses_each_layers_cap() -> None:
    spec = spec_from_config(GEMMA_3_12B_IT)
    # below the window every layer reads all
    assert kv_bytes_at_context(spec, 1000, BF16) == 393_216 * 1000


@pytest.mark.parametrize("model_id", ["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"])
def test_deepseek_v3_rank_missing_or_null(model_id: str) -> None:
    from roofline.modelspec.catalogue import find_model

    cfg = json.loads(json.dumps(find_model(model_id).config))
    written = spec_from_config(cfg)
    del cfg["kv_lora_rank"]
    # DeepseekV3Config's 512 is what the checkpoint states
    assert spec_from_config(cfg).mla == written.mla
    assert kv_bytes_per_token(spec_from_config(cfg), BF16) == 61 * (512 + 64) * 2
    with pytest.raises(UserError, match="kv_lora_rank=null"):
        spec_from_config({**cfg, "kv_lora_rank": None})
