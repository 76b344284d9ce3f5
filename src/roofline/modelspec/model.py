"""ModelSpec: the shape of a decoder-only transformer, as much as the decode arithmetic needs.

Built by `roofline.modelspec.parse.spec_from_config` from a Hugging Face `config.json` (and by
`roofline.modelspec.files.spec_from_file` from a GGUF or safetensors checkpoint, whose tensors then
give the components' parameters and formats: `stored`); every count downstream (components, KV
bytes, FLOPs) is a pure function of this record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from roofline.modelspec.formats import WeightFormat

# The components a decoded token reads, in display order. `--weights key=format` uses these keys.
COMPONENT_KEYS = (
    "weights",  # a shape given only by its parameter counts (the guide's illustrative models)
    "attention",
    "mlp",
    "experts",
    "shared_experts",
    "router",
    "lm_head",
    "embeddings",
    "norms",
)


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    top_k: int
    expert_intermediate: int  # width of one routed expert's MLP
    moe_layers: tuple[int, ...]  # indices of the layers whose MLP is the routed-expert block
    shared_intermediate: int = 0  # total width of the always-on shared expert(s); 0 when none
    shared_gate: bool = False  # Qwen2-MoE scales its shared expert by a sigmoid gate (hidden x 1)
    expert_bias: bool = False  # gpt-oss experts carry biases
    router_bias: bool = False  # gpt-oss router bias; DeepSeek-V3 score-correction bias


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the cache holds one latent per
    layer."""

    q_lora_rank: int | None  # None: q is a plain hidden -> heads x (nope + rope) projection
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def latent_dim(self) -> int:
        """Values cached per token per layer: the compressed KV latent plus the shared rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ExplicitParams:
    """A shape known only by its parameter counts (total stored, active per token)."""

    total: float
    active: float


@dataclass(frozen=True)
class StoredComponent:
    """A component as a model file stores it (`spec.files`): its parameters counted from the
    shapes of its tensors, stored and read per decoded token; its bytes are in the spec's
    default_formats."""

    key: str  # one of COMPONENT_KEYS
    params_stored: float
    params_read: float


@dataclass(frozen=True)
class ModelSpec:
    name: str
    architecture: str  # the config's model_type
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (layers without routed experts)
    vocab_size: int
    tie_word_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU-style gate+up+down (3 matrices) vs up+down (2)
    attention_bias: str = ""  # "" none, "qkv" (Qwen2), "qkvo" (Llama attention_bias, gpt-oss)
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2  # hidden-sized norms per layer (Gemma 2/3 have 4)
    attention_sinks: bool = False  # gpt-oss: one learned logit per head per layer
    layer_windows: tuple[
        int | None, ...
    ] = ()  # per layer: window or chunk length in tokens, None = full
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    explicit: ExplicitParams | None = None
    dtype: str = "bf16"  # checkpoint dtype of unquantized tensors (and the default KV format)
    default_formats: Mapping[str, WeightFormat] | None = field(default=None, compare=False)
    quant_note: str = ""  # how default_formats were derived (or why they could not be)
    mtp_layers: int = 0  # multi-token-prediction layers shipped with the checkpoint (not in decode)
    max_position_embeddings: int | None = (
        None  # the longest context the model was built for, when known
    )
    notes: tuple[str, ...] = ()
    stored: tuple[StoredComponent, ...] = ()  # from a model file: replaces the arithmetic

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and len(self.moe.moe_layers) > 0

    def window(self, layer: int) -> int | None:
        return self.layer_windows[layer] if layer < len(self.layer_windows) else None
