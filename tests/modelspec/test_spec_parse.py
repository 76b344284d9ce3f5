"""config.json -> ModelSpec: the catalogue's real configs, the dialects, and the errors."""

from __future__ import annotations

import copy
import json

import pytest

from roofline.errors import UserError
from roofline.modelspec.budget import token_budget
from roofline.modelspec.catalogue import catalogue_models, find_model, load_spec
from roofline.modelspec.components import active_params, components, total_params
from roofline.modelspec.formats import parse_format
from roofline.modelspec.kv import kv_bytes_at_context, kv_bytes_per_token
from roofline.modelspec.parse import spec_from_config
from roofline.modelspec.quant import resolve_formats

BF16, FP8 = parse_format("bf16"), parse_format("fp8")


def _config(model_id: str) -> dict:
    return copy.deepcopy(find_model(model_id).config)


def _llama(**over) -> dict:
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    cfg.update(over)
    return cfg


def test_every_catalogue_entry_parses_and_has_a_source() -> None:
    entries = catalogue_models()
    assert len(entries) >= 18
    for m in entries:
        assert m.source and m.retrieved, m.id
        spec = spec_from_config(m.config, name=m.id)
        assert 0 < active_params(spec) <= total_params(spec)


@pytest.mark.parametrize(
    "model_id, total",
    [
        ("meta-llama/Llama-3.1-8B", 8_030_261_248),
        ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 134_515_008),
    ],
)
def test_exact_parameter_counts(model_id: str, total: int) -> None:
    assert total_params(load_spec(model_id)) == total


@pytest.mark.parametrize(
    "model_id, total_b, active_b",
    [
        ("openai/gpt-oss-120b", 116.83, 5.13),  # the model card's 116.83 B / 5.13 B
        ("openai/gpt-oss-20b", 20.91, 3.61),
        ("deepseek-ai/DeepSeek-V3", 671.0, 36.6),  # "671B total, 37B activated"
        ("Qwen/Qwen3-235B-A22B", 235.1, 21.6),
        ("moonshotai/Kimi-K2-Instruct", 1026.4, 31.7),  # "1T total, 32B activated"
    ],
)
def test_moe_totals_and_active(model_id: str, total_b: float, active_b: float) -> None:
    spec = load_spec(model_id)
    assert total_params(spec) / 1e9 == pytest.approx(total_b, abs=0.06)
    assert active_params(spec) / 1e9 == pytest.approx(active_b, abs=0.06)


def test_catalogue_names_resolve_case_insensitively() -> None:
    for name in ("openai/gpt-oss-120b", "GPT-OSS-120B", "gpt-oss-120b", "OpenAI/GPT-OSS-120b"):
        assert load_spec(name).name == "openai/gpt-oss-120b"
    assert load_spec("qwen3-8b").name == "Qwen/Qwen3-8B"


def test_deepseek_v3_mla_kv_and_active_params() -> None:
    spec = load_spec("deepseek-ai/DeepSeek-V3")
    assert spec.mla is not None and spec.mla.latent_dim == 512 + 64
    # KV per token = (kv_lora_rank + qk_rope_head_dim) x bytes x 61 layers; not 2 x 128 heads x 128.
    assert kv_bytes_per_token(spec, BF16) == 576 * 2 * 61
    assert kv_bytes_per_token(spec, FP8) == 576 * 61
    assert spec.moe.moe_layers == tuple(range(3, 61))  # first_k_dense_replace = 3
    keys = {c.key: c for c in components(spec)}
    assert keys["mlp"].params_active == 3 * 3 * 7168 * 18432  # the three dense layers
    # one shared expert per MoE layer
    assert keys["shared_experts"].params_active == 58 * 3 * 7168 * 2048
    assert keys["experts"].params_active == 58 * 8 * 3 * 7168 * 2048
    assert active_params(spec) == pytest.approx(37e9, rel=0.02)
    formats = resolve_formats(spec, None)
    assert formats["experts"].name == "fp8" and formats["experts"].bits_per_weight == 8 + 32 / (
        128 * 128
    )
    assert formats["router"].name == "bf16" and formats["lm_head"].name == "bf16"
    assert any("multi-token" in n for n in spec.notes)


def test_explicit_head_dim_differs_from_hidden_over_heads() -> None:
    spec = load_spec("Qwen/Qwen3-32B")  # hidden 5120 / 64 heads = 80, but head_dim is 128
    assert spec.head_dim == 128
    assert kv_bytes_per_token(spec, BF16) == 2 * 64 * 8 * 128 * 2
    q = next(c for c in components(spec) if c.key == "attention").params_active
    assert q == 64 * (5120 * 64 * 128 * 2 + 5120 * 8 * 128 * 2)
    cfg = _config("Qwen/Qwen3-32B")
    del cfg["head_dim"]
    assert spec_from_config(cfg).head_dim == 128  # Qwen3Config's own default, not hidden / heads
    # LlamaConfig derives it
    assert spec_from_config(_llama(hidden_size=96, num_attention_heads=4)).head_dim == 24


def test_gpt_oss_sliding_window_caps_kv() -> None:
    spec = load_spec("openai/gpt-oss-120b")
    assert spec.layer_windows[:2] == (128, None) and spec.layer_windows.count(128) == 18
    per_layer = 2 * 8 * 64 * 2  # bytes per token per layer, bf16
    # 18 full layers hold all 8,192 tokens, 18 sliding layers only their 128.
    assert kv_bytes_at_context(spec, 8192, BF16) == per_layer * (18 * 8192 + 18 * 128)
    assert kv_bytes_at_context(spec, 100, BF16) == per_layer * 36 * 100


def test_sliding_window_dialects() -> None:
    n = 12
    gemma2 = spec_from_config(
        _llama(model_type="gemma2", num_hidden_layers=n, sliding_window=4096, head_dim=16)
    )
    assert gemma2.layer_windows == tuple(4096 if i % 2 == 0 else None for i in range(n))
    gemma3 = spec_from_config(
        _llama(
            model_type="gemma3_text",
            num_hidden_layers=n,
            sliding_window=512,
            sliding_window_pattern=6,
            head_dim=16,
        )
    )
    assert [w is None for w in gemma3.layer_windows] == [(i + 1) % 6 == 0 for i in range(n)]
    mistral = spec_from_config(_llama(model_type="mistral", sliding_window=4096))
    assert mistral.layer_windows == (4096, 4096)
    qwen = spec_from_config(
        _llama(model_type="qwen3", sliding_window=4096, use_sliding_window=False)
    )
    assert qwen.layer_windows == (None, None)
    qwen_on = spec_from_config(
        _llama(model_type="qwen2", sliding_window=64, use_sliding_window=True, max_window_layers=1)
    )
    assert qwen_on.layer_windows == (None, 64)


def test_text_config_nesting() -> None:
    inner = _llama(model_type="gemma3_text", head_dim=16, sliding_window=512, num_hidden_layers=6)
    cfg = {
        "model_type": "gemma3",
        "text_config": inner,
        "vision_config": {"hidden_size": 1152},
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(cfg)
    assert (
        spec.architecture == "gemma3_text" and spec.hidden_size == 64 and spec.tie_word_embeddings
    )
    no_type = {
        "model_type": "mistral3",
        "text_config": {k: v for k, v in _llama().items() if k != "model_type"},
    }
    assert spec_from_config(no_type).architecture == "mistral"


@pytest.mark.parametrize("key", ["num_local_experts", "n_routed_experts", "num_experts"])
def test_moe_expert_count_keys(key: str) -> None:
    spec = spec_from_config(_llama(model_type="mixtral", **{key: 8}, num_experts_per_tok=2))
    assert spec.moe.num_experts == 8 and spec.moe.top_k == 2 and spec.moe.moe_layers == (0, 1)


def test_moe_layer_selection_keys() -> None:
    ds = spec_from_config(
        _llama(
            model_type="deepseek_v3",
            num_hidden_layers=8,
            n_routed_experts=16,
            num_experts_per_tok=2,
            first_k_dense_replace=2,
            moe_layer_freq=2,
            moe_intermediate_size=32,
            n_shared_experts=2,
        )
    )
    assert ds.moe.moe_layers == (2, 4, 6) and ds.moe.shared_intermediate == 64
    qw = spec_from_config(
        _llama(
            model_type="qwen2_moe",
            num_hidden_layers=6,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
            moe_intermediate_size=32,
            shared_expert_intermediate_size=96,
        )
    )
    assert qw.moe.moe_layers == (1, 5) and qw.moe.shared_intermediate == 96 and qw.moe.shared_gate
    dense = next(c for c in components(qw) if c.key == "mlp")
    assert dense.params_active == 4 * 3 * 64 * 128  # layers 0, 2, 3, 4 keep a dense MLP


def test_gpt_oss_formats_from_quantization_config() -> None:
    spec = load_spec("openai/gpt-oss-20b")
    f = resolve_formats(spec, None)
    assert f["experts"].name == "mxfp4"
    assert {f[k].name for k in ("attention", "router", "lm_head", "embeddings")} == {"bf16"}


def test_weight_overrides() -> None:
    spec = load_spec("openai/gpt-oss-120b")
    f = resolve_formats(spec, "experts=nvfp4,attention=fp8")
    assert (f["experts"].name, f["attention"].name, f["lm_head"].name) == ("nvfp4", "fp8", "bf16")
    f = resolve_formats(spec, "fp8,lm_head=bf16")
    assert (f["experts"].name, f["lm_head"].name, f["norms"].name) == ("fp8", "bf16", "bf16")
    b = token_budget(spec, resolve_formats(spec, "q4_0"))
    assert b.row("attention").bytes_active == b.row("attention").params_active * 18 / 32
    for bad in ("fp7", "experts=", "wings=fp8", "fp8,bf16", ","):
        with pytest.raises(UserError):
            resolve_formats(spec, bad)
    # empty means the checkpoint's own
    assert resolve_formats(spec, "") == resolve_formats(spec, None)


def test_gptq_and_unknown_quantization() -> None:
    gptq = spec_from_config(
        _llama(quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    )
    f = resolve_formats(gptq, None)
    assert f["mlp"].bits_per_weight == 4.125 and f["lm_head"].name == "bf16"
    odd = spec_from_config(_llama(quantization_config={"quant_method": "hqq-something"}))
    with pytest.raises(UserError, match="--weights"):
        resolve_formats(odd, None)
    assert resolve_formats(odd, "int4")["mlp"].name == "int4"


def test_tied_embeddings_are_stored_once_but_read_in_full() -> None:
    spec = load_spec("smollm2-135m")
    head = next(c for c in components(spec) if c.key == "lm_head")
    assert head.params_total == 0 and head.params_active == 49152 * 576


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"model_type": "bert", "hidden_size": 8}, "unknown architecture"),
        ({"hidden_size": 8}, "model_type"),
        (_llama(hidden_size="wide"), "hidden_size"),
        (_llama(num_hidden_layers=-1), "num_hidden_layers"),
        (_llama(num_hidden_layers=True), "num_hidden_layers"),
        (_llama(hidden_size=66, num_attention_heads=4), "head_dim"),
        (_llama(num_key_value_heads=8), "num_key_value_heads"),
        (_llama(num_local_experts=8), "num_experts_per_tok"),
        (_llama(layer_types=["sliding_attention"]), "layer_types"),
        (_llama(text_config=[1, 2]), "text_config"),
        ([1, 2, 3], "JSON object"),
    ],
)
def test_bad_configs_raise_user_error(cfg, match: str) -> None:
    with pytest.raises(UserError, match=match):
        spec_from_config(cfg)


def test_load_spec_from_file_and_folder(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(_config("qwen3-8b")))
    assert load_spec(str(tmp_path / "m")).num_layers == 36
    assert load_spec(str(tmp_path / "m" / "config.json")).head_dim == 128
    (tmp_path / "broken.json").write_text("{ not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_spec(str(tmp_path / "broken.json"))
    with pytest.raises(UserError, match=r"no config\.json"):
        load_spec(str(tmp_path))
    with pytest.raises(UserError, match="no such file"):
        load_spec(str(tmp_path / "missing.json"))
    with pytest.raises(UserError, match="unknown model"):
        load_spec("nobody/no-such-model")


def test_gguf_architecture_names_are_family_traits() -> None:
    """A GGUF file's `general.architecture` finds its family through the family's own trait: one
    table, and every decoder block the engine runs is a name a GGUF file can carry."""
    from roofline.modelspec.families import engine_archs, get_family, model_type_of_gguf_arch

    of_arch = model_type_of_gguf_arch()
    assert all(arch in get_family(mt).gguf_archs for arch, mt in of_arch.items())
    assert of_arch["command-r"] == of_arch["cohere"] == "cohere"  # renamed by llama.cpp
    assert of_arch["deepseek2"] == "deepseek_v2" and "mixtral" not in of_arch.values()
    assert set(engine_archs()) <= set(of_arch)
