"""config.json (the file, then the dict) -> ModelSpec, or a UserError that says which key is wrong.

The config is first unwrapped (multimodal wrappers nest the language model under `text_config`),
then filled with its family's transformers defaults for the keys it leaves out (`families.py`: a
Gemma 3 config without head_dim gets 256, not hidden / heads), then read: GQA with an explicit
`head_dim`, MoE and MLA (`moe.py`), sliding windows and chunks (`windows.py`) and
`quantization_config` (`quant.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.families import (
    TEXT_OF,
    Family,
    defaults_note,
    get_family,
    known_types,
    with_defaults,
)
from roofline.modelspec.formats import parse_format
from roofline.modelspec.model import ExplicitParams, ModelSpec
from roofline.modelspec.moe import dense_width, mla_spec, moe_spec
from roofline.modelspec.quant import default_formats
from roofline.modelspec.values import MAX_LAYERS, positive_float, shown, whole
from roofline.modelspec.windows import layer_windows

# Defaulted keys not worth a line in the assumptions: they change no byte of a decoded token.
_QUIET = {
    "max_position_embeddings",
    "attention_bias",
    "mlp_bias",
    "use_sliding_window",
    "max_window_layers",
    "qkv_bias",
    "use_qk_norm",
    "no_rope_layer_interval",
    "decoder_sparse_step",
    "sliding_window",
    "attention_chunk_size",
}


def _model_type(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UserError(f'config\'s {where} is {shown(value)}; it must be a name such as "llama"')
    return value


def language_model_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language-model part of the config (a multimodal wrapper's text_config, with the
    wrapper's dtype, quantization and tie keys), and its model_type."""
    top_type = _model_type(cfg.get("model_type"), "model_type")
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = {
            k: v
            for k, v in cfg.items()
            if k in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings")
        }
        merged.update(text)
        mt = _model_type(text.get("model_type"), "text_config.model_type") or TEXT_OF.get(
            top_type, top_type
        )
        if mt == "llama4":  # some Llama 4 text_configs repeat the wrapper's type
            mt = "llama4_text"
        return merged, mt
    if text is not None:
        raise UserError("config's text_config must be an object; fix the config")
    return cfg, TEXT_OF.get(top_type, top_type)


def _dtype(cfg: dict[str, Any]) -> str:
    """The checkpoint's dtype name; bf16 when the config does not say or says something
    unreadable."""
    d = cfg.get("torch_dtype", cfg.get("dtype"))
    if not isinstance(d, str):
        return "bfloat16"
    try:
        parse_format(d)
    except UserError:
        return "bfloat16"
    return d


def _shape_spec(cfg: dict, name: str) -> ModelSpec:
    """The guide's illustrative shapes: (params, active, layers, kv_heads, head_dim) and nothing
    else."""
    total, active = positive_float(cfg, "params"), positive_float(cfg, "active_params")
    if active > total:
        raise UserError(f"{name}: active_params ({active:g}) exceeds params ({total:g})")
    layers = whole(cfg, "num_hidden_layers", maximum=MAX_LAYERS)
    kv_heads, head_dim = whole(cfg, "num_key_value_heads"), whole(cfg, "head_dim")
    dtype = _dtype(cfg)
    formats, note = default_formats(cfg.get("quantization_config"), dtype)
    return ModelSpec(
        name=name,
        architecture="roofline_shape",
        num_layers=layers,
        hidden_size=0,
        num_heads=kv_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=0,
        vocab_size=0,
        layer_windows=(None,) * layers,
        explicit=ExplicitParams(total, active),
        dtype=dtype,
        default_formats=formats,
        quant_note=note,
    )


def _family(mt: str, name: str) -> Family:
    family = get_family(mt)
    if family is None:
        raise UserError(
            f"{name}: unknown architecture {shown(mt)}; roofline knows {', '.join(known_types())}"
        )
    return family


def spec_from_config(cfg: Any, name: str = "model") -> ModelSpec:
    """Parse a Hugging Face config.json dict. Raises UserError for anything it cannot make sense
    of."""
    if not isinstance(cfg, dict):
        raise UserError(f"{name}: config.json must hold a JSON object")
    given, mt = language_model_config(cfg)
    if not mt:
        raise UserError(f"{name}: config has no model_type; is this a Hugging Face config.json?")
    family = _family(mt, name)
    if mt == "roofline_shape":
        return _shape_spec(given, name)
    cfg, filled = with_defaults(given, family)

    num_layers = whole(cfg, "num_hidden_layers", maximum=MAX_LAYERS)
    hidden = whole(cfg, "hidden_size")
    heads = whole(cfg, "num_attention_heads", maximum=10**5)
    kv_heads = whole(cfg, "num_key_value_heads", default=heads, maximum=heads)
    head_dim = whole(cfg, "head_dim", default=None)
    # transformers' __post_init__: hidden / heads when the family has no default
    if head_dim is None:
        if hidden % heads:
            raise UserError(
                f"{name}: hidden_size {hidden} is not a multiple of {heads} heads "
                "and head_dim is not given"
            )
        head_dim = hidden // heads
    vocab = whole(cfg, "vocab_size", maximum=10**8)
    mla = mla_spec(cfg, given, family, name)
    moe = moe_spec(cfg, family, num_layers)
    inter = dense_width(cfg, family, num_layers - (len(moe.moe_layers) if moe else 0))

    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise UserError(
            f"{name}: config has tie_word_embeddings={shown(tied)}; it must be true or false"
        )
    attention_bias = family.attention_bias
    if cfg.get("attention_bias") is True:
        attention_bias = attention_bias or "qkvo"
    dtype = _dtype(cfg)
    formats, note = default_formats(cfg.get("quantization_config"), dtype)
    windows = layer_windows(cfg, num_layers, family.window_rule)
    notes = []
    mtp = whole(cfg, "num_nextn_predict_layers", default=0, minimum=0, maximum=MAX_LAYERS)
    if mtp:
        notes.append(
            f"{mtp} multi-token-prediction layer(s) ship with the checkpoint; "
            "plain decode skips them"
        )
    chunked = [w for w in windows if w is not None] if family.window_rule == "chunked" else []
    if chunked:
        notes.append(
            f"{len(chunked)} of {num_layers} layers attend in chunks of {max(chunked):,} tokens: "
            "at a context C each reads min(C, chunk) tokens of KV, the most a chunk holds"
        )
    defaulted = defaults_note(family, filled, tuple(k for k in filled if k not in _QUIET))
    if defaulted:
        notes.append(defaulted)
    max_positions = whole(cfg, "max_position_embeddings", default=None, maximum=10**12)
    return ModelSpec(
        name=name,
        architecture=mt,
        num_layers=num_layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        gated_mlp=family.gated,
        attention_bias=attention_bias,
        mlp_bias=family.mlp_bias or cfg.get("mlp_bias") is True,
        qk_norm=family.qk_norm,
        norms_per_layer=family.norms_per_layer,
        attention_sinks=family.sinks,
        layer_windows=windows,
        moe=moe,
        mla=mla,
        dtype=dtype,
        default_formats=formats,
        quant_note=note,
        mtp_layers=mtp,
        max_position_embeddings=max_positions,
        notes=tuple(notes),
    )


def read_config_file(path: Path) -> dict[str, Any]:
    """A config.json's object, or a UserError that says what is wrong with the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(
            f"{path} is not a UTF-8 text file; point at a config.json, a .gguf file "
            "or a safetensors checkpoint"
        ) from None
    except OSError as e:
        raise UserError(f"cannot read {path} ({e.strerror}); check the path") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(
            f"{path} is not valid JSON (line {e.lineno}: {e.msg}); fix the file"
        ) from None
    except RecursionError:
        raise UserError(f"{path} nests too deeply to be a config.json") from None
    except ValueError:  # an integer past Python's int-from-string limit (4,300 digits by default)
        raise UserError(
            f"{path} holds a number thousands of digits long, which no config.json needs; "
            "fix the file"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object (a Hugging Face config.json)")
    return data
