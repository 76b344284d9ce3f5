"""Routed experts and latent attention from a config (already filled with its family's defaults).

- default (Mixtral, Qwen-MoE, DeepSeek, gpt-oss): experts `moe_intermediate_size` (else
  `intermediate_size`) wide; MoE layers from `first_k_dense_replace` on, every `moe_layer_freq`-th
  and `decoder_sparse_step`-th, minus `mlp_only_layers`; shared experts `n_shared_experts` x width
  or `shared_expert_intermediate_size`;
- llama4: experts and the one shared expert `intermediate_size` wide; MoE layers `moe_layers` or
  every `interleave_moe_layer_step`-th from step - 1 (Scout: all 48, Maverick: 1, 3, ..., 47);
  the rest dense MLPs of `intermediate_size_mlp`.
"""

from __future__ import annotations

from roofline.errors import UserError
from roofline.modelspec.families import Family
from roofline.modelspec.model import MLASpec, MoESpec
from roofline.modelspec.values import MAX_LAYERS, layer_list, whole


def _routed_layers(cfg: dict, family: Family, num_layers: int) -> tuple[int, ...]:
    if family.moe_layout == "llama4":
        if cfg.get("moe_layers") is not None:
            named = set(layer_list(cfg, "moe_layers"))
            return tuple(i for i in range(num_layers) if i in named)
        step = whole(cfg, "interleave_moe_layer_step", default=1, maximum=MAX_LAYERS)
        return tuple(range(step - 1, num_layers, step))
    first_dense = whole(cfg, "first_k_dense_replace", default=0, minimum=0, maximum=MAX_LAYERS)
    freq = whole(cfg, "moe_layer_freq", default=1, maximum=MAX_LAYERS)
    step = whole(cfg, "decoder_sparse_step", default=1, maximum=MAX_LAYERS)
    mlp_only = set(layer_list(cfg, "mlp_only_layers"))
    return tuple(
        i
        for i in range(num_layers)
        if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
    )


def moe_spec(cfg: dict, family: Family, num_layers: int) -> MoESpec | None:
    n_experts = None
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if cfg.get(key) is not None:
            n_experts = whole(cfg, key, minimum=0, maximum=10**6)
            break
    if not n_experts:
        return None
    top_k_key = next(
        (
            k
            for k in ("num_experts_per_tok", "experts_per_token", "moe_topk")
            if cfg.get(k) is not None
        ),
        None,
    )
    if top_k_key is None:
        raise UserError(
            "config names routed experts but not how many each token uses (num_experts_per_tok)"
        )
    top_k = whole(cfg, top_k_key, maximum=n_experts)
    if family.moe_layout == "llama4":
        inter = whole(cfg, "intermediate_size")
        shared = inter  # one shared expert, as wide as a routed one
    else:
        inter = whole(cfg, "moe_intermediate_size", default=None) or whole(cfg, "intermediate_size")
        shared = 0
        if cfg.get("n_shared_experts"):
            shared = whole(cfg, "n_shared_experts", maximum=10**4) * inter
        if cfg.get("shared_expert_intermediate_size"):
            shared = whole(cfg, "shared_expert_intermediate_size")
    return MoESpec(
        num_experts=n_experts,
        top_k=top_k,
        expert_intermediate=inter,
        moe_layers=_routed_layers(cfg, family, num_layers),
        shared_intermediate=shared,
        shared_gate=family.model_type == "qwen2_moe" and shared > 0,
        expert_bias=family.expert_bias,
        router_bias=family.router_bias,
    )


def dense_width(cfg: dict, family: Family, dense_layers: int) -> int:
    """Width of the dense MLP of the layers without routed experts (0 when every layer routes)."""
    key = "intermediate_size_mlp" if family.moe_layout == "llama4" else "intermediate_size"
    return whole(cfg, key, default=0 if dense_layers == 0 else ..., minimum=0)


def mla_spec(cfg: dict, given: dict, family: Family, name: str) -> MLASpec | None:
    """Latent attention, or None for ordinary GQA. `given` is the config as written (before
    defaults): a family built on MLA whose config sets kv_lora_rank to null is refused, never read
    as GQA."""
    if family.mla:
        if "kv_lora_rank" in given and given["kv_lora_rank"] is None:
            default = family.defaults.get("kv_lora_rank")
            hint = (
                f" (transformers' default is {default}: drop the key to use it)" if default else ""
            )
            raise UserError(
                f"{name}: config has kv_lora_rank=null, "
                f"but {family.model_type} caches a latent of that rank; "
                f"set it{hint}"
            )
        if cfg.get("kv_lora_rank") is None:
            raise UserError(
                f"{name}: config is missing 'kv_lora_rank', "
                f"which {family.model_type} (latent attention) needs; "
                "add it from the model's published config"
            )
    elif cfg.get("kv_lora_rank") is None:
        return None
    q_rank = cfg.get("q_lora_rank")
    return MLASpec(
        q_lora_rank=whole(cfg, "q_lora_rank") if q_rank is not None else None,
        kv_lora_rank=whole(cfg, "kv_lora_rank"),
        qk_nope_head_dim=whole(cfg, "qk_nope_head_dim", minimum=0),
        qk_rope_head_dim=whole(cfg, "qk_rope_head_dim", minimum=0),
        v_head_dim=whole(cfg, "v_head_dim"),
    )
