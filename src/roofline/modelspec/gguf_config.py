"""A GGUF file's metadata as the config.json keys `modelspec.parse.spec_from_config` reads.

llama.cpp writes the shape under the architecture's prefix (`llama.block_count`); the Hugging
Face key each `{arch}.` key maps to:

    block_count                      num_hidden_layers (less nextn_predict_layers)
    embedding_length                 hidden_size
    attention.head_count(_kv)        num_attention_heads, num_key_value_heads
    attention.key_length             head_dim (GQA)
    context_length                   max_position_embeddings
    feed_forward_length              intermediate_size (Llama 4: intermediate_size_mlp)
    expert_count, expert_used_count  num_local_experts, num_experts_per_tok
    expert_feed_forward_length       moe_intermediate_size (Llama 4: intermediate_size)
    attention.sliding_window         sliding_window
    MLA: attention.q_lora_rank, kv_lora_rank, rope.dimension_count, key/value_length(_mla)

The vocabulary is the token embedding's rows; tied without `output.weight`. KV defaults to f16,
as in llama.cpp.
"""

from __future__ import annotations

from typing import Any

from roofline.errors import UserError
from roofline.modelspec.families import model_type_of_gguf_arch
from roofline.modelspec.gguf_header import ArrayValue, GgufHeader

# config.json key <- GGUF key (after the "{arch}." prefix), copied when the file has it.
_COPIED = (
    ("hidden_size", "embedding_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("max_position_embeddings", "context_length"),
    ("num_experts_per_tok", "expert_used_count"),
    ("n_shared_experts", "expert_shared_count"),
    ("shared_expert_intermediate_size", "expert_shared_feed_forward_length"),
    ("first_k_dense_replace", "leading_dense_block_count"),
    ("sliding_window", "attention.sliding_window"),
    ("interleave_moe_layer_step", "interleave_moe_layer_step"),
)
_REQUIRED = ("block_count", "embedding_length", "attention.head_count")


def _number(value: Any) -> Any:
    """A per-layer array stands for its largest entry (the spec has one value for every layer)."""
    if isinstance(value, ArrayValue):
        return max(value.items) if value.items else None
    return value


def _mla(get, cfg: dict[str, Any]) -> None:
    rope = _number(get("rope.dimension_count"))
    key_len = _number(get("attention.key_length_mla")) or _number(get("attention.key_length"))
    cfg["q_lora_rank"] = _number(get("attention.q_lora_rank"))
    cfg["kv_lora_rank"] = _number(get("attention.kv_lora_rank"))
    cfg["qk_rope_head_dim"] = rope
    if isinstance(key_len, int) and isinstance(rope, int):
        cfg["qk_nope_head_dim"] = key_len - rope
    cfg["v_head_dim"] = _number(get("attention.value_length_mla")) or _number(
        get("attention.value_length")
    )


def config_from_gguf(
    header: GgufHeader, *, has_output: bool, vocab_rows: int | None, expert_router_bias: bool
) -> dict[str, Any]:
    """The config.json a GGUF file's metadata stands for; UserError when it lacks what decoding
    needs."""
    path = header.source
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UserError(
            f"{path}: GGUF metadata has no general.architecture; the file is not a model"
        )
    known = model_type_of_gguf_arch()
    model_type = known.get(arch)
    if model_type is None:
        raise UserError(
            f"{path}: GGUF architecture {arch[:40]!r} is not one roofline reads; it "
            f"reads {', '.join(sorted(known))}"
        )
    get = lambda key: meta.get(f"{arch}.{key}")  # noqa: E731
    for key in _REQUIRED:
        if get(key) is None:
            raise UserError(f"{path}: GGUF metadata has no {arch}.{key}; the file is incomplete")
    experts = _number(get("expert_count")) or 0
    if model_type == "llama" and experts:
        model_type = "mixtral"
    if model_type == "deepseek_v2" and expert_router_bias:
        model_type = "deepseek_v3"
    nextn, blocks = _number(get("nextn_predict_layers")) or 0, _number(get("block_count"))
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (nextn, blocks)):
        raise UserError(
            f"{path}: GGUF metadata has {arch}.block_count={blocks!r}, "
            f"nextn_predict_layers={nextn!r}; they must be whole numbers"
        )
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "torch_dtype": "float16",
        "num_hidden_layers": blocks - nextn,
        "tie_word_embeddings": not has_output,
    }
    if nextn:
        cfg["num_nextn_predict_layers"] = nextn
    for config_key, gguf_key in _COPIED:
        value = _number(get(gguf_key))
        if value is not None:
            cfg[config_key] = value
    ffn = _number(get("feed_forward_length"))
    expert_ffn = _number(get("expert_feed_forward_length"))
    if model_type == "llama4_text":
        cfg["intermediate_size"], cfg["intermediate_size_mlp"] = expert_ffn or ffn, ffn
    else:
        if ffn is not None:
            cfg["intermediate_size"] = ffn
        if expert_ffn is not None:
            cfg["moe_intermediate_size"] = expert_ffn
    if experts:
        cfg["num_local_experts"] = experts
    if model_type.startswith("deepseek"):
        _mla(get, cfg)
    elif get("attention.key_length") is not None:
        cfg["head_dim"] = _number(get("attention.key_length"))
    vocab = vocab_rows or _number(get("vocab_size"))
    tokens = meta.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(tokens, ArrayValue):
        vocab = tokens.count
    if vocab is not None:
        cfg["vocab_size"] = vocab
    return cfg
