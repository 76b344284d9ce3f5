"""Cost per million output tokens from an hourly price.

$/Mtok = price_per_hour / (3600 x tok_per_s) x 1e6
"""

from __future__ import annotations

from roofline.errors import UserError


def dollars_per_million_tokens(price_per_hour: float, tok_per_s: float) -> float:
    if not price_per_hour >= 0:
        raise UserError(f"price per hour must be >= 0 (got {price_per_hour!r})")
    if not tok_per_s > 0:
        raise UserError(f"throughput must be positive to price it (got {tok_per_s!r} tok/s)")
    return price_per_hour / (3600.0 * tok_per_s) * 1e6
