"""KV-cache bytes: what one token adds to the cache, and what decoding at a context must read.

    GQA:  values per token per layer = 2 (K and V) x kv_heads x head_dim
    MLA:  values per token per layer = kv_lora_rank + qk_rope_head_dim (one latent: e.g. 512 + 64)

A decoded token attends over its sequence's whole cache, so at context C it reads, summed over
layers, values_per_layer x bytes_per_value x min(C, that layer's window).
"""

from __future__ import annotations

from roofline.modelspec.formats import WeightFormat
from roofline.modelspec.model import ModelSpec


def kv_values_per_token_per_layer(spec: ModelSpec) -> int:
    if spec.mla is not None:
        return spec.mla.latent_dim
    return 2 * spec.num_kv_heads * spec.head_dim


def kv_bytes_per_token(spec: ModelSpec, kv_format: WeightFormat) -> float:
    """Bytes one token adds to the cache over all layers (before any window cap)."""
    return spec.num_layers * kv_values_per_token_per_layer(spec) * kv_format.bytes_per_weight


def kv_bytes_at_context(spec: ModelSpec, context_tokens: int, kv_format: WeightFormat) -> float:
    """Bytes of cache one sequence holds at `context_tokens`, all of which one decode step reads."""
    if context_tokens <= 0:
        return 0.0
    per_layer = kv_values_per_token_per_layer(spec) * kv_format.bytes_per_weight
    tokens = 0
    for layer in range(spec.num_layers):
        window = spec.window(layer)
        tokens += context_tokens if window is None else min(context_tokens, window)
    return per_layer * tokens
