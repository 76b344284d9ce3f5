"""What every loader returns: the config, the weights under Hugging Face names, and the
tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from roofline.engine.loading.block_formats import BLOCK_FORMATS

if TYPE_CHECKING:  # heavy imports stay out of module import time
    from roofline.engine.loading.config import ModelConfig
    from roofline.engine.loading.tokenizer import Tokenizer

# numpy's bfloat16 (ml_dtypes): the tensors' dtype where a file stores BF16
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# the float dtypes a checkpoint's tensors keep, by the name the files give them
FLOAT_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", BFLOAT16: "BF16"}


def shape_only(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 tensor's shape without its values (a quantized tensor loaded without
    dequantizing: only its rows are kept): one zero seen through every index, no memory."""
    return np.broadcast_to(np.zeros((), np.float32), shape)


def is_shape_only(t: np.ndarray) -> bool:
    """Whether t is `shape_only`'s (or a slice of one)."""
    return t.ndim > 0 and not any(t.strides)


@dataclass
class Checkpoint:
    """A loaded model. `tensors` uses HF names and layouts: Linear weights are (out_features,
    in_features), GGUF q/k rows are back in HF order, quantized GGUF tensors are float32 (or, loaded
    without dequantizing, `shape_only`), float ones keep their dtype (numpy arrays; BF16 as
    `BFLOAT16`). `raw` keeps the quantized GGUF tensors as (format, uint8 blocks with one row of
    blocks per output row, rows in HF order) for the stored-format kernels; it is empty for
    float-only checkpoints. Norm weights are the factors the norm multiplies by (a Gemma
    checkpoint's w is loaded as 1 + w, float32)."""

    config: ModelConfig
    tensors: dict[str, np.ndarray]
    tokenizer: Tokenizer
    path: str
    stored_format: dict[str, str]
    raw: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)


def hf_tensor_names(config: ModelConfig) -> list[str]:
    """Every tensor a checkpoint of this config must hold, under its HF name."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_embeddings:
        names.append("lm_head.weight")
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        if config.post_norms:
            names += [
                p + "pre_feedforward_layernorm.weight",
                p + "post_feedforward_layernorm.weight",
            ]
        names += [p + f"self_attn.{x}_proj.weight" for x in "qkvo"]
        if config.moe:  # the router, then each expert's SwiGLU (gpt-oss: each with its bias)
            kinds = ("weight", "bias") if config.expert_bias else ("weight",)
            names += [p + f"mlp.gate.{kind}" for kind in kinds]
            for e in range(config.n_experts):
                names += [
                    p + f"mlp.experts.{e}.{x}_proj.{kind}"
                    for x in ("gate", "up", "down")
                    for kind in kinds
                ]
        else:
            names += [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
        if config.attn_bias:
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
        if config.o_bias:
            names.append(p + "self_attn.o_proj.bias")
        if config.sinks:
            names.append(p + "self_attn.sinks")
        if config.qk_norm:
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return names


def hf_tensor_shape(name: str, config: ModelConfig) -> tuple[int, ...]:
    """The HF shape of one tensor: Linear weights are (out_features, in_features); an expert's are
    a dense MLP's of `ffn` rows."""
    c = config
    leaf = name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1]
    shapes = {
        "embed_tokens.weight": (c.vocab_size, c.hidden),
        "lm_head.weight": (c.vocab_size, c.hidden),
        "norm.weight": (c.hidden,),
        "input_layernorm.weight": (c.hidden,),
        "post_attention_layernorm.weight": (c.hidden,),
        "pre_feedforward_layernorm.weight": (c.hidden,),
        "post_feedforward_layernorm.weight": (c.hidden,),
        "q_proj.weight": (c.q_dim, c.hidden),
        "k_proj.weight": (c.kv_dim, c.hidden),
        "v_proj.weight": (c.kv_dim, c.hidden),
        "o_proj.weight": (c.hidden, c.q_dim),
        "q_proj.bias": (c.q_dim,),
        "k_proj.bias": (c.kv_dim,),
        "v_proj.bias": (c.kv_dim,),
        "q_norm.weight": (c.head_dim,),
        "k_norm.weight": (c.head_dim,),
        "gate_proj.weight": (c.ffn, c.hidden),
        "up_proj.weight": (c.ffn, c.hidden),
        "down_proj.weight": (c.hidden, c.ffn),
        "gate.weight": (c.n_experts, c.hidden),  # the router
        "gate.bias": (c.n_experts,),
        "o_proj.bias": (c.hidden,),
        "self_attn.sinks": (c.n_heads,),
        "gate_proj.bias": (c.ffn,),
        "up_proj.bias": (c.ffn,),
        "down_proj.bias": (c.hidden,),
    }
    return shapes[leaf]


def check_tensors(tensors: dict, config: ModelConfig, path: str) -> None:
    """Raise UserError when a tensor is missing or has the wrong shape for the config."""
    from roofline.errors import UserError

    for name in hf_tensor_names(config):
        if name not in tensors:
            raise UserError(
                f"{path}: tensor {name} is missing; "
                f"the checkpoint is incomplete or not a {config.arch} model"
            )
        want = hf_tensor_shape(name, config)
        got = tuple(tensors[name].shape)
        if got != want:
            raise UserError(
                f"{path}: tensor {name} has shape {got}, the config implies {want}; "
                "the checkpoint is inconsistent"
            )


def stored_bytes(checkpoint: Checkpoint, name: str) -> int:
    """Bytes tensor `name` takes in the file: its raw blocks when quantized, else elements x stored
    width."""
    if name in checkpoint.raw:
        return int(checkpoint.raw[name][1].nbytes)
    t = checkpoint.tensors[name]
    # none for a checkpoint built in memory: its tensors' own width
    fmt = checkpoint.stored_format.get(name)
    return int(t.size) * (BLOCK_FORMATS[fmt].block_bytes if fmt else t.itemsize)


def file_bytes_per_token(checkpoint: Checkpoint) -> int:
    """Weight bytes one batch-1 decode step must read from the file as stored: every tensor once,
    except the embedding table, of which one row (the lm_head, read in full, is the table itself
    when tied), and of each layer's experts the n_experts_used it is routed to."""
    total = 0
    for name in checkpoint.tensors:
        n = stored_bytes(checkpoint, name)
        if name == "model.embed_tokens.weight":
            rows = checkpoint.config.vocab_size
            total += n // rows + (n if checkpoint.config.tie_embeddings else 0)
        elif ".mlp.experts." in name:  # a step reads the experts it is routed to
            total += n * checkpoint.config.n_experts_used // checkpoint.config.n_experts
        else:
            total += n
    return total
