"""e^x for x <= 0 in a numba kernel, branch-free so that the loops over it vectorise: softmax
weights (`attention`: the units and `merge_attention`) and SiLU (`silu_mul`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from roofline.engine.kernels.matrices import FASTMATH


@intrinsic
def _f32_from_i32_bits(typingctx, bits):
    """Reinterpret int32 bits as float32 (used to build 2^n for exp)."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(fastmath=FASTMATH, error_model="numpy", inline="always")
def exp_nonpos(x):
    """e^x for x <= 0, within ~3 ulp (relative 4e-7), branch-free so that loops over it vectorise
    (calls to libm's expf do not): e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln2 / 2, e^r by
    its degree-7 Taylor-like polynomial (Cephes' coefficients), 2^n built from its exponent bits.
    Inputs below -87 give ~1e-38 instead of 0."""
    x = max(x, np.float32(-87.0))
    # floor(0.5 - x / ln2) >= 0 by truncation
    k = np.int32(np.float32(0.5) - x * np.float32(1.44269504))
    n = -np.float32(k)  # round(x / ln2)
    # x - n ln2, ln2 split in two
    r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    return p * _f32_from_i32_bits(np.int32((np.int32(127) - k) << np.int32(23)))
