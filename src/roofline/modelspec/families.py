"""The family registry: per `model_type`, what its config leaves unsaid.

Two kinds of knowledge, both per family and both here:

- traits of the modeling code that no config key states (Qwen2's q/k/v biases, Gemma's four norms
  per layer, gpt-oss's attention sinks, which layers slide, how MoE layers are laid out);
- the values a config may leave out, which transformers fills from its configuration class
  (Gemma 3: head_dim 256, vocab_size 262,208; DeepSeek-V2: kv_lora_rank 512, q_lora_rank 1536).
  Those live as data in `roofline/data/family_defaults.json`, with the transformers version they
  were read from, and `with_defaults` applies them exactly as transformers does: a key the config
  leaves out takes the default; a key it sets (even to null) keeps the config's value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any

# Which layers slide, per family (see windows.py for what each rule means).
WINDOW_RULES = ("all", "after_max_window", "qwen2_moe", "alternate", "pattern", "chunked")


@dataclass(frozen=True)
class Family:
    model_type: str
    attention_bias: str = ""  # "" none, "qkv" (Qwen2), "qkvo" (gpt-oss, Llama with attention_bias)
    qk_norm: bool = False  # per-head RMSNorm weights on q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2  # hidden-sized norms per layer (Gemma 2/3 have 4)
    gated: bool = True  # SwiGLU-style gate+up+down (3 matrices) vs up+down (2)
    mlp_bias: bool = False
    sinks: bool = False  # gpt-oss: one learned logit per head per layer
    expert_bias: bool = False  # gpt-oss experts carry biases
    router_bias: bool = False  # gpt-oss router bias; DeepSeek-V3 score-correction bias
    mla: bool = False  # multi-head latent attention: kv_lora_rank is required, never GQA
    window_rule: str = "all"
    # "llama4": shared expert of intermediate_size, dense layers intermediate_size_mlp
    moe_layout: str = "default"
    engine_arch: str = ""  # the embedded engine's decoder block ("" = the engine cannot run it)
    hf_classes: tuple[str, ...] = ()  # config.json "architectures" the engine loads as this family
    gguf_permutes_qk: bool = False  # llama.cpp's converter permutes q/k rows (its NORM rope type)
    # the engine's block traits no config key states (Gemma 3): RMSNorm weights stored as w for a
    # norm that multiplies by 1 + w (llama.cpp's converter stores 1 + w), the embedding rows times
    # sqrt(hidden_size), and sliding windows attended as such (else the context is capped at the
    # narrowest window)
    norm_plus_one: bool = False
    embed_scaled: bool = False
    engine_windows: bool = False
    # transformers' RoPE bases (global layers, sliding layers) where the config names neither
    # (Gemma3TextConfig.default_theta); None: 10000 and no base of the sliding layers' own
    rope_thetas: tuple[float, float] | None = None
    # the engine's mixture-of-experts traits no config key states (gpt-oss): the experts' gate
    # activation ("" the config's hidden_act; "swiglu_oai": gpt-oss's clamped SwiGLU), how the
    # router weighs the picked experts ("softmax_topk": softmax over all logits, then the top k;
    # "topk_softmax": the top k logits, then a softmax over those), and whether YaRN's correction
    # range is rounded outward (transformers' default; GptOssConfig's rope_parameters say
    # truncate false, a key no GGUF carries)
    expert_activation: str = ""
    routing: str = "softmax_topk"
    yarn_truncate: bool = True
    # the `general.architecture` names llama.cpp writes in a GGUF file of this family (several
    # where it renamed one; none where the family has no architecture of its own: Mixtral is
    # "llama" with experts, DeepSeek-V3 "deepseek2" with a router bias, see gguf_config)
    gguf_archs: tuple[str, ...] = ()
    # transformers' values for keys left out
    defaults: Mapping[str, Any] = field(default_factory=dict)
    defaults_source: str = ""  # where `defaults` were read: file, class and transformers version


# model_type -> traits. Families without a transformers configuration class (remote code) get no
# defaults: a key their config leaves out is refused rather than guessed.
_TRAITS: dict[str, dict[str, Any]] = {
    "llama": {
        "gguf_archs": ("llama",),
        "engine_arch": "llama",
        "hf_classes": ("LlamaForCausalLM",),
        "gguf_permutes_qk": True,
    },
    "mistral": {
        "gguf_archs": ("mistral",),
        "engine_arch": "llama",
        "hf_classes": ("MistralForCausalLM",),
        "gguf_permutes_qk": True,
    },
    # Mistral's block with a mixture of experts in every layer (ModelConfig.moe); GGUF: llama's
    "mixtral": {
        "engine_arch": "llama",
        "hf_classes": ("MixtralForCausalLM",),
        "gguf_permutes_qk": True,
    },
    "granite": {"gguf_archs": ("granite",)},
    "smollm3": {"gguf_archs": ("smollm3",)},
    "phi3": {"gguf_archs": ("phi3",)},
    "olmo": {"gguf_archs": ("olmo",)},
    "olmo2": {"gguf_archs": ("olmo2",)},
    "cohere": {"gguf_archs": ("command-r", "cohere")},
    "internlm2": {"gguf_archs": ("internlm2",)},
    "yi": {},
    "qwen2": {
        "gguf_archs": ("qwen2",),
        "attention_bias": "qkv",
        "window_rule": "after_max_window",
        "engine_arch": "qwen2",
        "hf_classes": ("Qwen2ForCausalLM",),
    },
    "qwen2_moe": {"gguf_archs": ("qwen2moe",), "attention_bias": "qkv", "window_rule": "qwen2_moe"},
    "qwen3": {
        "gguf_archs": ("qwen3",),
        "qk_norm": True,
        "window_rule": "after_max_window",
        "engine_arch": "qwen3",
        "hf_classes": ("Qwen3ForCausalLM",),
    },
    "qwen3_moe": {
        "gguf_archs": ("qwen3moe",),
        "qk_norm": True,
        "engine_arch": "qwen3moe",
        "hf_classes": ("Qwen3MoeForCausalLM",),
    },
    "gemma": {"gguf_archs": ("gemma",)},
    "gemma2": {"gguf_archs": ("gemma2",), "norms_per_layer": 4, "window_rule": "alternate"},
    "gemma3_text": {
        "gguf_archs": ("gemma3",),
        "norms_per_layer": 4,
        "qk_norm": True,
        "window_rule": "pattern",
        "engine_arch": "gemma3",
        "hf_classes": ("Gemma3ForCausalLM",),
        "norm_plus_one": True,
        "embed_scaled": True,
        "engine_windows": True,
        "rope_thetas": (1_000_000.0, 10_000.0),
    },
    "starcoder2": {
        "gguf_archs": ("starcoder2",),
        "gated": False,
        "attention_bias": "qkvo",
        "mlp_bias": True,
    },
    "gpt_oss": {
        "gguf_archs": ("gpt-oss",),
        "sinks": True,
        "expert_bias": True,
        "router_bias": True,
        "attention_bias": "qkvo",
        "window_rule": "alternate",
        "engine_arch": "gpt-oss",
        "hf_classes": ("GptOssForCausalLM",),
        "engine_windows": True,
        "expert_activation": "swiglu_oai",
        "routing": "topk_softmax",
        "yarn_truncate": False,
    },
    "deepseek_v2": {"gguf_archs": ("deepseek2",), "mla": True},
    "deepseek_v3": {"mla": True, "router_bias": True},
    "kimi_k2": {"mla": True, "router_bias": True},
    # Llama 4: q/k get a weightless L2 norm (no parameters), so no qk_norm here.
    "llama4_text": {"gguf_archs": ("llama4",), "window_rule": "chunked", "moe_layout": "llama4"},
    "roofline_shape": {},  # a shape given by parameter counts (data/models/guide-*.json)
}

# Multimodal wrappers: the language model's own type when text_config does not name it.
TEXT_OF = {
    "gemma3": "gemma3_text",
    "mistral3": "mistral",
    "llava": "llama",
    "llava_next": "llama",
    "qwen2_5_vl": "qwen2",
    "qwen2_vl": "qwen2",
    "paligemma": "gemma",
    "llama4": "llama4_text",
}


@lru_cache(maxsize=1)
def _defaults_data() -> dict[str, Any]:
    path = resources.files("roofline") / "data" / "family_defaults.json"
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def _families() -> dict[str, Family]:
    data = _defaults_data()
    version = data["transformers_version"]
    out = {}
    for mt, traits in _TRAITS.items():
        entry = data["families"].get(mt, {})
        source = f"{entry['source']}, transformers {version}" if entry else ""
        out[mt] = Family(
            model_type=mt,
            defaults=dict(entry.get("defaults", {})),
            defaults_source=source,
            **traits,
        )
    return out


def known_types() -> list[str]:
    return sorted(_families())


def get_family(model_type: str) -> Family | None:
    return _families().get(model_type)


@cache
def model_type_of_gguf_arch() -> dict[str, str]:
    """GGUF `general.architecture` -> the family's model_type, from each family's `gguf_archs`."""
    out: dict[str, str] = {}
    for family in _families().values():
        for arch in family.gguf_archs:
            if arch in out:  # two families claiming one name: the registry is wrong, not the file
                raise ValueError(f"GGUF architecture {arch!r} is in {out[arch]} and {family}")
            out[arch] = family.model_type
    return out


def engine_classes() -> dict[str, Family]:
    """config.json architecture class -> family, for the families the embedded engine runs."""
    return {c: f for f in _families().values() if f.engine_arch for c in f.hf_classes}


def engine_archs() -> tuple[str, ...]:
    """The decoder blocks the embedded engine runs (also their GGUF `general.architecture`)."""
    return tuple(dict.fromkeys(f.engine_arch for f in _families().values() if f.engine_arch))


def with_defaults(cfg: Mapping[str, Any], family: Family) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The config with the family's defaults filled in for the keys it leaves out, and which those
    were."""
    merged = dict(cfg)
    filled = []
    for key, value in family.defaults.items():
        if key not in merged:
            merged[key] = value
            filled.append(key)
    return merged, tuple(filled)


def defaults_note(family: Family, filled: tuple[str, ...], shown: tuple[str, ...]) -> str | None:
    """A line for the assumptions: which of the keys that matter took transformers' defaults."""
    named = [k for k in filled if k in shown]
    if not named:
        return None
    values = ", ".join(f"{k}={family.defaults[k]}" for k in named)
    return f"config leaves {values} to the {family.model_type} defaults ({family.defaults_source})"
