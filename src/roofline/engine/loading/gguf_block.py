"""What a GGUF file's block departs from Llama's by (`config.ModelConfig`'s Gemma 3 fields), from
its metadata and its family's traits, as llama.cpp reads them.

    post norms, embedding scale   the family's (`families.Family`: norms_per_layer 4, embed_scaled)
    activation                    the family's transformers default (llama.cpp's graph has it);
                                  gpt-oss's experts' clamped SwiGLU (Family.expert_activation)
    sliding windows               {arch}.attention.sliding_window, one layer in
                                  {arch}.attention.sliding_window_pattern (default: the family's
                                  window rule, Gemma 3's 6) global, or that key as a list a layer
    sliding layers' RoPE base     {arch}.rope.freq_base_swa, else the family's (10000); no scaling
    query scale                   llama.cpp's rule: head_dim^-1/2, except Gemma 3 27B (62 layers):
                                  (hidden / n_heads)^-1/2, its query_pre_attn_scalar
    final logit cap               {arch}.final_logit_softcapping
The norms' 1 + w is already in the file (llama.cpp's converter adds it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roofline.engine.loading.config import Activation
from roofline.errors import UserError
from roofline.modelspec.families import get_family, model_type_of_gguf_arch
from roofline.modelspec.windows import layer_windows

GEMMA3_27B_LAYERS = 62  # llama.cpp's LLM_TYPE_27B for gemma3, the one model with its own scale


def _windows(meta: dict, arch: str, n_layers: int, rule: str) -> tuple[int, ...]:
    window = int(meta.get(f"{arch}.attention.sliding_window") or 0)
    if window <= 0:
        return ()
    cfg: dict = {"sliding_window": window}
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        cfg["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    elif pattern is not None:
        cfg["sliding_window_pattern"] = int(pattern)
    return tuple(w or 0 for w in layer_windows(cfg, n_layers, rule))


def block_fields(
    meta: dict, arch: str, n_layers: int, hidden: int, n_heads: int, head_dim: int, path: Path
) -> dict:
    """ModelConfig's keyword arguments past the Llama block's (module doc)."""
    family = get_family(model_type_of_gguf_arch().get(arch, arch))
    if family is None:
        return {}
    if meta.get(f"{arch}.attn_logit_softcapping"):
        raise UserError(f"{path}: soft-capped attention logits are not supported")
    cap = meta.get(f"{arch}.final_logit_softcapping")
    query_scale = None  # 1 / sqrt(head_dim)
    if family.defaults.get("query_pre_attn_scalar"):  # the family scales queries its own way
        scalar = hidden // n_heads if n_layers == GEMMA3_27B_LAYERS else head_dim
        query_scale = float(scalar) ** -0.5
    windows = _windows(meta, arch, n_layers, family.window_rule) if family.engine_windows else ()
    local = meta.get(f"{arch}.rope.freq_base_swa")
    if local is None and family.rope_thetas is not None:
        local = family.rope_thetas[1]
    return dict(
        activation=Activation(
            family.expert_activation or family.defaults.get("hidden_activation", "silu")
        ),
        post_norms=family.norms_per_layer == 4,
        embed_scale=float(np.float32(hidden**0.5)) if family.embed_scaled else 1.0,
        query_scale=query_scale,
        layer_windows=windows,
        local_rope_theta=None if local is None or not windows else float(local),
        final_softcap=float(cap) if cap else None,
    )
