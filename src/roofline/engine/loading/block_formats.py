"""The weight formats the kernels compute on as stored: one registry, each entry with its traits.

A row in a block format is a run of blocks of `block` weights in `block_bytes` bytes (GGUF's
layouts). Dequantizing is exact in float32, so a kernel that widens a block in registers and keeps
the float32 summation order gives the float32 path's bits (`block_simd`):

    Q8_0  w = d q               d fp16 (11 significant bits), |q| <= 128: 18 bits, exact
    Q4_0  w = d (q - 8)         exact;   Q5_0  w = d (q - 16)   exact
    Q4_1  w = d q + m           d q exact (15 bits), + m one rounding, as fma(d, q, m)
    Q5_1  w = d q + m           the same with 5-bit q
    Q4_K  w = (d sc) q - dmin mn  d sc (17 bits) q (4): 21 bits exact, dmin mn exact, one rounding
    Q5_K  the same with 5-bit q (22 bits)
    Q6_K  w = (d sc) q          sc int8 (7 bits), |q| <= 32: <= 23 bits, exact
    MXFP4 w = k[q] 2^(e - 128)  k: E2M1 doubled (0, 1, 2, 3, 4, 6, 8, 12, negated for q >= 8),
                                e: the E8M0 byte (ggml's e8m0 "half": 2^(e - 127) / 2), exact
    F16, BF16                   widening is exact

`code` is the number the kernels switch on, per matrix row.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.modelspec.gguf_header import ggml_types


@dataclass(frozen=True)
class BlockFormat:
    name: str  # the GGUF type name
    code: int  # the kernels' format number
    block: int  # weights per block
    block_bytes: int  # bytes per block

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of n weights (n a multiple of the block)."""
        return n // self.block * self.block_bytes


# The formats the kernels widen, in the order of their codes (code = position); each one's block
# and bytes are GGML's, from the one table of them (data/ggml_types.toml).
KERNEL_FORMATS = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "MXFP4",
)
_GGML = {t.name: t for t in ggml_types().values()}
BLOCK_FORMATS: dict[str, BlockFormat] = {
    name: BlockFormat(name, code, _GGML[name].block_elements, _GGML[name].block_bytes)
    for code, name in enumerate(KERNEL_FORMATS)
}
BY_CODE: dict[int, BlockFormat] = {f.code: f for f in BLOCK_FORMATS.values()}
