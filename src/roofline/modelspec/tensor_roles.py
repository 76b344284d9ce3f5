"""A tensor as a model file stores it, and which component of the model it belongs to.

`role_of` sorts the readers' `StoredTensor`s by name into `model.COMPONENT_KEYS`, for GGUF
(`token_embd`, `output`, `blk.N.attn_q`, `blk.N.ffn_gate_exps`) and Hugging Face names
(`model.embed_tokens`, `lm_head`, `model.layers.N.self_attn.q_proj`). Norms, biases and sinks go
to "norms"; quantization side tensors (scales, zeros, blocks) follow their module. A tensor that
does not decode text (vision, audio, MTP layers) has no role (None); an unknown name goes to
"weights" ("other tensors").
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredTensor:
    name: str
    type_name: str  # as the file says it: 'Q4_1', 'F32' (GGUF); 'BF16', 'F8_E4M3' (safetensors)
    shape: tuple[int, ...]  # as the file stores it (GGUF: ne0 first; safetensors: row-major)
    n_elements: int
    n_bytes: int
    row_count: int  # rows of the innermost dimension: an embedding lookup reads n_bytes / row_count

    @property
    def row_bytes(self) -> int:
        return self.n_bytes // max(self.row_count, 1)


@dataclass(frozen=True)
class TensorRole:
    key: str  # one of model.COMPONENT_KEYS
    expert: bool = False  # a routed expert's tensor: top-k of E of it is read per token
    layer: int | None = None


# First name parts of towers that decoding text never reads (GGUF mmproj files use v., a., mm.).
_NOT_TEXT_HEADS = frozenset(
    {
        "vision_tower",
        "vision_model",
        "visual",
        "vision",
        "audio_tower",
        "audio",
        "mm",
        "v",
        "a",
        "multi_modal_projector",
        "mm_projector",
        "mtp",
        "image_newline",
        "patch_embed",
        "embed_vision",
        "embed_audio",
    }
)
_LAYER = re.compile(r"(?:^|\.)(?:blk|layers|h|block|blocks)\.(\d+)\.")
_SHARED = ("shexp", "shared_expert", "shared_experts", "shared_mlp")
_ROUTER = ("ffn_gate_inp", "exp_probs_b", "router", "e_score_correction_bias")
_GATE = re.compile(r"(mlp|block_sparse_moe|feed_forward)\.gate\.")  # the router, not gate_proj


def _is_bias(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "bias" or (last.endswith("_bias") and "correction" not in last)


def _is_norm(parts: list[str]) -> bool:
    return any("norm" in p or p in ("sinks", "attn_sinks", "ln_1", "ln_2", "ln_f") for p in parts)


# one expert's projection as llama.cpp wrote Mixtral before it packed experts (early 2024):
# blk.0.ffn_gate.3.weight; the engine's loader reads the same names (`engine/loading/gguf_names`)
ONE_EXPERT_GGUF = re.compile(r"blk\.(\d+)\.ffn_(gate|up|down)\.(\d+)\.weight")


def _gguf_role(name: str, parts: list[str]) -> str:
    head = parts[0]
    if head == "token_embd":
        return "embeddings"
    if head == "output":
        return "lm_head"
    if head == "rope_freqs" or _is_norm(parts):
        return "norms"
    if head != "blk" or len(parts) < 3:
        return "weights"
    module = parts[2]
    if module == "ffn_gate_inp_shexp" or any(s in module for s in _SHARED):
        return "shared_experts"
    if any(module.startswith(r) for r in _ROUTER):
        return "router"
    # packed (ffn_gate_exps, ffn_gate_up_exps) or one expert's own (ffn_gate.3: early Mixtral)
    if module.endswith("_exps") or ONE_EXPERT_GGUF.fullmatch(name):
        return "experts"
    if module.startswith("attn_"):
        return "attention"
    if module.startswith("ffn_"):
        return "mlp"
    return "weights"


def _hf_role(name: str, parts: list[str]) -> str:
    if "embed_tokens" in parts or "wte" in parts or "tok_embeddings" in parts:
        return "embeddings"
    if parts[0] == "lm_head" or (parts[0] == "output" and len(parts) == 2):
        return "lm_head"
    if _is_norm(parts):
        return "norms"
    if any(s in parts for s in _SHARED) or "shared_expert_gate" in parts:
        return "shared_experts"
    if "experts" in parts:
        return "experts"
    if any(r in parts for r in _ROUTER) or _GATE.search(name):
        return "router"
    if any(p in parts for p in ("self_attn", "attention", "attn", "self_attention")):
        return "attention"
    if any(p in parts for p in ("mlp", "feed_forward", "block_sparse_moe", "ffn")):
        return "mlp"
    return "weights"


def role_of(name: str, *, gguf: bool, num_layers: int) -> TensorRole | None:
    """The component a tensor belongs to, or None when decoding text does not read it."""
    plain = name
    for prefix in ("model.language_model.", "language_model.model.", "language_model.", "model."):
        if plain.startswith(prefix):
            plain = plain[len(prefix) :]
            break
    parts = plain.split(".")
    if parts[0] in _NOT_TEXT_HEADS or any(w in plain for w in ("vision", "visual", "audio")):
        return None
    m = _LAYER.search("." + plain)
    layer = int(m.group(1)) if m else None
    if layer is not None and layer >= num_layers:
        return None  # a multi-token-prediction layer: plain decode skips it
    key = _gguf_role(plain, parts) if gguf else _hf_role(plain, parts)
    expert = key == "experts"
    if _is_bias(plain) and key in ("attention", "mlp", "experts", "shared_experts", "weights"):
        key = "norms"  # biases are small tensors, as `components` counts them
    return TensorRole(key, expert=expert, layer=layer)
