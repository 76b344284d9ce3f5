"""config.json (a dict) -> ModelSpec, or a UserError that says which key is wrong.

Handles the dialects of the families in the catalogue: GQA with an explicit `head_dim` (Qwen3,
gpt-oss: never assume hidden / heads when the config says otherwise), MoE under its three names for
the expert count, DeepSeek/Kimi MLA, sliding windows (see `windows.py`), multimodal wrappers that nest
the language model under `text_config`, and `quantization_config` (see `quant.py`).
"""

from __future__ import annotations

from typing import Any

from roofline.errors import UserError
from roofline.spec.formats import parse_format
from roofline.spec.model import ExplicitParams, MLASpec, ModelSpec, MoESpec
from roofline.spec.quant import default_formats
from roofline.spec.windows import layer_windows

# model_type -> traits that the config does not spell out.
_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "llama": {}, "mistral": {}, "mixtral": {}, "granite": {}, "smollm3": {}, "phi3": {},
    "olmo": {}, "olmo2": {}, "cohere": {}, "internlm2": {}, "yi": {},
    "qwen2": {"attention_bias": "qkv"},
    "qwen2_moe": {"attention_bias": "qkv"},
    "qwen3": {"qk_norm": True},
    "qwen3_moe": {"qk_norm": True},
    "gemma": {"tied": True},
    "gemma2": {"tied": True, "norms_per_layer": 4},
    "gemma3_text": {"tied": True, "norms_per_layer": 4, "qk_norm": True},
    "starcoder2": {"gated": False, "attention_bias": "qkvo", "mlp_bias": True},
    "gpt_oss": {"sinks": True, "expert_bias": True, "router_bias": True, "attention_bias": "qkvo"},
    "deepseek_v2": {}, "deepseek_v3": {"router_bias": True}, "kimi_k2": {"router_bias": True},
    "roofline_shape": {},  # a shape given by parameter counts (data/models/guide-*.json)
}
# Multimodal wrappers: the language model's own type when text_config does not name it.
_TEXT_OF = {"gemma3": "gemma3_text", "mistral3": "mistral", "llava": "llama", "llava_next": "llama",
            "qwen2_5_vl": "qwen2", "qwen2_vl": "qwen2", "paligemma": "gemma"}

_MAX_DIM = 10**7  # sanity ceilings: a config beyond these is a typo, not a model
_MAX_LAYERS = 10**4


def _int(cfg: dict, key: str, *, default: Any = ..., minimum: int = 1, maximum: int = _MAX_DIM) -> Any:
    """A whole number from the config, or the default; anything else is the user's to fix."""
    v = cfg.get(key, None)
    if v is None:
        if default is ...:
            raise UserError(f"config is missing {key!r}; is this a decoder-only transformer's config.json?")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise UserError(f"config has {key}={v!r}; it must be a whole number")
    if v != int(v) or not minimum <= v <= maximum:
        raise UserError(f"config has {key}={v!r}; expected a whole number from {minimum} to {maximum}")
    return int(v)


def _positive_float(cfg: dict, key: str) -> float:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e16:
        raise UserError(f"config has {key}={v!r}; it must be a positive number of parameters")
    return float(v)


def _flatten(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language-model part of the config, and its model_type."""
    top_type = cfg.get("model_type")
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in cfg.items() if k in ("quantization_config", "torch_dtype", "dtype",
                                                         "tie_word_embeddings")}
        merged.update(text)
        mt = text.get("model_type") or _TEXT_OF.get(str(top_type), top_type)
        return merged, str(mt) if mt is not None else ""
    if text is not None:
        raise UserError("config's text_config must be an object; fix the config")
    mt = _TEXT_OF.get(str(top_type), top_type) if top_type is not None else ""
    return cfg, str(mt)


def _dtype(cfg: dict[str, Any]) -> str:
    """The checkpoint's dtype name; bf16 when the config does not say or says something unreadable."""
    d = cfg.get("torch_dtype", cfg.get("dtype"))
    if not isinstance(d, str):
        return "bfloat16"
    try:
        parse_format(d)
    except UserError:
        return "bfloat16"
    return d


def _int_list(cfg: dict, key: str) -> list[int]:
    v = cfg.get(key) or []
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in v):
        raise UserError(f"config has {key}={v!r}; it must be a list of layer numbers")
    return v


def _moe(cfg: dict, mt: str, num_layers: int, traits: dict) -> MoESpec | None:
    n_experts = None
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if cfg.get(key) is not None:
            n_experts = _int(cfg, key, minimum=0, maximum=10**6)
            break
    if not n_experts:
        return None
    top_k_key = next((k for k in ("num_experts_per_tok", "experts_per_token", "moe_topk") if k in cfg), None)
    if top_k_key is None:
        raise UserError("config names routed experts but not how many each token uses (num_experts_per_tok)")
    top_k = _int(cfg, top_k_key, maximum=n_experts)
    inter = _int(cfg, "moe_intermediate_size", default=None) or _int(cfg, "intermediate_size")

    # Which layers route: DeepSeek style (first k dense, then every freq-th), Qwen style (every
    # step-th layer except mlp_only_layers). The defaults make both rules a no-op.
    first_dense = _int(cfg, "first_k_dense_replace", default=0, minimum=0, maximum=_MAX_LAYERS)
    freq = _int(cfg, "moe_layer_freq", default=1, maximum=_MAX_LAYERS)
    step = _int(cfg, "decoder_sparse_step", default=1, maximum=_MAX_LAYERS)
    mlp_only = set(_int_list(cfg, "mlp_only_layers"))
    layers = tuple(
        i for i in range(num_layers)
        if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
    )

    shared = 0
    if cfg.get("n_shared_experts"):
        shared = _int(cfg, "n_shared_experts", maximum=10**4) * inter
    if cfg.get("shared_expert_intermediate_size"):
        shared = _int(cfg, "shared_expert_intermediate_size")
    return MoESpec(
        num_experts=n_experts, top_k=top_k, expert_intermediate=inter, moe_layers=layers,
        shared_intermediate=shared, shared_gate=mt == "qwen2_moe" and shared > 0,
        expert_bias=bool(traits.get("expert_bias")), router_bias=bool(traits.get("router_bias")),
    )


def _mla(cfg: dict) -> MLASpec | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    q_rank = cfg.get("q_lora_rank")
    return MLASpec(
        q_lora_rank=_int(cfg, "q_lora_rank") if q_rank is not None else None,
        kv_lora_rank=_int(cfg, "kv_lora_rank"),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", minimum=0),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", minimum=0),
        v_head_dim=_int(cfg, "v_head_dim"),
    )


def _shape_spec(cfg: dict, name: str) -> ModelSpec:
    """The guide's illustrative shapes: (params, active, layers, kv_heads, head_dim) and nothing else."""
    total, active = _positive_float(cfg, "params"), _positive_float(cfg, "active_params")
    if active > total:
        raise UserError(f"{name}: active_params ({active:g}) exceeds params ({total:g})")
    layers = _int(cfg, "num_hidden_layers", maximum=_MAX_LAYERS)
    kv_heads, head_dim = _int(cfg, "num_key_value_heads"), _int(cfg, "head_dim")
    dtype = _dtype(cfg)
    formats, note = default_formats(cfg.get("quantization_config"), dtype)
    return ModelSpec(
        name=name, architecture="roofline_shape", num_layers=layers, hidden_size=0,
        num_heads=kv_heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=0, vocab_size=0,
        layer_windows=(None,) * layers, explicit=ExplicitParams(total, active),
        dtype=dtype, default_formats=formats, quant_note=note,
    )


def spec_from_config(cfg: Any, name: str = "model") -> ModelSpec:
    """Parse a Hugging Face config.json dict. Raises UserError for anything it cannot make sense of."""
    if not isinstance(cfg, dict):
        raise UserError(f"{name}: config.json must hold a JSON object")
    cfg, mt = _flatten(cfg)
    if not mt:
        raise UserError(f"{name}: config has no model_type; is this a Hugging Face config.json?")
    traits = _ARCHITECTURES.get(mt)
    if traits is None:
        raise UserError(
            f"{name}: unknown architecture {mt!r}; roofline knows {', '.join(sorted(_ARCHITECTURES))}"
        )
    if mt == "roofline_shape":
        return _shape_spec(cfg, name)

    num_layers = _int(cfg, "num_hidden_layers", maximum=_MAX_LAYERS)
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads", maximum=10**5)
    kv_heads = _int(cfg, "num_key_value_heads", default=heads, maximum=heads)
    head_dim = _int(cfg, "head_dim", default=None)
    if head_dim is None:
        if hidden % heads:
            raise UserError(f"{name}: hidden_size {hidden} is not a multiple of {heads} heads and head_dim is not given")
        head_dim = hidden // heads
    vocab = _int(cfg, "vocab_size", maximum=10**8)
    mla = _mla(cfg)
    moe = _moe(cfg, mt, num_layers, traits)
    dense_layers = num_layers - (len(moe.moe_layers) if moe else 0)
    inter = _int(cfg, "intermediate_size", default=0 if dense_layers == 0 else ..., minimum=0)

    tied = cfg.get("tie_word_embeddings", bool(traits.get("tied")))
    if not isinstance(tied, bool):
        raise UserError(f"{name}: config has tie_word_embeddings={tied!r}; it must be true or false")
    attention_bias = traits.get("attention_bias", "")
    if cfg.get("attention_bias") is True:
        attention_bias = attention_bias or "qkvo"
    dtype = _dtype(cfg)
    formats, note = default_formats(cfg.get("quantization_config"), dtype)
    notes = []
    mtp = _int(cfg, "num_nextn_predict_layers", default=0, minimum=0, maximum=_MAX_LAYERS)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) ship with the checkpoint; plain decode skips them")
    return ModelSpec(
        name=name, architecture=mt, num_layers=num_layers, hidden_size=hidden, num_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tied, gated_mlp=traits.get("gated", True), attention_bias=attention_bias,
        mlp_bias=bool(traits.get("mlp_bias") or cfg.get("mlp_bias") is True),
        qk_norm=bool(traits.get("qk_norm")), norms_per_layer=traits.get("norms_per_layer", 2),
        attention_sinks=bool(traits.get("sinks")), layer_windows=layer_windows(cfg, num_layers, mt),
        moe=moe, mla=mla, dtype=dtype, default_formats=formats, quant_note=note,
        mtp_layers=mtp, notes=tuple(notes),
    )
