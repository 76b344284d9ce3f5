"""gpt-oss's experts as OpenAI ships them in safetensors: MXFP4 blocks, rewritten as llama.cpp's
MXFP4 rows (`block_formats`), one matrix per expert, which `--dtype stored` computes on as they
are and the other dtypes dequantize (exactly: `gguf.quants`).

A layer holds, for gate_up (rows interleaved: gate = rows[::2], up = rows[1::2]) and down:

    {proj}_blocks  (E, rows, n / 32, 16) uint8   two E2M1 codes a byte, element 2j in the low
                                                 nibble of byte j, 2j + 1 in the high one
    {proj}_scales  (E, rows, n / 32) uint8       E8M0: the block's weights are code value
                                                 times 2^(s - 127)

(transformers' convert_moe_packed_tensors reads them so). llama.cpp's block_mxfp4 keeps the same
scale byte first (its doubled code values times 2^(s - 128) are the same weights) and the same
codes, element j in the low nibble of byte j and j + 16 in the high one: only the nibbles move.
"""

from __future__ import annotations

import re

import numpy as np

MXFP4_PART = re.compile(
    r"(model\.layers\.\d+\.mlp\.experts\.)(gate_up_proj|down_proj)_(blocks|scales)"
)


def ggml_rows(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """OpenAI's MXFP4 (module doc) -> llama.cpp's rows: (..., rows, n / 32 * 17) uint8."""
    codes = np.empty((*blocks.shape[:-1], 32), np.uint8)
    codes[..., 0::2] = blocks & 15
    codes[..., 1::2] = blocks >> 4
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    rows = np.concatenate([scales[..., None], qs], axis=-1)
    return rows.reshape(*rows.shape[:-2], -1)


def openai_blocks(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`ggml_rows`'s inverse: llama.cpp's MXFP4 rows (..., rows, n / 32 * 17) -> OpenAI's
    (blocks, scales)."""
    blocks = rows.reshape(*rows.shape[:-1], -1, 17)
    codes = np.concatenate([blocks[..., 1:] & 15, blocks[..., 1:] >> 4], axis=-1)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), np.ascontiguousarray(blocks[..., 0])


def split_mxfp4_experts(
    prefix: str, projection: str, blocks: np.ndarray, scales: np.ndarray
) -> dict[str, np.ndarray]:
    """Each expert's llama.cpp MXFP4 rows under the engine's names
    (`{prefix}{e}.{gate,up,down}_proj.weight`)."""
    rows = ggml_rows(blocks, scales)
    parts = (
        {"down_proj": rows}
        if projection == "down_proj"
        else {"gate_proj": rows[:, 0::2], "up_proj": rows[:, 1::2]}
    )
    return {
        f"{prefix}{e}.{proj}.weight": np.ascontiguousarray(part[e])
        for proj, part in parts.items()
        for e in range(part.shape[0])
    }
