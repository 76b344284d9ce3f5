"""The tiny models' runners and the prompts the runner, kernel and prefill tests share."""

from __future__ import annotations

import numpy as np
import torch
from fixtures import tiny_shape, tiny_weights

from roofline.engine.kernels import reference as model
from roofline.engine.loading import Checkpoint
from roofline.engine.loading.config import ModelConfig
from roofline.engine.loading.weights import matrix
from roofline.engine.runtime.model_runner import ModelRunner, load_runner

PROMPT = [5, 40, 41, 7, 99, 12, 3]


FOLLOW = [17, 250, 8, 8, 31]


LONG_PROMPT = PROMPT * 5


def tiny_checkpoint(arch: str = "llama", tie: bool = False, seed: int = 0) -> Checkpoint:
    s = tiny_shape(arch)
    weights = {k: v * 3 if "norm" not in k else v for k, v in tiny_weights(arch, seed, tie).items()}
    vocab = weights["model.embed_tokens.weight"].shape[0]
    config = ModelConfig(
        arch=arch,
        name=f"tiny-{arch}",
        n_layers=s.n_layers,
        hidden=s.hidden,
        n_heads=s.n_heads,
        n_kv_heads=s.n_kv_heads,
        head_dim=s.head_dim,
        ffn=s.ffn,
        vocab_size=vocab,
        max_seq_len=s.max_seq_len,
        rope_theta=s.rope_theta,
        rms_eps=s.rms_eps,
        tie_embeddings=tie,
        attn_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
    )
    return Checkpoint(
        config=config, tensors=weights, tokenizer=None, path=f"<random {arch}>", stored_format={}
    )


def reference_logits(ckpt: Checkpoint, ids: list[int], dtype: str) -> torch.Tensor:
    """Last-position logits of the whole sequence through model.forward (bf16: weights rounded to
    bf16)."""
    weights = model.torch_weights(ckpt.tensors)
    if dtype == "bf16":
        weights = {
            k: v.to(torch.bfloat16).float() if v.dim() == 2 else v for k, v in weights.items()
        }
    if dtype == "int8":  # per-row int8: W ~ scale[o] * q[o, i]
        deq = {k: matrix(v, "int8") for k, v in ckpt.tensors.items() if v.ndim == 2}
        weights = {
            k: torch.from_numpy(deq[k][0] * deq[k][1][:, None]) if k in deq else v
            for k, v in weights.items()
        }
    rope = model.rope_tables(ckpt.config, len(ids))
    with torch.no_grad():
        return model.forward(ckpt.config, weights, torch.tensor(ids), rope=rope)[-1]


CHUNK = 32


PROMPT_LEN = 150  # chunks [0,32) [32,64) [64,96) [96,128) [128,150)


def prompt_ids(n: int, seed: int = 0, vocab: int = 300) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, n)]


def make_runner(tiny_gguf, dtype: str, max_batch: int = 3) -> ModelRunner:
    runner = load_runner(
        str(tiny_gguf), dtype=dtype, max_batch=max_batch, max_seq_len=256, warmup=False
    )
    runner.prefill_chunk_tokens = CHUNK
    return runner


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (round to nearest even, as torch does)."""
    return torch.from_numpy(a).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)
