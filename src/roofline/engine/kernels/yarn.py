"""YaRN RoPE scaling (gpt-oss), as transformers computes it (`_compute_yarn_parameters`), so that
the runner's cos/sin tables follow transformers' float32 steps (`rope`: theta^x rounded to
float32 once from float64).

With d = head_dim, base theta, scaling factor s, L the original context
(original_max_position_embeddings), beta_fast and beta_slow (defaults 32 and 1):

    pos_freq_i = theta^(2i / d)                         (float32, i < d / 2)
    extrapolation_i = 1 / pos_freq_i,   interpolation_i = 1 / (s pos_freq_i)
    dim(r) = d ln(L / (2 pi r)) / (2 ln theta)          (float64: the dimension that turns r times)
    low, high = dim(beta_fast), dim(beta_slow)          (floored and ceiled when `truncate`,
                                                         transformers' default; gpt-oss: not),
                clamped to [0, d - 1]
    ramp_i = clamp((i - low) / (high - low), 0, 1)      (high += 0.001 when equal), float32
    inv_freq_i = interpolation_i ramp_i + extrapolation_i (1 - ramp_i)
    cos, sin = cos(p inv_freq) a, sin(p inv_freq) a     a = the attention factor:
                                                         0.1 ln(s) + 1 (s > 1; else 1) unless given
"""

from __future__ import annotations

import math

import numpy as np


def yarn_attention_factor(scaling: dict) -> float:
    """What YaRN multiplies cos and sin by (module doc); mscale / mscale_all_dim as transformers'
    yarn_get_mscale ratio when both are given."""
    given = scaling.get("attention_factor")
    if given is not None:
        return float(given)
    factor = float(scaling["factor"])

    def mscale(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if m and m_all:
        return float(mscale(float(m)) / mscale(float(m_all)))
    return mscale()


def yarn_inv_freq(pos_freqs: np.ndarray, theta: float, scaling: dict) -> np.ndarray:
    """YaRN's per-pair frequencies (head_dim / 2,) float32 (module doc), from pos_freqs, float32
    theta^(2i / d)."""
    d = 2 * pos_freqs.shape[0]
    factor = float(scaling["factor"])
    original = float(scaling["original_max_position_embeddings"])
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def dim_of(rotations: float) -> float:
        return (d * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # transformers: "prevent singularity"
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = np.clip((np.arange(d // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
