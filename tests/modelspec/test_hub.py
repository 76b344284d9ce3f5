"""Models on the Hugging Face Hub (`roofline.modelspec.hub`), against a fake Hub on loopback
(`fake_hub.py`): no test reaches the internet.

Repos made here: a safetensors llama in three shards with an index; a GGUF repo with two quants,
one quant split in two files and a vision projector; a gated copy of the safetensors repo; a repo
whose safetensors header claims more bytes than the file has; one whose GGUF ends inside its tensor
infos; one with only a README; one with a config.json and .bin weights. Every weight file is
8-35 MB, so that reading headers only is told apart from reading weights: the bytes the server
sends stay under 1% of the files' size."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fake_hub import TOKEN, FakeHub, use_fake_hub

from roofline.bounds.analysis import CeilingRequest, analyse
from roofline.errors import UserError
from roofline.modelspec import hub
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.files import read_file_weights
from roofline.modelspec.hub import download_model, hub_model, parse_hub_id
from roofline.modelspec.hub_files import choose_gguf, gguf_models

gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 4, 512, 8, 4, 1536, 4096
HEAD_DIM = HIDDEN // HEADS
ST_REPO, GGUF_REPO = "test/tiny-llama", "test/tiny-GGUF"
GGUF_MODELS = {
    "Q8_0": ("tiny-Q8_0.gguf",),
    "Q4_0": ("tiny-Q4_0.gguf",),
    "F16": ("tiny-F16-00001-of-00002.gguf", "tiny-F16-00002-of-00002.gguf"),
}


# ---------------------------------------------------------------------------------- the repos
def _config() -> dict:
    return {
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }


def _hf_shapes() -> dict[str, tuple[int, ...]]:
    """A Hugging Face llama's tensor names and shapes."""
    out = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        "lm_head.weight": (VOCAB, HIDDEN),
        "model.norm.weight": (HIDDEN,),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": (FFN, HIDDEN),
            p + "mlp.up_proj.weight": (FFN, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, FFN),
        }
    return out


def write_safetensors_repo(folder: Path, shards: int = 3) -> Path:
    """config.json, the shards and their index: f16 matrices, f32 norms."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_config()))
    shapes = _hf_shapes()
    names = sorted(shapes)
    weight_map = {}
    for s in range(shards):
        part = {
            n: np.full(shapes[n], 0.5, np.float32 if len(shapes[n]) == 1 else np.float16)
            for n in names[s::shards]
        }
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_numpy.save_file(part, str(folder / file))
        weight_map.update({n: file for n in part})
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def _gguf_tensor(writer, name: str, ne: tuple[int, ...], type_name: str) -> None:
    """A tensor of logical shape `ne` (ne0 first) stored as `type_name`; quantized types as bytes
    of the right size (only headers are read)."""
    if type_name == "F32":
        writer.add_tensor(name, np.ones(ne[::-1], np.float32))
        return
    if type_name == "F16":
        writer.add_tensor(name, np.ones(ne[::-1], np.float16))
        return
    qt = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[qt]
    raw = np.full((*ne[1:][::-1], ne[0] // block * size), 7, dtype=np.uint8)
    writer.add_tensor(name, raw, raw_dtype=qt)


def write_gguf(path: Path, type_name: str, split_max_tensors: int = 0) -> None:
    """A llama in one GGML type (norms F32), no vocabulary: the header is a few kB."""
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name("tiny")
    writer.add_block_count(LAYERS)
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    _gguf_tensor(writer, "token_embd.weight", (HIDDEN, VOCAB), type_name)
    _gguf_tensor(writer, "output_norm.weight", (HIDDEN,), "F32")
    _gguf_tensor(writer, "output.weight", (HIDDEN, VOCAB), type_name)
    for i in range(LAYERS):
        p = f"blk.{i}."
        _gguf_tensor(writer, p + "attn_norm.weight", (HIDDEN,), "F32")
        _gguf_tensor(writer, p + "ffn_norm.weight", (HIDDEN,), "F32")
        for n, ne in (
            ("attn_q", (HIDDEN, HEADS * HEAD_DIM)),
            ("attn_k", (HIDDEN, KV_HEADS * HEAD_DIM)),
            ("attn_v", (HIDDEN, KV_HEADS * HEAD_DIM)),
            ("attn_output", (HEADS * HEAD_DIM, HIDDEN)),
            ("ffn_gate", (HIDDEN, FFN)),
            ("ffn_up", (HIDDEN, FFN)),
            ("ffn_down", (FFN, HIDDEN)),
        ):
            _gguf_tensor(writer, f"{p}{n}.weight", ne, type_name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict[str, Path]:
    """The repos' files on disk, as a local user would have them."""
    root = tmp_path_factory.mktemp("repos")
    st = write_safetensors_repo(root / "tiny-llama")
    gg = root / "tiny-GGUF"
    gg.mkdir()
    write_gguf(gg / "tiny-Q8_0.gguf", "Q8_0")
    write_gguf(gg / "tiny-Q4_0.gguf", "Q4_0")
    write_gguf(gg / "tiny-F16.gguf", "F16", split_max_tensors=20)
    (gg / "mmproj-tiny-F16.gguf").write_bytes(b"GGUF" + bytes(60))  # a vision tower: no model
    (gg / "README.md").write_text("# tiny\n")
    lying = write_safetensors_repo(root / "lying", shards=1)
    shard = lying / "model-00001-of-00001.safetensors"
    data = shard.read_bytes()
    shard.write_bytes((len(data) * 2).to_bytes(8, "little") + data[8:])  # claims twice the file
    cut = root / "cut-GGUF"
    cut.mkdir()
    good = gg / "tiny-Q4_0.gguf"
    data_start = gguf.GGUFReader(str(good)).data_offset
    (cut / "tiny-Q4_0.gguf").write_bytes(good.read_bytes()[: data_start - 40])
    return {"st": st, "gguf": gg, "lying": lying, "cut": cut}


@pytest.fixture(scope="module")
def fake(local) -> FakeHub:
    server = FakeHub().start()
    server.add(ST_REPO, _files(local["st"]))
    server.add(GGUF_REPO, _files(local["gguf"]))
    server.add("test/gated-llama", _files(local["st"]), gated=True)
    server.add("test/lying", _files(local["lying"]))
    server.add("test/cut-GGUF", _files(local["cut"]))
    server.add("test/readme-only", {"README.md": b"# nothing to run\n"})
    config = json.dumps(_config()).encode()
    server.add("test/config-only", {"config.json": config, "pytorch_model.bin": bytes(1000)})
    server.add("Qwen/Qwen3-8B", _files(local["st"]))  # a catalogue id, on this Hub a tiny llama
    yield server
    server.stop()


@pytest.fixture
def home(fake, tmp_path, monkeypatch) -> Path:
    """A fresh HF_HOME for each test, huggingface_hub pointed at the fake Hub."""
    path = tmp_path / "hf-home"
    use_fake_hub(monkeypatch, fake.url, path)
    fake.clear_log()
    return path


def _gguf_size(local, tag: str) -> int:
    return sum((local["gguf"] / f).stat().st_size for f in GGUF_MODELS[tag])


def _one_line_error(call) -> str:
    with pytest.raises(UserError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message and message.strip() == message
    return message


# ------------------------------------------------------------------------- bytes without weights
def test_safetensors_repo_counts_as_the_local_folder_from_headers_alone(fake, local, home):
    m = hub_model(parse_hub_id(ST_REPO))
    here = read_file_weights(local["st"])
    assert m.weights.bytes_per_token == here.bytes_per_token
    assert m.weights.components == here.components and m.weights.type_bytes == here.type_bytes
    assert m.files == tuple(f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3))
    source = f"hub: {ST_REPO}@{fake.repos[ST_REPO].sha}"
    assert m.spec.quant_note.startswith(f"as stored in {source} (")
    assert m.spec.notes[-1].startswith(f"{source}: 3 file headers read by HTTP range reads")
    weights = sum(p.stat().st_size for p in local["st"].glob("*.safetensors"))
    # three range reads of 64 KiB, the info and config.json and index: no tensor data past that
    assert fake.sent_bytes() < 0.01 * weights
    gets = [s for s in fake.log if s.path.endswith(".safetensors")]
    assert [s.range for s in gets] == ["bytes=0-65535"] * 3 and all(s.status == 206 for s in gets)
    # the ceiling: the same bytes per token as the folder's, the source named
    _, from_hub = analyse(CeilingRequest(model=ST_REPO, hardware="h100-sxm"))
    _, from_disk = analyse(CeilingRequest(model=str(local["st"]), hardware="h100-sxm"))
    assert from_hub.bytes_per_token == from_disk.bytes_per_token
    assert from_hub.model.name == ST_REPO and any(source in a for a in from_hub.assumptions)


@pytest.mark.parametrize(
    "asked, tag",
    [("Q8_0", "Q8_0"), ("q4_0", "Q4_0"), ("f16", "F16"), ("TINY-Q4_0.gguf", "Q4_0")],
)
def test_a_quant_tag_picks_the_gguf_and_counts_it_as_the_local_file(
    fake, local, home, asked: str, tag: str
):
    m = hub_model(parse_hub_id(f"{GGUF_REPO}:{asked}"))
    assert m.files == GGUF_MODELS[tag]  # a split's two parts are one model
    here = read_file_weights(local["gguf"] / GGUF_MODELS[tag][0])  # part 1 reads both parts
    assert m.weights.bytes_per_token == here.bytes_per_token
    assert m.weights.components == here.components
    assert m.spec.name == f"{GGUF_REPO}:{asked}"
    assert f"hub: {GGUF_REPO}@{fake.repos[GGUF_REPO].sha}/{GGUF_MODELS[tag][0]}" in (
        m.spec.quant_note
    )
    assert fake.sent_bytes() < 0.01 * _gguf_size(local, tag)


def test_the_bytes_sent_for_every_model_stay_under_one_percent(fake, local, home, capsys):
    """Each model of the two repos, read once into a fresh cache: what the server sent, over the
    size of the files the models are stored in."""
    sizes = {ST_REPO: sum(p.stat().st_size for p in local["st"].glob("*.safetensors"))}
    sizes |= {f"{GGUF_REPO}:{tag}": _gguf_size(local, tag) for tag in GGUF_MODELS}
    for name in sizes:
        hub_model(parse_hub_id(name))
    sent, stored = fake.sent_bytes(), sum(sizes.values())
    with capsys.disabled():
        print(f"\nfake Hub: {sent:,} B sent for {stored:,} B of model files ({sent / stored:.3%})")
    assert sent < 0.01 * stored
    # a second read needs the listing only: the headers are kept
    fake.clear_log()
    again = hub_model(parse_hub_id(f"{GGUF_REPO}:Q8_0"))
    assert again.fetched_bytes == 0 and [s.path.split("?")[0] for s in fake.log] == [
        f"/api/models/{GGUF_REPO}"
    ]


def test_the_gguf_range_grows_until_the_tensor_infos_end(fake, local, home, monkeypatch):
    monkeypatch.setattr(hub, "FIRST_RANGE_BYTES", 1024)
    m = hub_model(parse_hub_id(f"{GGUF_REPO}:Q8_0"))
    header = gguf.GGUFReader(str(local["gguf"] / "tiny-Q8_0.gguf")).data_offset
    reads = [s for s in fake.log if s.path.endswith("tiny-Q8_0.gguf")]
    assert len(reads) >= 2 and reads[0].range == "bytes=0-1023"
    assert reads[1].range.startswith("bytes=1024-")  # only the bytes not yet read
    # x4 each time: never past four times what the header needed
    assert header <= m.fetched_bytes < 4 * header
    assert m.weights.bytes_per_token == (
        read_file_weights(local["gguf"] / "tiny-Q8_0.gguf").bytes_per_token
    )


# --------------------------------------------------------------------------- quant tags chosen
def test_gguf_models_group_split_parts_and_leave_projectors_out():
    names = [
        "README.md",
        "a-Q4_K_M.gguf",
        "a-UD-Q4_K_M.gguf",
        "mmproj-a-F16.gguf",
        "Q8_0/a-Q8_0-00001-of-00002.gguf",
        "Q8_0/a-Q8_0-00002-of-00002.gguf",
        "BF16/a-BF16-00001-of-00002.gguf",  # its part 2 is missing: no model
    ]
    models = gguf_models(names)
    assert [m.files[0] for m in models] == [
        "Q8_0/a-Q8_0-00001-of-00002.gguf",
        "a-Q4_K_M.gguf",
        "a-UD-Q4_K_M.gguf",
    ]
    assert choose_gguf(names, "q8_0", "o/a").files[1] == "Q8_0/a-Q8_0-00002-of-00002.gguf"
    assert choose_gguf(names, "UD-Q4_K_M", "o/a").files == ("a-UD-Q4_K_M.gguf",)
    assert choose_gguf(names, "a-q4_k_m.gguf", "o/a").files == ("a-Q4_K_M.gguf",)
    message = _one_line_error(lambda: choose_gguf(names, "Q4_K_M", "o/a"))
    assert message.startswith(":Q4_K_M matches 2 GGUF models in o/a: a-Q4_K_M.gguf, a-UD-")
    assert "e.g. o/a:a-Q4_K_M.gguf" in message
    assert choose_gguf(["config.json", "m.safetensors", "x.gguf"], None, "o/a") is None


@pytest.mark.parametrize(
    "asked, words",
    [
        (GGUF_REPO, "test/tiny-GGUF holds 3 GGUF models: tiny-F16-00001-of-00002.gguf (+1 part)"),
        (f"{GGUF_REPO}:Q5_K", "no GGUF in test/tiny-GGUF matches :Q5_K; it holds tiny-F16-"),
        (f"{GGUF_REPO}:tiny", ":tiny matches 3 GGUF models in test/tiny-GGUF"),
        (f"{ST_REPO}:Q4_0", "test/tiny-llama holds no .gguf file for the tag :Q4_0"),
    ],
)
def test_a_tag_that_picks_nothing_or_several_lists_the_repo(fake, home, asked: str, words: str):
    message = _one_line_error(lambda: hub_model(parse_hub_id(asked)))
    assert words in message and "mmproj" not in message


def test_a_config_without_safetensors_gives_the_config_arithmetic(fake, home):
    m = hub_model(parse_hub_id("test/config-only"))
    assert m.weights is None and m.files == () and m.spec.num_layers == LAYERS
    assert "config.json only" in m.spec.notes[-1]


# ------------------------------------------------------------------------ names and revisions
def test_hub_ids_are_told_from_paths_and_catalogue_names():
    assert parse_hub_id("Qwen/Qwen3-8B") == hub.HubId("Qwen/Qwen3-8B")
    assert parse_hub_id("unsloth/gpt-oss-20b-GGUF:Q4_K_M") == hub.HubId(
        "unsloth/gpt-oss-20b-GGUF", "Q4_K_M"
    )
    assert str(parse_hub_id("o/n:Q8_0/o-Q8_0-00001-of-00002.gguf")).endswith("00002.gguf")
    for text in (
        "qwen3-8b",
        "./o/n",
        "/abs/o",
        "o/config.json",
        "o/n.gguf",
        "a/b/c",
        "o/n:",
        "o/-n",
    ):
        assert parse_hub_id(text) is None, text


def test_the_catalogue_wins_and_says_so_and_a_revision_reads_the_hub(fake, home):
    spec = load_spec("Qwen/Qwen3-8B")
    assert spec.num_layers == 36 and "catalogue entry Qwen/Qwen3-8B" in spec.notes[-1]
    assert "not the Hub repo" in spec.notes[-1] and fake.log == []  # the Hub is not asked
    sha = fake.repos["Qwen/Qwen3-8B"].sha
    for revision in ("main", sha):
        spec = load_spec("Qwen/Qwen3-8B", revision=revision)
        assert spec.num_layers == LAYERS and f"hub: Qwen/Qwen3-8B@{sha}" in spec.quant_note
    message = _one_line_error(lambda: load_spec(ST_REPO, revision="v9"))
    assert message == "test/tiny-llama has no revision 'v9'; give a branch, a tag or a commit sha"
    message = _one_line_error(lambda: load_spec("qwen3-8b", revision="main"))
    assert message.startswith("--revision is for a Hub repo")


# ----------------------------------------------------------------------- tokens, cache, offline
def test_a_gated_repo_needs_a_token(fake, local, home, monkeypatch):
    message = _one_line_error(lambda: hub_model(parse_hub_id("test/gated-llama")))
    assert message.startswith("test/gated-llama is a gated repo: accept its conditions at ")
    assert "`hf auth login` or set HF_TOKEN" in message
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    m = hub_model(parse_hub_id("test/gated-llama"))
    assert m.weights.bytes_per_token == read_file_weights(local["st"]).bytes_per_token


def test_offline_works_from_the_cache_after_a_first_run(fake, local, monkeypatch, home):
    name = f"{GGUF_REPO}:Q4_0"
    use_fake_hub(monkeypatch, fake.url, home, offline=True)
    message = _one_line_error(lambda: hub_model(parse_hub_id(name)))
    assert "HF_HUB_OFFLINE=1" in message and "not in the cache" in message
    use_fake_hub(monkeypatch, fake.url, home)
    first = hub_model(parse_hub_id(name))
    st_first = hub_model(parse_hub_id(ST_REPO))
    fake.clear_log()
    use_fake_hub(monkeypatch, fake.url, home, offline=True)
    again = hub_model(parse_hub_id(name))
    assert again.weights == first.weights and again.fetched_bytes == 0
    assert hub_model(parse_hub_id(ST_REPO)).weights == st_first.weights
    assert fake.log == []
    # another quant of the same repo: listed, but its header was never read
    message = _one_line_error(lambda: hub_model(parse_hub_id(f"{GGUF_REPO}:Q8_0")))
    assert "the header of tiny-Q8_0.gguf of the Hub repo test/tiny-GGUF is not in" in message


def test_a_cut_download_resumes_and_is_reused_offline(fake, local, monkeypatch, home):
    original = (local["gguf"] / "tiny-Q8_0.gguf").read_bytes()
    # cut past huggingface_hub's first 10 MiB chunk: it resumes from the last chunk it wrote
    fake.cut_once[(GGUF_REPO, "tiny-Q8_0.gguf")] = 15_000_000
    path = download_model(parse_hub_id(f"{GGUF_REPO}:Q8_0"))
    assert path.read_bytes() == original and path.is_relative_to(home / "hub")
    gets = [s for s in fake.log if s.method == "GET" and s.path.endswith("tiny-Q8_0.gguf")]
    assert len(gets) == 2 and (gets[0].range, gets[0].body_bytes) == (None, 15_000_000)
    start = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < start <= 15_000_000 and gets[1].body_bytes == len(original) - start
    fake.clear_log()
    use_fake_hub(monkeypatch, fake.url, home, offline=True)
    assert download_model(parse_hub_id(f"{GGUF_REPO}:q8_0")) == path and fake.log == []
    # the ceiling reads the downloaded file's header there: nothing fetched, offline
    assert hub_model(parse_hub_id(f"{GGUF_REPO}:Q8_0")).weights.bytes_per_token == (
        read_file_weights(local["gguf"] / "tiny-Q8_0.gguf").bytes_per_token
    )


def test_a_split_gguf_is_not_downloaded_for_the_engine(fake, home):
    message = _one_line_error(lambda: download_model(parse_hub_id(f"{GGUF_REPO}:F16")))
    assert "is a GGUF split in 2 files" in message and fake.sent_bytes() < 10_000


def test_a_safetensors_repo_downloads_as_a_folder(fake, local, home):
    folder = download_model(parse_hub_id(ST_REPO))
    assert sorted(p.name for p in folder.iterdir()) == sorted(_files(local["st"]))
    assert read_file_weights(folder).bytes_per_token == (
        read_file_weights(local["st"]).bytes_per_token
    )


# ---------------------------------------------------------------------------------- the CLI
def _cli(monkeypatch, *args: str) -> tuple[int, str, str]:
    """`roofline ARGS` in this process: (exit code, stdout, stderr)."""
    from roofline.cli.main import run

    monkeypatch.setattr(sys, "argv", ["roofline", *args])
    monkeypatch.setenv("COLUMNS", "200")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run()
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "case, args, words",
    [
        ("unknown", ["test/no-such-repo"], "unknown model 'test/no-such-repo': not a local"),
        ("gated", ["test/gated-llama"], "is a gated repo: accept its conditions"),
        ("offline", [ST_REPO], "HF_HUB_OFFLINE=1 the Hub repo test/tiny-llama@main is not in"),
        ("network", [ST_REPO], "cannot reach the Hub at http://127.0.0.1:"),
        ("neither", ["test/readme-only"], "holds neither a config.json nor a .gguf file"),
        ("lying", ["test/lying"], "the header claims"),
        ("truncated", ["test/cut-GGUF:Q4_0"], "the file ends inside the tensor infos"),
        ("tag", [f"{GGUF_REPO}:Q5_K"], "no GGUF in test/tiny-GGUF matches :Q5_K"),
        ("revision", [ST_REPO, "--revision", "v9"], "has no revision 'v9'"),
    ],
)
def test_each_failure_is_one_line_and_exit_2(
    fake, home, monkeypatch, case: str, args: list[str], words: str
):
    if case == "offline":
        use_fake_hub(monkeypatch, fake.url, home, offline=True)
    if case == "network":
        use_fake_hub(monkeypatch, f"http://127.0.0.1:{_closed_port()}", home)
    code, out, err = _cli(monkeypatch, "ceiling", *args, "--hardware", "h100-sxm")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")
    assert words in err
    if case == "network":
        assert "set HF_HUB_OFFLINE=1 to use what is in the cache" in err
    if case == "lying":
        name = "model-00001-of-00001.safetensors"
        assert f"hub: test/lying@{fake.repos['test/lying'].sha}/{name}:" in err


def test_generate_and_serve_hand_the_engine_the_downloaded_file(fake, local, home, monkeypatch):
    import roofline.engine
    import roofline.engine.serve.main

    given: list[str | None] = []

    def load_runner(model, **kwargs):
        given.append(model)
        raise UserError("stopped before the engine")

    def serve(options):
        given.append(options.model)
        raise UserError("stopped before serving")

    monkeypatch.setattr(roofline.engine, "load_runner", load_runner)
    monkeypatch.setattr(roofline.engine.serve.main, "serve", serve)
    code, _, err = _cli(monkeypatch, "generate", "--model", f"{GGUF_REPO}:Q8_0", "hi")
    assert code == 2 and "stopped before the engine" in err
    code, _, err = _cli(monkeypatch, "serve", "--model", f"{GGUF_REPO}:Q8_0")
    assert code == 2 and "stopped before serving" in err
    assert given[0] == given[1] and Path(given[0]).read_bytes() == (
        (local["gguf"] / "tiny-Q8_0.gguf").read_bytes()
    )
    code, _, err = _cli(monkeypatch, "serve", "--revision", "main")
    assert code == 2 and "--revision is for a Hub repo" in err


def test_roofline_ceiling_on_a_hub_id_as_a_user_runs_it(fake, local, home):
    """A fresh process: huggingface_hub reads HF_ENDPOINT and HF_HOME from the environment."""
    env = {**os.environ, "COLUMNS": "200"}  # use_fake_hub set HF_ENDPOINT, HF_HOME, no token
    args = ["ceiling", f"{GGUF_REPO}:Q8_0", "--hardware", "h100-sxm"]
    p = subprocess.run(
        [sys.executable, "-m", "roofline", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    sha = fake.repos[GGUF_REPO].sha
    assert f"{GGUF_REPO}:Q8_0 on NVIDIA H100" in p.stdout
    assert f"hub: {GGUF_REPO}@{sha}/tiny-Q8_0.gguf" in p.stdout.replace("\n", " ")
    assert fake.sent_bytes() < 0.01 * _gguf_size(local, "Q8_0")
