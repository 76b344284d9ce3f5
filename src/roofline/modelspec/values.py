"""Reading one value out of a config dict: a whole number, a list of layer numbers, or a UserError
that names the key and says what is allowed."""

from __future__ import annotations

import math
from typing import Any

from roofline.errors import UserError

MAX_DIM = 10**7  # sanity ceilings: a config beyond these is a typo, not a model
MAX_LAYERS = 10**4


def shown(v: Any) -> str:
    """repr() for an error message, safe for any JSON value (a 5,000-digit int cannot be repr'd)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**30:
        digits = int(abs(v).bit_length() * math.log10(2)) + 1
        return f"a {'-' if v < 0 else ''}{digits:,}-digit number"
    try:
        text = repr(v)
    except ValueError:  # a list or object holding such an int
        return f"a {type(v).__name__} holding a number thousands of digits long"
    return text if len(text) <= 80 else text[:77] + "..."


def whole(
    cfg: dict, key: str, *, default: Any = ..., minimum: int = 1, maximum: int = MAX_DIM
) -> Any:
    """A whole number from the config, or the default when the key is missing or null."""
    v = cfg.get(key)
    if v is None:
        if default is ...:
            raise UserError(
                f"config is missing {key!r}; is this a decoder-only transformer's config.json?"
            )
        return default
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
    ):
        raise UserError(f"config has {key}={shown(v)}; it must be a whole number")
    if v != int(v) or not minimum <= v <= maximum:
        raise UserError(
            f"config has {key}={shown(v)}; expected a whole number from {minimum} to {maximum}"
        )
    return int(v)


def positive_float(cfg: dict, key: str) -> float:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e16:
        raise UserError(f"config has {key}={shown(v)}; it must be a positive number of parameters")
    return float(v)


def layer_list(cfg: dict, key: str) -> list[int]:
    """A list of layer indices (ones outside the model are ignored, as transformers does); missing
    or null is the empty list."""
    v = cfg.get(key) or []
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in v):
        raise UserError(f"config has {key}={shown(v)}; it must be a list of layer numbers")
    return v
