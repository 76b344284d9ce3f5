"""RoPE scaling as an HF-style dict (what config.json's `rope_scaling` holds), recovered from GGUF
files.

GGUF keeps linear / YaRN scaling as metadata. Llama 3.1+ ("llama3" scaling) is instead baked by
llama.cpp's converter into a tensor `rope_freqs` of per-frequency divisors f_j: the rotation uses
inv_freq_j / f_j, with inv_freq_j = theta^(-2j/head_dim). HF's llama3 rule gives, with wavelength
w_j = 2*pi / inv_freq_j, L = original_max_position_embeddings, lo = low_freq_factor, hi =
high_freq_factor:
    f_j = 1                                   if w_j < L / hi        (high frequencies untouched)
    f_j = factor                              if w_j > L / lo        (low frequencies stretched)
    f_j = 1 / ((1 - s) / factor + s)          otherwise, s = (L / w_j - lo) / (hi - lo)
We fit (factor, lo, hi, L) among the values Llama 3.x ships and return the HF dict when the tensor
is reproduced; the divisors themselves are always kept under "freq_factors", so a runner can use
them exactly.
"""

from __future__ import annotations

import math

import numpy as np

from roofline.engine.loading.config import ModelConfig

_LLAMA3_CANDIDATES = [
    (lo, hi, ctx)
    for lo in (1.0, 2.0)
    for hi in (4.0, 8.0)
    for ctx in (8192, 4096, 2048, 16384, 32768, 131072)
]


def llama3_freq_factors(
    head_dim: int, theta: float, factor: float, low: float, high: float, ctx: int
) -> np.ndarray:
    """The divisors f_j of HF's llama3 rule (module doc), float64, length head_dim / 2."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    smooth = (ctx / wavelen - low) / (high - low)
    mid = 1.0 / ((1.0 - smooth) / factor + smooth)
    return np.where(wavelen < ctx / high, 1.0, np.where(wavelen > ctx / low, factor, mid))


def fit_llama3(freq_factors: np.ndarray, config: ModelConfig) -> dict:
    """HF llama3 rope_scaling dict for a GGUF rope_freqs tensor, with the tensor under
    "freq_factors". The largest divisor is `factor`; it is tried rounded to 2 decimals first
    (float32 storage turns 8 into 7.9999995), then as stored."""
    factors = np.asarray(freq_factors, dtype=np.float64)
    stored = float(factors.max())
    scaling: dict = {"rope_type": "llama3", "factor": stored, "freq_factors": factors.tolist()}
    for factor in (round(stored, 2), stored):
        for low, high, ctx in _LLAMA3_CANDIDATES:
            expect = llama3_freq_factors(config.head_dim, config.rope_theta, factor, low, high, ctx)
            if expect.shape == factors.shape and np.allclose(expect, factors, rtol=1e-5, atol=0):
                scaling.update(
                    factor=factor,
                    low_freq_factor=low,
                    high_freq_factor=high,
                    original_max_position_embeddings=ctx,
                )
                return scaling
    return scaling


def rope_scaling_from_gguf(
    meta: dict, config: ModelConfig, freq_factors: np.ndarray | None, yarn_truncate: bool = True
) -> dict | None:
    """The HF-style rope_scaling dict a GGUF describes, or None for plain RoPE. YaRN: its beta
    keys where the file has them (else transformers' defaults apply), and `truncate` from the
    family (`Family.yarn_truncate`): no GGUF key holds it."""
    if freq_factors is not None:
        return fit_llama3(freq_factors, config)
    arch = config.arch
    kind = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor", meta.get(f"{arch}.rope.scale_linear"))
    if kind == "none" or factor is None or float(factor) == 1.0:
        return None
    scaling = {"rope_type": str(kind or "linear"), "factor": float(factor)}
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if original:
        scaling["original_max_position_embeddings"] = int(original)
    if scaling["rope_type"] == "yarn":
        for beta in ("beta_fast", "beta_slow"):
            value = meta.get(f"{arch}.rope.scaling.yarn_{beta}")
            if value is not None:
                scaling[beta] = float(value)
        scaling["truncate"] = yarn_truncate
    return scaling
