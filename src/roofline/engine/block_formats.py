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
    F16, BF16                   widening is exact

`code` is the number the kernels switch on, per matrix row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockFormat:
    name: str  # the GGUF type name
    code: int  # the kernels' format number
    block: int  # weights per block
    block_bytes: int  # bytes per block

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of n weights (n a multiple of the block)."""
        return n // self.block * self.block_bytes


BLOCK_FORMATS: dict[str, BlockFormat] = {
    f.name: f
    for f in (
        BlockFormat("F32", 0, 1, 4),
        BlockFormat("F16", 1, 1, 2),
        BlockFormat("BF16", 2, 1, 2),
        BlockFormat("Q8_0", 3, 32, 34),
        BlockFormat("Q4_0", 4, 32, 18),
        BlockFormat("Q4_1", 5, 32, 20),
        BlockFormat("Q5_0", 6, 32, 22),
        BlockFormat("Q5_1", 7, 32, 24),
        BlockFormat("Q4_K", 8, 256, 144),
        BlockFormat("Q5_K", 9, 256, 176),
        BlockFormat("Q6_K", 10, 256, 210),
    )
}
BY_CODE: dict[int, BlockFormat] = {f.code: f for f in BLOCK_FORMATS.values()}
