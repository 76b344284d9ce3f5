"""A Hugging Face config.json -> ModelConfig, for the architectures the engine runs."""

from __future__ import annotations

import json
from pathlib import Path

from roofline.engine.loading.config import ModelConfig
from roofline.errors import UserError
from roofline.modelspec.families import Family, engine_classes
from roofline.modelspec.windows import layer_windows


def read_json(path: Path) -> dict:
    """A JSON object from a file; UserError when it is unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(
            f"{path} is not valid JSON ({exc}); the checkpoint directory is damaged"
        ) from None
    if not isinstance(value, dict):
        raise UserError(
            f"{path} holds {type(value).__name__}, not a JSON object; "
            "the checkpoint directory is damaged"
        )
    return value


def _rope(cfg: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from either transformers 4's keys or transformers 5's
    `rope_parameters`."""
    params = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)
    scaling = (
        cfg.get("rope_scaling") or {k: v for k, v in params.items() if k != "rope_theta"} or None
    )
    if scaling is not None:
        scaling = dict(scaling)
        kind = scaling.pop("type", None)
        scaling.setdefault("rope_type", kind or "default")
        if scaling["rope_type"] == "default":
            scaling = None
    return theta, scaling


def _context_tokens(cfg: dict, family: Family) -> int:
    """Usable context. The engine attends over the whole context, which equals a sliding-window
    model's attention only up to the window: cap the context at the narrowest layer window (which
    layers slide is the family's window rule, modelspec/windows.py) so outputs stay exact."""
    context = int(cfg.get("max_position_embeddings") or 2048)
    layers = int(cfg.get("num_hidden_layers") or 1)
    windows = [w for w in layer_windows(cfg, layers, family.window_rule) if w]
    return min([context, *windows])


def config_from_hf(cfg: dict, name: str, path: Path) -> ModelConfig:
    """ModelConfig from a parsed config.json; UserError naming the architecture when it is not
    supported."""
    classes = engine_classes()
    declared = cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    arch_name = next((a for a in declared if a in classes), None)
    if arch_name is None:
        raise UserError(
            f"{path}: architecture {', '.join(map(str, declared))} is not supported; "
            f"supported: {', '.join(classes)}"
        )
    family = classes[arch_name]
    if cfg.get("hidden_act", "silu") != "silu" or cfg.get("mlp_bias"):
        raise UserError(
            f"{path}: only SiLU-gated MLPs without bias are supported "
            f"(hidden_act={cfg.get('hidden_act')!r})"
        )
    try:
        n_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        theta, scaling = _rope(cfg)
        return ModelConfig(
            arch=family.engine_arch,
            name=name,
            n_layers=int(cfg["num_hidden_layers"]),
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=int(cfg.get("head_dim") or hidden // n_heads),
            ffn=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            max_seq_len=_context_tokens(cfg, family),
            rope_theta=theta,
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_scaling=scaling,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attn_bias=bool(family.attention_bias) or bool(cfg.get("attention_bias", False)),
            qk_norm=family.qk_norm,
        )
    except KeyError as exc:
        raise UserError(
            f"{path}: config.json lacks {exc.args[0]}; the checkpoint directory is incomplete"
        ) from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise UserError(f"{path}: config.json has inconsistent values ({exc})") from None
