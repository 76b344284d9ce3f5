"""llama.cpp tensor names -> Hugging Face names, for the Llama family (llama, qwen2, qwen3
GGUFs), Gemma 3's block, whose norms after attention and MLP rename the MLP's input norm, and a
mixture of experts' (qwen3moe, Mixtral's llama, gpt-oss), whose experts llama.cpp packs into one
3-D tensor per projection (`expert_tensor`; gpt-oss's biases into one 2-D tensor each). Two other
layouts of the same rows: Mixtral GGUFs converted before llama.cpp packed experts (early 2024) hold
one tensor per expert (`blk.N.ffn_gate.E.weight`), and converters since early 2026 may fuse gate
and up into `ffn_gate_up_exps` (each expert's gate rows, then its up rows: `split_gate_up`).

gpt-oss's own names: post_attention_norm is the MLP's input norm (Hugging Face's
post_attention_layernorm, as in any block without post norms), attn_sinks the sinks,
attn_output.bias o_proj's bias, ffn_gate_inp.bias the router's (the engine's mlp.gate)."""

from __future__ import annotations

import re

from roofline.modelspec.tensor_roles import ONE_EXPERT_GGUF

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
    "ffn_gate_inp.weight": "mlp.gate.weight",  # a mixture of experts' router
    "ffn_gate_inp.bias": "mlp.gate.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_sinks.weight": "self_attn.sinks",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
}

# blk.{i}.<gguf part>: every expert's <HF projection>.<kind> at once, numpy shape (experts, out,
# in) for a weight, (experts, out) for a bias
_EXPERTS = {
    f"ffn_{x}_exps.{kind}": f"{x}_proj.{kind}"
    for x in ("gate", "up", "down", "gate_up")
    for kind in ("weight", "bias")
}

# Blocks with post norms (Gemma 2/3): llama.cpp's ffn_norm is the MLP's input norm there too, which
# Hugging Face calls pre_feedforward_layernorm (post_attention_layernorm is the attention output's)
_POST_NORMS = {
    **_PER_LAYER,
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}

_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")

# Tensors a GGUF may carry that are not weights of the model proper.
# rope_freqs: Llama 3.1+ frequency factors (read into ModelConfig.rope_scaling, not a weight).
NON_WEIGHT_TENSORS = frozenset({"rope_freqs.weight"})


def hf_name(gguf_name: str, post_norms: bool = False) -> str | None:
    """The HF name of a GGUF tensor, or None when the name is not part of the block (post_norms:
    a block with norms after attention and MLP)."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    if one := ONE_EXPERT_GGUF.fullmatch(gguf_name):
        layer, x, expert = one.groups()
        return expert_name(int(layer), int(expert), f"{x}_proj.weight")
    match = _BLOCK.fullmatch(gguf_name)
    table = _POST_NORMS if post_norms else _PER_LAYER
    if match and match.group(2) in table:
        return f"model.layers.{match.group(1)}.{table[match.group(2)]}"
    return None


def expert_tensor(gguf_name: str) -> tuple[int, str] | None:
    """(layer, HF projection and kind: "gate_proj.weight", ...) of a GGUF tensor packing every
    expert's projection (or its bias), else None."""
    match = _BLOCK.fullmatch(gguf_name)
    if match and match.group(2) in _EXPERTS:
        return int(match.group(1)), _EXPERTS[match.group(2)]
    return None


def expert_name(layer: int, expert: int, projection: str) -> str:
    """The HF name of one expert's projection ("gate_proj.weight", ...)."""
    return f"model.layers.{layer}.mlp.experts.{expert}.{projection}"


def split_gate_up(projection: str, t, rows):
    """[(projection, tensor, stored rows or None)] of an expert tensor as the engine reads it: a
    fused gate_up_proj (experts, 2 ffn, ...) (its bias (experts, 2 ffn)) split into gate_proj's
    first ffn rows and up_proj's last ffn of each expert, as llama.cpp's views take them; any
    other projection as it is. Slices, no copies."""
    if not projection.startswith("gate_up_proj."):
        return [(projection, t, rows)]
    kind, half = projection.split(".", 1)[1], t.shape[1] // 2
    return [
        (f"{x}_proj.{kind}", t[:, part], None if rows is None else rows[:, part])
        for x, part in (("gate", slice(0, half)), ("up", slice(half, None)))
    ]
