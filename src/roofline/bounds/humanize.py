"""Numbers as people read them, in decimal units (1 GB = 1e9 B), for tables and assumption lines."""

from __future__ import annotations

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _scaled(value: float, unit: str, digits: int) -> str:
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:,.{digits}f} {prefix}{unit}"
    return f"{value:,.{digits}f} {unit}"


def fmt_bytes(n: float, digits: int = 2) -> str:
    """4.97e9 -> '4.97 GB'; 26.5e6 -> '26.55 MB'."""
    return _scaled(n, "B", digits)


def fmt_gb(n: float) -> str:
    """Always in GB with two decimals, the unit of the breakdown table: '1.91 GB'."""
    return f"{n / 1e9:,.2f} GB"


def fmt_bandwidth(bytes_per_s: float) -> str:
    return _scaled(bytes_per_s, "B/s", 2)


def fmt_flops(flops_per_s: float) -> str:
    return _scaled(flops_per_s, "FLOP/s", 2)


def fmt_params(n: float) -> str:
    """955514880 -> '955.5 M'; 3.58e9 -> '3.58 B'; 1e12 -> '1.00 T'."""
    if n >= 1e12:
        return f"{n / 1e12:.2f} T"
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    if n >= 1e6:
        return f"{n / 1e6:.1f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} k"
    return f"{n:.0f}"


def fmt_seconds(s: float) -> str:
    """A duration in the unit its size calls for: 1e-5 -> '10.0 µs'; 0.000622 -> '0.622 ms'; 0.083
    -> '83.0 ms'; 2.587 -> '2.59 s'; 184.124 -> '3.1 min'; 7200 -> '2.0 h'."""
    if s < 1e-4:
        return f"{s * 1e6:.1f} µs"
    if s < 0.01:
        return f"{s * 1e3:.3f} ms"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:,.1f} h"


def fmt_rate(tok_per_s: float) -> str:
    """Tokens per second: whole numbers from 10 up ('1,609'), two decimals below ('3.34')."""
    if tok_per_s >= 10:
        return f"{tok_per_s:,.0f}"
    return f"{tok_per_s:.2f}"


def fmt_dollars(x: float) -> str:
    return f"${x:,.2f}"
