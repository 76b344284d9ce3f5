"""RoPE's tables in numpy: each pair's rotation frequency, and cos and sin of position x frequency,
as transformers computes them (its float32 steps), for the runner and the reference alike.

With d = head_dim and base theta, pair i < d / 2 turns by

    inv_freq_i = 1 / theta^(2i / d)                      (then a scaling's rule, below)
    cos, sin = cos(p inv_freq_i), sin(p inv_freq_i)      for positions p

Every step is a float32 operation, as in transformers, except two that transformers leaves to
torch's vector math library: theta^x and cos/sin are computed in float64 and rounded to float32
once (within a float64 ulp of the correctly rounded value, so the same float32 on any host but in
a rare near-tie; a float32 library call may differ in the last bit from one instruction set to
another). The tables may therefore differ from transformers' in the last bit of a few entries
(the shipped model: 5% of cos and sin, docs/measured.md); the engine's paths all take these
tables, so they agree with each other bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from roofline.engine.kernels.yarn import yarn_attention_factor, yarn_inv_freq
from roofline.engine.loading.config import ModelConfig
from roofline.errors import UserError


def float32_powers(base: float, exponents: np.ndarray) -> np.ndarray:
    """base ** exponents[i] for float32 exponents, in float64 and rounded to float32 once."""
    return np.array([math.pow(base, float(x)) for x in exponents], dtype=np.float32)


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Per-pair rotation frequencies (head_dim / 2,), float32 (module doc)."""
    d = config.head_dim
    exponents = np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d
    pos_freqs = float32_powers(config.rope_theta, exponents)
    inv_freq = 1.0 / pos_freqs
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":  # positions divided by factor
        return inv_freq / float(scaling["factor"])
    if kind == "yarn":
        return yarn_inv_freq(pos_freqs, config.rope_theta, scaling)
    if kind == "llama3":
        # GGUF: llama.cpp's exact per-frequency divisors
        if "original_max_position_embeddings" not in scaling:
            return inv_freq / np.asarray(scaling["freq_factors"], dtype=np.float32)
        # Llama 3.1: keep high frequencies, divide low ones by `factor`, blend in between
        # (wavelength w = 2 pi / f); a python float meets a float32 array as float32, as in
        # torch
        factor, low, high = (
            float(scaling["factor"]),
            float(scaling["low_freq_factor"]),
            float(scaling["high_freq_factor"]),
        )
        ctx = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > ctx / low, inv_freq / factor, inv_freq)
        smooth = (ctx / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < ctx / high) & ~(wavelen > ctx / low)
        return np.where(medium, blended, scaled).astype(np.float32)
    raise UserError(
        f"RoPE scaling type {kind!r} is not supported (supported: default, linear, llama3, yarn)"
    )


def rope_tables(config: ModelConfig, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of pos * inv_freq for pos in [0, n_positions): two float32 (n_positions,
    head_dim / 2), C-contiguous; YaRN's scaled by its attention factor, as transformers scales
    them."""
    angles = np.outer(np.arange(n_positions, dtype=np.float32), rope_inv_freq(config))
    wide = angles.astype(np.float64)
    cos, sin = np.cos(wide).astype(np.float32), np.sin(wide).astype(np.float32)
    scaling = config.rope_scaling or {}
    if scaling.get("rope_type") == "yarn":
        factor = yarn_attention_factor(scaling)
        cos, sin = cos * factor, sin * factor
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def rope_table_stack(config: ModelConfig, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of every RoPE table of the model (`ModelConfig.rope_configs`), stacked:
    float32 (tables, n_positions, head_dim / 2)."""
    tables = [rope_tables(c, n_positions) for c in config.rope_configs]
    return np.stack([c for c, _ in tables]), np.stack([s for _, s in tables])
