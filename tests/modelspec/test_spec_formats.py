"""Bits per weight of each storage format, from its block layout."""

from __future__ import annotations

import pytest

from roofline.errors import UserError
from roofline.modelspec.formats import fp8_block_format, group_int_format, parse_format


@pytest.mark.parametrize(
    "name, bits",
    [
        ("bf16", 16),
        ("fp16", 16),
        ("fp32", 32),
        ("fp8", 8),
        ("mxfp4", 4 + 8 / 32),  # E2M1 + one E8M0 scale per 32 = 4.25
        ("nvfp4", 4 + 8 / 16),  # E2M1 + one FP8 scale per 16 = 4.5
        ("int4", 4 + 16 / 128),  # group-128 with an fp16 scale = 4.125
        ("q8_0", 34 * 8 / 32),
        ("q4_0", 18 * 8 / 32),
        ("q4_1", 20 * 8 / 32),  # GGUF blocks of 32
    ],
)
def test_bits_per_weight(name: str, bits: float) -> None:
    assert parse_format(name).bits_per_weight == bits


def test_the_brief_figures() -> None:
    assert [
        parse_format(n).bits_per_weight for n in ("mxfp4", "nvfp4", "int4", "q8_0", "q4_0", "q4_1")
    ] == [4.25, 4.5, 4.125, 8.5, 4.5, 5.0]


def test_aliases_and_labels() -> None:
    assert parse_format("BFloat16").name == "bf16" and parse_format("float8_e4m3fn").name == "fp8"
    assert parse_format("Q4_1").name == "q4_1" and parse_format("int4-g64").bits_per_weight == 4.25
    assert (
        parse_format("mxfp4").label() == "mxfp4 (4.25 bit)"
        and parse_format("bf16").label() == "bf16"
    )
    assert fp8_block_format([128, 128]).label() == "fp8"  # 8.002 bits reads as fp8


def test_scaled_formats() -> None:
    assert fp8_block_format([128, 128]).bits_per_weight == 8 + 32 / 16384
    assert fp8_block_format(None).bits_per_weight == 8
    assert group_int_format(4, 32).bits_per_weight == 4.5
    assert group_int_format(8, -1).bits_per_weight == 8
    with pytest.raises(UserError):
        group_int_format(5, 128)


@pytest.mark.parametrize("bad", ["fp7", "", "int4_g0", "mx"])
def test_unknown_formats(bad: str) -> None:
    with pytest.raises(UserError, match="unknown"):
        parse_format(bad)
