"""A Hugging Face config.json -> ModelConfig, for the architectures the engine runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from roofline.engine.loading.config import Activation, ModelConfig, Routing
from roofline.errors import UserError
from roofline.modelspec.families import Family, engine_classes, get_family, with_defaults
from roofline.modelspec.parse import language_model_config
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


def _layered_rope(cfg: dict, family: Family, path: Path) -> tuple[float, dict | None, float | None]:
    """(rope_theta, rope_scaling, the sliding layers' RoPE base or None). Gemma 3: transformers 5
    nests both under `rope_parameters` ("full_attention", "sliding_attention"); transformers 4
    writes rope_theta, rope_scaling (global layers only) and rope_local_base_freq."""
    if family.rope_thetas is None:
        return (*_rope(cfg), None)
    global_theta, local_theta = family.rope_thetas
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        full = {"rope_theta": global_theta, **(params.get("full_attention") or {})}
        local = dict(params.get("sliding_attention") or {})
        theta, scaling = _rope({"rope_parameters": full})
        if _rope({"rope_parameters": {"rope_theta": 1.0, **local}})[1] is not None:
            raise UserError(f"{path}: RoPE scaling on sliding layers ({local}) is not supported")
        return theta, scaling, float(local.get("rope_theta", local_theta))
    theta, scaling = _rope(
        {
            "rope_theta": cfg.get("rope_theta") or global_theta,
            "rope_scaling": cfg.get("rope_scaling"),
        }
    )
    return theta, scaling, float(cfg.get("rope_local_base_freq") or local_theta)


def _windows(cfg: dict, family: Family) -> tuple[int, ...]:
    """Each layer's sliding window (0: none), by the family's window rule (modelspec/windows.py)."""
    layers = int(cfg.get("num_hidden_layers") or 1)
    return tuple(w or 0 for w in layer_windows(cfg, layers, family.window_rule))


def _context_tokens(cfg: dict, family: Family) -> int:
    """Usable context. A family whose windows the engine does not attend as such (not
    `engine_windows`) is attended over the whole context, which equals a sliding-window model's
    attention only up to the window: the context is capped at the narrowest layer window so
    outputs stay exact."""
    context = int(cfg.get("max_position_embeddings") or 2048)
    if family.engine_windows:
        return context
    return min([context, *(w for w in _windows(cfg, family) if w)])


def _activation(cfg: dict, family: Family, path: Path) -> Activation:
    """The MLP's gate activation: the family's where its modeling code fixes one (gpt-oss's
    experts), else the config's hidden_act."""
    if family.expert_activation:
        return Activation(family.expert_activation)
    name = cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu"
    if name not in tuple(Activation) or cfg.get("mlp_bias"):
        raise UserError(
            f"{path}: only gated MLPs of {', '.join(Activation)} without bias are supported "
            f"(activation {name!r})"
        )
    return Activation(name)


def _block_fields(cfg: dict, family: Family, hidden: int, path: Path) -> dict:
    """The ModelConfig fields a block departs from Llama's by (config.py), from the config and the
    family's traits."""
    if cfg.get("attn_logit_softcapping") is not None:
        raise UserError(
            f"{path}: soft-capped attention logits (attn_logit_softcapping) are not supported"
        )
    cap = cfg.get("final_logit_softcapping")
    scalar = cfg.get("query_pre_attn_scalar")
    return dict(
        post_norms=family.norms_per_layer == 4,
        # transformers: torch.tensor(hidden_size ** 0.5), float32
        embed_scale=float(np.float32(hidden**0.5)) if family.embed_scaled else 1.0,
        query_scale=None if scalar is None else float(scalar) ** -0.5,
        layer_windows=_windows(cfg, family) if family.engine_windows else (),
        final_softcap=None if cap is None else float(cap),
    )


def _moe_fields(cfg: dict, family: Family, path: Path) -> dict:
    """The mixture-of-experts fields (ModelConfig.n_experts ...), {} for a dense model. Every layer
    must be sparse: Qwen3-MoE's dense layers (decoder_sparse_step > 1, mlp_only_layers) are
    refused. An expert's rows: Qwen3-MoE's moe_intermediate_size, Mixtral's intermediate_size.
    Mixtral always renormalises its top-k weights (a softmax over the top-k logits); Qwen3-MoE
    when norm_topk_prob (default false, as Qwen3MoeConfig's)."""
    # transformers 5 writes num_local_experts (num_experts may be the family's default only)
    n_experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    if n_experts == 0:
        return {}
    step = int(cfg.get("decoder_sparse_step") or 1)
    if step != 1 or cfg.get("mlp_only_layers"):
        raise UserError(
            f"{path}: dense MLP layers among the expert layers (decoder_sparse_step={step}, "
            f"mlp_only_layers={cfg.get('mlp_only_layers')}) are not supported"
        )
    routing = Routing(family.routing)
    return dict(
        n_experts=n_experts,
        n_experts_used=int(cfg["num_experts_per_tok"]),
        # a softmax over the picked logits alone sums to 1 by itself
        norm_topk=family.model_type == "mixtral"
        or routing == Routing.TOPK_SOFTMAX
        or bool(cfg.get("norm_topk_prob", False)),
        routing=routing,
        expert_bias=family.expert_bias,
        ffn=int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"]),
        **_swiglu(cfg, family),
    )


def _swiglu(cfg: dict, family: Family) -> dict:
    """gpt-oss's SwiGLU clamp and gain (the family's defaults fill them when left out)."""
    if family.expert_activation != Activation.SWIGLU_OAI:
        return {}
    return dict(swiglu_limit=float(cfg["swiglu_limit"]), swiglu_alpha=float(cfg["swiglu_alpha"]))


def family_of(cfg: dict, path: Path) -> Family:
    """The family of a parsed config.json, by its architecture class; UserError naming the
    architecture when the engine does not run it."""
    classes = engine_classes()
    declared = cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    arch_name = next((a for a in declared if a in classes), None)
    if arch_name is None and isinstance(cfg.get("text_config"), dict):
        # a multimodal wrapper (Gemma3ForConditionalGeneration): its language model's family
        family = get_family(language_model_config(cfg)[1])
        if family is not None and family.engine_arch:
            return family
    if arch_name is None:
        raise UserError(
            f"{path}: architecture {', '.join(map(str, declared))} is not supported; "
            f"supported: {', '.join(classes)}"
        )
    return classes[arch_name]


def config_from_hf(cfg: dict, name: str, path: Path) -> ModelConfig:
    """ModelConfig from a parsed config.json; UserError naming the architecture when it is not
    supported."""
    family = family_of(cfg, path)
    if isinstance(cfg.get("text_config"), dict):  # a wrapper: the text model alone is run
        cfg = language_model_config(cfg)[0]
    cfg = with_defaults(cfg, family)[0]
    activation = _activation(cfg, family, path)
    try:
        n_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        theta, scaling, local_theta = _layered_rope(cfg, family, path)
        moe = _moe_fields(cfg, family, path)
        return ModelConfig(
            arch=family.engine_arch,
            name=name,
            n_layers=int(cfg["num_hidden_layers"]),
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=int(cfg.get("head_dim") or hidden // n_heads),
            ffn=moe.pop("ffn", None) or int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            max_seq_len=_context_tokens(cfg, family),
            rope_theta=theta,
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_scaling=scaling,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attn_bias=bool(family.attention_bias) or bool(cfg.get("attention_bias", False)),
            # the output projection's bias: gpt-oss's ("qkvo"), and Llama's attention_bias key
            # (LlamaAttention gives o_proj a bias with it); Qwen2's biases are q/k/v's alone
            o_bias=family.attention_bias == "qkvo"
            or (bool(cfg.get("attention_bias", False)) and family.attention_bias != "qkv"),
            sinks=family.sinks,
            qk_norm=family.qk_norm,
            activation=activation,
            local_rope_theta=local_theta,
            **_block_fields(cfg, family, hidden, path),
            **moe,
        )
    except KeyError as exc:
        raise UserError(
            f"{path}: config.json lacks {exc.args[0]}; the checkpoint directory is incomplete"
        ) from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise UserError(f"{path}: config.json has inconsistent values ({exc})") from None
