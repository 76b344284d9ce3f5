"""The shape of a Llama-family decoder, as read from a checkpoint (GGUF metadata or HF
config.json)."""

from __future__ import annotations

from dataclasses import dataclass

from roofline.modelspec.families import engine_archs

# Decoder blocks the engine runs, from the family registry (Family.engine_arch): "llama" covers
# Llama 2/3, Mistral and SmolLM (same block, RoPE on rotate-half pairs); "qwen2" adds q/k/v biases;
# "qwen3" adds a per-head RMSNorm on q and k.
SUPPORTED_ARCHS = engine_archs()


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

    @property
    def q_dim(self) -> int:
        """Rows of q_proj: n_heads * head_dim (equals hidden except in e.g. Qwen3)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Rows of k_proj and v_proj: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim
