"""Which layers attend over a sliding window, and how long it is.

A sliding-window layer never caches more than `window` tokens, so its KV bytes stop growing at
that context. Configs say so in several dialects:

- `layer_types` (gpt-oss, Gemma 3, newer Qwen): one of "sliding_attention" / "full_attention" per layer;
- Gemma 2: every even layer slides (no list in older configs);
- Gemma-style `sliding_window_pattern: p`: every p-th layer is global, the others slide;
- Qwen2/3: `use_sliding_window` (default false) with `max_window_layers` full layers first;
- Mistral 7B v0.1: `sliding_window` alone means every layer slides.
"""

from __future__ import annotations

from typing import Any

from roofline.errors import UserError

_SLIDING_TYPES = {"sliding_attention", "sliding", "chunked_attention", "local_attention", "local"}
_FULL_TYPES = {"full_attention", "full", "global", "global_attention", "attention"}
_QWEN = {"qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}


def _window_length(cfg: dict[str, Any]) -> int | None:
    w = cfg.get("sliding_window")
    if w is None or w is False:
        return None
    if isinstance(w, bool) or not isinstance(w, (int, float)) or w != int(w) or w < 0:
        raise UserError(f"config has sliding_window={w!r}; it must be a whole number of tokens (or null)")
    return int(w) or None  # 0 means no window


def layer_windows(cfg: dict[str, Any], num_layers: int, model_type: str) -> tuple[int | None, ...]:
    """Per layer: the sliding-window length in tokens, or None for a full-attention layer."""
    window = _window_length(cfg)
    full: tuple[int | None, ...] = (None,) * num_layers

    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) < num_layers:
            raise UserError(
                f"config's layer_types must list one type per layer ({num_layers}); fix the config or remove the key"
            )
        out: list[int | None] = []
        for t in layer_types[:num_layers]:
            kind = str(t).lower() if isinstance(t, str) else None
            if kind in _SLIDING_TYPES:
                if window is None:
                    raise UserError("config's layer_types names sliding-window layers but sliding_window is not set")
                out.append(window)
            elif kind in _FULL_TYPES:
                out.append(None)
            else:
                raise UserError(
                    f"unknown layer type {t!r} in layer_types; roofline knows sliding_attention and full_attention"
                )
        return tuple(out)

    if window is None:
        return full
    if cfg.get("use_sliding_window") is False or (model_type in _QWEN and not cfg.get("use_sliding_window")):
        return full
    if model_type in _QWEN:  # the first max_window_layers layers keep full attention
        first = cfg.get("max_window_layers", num_layers)
        first = first if isinstance(first, int) and not isinstance(first, bool) else num_layers
        return tuple(None if i < first else window for i in range(num_layers))
    pattern = cfg.get("sliding_window_pattern")
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6  # Gemma 3: five local layers, then one global
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise UserError(f"config has sliding_window_pattern={pattern!r}; it must be a positive whole number")
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(num_layers))
    if model_type == "gemma2":  # even layers slide, odd layers are global
        return tuple(window if i % 2 == 0 else None for i in range(num_layers))
    return (window,) * num_layers
