"""Hugging Face directories: single vs sharded safetensors, dtypes, config parsing, and the errors
users meet."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from fixtures import assert_load_fails, tiny_weights, write_tiny_hf_dir

from roofline.engine.loading import load_checkpoint
from roofline.engine.loading.checkpoint import BFLOAT16
from roofline.engine.loading.config import SUPPORTED_ARCHS
from roofline.engine.loading.hf_config import config_from_hf
from roofline.modelspec.families import engine_classes


def test_loads_the_written_weights_exactly(tiny_hf_dir):
    ck = load_checkpoint(tiny_hf_dir)
    written = tiny_weights("llama", seed=0)
    assert set(ck.tensors) == set(written)
    for name, value in written.items():
        assert np.array_equal(ck.tensors[name], value), name
    c = ck.config
    assert (c.arch, c.name, c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn) == (
        "llama",
        "tiny-llama",
        2,
        64,
        4,
        2,
        16,
        128,
    )
    assert not c.tie_embeddings and c.rope_scaling is None and ck.raw == {}
    assert set(ck.stored_format.values()) == {"F32"}


@pytest.mark.parametrize("dtype,fmt", [("bfloat16", "BF16"), ("float16", "F16")])
def test_sharded_equals_single_and_keeps_dtype(tmp_path, dtype, fmt):
    single = load_checkpoint(write_tiny_hf_dir(tmp_path / "one", shards=1, dtype=dtype, seed=3))
    sharded_dir = write_tiny_hf_dir(tmp_path / "three", shards=3, dtype=dtype, seed=3)
    assert len(list(sharded_dir.glob("*.safetensors"))) == 3
    sharded = load_checkpoint(sharded_dir)
    assert set(single.tensors) == set(sharded.tensors)
    for name, value in single.tensors.items():
        assert value.dtype == {"bfloat16": BFLOAT16, "float16": np.float16}[dtype]
        assert np.array_equal(sharded.tensors[name], value), name
    assert set(sharded.stored_format.values()) == {fmt}
    assert replace(single.config, name="x") == replace(sharded.config, name="x")


def test_tied_directory_has_no_lm_head(tmp_path):
    ck = load_checkpoint(write_tiny_hf_dir(tmp_path / "tied", tie_embeddings=True))
    assert ck.config.tie_embeddings and "lm_head.weight" not in ck.tensors


def test_config_parsing_rope_parameters_and_sliding_window(tmp_path):
    base = json.loads((write_tiny_hf_dir(tmp_path / "m") / "config.json").read_text())
    # transformers 5 writes rope settings under rope_parameters.
    v5 = {k: v for k, v in base.items() if k != "rope_theta"}
    v5["rope_parameters"] = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    c = config_from_hf(v5, "m", tmp_path)
    assert (
        c.rope_theta == 500000.0
        and c.rope_scaling["rope_type"] == "llama3"
        and c.rope_scaling["factor"] == 8.0
    )
    assert "rope_theta" not in c.rope_scaling
    old = dict(base, rope_scaling={"type": "linear", "factor": 2.0})
    assert config_from_hf(old, "m", tmp_path).rope_scaling == {"rope_type": "linear", "factor": 2.0}
    plain = dict(base, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    assert config_from_hf(plain, "m", tmp_path).rope_scaling is None
    mistral = dict(
        base,
        architectures=["MistralForCausalLM"],
        max_position_embeddings=32768,
        sliding_window=4096,
    )
    assert config_from_hf(mistral, "m", tmp_path).max_seq_len == 4096
    qwen = dict(
        base,
        architectures=["Qwen2ForCausalLM"],
        max_position_embeddings=32768,
        sliding_window=4096,
        use_sliding_window=False,
    )
    c = config_from_hf(qwen, "m", tmp_path)
    assert c.max_seq_len == 32768 and c.arch == "qwen2" and c.attn_bias


def test_family_traits_come_from_the_family_registry(tmp_path):
    base = json.loads((write_tiny_hf_dir(tmp_path / "m") / "config.json").read_text())
    classes = engine_classes()
    assert {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
    } <= set(classes)
    assert set(SUPPORTED_ARCHS) == {f.engine_arch for f in classes.values()}
    for name, family in classes.items():
        c = config_from_hf(dict(base, architectures=[name]), "m", tmp_path)
        assert c.arch == family.engine_arch and c.qk_norm == family.qk_norm, name
        assert c.attn_bias == bool(family.attention_bias), name
    assert config_from_hf(dict(base, architectures=["Qwen3ForCausalLM"]), "m", tmp_path).qk_norm


# ------------------------------------------------------------------------------------------- errors
def test_unsupported_architecture_is_named(tmp_path):
    folder = write_tiny_hf_dir(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (folder / "config.json").write_text(json.dumps(config))
    assert_load_fails(folder, "GPT2LMHeadModel", "not supported", "LlamaForCausalLM")


def test_corrupt_and_truncated_safetensors(tmp_path):
    folder = write_tiny_hf_dir(tmp_path / "m")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert_load_fails(folder, "model.safetensors", "truncated or corrupt")
    weights.write_bytes(b"\xff" * 64)
    assert_load_fails(folder, "model.safetensors")


def test_missing_pieces(tmp_path):
    folder = write_tiny_hf_dir(tmp_path / "sharded", shards=2)
    shard = sorted(folder.glob("*.safetensors"))[1]
    shard.unlink()
    assert_load_fails(folder, shard.name, "missing")

    folder = write_tiny_hf_dir(tmp_path / "notok")
    (folder / "tokenizer.json").unlink()
    assert_load_fails(folder, "tokenizer.json")

    folder = write_tiny_hf_dir(tmp_path / "noweights")
    (folder / "model.safetensors").unlink()
    assert_load_fails(folder, "safetensors")

    empty = tmp_path / "empty"
    empty.mkdir()
    assert_load_fails(empty, "config.json")

    folder = write_tiny_hf_dir(tmp_path / "badjson")
    (folder / "config.json").write_text("{not json")
    assert_load_fails(folder, "config.json", "not valid JSON")


def test_missing_tensor_and_wrong_shape(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = write_tiny_hf_dir(tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    assert_load_fails(folder, "model.layers.1.mlp.up_proj.weight", "missing")

    shutil.rmtree(folder)
    folder = write_tiny_hf_dir(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    assert_load_fails(folder, "shape")


def test_neither_gguf_nor_directory(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"PK\x03\x04 zip")
    assert_load_fails(path, "neither a GGUF file nor a Hugging Face model directory")
