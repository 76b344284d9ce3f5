"""GGUF loading on tiny files the tests write: each tensor type, the q/k un-permutation,
qwen2/qwen3, ties, errors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from fixtures import (
    assert_load_fails,
    llamacpp_permute,
    tiny_shape,
    tiny_weights,
    write_tiny_gguf,
    write_tiny_hf_dir,
)
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from roofline.engine.kernels.reference import as_torch
from roofline.engine.loading import load_checkpoint
from roofline.engine.loading.checkpoint import BFLOAT16
from roofline.engine.loading.gguf import display_name, unpermute_rope_rows

# Worst-case rounding error of each format relative to the largest |value| in a block of 32: Q8_0
# rounds to amax/127 steps, Q4_0 to amax/8 steps (error up to one step at the clipped end), Q4_1 to
# (max-min)/15.
QUANT_STEP = {"Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q4_1": 2 / 15}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same seed-0 weights written as an HF directory (float32): the ground truth."""
    return load_checkpoint(write_tiny_hf_dir(tmp_path_factory.mktemp("ref") / "ref", seed=0))


def test_f32_gguf_equals_hf_dir_exactly(tiny_gguf, tiny_hf_dir):
    gg, hf = load_checkpoint(tiny_gguf), load_checkpoint(tiny_hf_dir)
    assert set(gg.tensors) == set(hf.tensors)
    for name, value in hf.tensors.items():
        assert gg.tensors[name].dtype == np.float32
        assert np.array_equal(gg.tensors[name], value), name
    assert set(gg.stored_format.values()) == {"F32"} and gg.raw == {}
    assert {k: v for k, v in gg.config.__dict__.items() if k != "name"} == {
        k: v for k, v in hf.config.__dict__.items() if k != "name"
    }


@pytest.mark.parametrize(
    "fmt,dtype,torch_dtype",
    [("F16", np.float16, torch.float16), ("BF16", BFLOAT16, torch.bfloat16)],
)
def test_half_precision_gguf_keeps_its_dtype(tmp_path, reference, fmt, dtype, torch_dtype):
    ck = load_checkpoint(write_tiny_gguf(tmp_path, tensor_type=fmt))
    for name, value in reference.tensors.items():
        got = ck.tensors[name]
        if value.ndim == 1:  # norms are always F32 in GGUF
            assert ck.stored_format[name] == "F32" and np.array_equal(got, value)
            continue
        assert ck.stored_format[name] == fmt and got.dtype == dtype, name
        # torch's own rounding (round-to-nearest-even) is an independent reference for both formats.
        assert torch.equal(as_torch(got), torch.from_numpy(value).to(torch_dtype)), name


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q4_1"])
def test_quantized_gguf_dequantizes_to_the_gguf_reference_in_hf_row_order(tmp_path, reference, fmt):
    """The loaded tensor equals dequantize(quantize(W_hf)) exactly. Quantization blocks lie along
    rows, so the reference needs no permutation: a loader that skipped the q/k un-permutation would
    fail here."""
    ck = load_checkpoint(write_tiny_gguf(tmp_path, tensor_type=fmt))
    qtype = QT[fmt]
    for name, value in reference.tensors.items():
        got = ck.tensors[name]
        if value.ndim == 1:
            assert np.array_equal(got, value)
            continue
        w = value
        expect = dequantize(quantize(w, qtype), qtype)
        assert got.dtype == np.float32 and np.array_equal(got, expect), name
        blocks = np.abs(w).reshape(w.shape[0], -1, 32).max(axis=2, keepdims=True)
        err = np.abs(got - w).reshape(blocks.shape[0], -1, 32)
        assert (err <= blocks * QUANT_STEP[fmt] * 1.001 + 1e-7).all(), name
        assert not np.array_equal(got, w)  # it really was quantized
        # raw blocks: one row of blocks per output row, in HF row order, dequantizing to the tensor.
        raw_fmt, raw = ck.raw[name]
        assert raw_fmt == fmt and raw.dtype == np.uint8 and raw.shape[0] == w.shape[0]
        assert np.array_equal(dequantize(raw, qtype), expect), name


def test_permutation_is_not_trivial_and_unpermute_inverts_llamacpp():
    s = tiny_shape("llama")
    q = tiny_weights()["model.layers.0.self_attn.q_proj.weight"]
    assert not np.array_equal(llamacpp_permute(q, s.n_heads), q)
    rng = np.random.default_rng(1)
    for heads, head_dim in [(4, 16), (9, 64), (3, 64), (2, 128)]:
        w = rng.standard_normal((heads * head_dim, 8)).astype(np.float32)
        assert np.array_equal(unpermute_rope_rows(llamacpp_permute(w, heads), heads), w)
        bias = rng.standard_normal(heads * head_dim).astype(np.float32)
        assert np.array_equal(unpermute_rope_rows(llamacpp_permute(bias, heads), heads), bias)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_ggufs_are_not_permuted_and_carry_bias_or_qk_norm(tmp_path, arch):
    gg = load_checkpoint(write_tiny_gguf(tmp_path, arch=arch))
    hf = load_checkpoint(write_tiny_hf_dir(tmp_path / "hf", arch=arch))
    assert gg.config.arch == hf.config.arch == arch
    assert gg.config.attn_bias == hf.config.attn_bias == (arch == "qwen2")
    assert gg.config.qk_norm == hf.config.qk_norm == (arch == "qwen3")
    assert gg.config.head_dim == hf.config.head_dim == tiny_shape(arch).head_dim
    assert set(gg.tensors) == set(hf.tensors)
    for name, value in hf.tensors.items():
        assert np.array_equal(gg.tensors[name], value), name


def test_tied_embeddings_when_output_weight_is_absent(tmp_path):
    ck = load_checkpoint(write_tiny_gguf(tmp_path, tensor_type="Q8_0", tie_embeddings=True))
    assert ck.config.tie_embeddings and "lm_head.weight" not in ck.tensors
    assert ck.stored_format["model.embed_tokens.weight"] == "Q8_0"


def test_llama3_rope_freqs_become_an_hf_rope_scaling_dict(tmp_path):
    """Llama 3.1 GGUFs carry rope_freqs (divisors of each inverse frequency) instead of metadata.
    The divisors here come from transformers' own llama3 RoPE code; the loader must recover its
    parameters."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = tiny_shape("llama")
    params = {
        "rope_type": "llama3",
        "rope_theta": s.rope_theta,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    hf_config = LlamaConfig(
        hidden_size=s.hidden,
        num_attention_heads=s.n_heads,
        head_dim=s.head_dim,
        rope_parameters=params,
    )
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    plain = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2).double() / s.head_dim)
    divisors = (plain / scaled.double()).numpy()
    # all three regimes present
    assert divisors.max() > 1.0 and divisors.min() == pytest.approx(1.0)
    ck = load_checkpoint(write_tiny_gguf(tmp_path, rope_freqs=divisors))
    scaling = ck.config.rope_scaling
    assert {k: v for k, v in scaling.items() if k != "freq_factors"} == {
        k: v for k, v in params.items() if k != "rope_theta"
    }
    assert np.allclose(scaling["freq_factors"], divisors, rtol=1e-6)
    assert "rope_freqs.weight" not in ck.tensors


def test_a_folder_with_one_gguf_file_loads_that_file(tmp_path):
    path = write_tiny_gguf(tmp_path / "one", tensor_type="Q8_0")
    assert load_checkpoint(path.parent).path == str(path)
    write_tiny_gguf(tmp_path / "one", tensor_type="F16")
    assert_load_fails(path.parent, "several GGUF files", path.name)


def test_display_name_drops_the_format_suffix(tmp_path):
    assert display_name(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct"
    assert display_name(tmp_path / "Llama-3.2-1B-Instruct-f16.gguf") == "Llama-3.2-1B-Instruct"
    assert display_name(tmp_path / "model.gguf") == "model"


# ------------------------------------------------------------------------------------------- errors
def test_missing_file(tmp_path):
    assert_load_fails(tmp_path / "absent.gguf", "does not exist")


def test_truncated_gguf_at_several_cut_points(tmp_path, tiny_gguf):
    data = tiny_gguf.read_bytes()
    for cut in (0, 3, 40, 2000, len(data) // 2, len(data) - 7):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        assert_load_fails(bad, str(bad))


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "noise.gguf"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    assert_load_fails(bad, "is not a GGUF file")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    assert_load_fails(fake, "GGUF")


def _write_minimal_gguf(path, arch: str, tensor=None, qtype=None) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_add_bos_token(False)
    writer.add_tensor(
        "token_embd.weight",
        tensor if tensor is not None else np.zeros((4, 32), np.float32),
        raw_dtype=qtype,
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_unsupported_architecture_is_named(tmp_path):
    path = tmp_path / "gemma.gguf"
    _write_minimal_gguf(path, "gemma2")
    assert_load_fails(path, "'gemma2' is not supported", "llama")


def test_unsupported_tensor_type_is_named(tmp_path):
    """A Q8_1 tensor (a type llama.cpp uses for activations) in an otherwise complete file: the
    error names the tensor and its type."""
    path = write_tiny_gguf(tmp_path, type_overrides={"model.layers.0.mlp.up_proj.weight": "Q8_1"})
    assert_load_fails(path, "Q8_1", "blk.0.ffn_up.weight")


def test_unknown_tensor_is_refused(tmp_path):
    path = tmp_path / "moe.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, add in (
        ("block_count", writer.add_block_count),
        ("embedding_length", writer.add_embedding_length),
    ):
        add(64 if key == "embedding_length" else 1)
    writer.add_head_count(4)
    writer.add_feed_forward_length(128)
    writer.add_context_length(64)
    writer.add_tensor("token_embd.weight", np.zeros((8, 64), np.float32))
    writer.add_tensor("blk.0.ffn_gate_exps.weight", np.zeros((2, 128, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_load_fails(path, "blk.0.ffn_gate_exps.weight", "not supported")


# ----------------------------------------------------------------- the header reader against gguf
@pytest.mark.parametrize("which", ["tiny", "shipped", "Q4_K"])
def test_open_gguf_reads_what_ggufs_own_reader_reads(tmp_path, tiny_gguf, which):
    """Every key's value and every tensor's type, dims and bytes equal gguf.GGUFReader's (the
    vocabulary's strings and the numeric arrays included)."""
    from roofline.engine.loading.gguf import gguf_metadata, open_gguf
    from roofline.modelspec.default_model import default_model_path

    path = {
        "tiny": lambda: tiny_gguf,
        "shipped": default_model_path,
        "Q4_K": lambda: write_tiny_gguf(tmp_path, tensor_type="Q4_K"),
    }[which]()
    ours, theirs = open_gguf(path), gguf.GGUFReader(str(path))
    meta = gguf_metadata(ours)
    fields = {k: f for k, f in theirs.fields.items() if not k.startswith("GGUF.")}  # its own
    assert set(meta) == set(fields)
    for key, field in fields.items():
        expected = field.contents()
        assert meta[key] == expected, key
        assert type(meta[key]) is type(expected), key
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert (a.tensor_type, a.shape, a.n_bytes) == (
            int(b.tensor_type),
            tuple(b.shape),
            b.n_bytes,
        )
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        assert np.array_equal(a.data, b.data), a.name
