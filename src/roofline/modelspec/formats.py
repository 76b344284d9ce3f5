"""Weight and KV-cache storage formats, as bits per stored value *including* their scales.

A block format's cost per weight is bits_per_element + scale_bits / block_size:

    MXFP4   E2M1 + one E8M0 scale per 32            4 + 8/32   = 4.25
    NVFP4   E2M1 + one FP8 scale per 16             4 + 8/16   = 4.5
    int4    4 bit + one fp16 scale per 128          4 + 16/128 = 4.125
    Q8_0    34 bytes / 32 (fp16 scale + 32 int8)              = 8.5
    Q4_0    18 bytes / 32 (fp16 scale + 32 nibbles)           = 4.5
    Q4_1    20 bytes / 32 (fp16 scale, min + 32 nibbles)      = 5.0
    fp8     8 bit; a 128x128 block scale adds 32/16384 bit (counted when the checkpoint states it)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roofline.errors import UserError


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits_per_weight: float
    note: str = ""

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8.0

    def label(self) -> str:
        """'bf16', 'mxfp4 (4.25 bit)': the bits are shown when they are not a whole byte count."""
        bits = self.bits_per_weight
        # fp8 + block scales reads as fp8
        if any(abs(bits - whole) < 0.01 for whole in (8.0, 16.0, 32.0)):
            return self.name
        return f"{self.name} ({bits:g} bit)"


FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", 32.0),
        WeightFormat("bf16", 16.0),
        WeightFormat("fp16", 16.0),
        WeightFormat("fp8", 8.0, "block scales negligible"),
        WeightFormat("int8", 8.0, "per-channel scales negligible"),
        WeightFormat("mxfp4", 4.0 + 8.0 / 32, "E2M1 + E8M0 scale per 32"),
        WeightFormat("nvfp4", 4.0 + 8.0 / 16, "E2M1 + FP8 scale per 16"),
        WeightFormat("int4", 4.0 + 16.0 / 128, "group-128, fp16 scale"),
        WeightFormat("q8_0", 34 * 8 / 32, "GGUF: 34 bytes per 32"),
        WeightFormat("q4_0", 18 * 8 / 32, "GGUF: 18 bytes per 32"),
        WeightFormat("q4_1", 20 * 8 / 32, "GGUF: 20 bytes per 32"),
    )
}

_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "fp8_e4m3": "fp8",
    "float8_e4m3fn": "fp8",
    "e5m2": "fp8",
    "fp8_e5m2": "fp8",
    "f8_e4m3": "fp8",
    "f8_e5m2": "fp8",
    "f8_e4m3fnuz": "fp8",
    "f8_e5m2fnuz": "fp8",  # safetensors
    "mx4": "mxfp4",
    "mxfp4_e2m1": "mxfp4",
    "fp4": "nvfp4",
    "int4_g128": "int4",
    "w4a16": "int4",
    "q8": "q8_0",
    "q4": "q4_0",
}


def parse_format(text: str, *, what: str = "weight format") -> WeightFormat:
    """'bf16', 'BFloat16', 'mxfp4', 'q4_1' → WeightFormat; anything else is a UserError."""
    key = str(text).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key in FORMATS:
        return FORMATS[key]
    m = re.fullmatch(r"int4_g(\d{1,6})", key)
    if m and int(m.group(1)) > 0:
        group = int(m.group(1))
        return WeightFormat(f"int4-g{group}", 4.0 + 16.0 / group, f"group-{group}, fp16 scale")
    raise UserError(f"unknown {what} {text!r}; use one of: {', '.join(FORMATS)}")


def fp8_block_format(block_size: list | tuple | None) -> WeightFormat:
    """fp8 with one fp32 scale per block (DeepSeek-V3's 128x128): 8 + 32 / (b0 * b1) bits."""
    try:
        b0, b1 = (int(v) for v in block_size)  # type: ignore[union-attr]
    except (TypeError, ValueError, OverflowError):
        return FORMATS["fp8"]
    if not (0 < b0 <= 2**20 and 0 < b1 <= 2**20):  # past that the scale costs nothing measurable
        return FORMATS["fp8"]
    return WeightFormat("fp8", 8.0 + 32.0 / (b0 * b1), f"e4m3 + fp32 scale per {b0}x{b1} block")


def group_int_format(bits: int, group_size: int | None) -> WeightFormat:
    """GPTQ/AWQ-style integer weights: `bits` per weight + one fp16 scale per group (-1/None: per
    channel)."""
    if bits not in (2, 3, 4, 8):
        shown = bits if isinstance(bits, int) and abs(bits) < 10**6 else "an unreadable number of"
        raise UserError(f"unsupported quantized weight width {shown} bit; pass --weights")
    # a group past any row's length is per channel
    if not group_size or not 0 < group_size <= 2**20:
        return WeightFormat(f"int{bits}", float(bits), "per-channel scale")
    return WeightFormat(
        f"int{bits}-g{group_size}", bits + 16.0 / group_size, f"group-{group_size}, fp16 scale"
    )
