"""Parsing of quantities people type (8TB/s, 60s, 450ms) into SI numbers; 1 GB = 1e9 B."""

from __future__ import annotations

import re

from roofline.errors import UserError

_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*"  # an unsigned decimal, as group 1
_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {
    "": 1.0,
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}


def parse_seconds(text: str, *, what: str = "duration") -> float:
    """'450ms' -> 0.45, '60s' -> 60.0, '2m' -> 120.0, '1.5' -> 1.5 (seconds)."""
    m = re.fullmatch(_NUMBER + r"([a-zµ]*)\s*", str(text))
    if not m or m.group(2) not in _TIME:
        raise UserError(
            f"cannot read {what} {text!r}: write a number with a unit, e.g. 450ms, 60s, 2m"
        )
    return float(m.group(1)) * _TIME[m.group(2)]


def parse_bytes_per_s(text: str) -> float:
    """'8TB/s' -> 8e12, '3.35e12' -> 3.35e12, '32.8 GB/s' -> 3.28e10."""
    m = re.fullmatch(_NUMBER + r"([kKMGTP]?)(?:B/s|B)?\s*", str(text))
    if not m:
        raise UserError(f"cannot read bandwidth {text!r}: write e.g. 8TB/s or 3.35e12")
    return float(m.group(1)) * _SI[m.group(2)]


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def parse_bytes(text: str, *, what: str = "size") -> int:
    """'1GiB' -> 1073741824, '256MiB' -> 268435456, '1GB' -> 10**9, '4096' -> 4096 (bytes)."""
    m = re.fullmatch(_NUMBER + r"([kKMGTP]i?)?B?\s*", str(text))
    if not m:
        raise UserError(
            f"cannot read {what} {text!r}: write a number of bytes, e.g. 1GiB, 256MiB or 1e9"
        )
    prefix = m.group(2) or ""
    scale = _BINARY[prefix.upper()[0] + "i"] if prefix.endswith("i") else _SI[prefix]
    return int(float(m.group(1)) * scale)


def parse_int_list(text: str, *, what: str) -> list[int]:
    """'1,8,32' -> [1, 8, 32]; every item a positive whole number up to 10^9 (no empty items: '1,,2'
    and '1,8,' are refused, not read as 1,2 and 1,8)."""
    items = [v.strip() for v in str(text).split(",")]
    if any(not re.fullmatch(r"[0-9]{1,12}", v) for v in items):
        raise UserError(
            f"{what} must be comma-separated whole numbers, e.g. 1,8,32 (got {str(text)[:60]!r})"
        )
    values = [int(v) for v in items]
    if any(not 0 < v <= 10**9 for v in values):
        raise UserError(
            f"{what} must be whole numbers from 1 to 1,000,000,000 (got {str(text)[:60]!r})"
        )
    return values
