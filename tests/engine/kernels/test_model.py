"""The torch reference forward (model.py) against Hugging Face transformers on tiny random models of
each architecture the engine supports: Llama (plain and llama3 RoPE scaling), Qwen2 (q/k/v bias),
Qwen3 (q/k norm)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from roofline.engine.kernels import reference as model
from roofline.engine.kernels.kv_cache import KVCache
from roofline.engine.loading.config import ModelConfig

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
VARIANTS = {
    "llama": dict(arch="llama", head_dim=16),
    "llama3-scaled": dict(
        arch="llama", head_dim=16, rope_scaling=LLAMA3_SCALING, rope_theta=500000.0
    ),
    "qwen2": dict(arch="qwen2", head_dim=16),
    "qwen3": dict(arch="qwen3", head_dim=32),
    "tied": dict(arch="llama", head_dim=16, tie=True),
}


def tiny_hf_model(
    arch="llama", head_dim=16, rope_scaling=None, rope_theta=10000.0, tie=False, seed=0
):
    """(transformers model with random weights, matching ModelConfig, HF-named float32 weights)."""
    import transformers

    cls_name = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}[arch]
    kw = dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        vocab_size=97,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=rope_theta,
        tie_word_embeddings=tie,
        rope_scaling=rope_scaling,
    )
    if arch == "qwen2":
        kw["use_sliding_window"] = False
    cfg = getattr(transformers, cls_name + "Config")(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = getattr(transformers, cls_name + "ForCausalLM")(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(
                1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.08 * torch.randn_like(p)
            )
    weights = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    if tie:
        weights.pop("lm_head.weight", None)
    config = ModelConfig(
        arch=arch,
        name="tiny",
        n_layers=2,
        hidden=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=head_dim,
        ffn=96,
        vocab_size=97,
        max_seq_len=128,
        rope_theta=rope_theta,
        rms_eps=1e-5,
        rope_scaling=rope_scaling,
        tie_embeddings=tie,
        attn_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
    )
    return hf, config, weights


def rope_config(rope_theta: float = 1e4, rope_scaling: dict | None = None) -> ModelConfig:
    """A one-layer config for the RoPE tests: head_dim 16, the given theta and scaling."""
    return ModelConfig(
        arch="llama",
        name="t",
        n_layers=1,
        hidden=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        ffn=8,
        vocab_size=10,
        max_seq_len=64,
        rope_theta=rope_theta,
        rms_eps=1e-5,
        rope_scaling=rope_scaling,
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_matches_transformers(variant):
    hf, config, weights = tiny_hf_model(**VARIANTS[variant])
    ids = torch.tensor([3, 17, 42, 5, 96, 0, 8, 8, 8, 61, 2, 33, 70, 70, 1, 9])
    rope = model.rope_tables(config, 128)
    with torch.no_grad():
        ours = model.forward(config, weights, ids, rope=rope)
        ref = hf(ids[None]).logits[0].float()
    err = (ours - ref).abs().max().item()
    assert err <= 1e-4 * ref.abs().max().item(), f"{variant}: max |logit diff| {err}"
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_cached_chunks_equal_one_pass():
    """Prefill in two chunks through the KV cache == the whole sequence in one pass."""
    _, config, weights = tiny_hf_model("qwen2")
    ids = torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    rope = model.rope_tables(config, 32)
    # keys transposed in blocks, as the decode kernels read them
    cache = KVCache(config, 1, 32).torch_views(0)
    with torch.no_grad():
        whole = model.forward(config, weights, ids, rope=rope)
        model.forward(config, weights, ids[:6], rope=rope, cache=cache)
        tail = model.forward(config, weights, ids[6:], rope=rope, cache=cache, start=6)
        last = model.forward(config, weights, ids, rope=rope, last_only=True)
    torch.testing.assert_close(tail, whole[6:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last[0], whole[-1], rtol=1e-6, atol=1e-6)


def test_llama3_gguf_freq_factors_equal_the_hf_rule():
    """A GGUF carries llama3 scaling as per-frequency divisors; both routes give the same
    frequencies."""
    from roofline.engine.loading.rope_scaling import llama3_freq_factors

    hf_rule = model.rope_inv_freq(rope_config(rope_theta=500000.0, rope_scaling=LLAMA3_SCALING))
    factors = llama3_freq_factors(16, 500000.0, 8.0, 1.0, 4.0, 32)
    from_gguf = model.rope_inv_freq(
        rope_config(
            rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "freq_factors": factors.tolist()},
        )
    )
    torch.testing.assert_close(from_gguf, hf_rule, rtol=1e-6, atol=0)
    plain = model.rope_inv_freq(rope_config(rope_theta=500000.0))
    # high frequency kept, low one stretched
    assert plain[0] == hf_rule[0] and hf_rule[-1] < plain[-1]


def test_unsupported_rope_scaling_is_a_user_error():
    from roofline.errors import UserError

    cfg = rope_config(rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(UserError, match="dynamic"):
        model.rope_inv_freq(cfg)


def test_rope_tables_are_cos_sin_of_position_times_frequency():
    cos, sin = model.rope_tables(rope_config(), 64)
    assert cos.shape == (64, 8)
    angle = 37 * 1e4 ** (-2 * 3 / 16)
    assert math.isclose(cos[37, 3].item(), math.cos(angle), rel_tol=1e-5)
    assert math.isclose(sin[37, 3].item(), math.sin(angle), rel_tol=1e-5)
    np.testing.assert_allclose((cos**2 + sin**2).numpy(), 1.0, atol=1e-6)
