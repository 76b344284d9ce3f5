"""llama.cpp tensor names -> Hugging Face names, for the Llama family (llama, qwen2, qwen3
GGUFs)."""

from __future__ import annotations

import re

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

# blk.{i}.<gguf part> -> model.layers.{i}.<hf part>
_PER_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")

# Tensors a GGUF may carry that are not weights of the model proper.
# rope_freqs: Llama 3.1+ frequency factors (read into ModelConfig.rope_scaling, not a weight).
NON_WEIGHT_TENSORS = frozenset({"rope_freqs.weight"})


def hf_name(gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor, or None when the name is not part of the Llama family."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    match = _BLOCK.fullmatch(gguf_name)
    if match and match.group(2) in _PER_LAYER:
        return f"model.layers.{match.group(1)}.{_PER_LAYER[match.group(2)]}"
    return None
