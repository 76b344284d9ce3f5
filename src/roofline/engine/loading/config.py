"""The shape of a Llama-family decoder, as read from a checkpoint (GGUF metadata or HF
config.json), with what a block departs from Llama's by (Gemma 3: the norms after attention and
MLP, GELU, the embedding's scale, the query scale, sliding windows with their own RoPE base, the
final logits' soft cap; gpt-oss: the attention sinks, the output projection's bias, the experts'
biases, clamped SwiGLU and top-k-then-softmax routing) as data the kernels take."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from roofline.modelspec.families import engine_archs

# Decoder blocks the engine runs, from the family registry (Family.engine_arch): "llama" covers
# Llama 2/3, Mistral and SmolLM (same block, RoPE on rotate-half pairs); "qwen2" adds q/k/v biases;
# "qwen3" adds a per-head RMSNorm on q and k; "gemma3" is Qwen3's block with the Gemma 3 fields
# of ModelConfig below; "qwen3moe" is Qwen3's block with a mixture of experts for its MLP (Mixtral
# is "llama" with one: ModelConfig.moe); "gpt-oss" is Qwen2's block with the gpt-oss fields below.
SUPPORTED_ARCHS = engine_archs()


class Activation(StrEnum):
    """The MLP's gate activation: act(g) * u."""

    SILU = "silu"
    GELU_TANH = "gelu_pytorch_tanh"  # GELU, tanh approximation (Gemma)
    # gpt-oss's experts (llama.cpp's SWIGLU_OAI): g = min(g, limit), u = clamp(u, -limit, limit),
    # act = (u + 1) g sigmoid(alpha g)
    SWIGLU_OAI = "swiglu_oai"


class Routing(StrEnum):
    """How a router's logits l weigh the experts a row picks (the k of highest l either way)."""

    SOFTMAX_TOPK = "softmax_topk"  # p = softmax(l) over all experts, the picked p (renormalised)
    TOPK_SOFTMAX = "topk_softmax"  # softmax over the k picked logits alone (gpt-oss)


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab_size: int
    max_seq_len: int
    rope_theta: float
    rms_eps: float
    rope_scaling: dict | None = None
    tie_embeddings: bool = False
    attn_bias: bool = False
    qk_norm: bool = False
    activation: Activation = Activation.SILU
    # RMSNorm of the attention output and of the MLP output before each residual add (Gemma 2/3)
    post_norms: bool = False
    embed_scale: float = 1.0  # the embedding rows' multiplier (Gemma: float32 sqrt(hidden))
    query_scale: float | None = None  # scores' scale; None: 1 / sqrt(head_dim)
    # per layer, the sliding window in tokens (0: the whole context); empty: no layer slides
    layer_windows: tuple[int, ...] = ()
    # RoPE base of the sliding layers (no scaling there); None: every layer's is rope_theta
    local_rope_theta: float | None = None
    final_softcap: float | None = None  # logits = cap tanh(logits / cap)
    # mixture of experts (Qwen3-MoE, Mixtral): every layer's MLP is n_experts SwiGLU experts of
    # `ffn` rows each, of which a router picks n_experts_used per token; 0: one dense MLP
    n_experts: int = 0
    n_experts_used: int = 0
    norm_topk: bool = True  # the picked experts' router probabilities renormalised to sum 1
    routing: Routing = Routing.SOFTMAX_TOPK
    # gpt-oss: a bias on the attention output, one learned logit a head that joins each softmax's
    # denominator (a sink: exp(s - max) added to the sum, no value), biases on the router and on
    # every expert's projections, and its SwiGLU's clamp and gain (Activation.SWIGLU_OAI)
    o_bias: bool = False
    sinks: bool = False
    expert_bias: bool = False
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702

    def __post_init__(self) -> None:
        # A checkpoint whose numbers contradict each other is corrupt, not a model to guess at.
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"arch {self.arch!r} is not one of {SUPPORTED_ARCHS}")
        for field in (
            "n_layers",
            "hidden",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "ffn",
            "vocab_size",
            "max_seq_len",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.n_experts and not 0 < self.n_experts_used <= self.n_experts:
            raise ValueError(f"{self.n_experts_used} experts used of {self.n_experts}")
        if self.expert_bias and not self.n_experts:
            raise ValueError("expert biases without experts")
        if self.n_experts and self.post_norms:
            raise ValueError("experts with post norms are not supported")
        if self.layer_windows and len(self.layer_windows) != self.n_layers:
            raise ValueError(f"{len(self.layer_windows)} layer windows for {self.n_layers} layers")

    @property
    def moe(self) -> bool:
        """Every layer's MLP is a mixture of experts."""
        return self.n_experts > 0

    @property
    def attention_scale(self) -> float:
        """What the scores q.k are multiplied by."""
        if self.query_scale is None:
            return 1.0 / math.sqrt(self.head_dim)
        return self.query_scale

    @property
    def windows(self) -> tuple[int, ...]:
        """Each layer's sliding window (0: the whole context)."""
        return self.layer_windows or (0,) * self.n_layers

    @property
    def rope_configs(self) -> tuple[ModelConfig, ...]:
        """The configs the RoPE tables are computed from, in table order (`layer_rope_tables`):
        this one, then the sliding layers' (their base, no scaling)."""
        if self.local_rope_theta is None:
            return (self,)
        return (self, replace(self, rope_theta=self.local_rope_theta, rope_scaling=None))

    @property
    def layer_rope_tables(self) -> tuple[int, ...]:
        """Each layer's RoPE table: 0 the global one (rope_theta, rope_scaling), 1 the sliding
        layers' (local_rope_theta) when the model has one."""
        local = self.local_rope_theta is not None
        return tuple(int(local and w > 0) for w in self.windows)

    @property
    def q_dim(self) -> int:
        """Rows of q_proj: n_heads * head_dim (equals hidden except in e.g. Qwen3)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Rows of k_proj and v_proj: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim
