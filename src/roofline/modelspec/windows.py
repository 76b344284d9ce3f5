"""Which layers attend over a bounded span of recent tokens, and how long it is.

A sliding-window layer caches at most `window` tokens, a chunked one (Llama 4) reads at most
`attention_chunk_size` per step: KV reads cap at min(context, span). Which layers, by config
dialect (`families.py` names transformers' rule where the config does not):

- `layer_types` (gpt-oss, Gemma 3, Llama 4, newer Qwen): per layer "sliding_attention" /
  "chunked_attention" / "full_attention"; wins over every rule below;
- "alternate" (Gemma 2, gpt-oss): even layers slide, odd ones are global;
- "pattern" (Gemma 3, `sliding_window_pattern: p`, default 6): every p-th layer is global;
- "after_max_window" (Qwen2/3, `use_sliding_window`): layers from `max_window_layers` on slide;
- "qwen2_moe" (`use_sliding_window`): even layers below `max_window_layers` slide;
- "chunked" (Llama 4): RoPE layers (`no_rope_layers[i]` = 1; default all but every
  `no_rope_layer_interval`-th) attend in chunks;
- "all" (Mistral 7B v0.1, Mixtral, Phi-3, Starcoder2): every layer slides.
`use_sliding_window: false` turns windows off wherever the key exists.
"""

from __future__ import annotations

import math
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.values import shown

_SLIDING_TYPES = {"sliding_attention", "sliding", "local_attention", "local"}
_CHUNKED_TYPES = {"chunked_attention", "chunked"}
_FULL_TYPES = {"full_attention", "full", "global", "global_attention", "attention"}


def _tokens(cfg: dict[str, Any], key: str) -> int | None:
    w = cfg.get(key)
    if w is None or w is False:
        return None
    # (a huge int has no float)
    bad_float = isinstance(w, float) and (not math.isfinite(w) or w != int(w))
    if isinstance(w, bool) or not isinstance(w, (int, float)) or bad_float or w < 0:
        raise UserError(
            f"config has {key}={shown(w)}; it must be a whole number of tokens (or null)"
        )
    return int(w) or None  # 0 means no window


def _whole(cfg: dict[str, Any], key: str, default: int) -> int:
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise UserError(f"config has {key}={shown(v)}; it must be a whole number")
    return v


def _from_layer_types(cfg: dict[str, Any], num_layers: int) -> tuple[int | None, ...]:
    layer_types = cfg["layer_types"]
    if not isinstance(layer_types, list) or len(layer_types) < num_layers:
        raise UserError(
            f"config's layer_types must list one type per layer ({num_layers}); "
            "fix the config or remove the key"
        )
    out: list[int | None] = []
    for t in layer_types[:num_layers]:
        kind = t.lower() if isinstance(t, str) else None
        if kind in _SLIDING_TYPES:
            window = _tokens(cfg, "sliding_window")
            if window is None:
                raise UserError(
                    "config's layer_types names sliding-window layers but sliding_window is not set"
                )
            out.append(window)
        elif kind in _CHUNKED_TYPES:
            chunk = _tokens(cfg, "attention_chunk_size")
            if chunk is None:
                raise UserError(
                    "config's layer_types names chunked-attention layers "
                    "but attention_chunk_size is not set"
                )
            out.append(chunk)
        elif kind in _FULL_TYPES:
            out.append(None)
        else:
            raise UserError(
                f"unknown layer type {shown(t)} in layer_types; "
                "roofline knows sliding_attention, chunked_attention "
                "and full_attention"
            )
    return tuple(out)


def _chunked(cfg: dict[str, Any], num_layers: int) -> tuple[int | None, ...]:
    """Llama 4: RoPE layers attend in chunks, NoPE layers see everything."""
    chunk = _tokens(cfg, "attention_chunk_size")
    if chunk is None:
        return (None,) * num_layers
    rope = cfg.get("no_rope_layers")
    if not rope:  # transformers: an empty or missing list means the default interval
        interval = _whole(cfg, "no_rope_layer_interval", 4)
        if interval < 1:
            raise UserError(f"config has no_rope_layer_interval={interval}; it must be at least 1")
        rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if (
        not isinstance(rope, list)
        or len(rope) < num_layers
        or any(not isinstance(r, (int, bool)) for r in rope)
    ):
        raise UserError(
            f"config's no_rope_layers must list 0 or 1 for each of the {num_layers} layers"
        )
    return tuple(chunk if rope[i] else None for i in range(num_layers))


def layer_windows(
    cfg: dict[str, Any], num_layers: int, rule: str = "all"
) -> tuple[int | None, ...]:
    """Per layer: the most tokens it attends over (sliding window or chunk), or None for a full
    layer."""
    if cfg.get("layer_types") is not None:
        return _from_layer_types(cfg, num_layers)
    if rule == "chunked":
        return _chunked(cfg, num_layers)
    full: tuple[int | None, ...] = (None,) * num_layers
    window = _tokens(cfg, "sliding_window")
    if window is None or cfg.get("use_sliding_window") is False:
        return full
    if rule in ("after_max_window", "qwen2_moe"):
        if not cfg.get("use_sliding_window"):
            return full
        first = _whole(cfg, "max_window_layers", num_layers)
        if rule == "qwen2_moe":
            return tuple(window if (i + 1) % 2 and i < first else None for i in range(num_layers))
        return tuple(None if i < first else window for i in range(num_layers))
    pattern = cfg.get("sliding_window_pattern")
    if pattern is None and rule == "pattern":
        pattern = 6  # transformers' Gemma3TextConfig: five local layers, then one global
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise UserError(
                f"config has sliding_window_pattern={shown(pattern)}; "
                "it must be a positive whole number"
            )
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(num_layers))
    if rule == "alternate":  # even layers slide, odd layers are global
        return tuple(window if i % 2 == 0 else None for i in range(num_layers))
    return (window,) * num_layers
