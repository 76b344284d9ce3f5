"""Writers of tiny random Llama-family models, as GGUF files and as Hugging Face directories, the
check that loading a broken one fails with one clear line, and plain greedy decoding by hand on a
runner.

Both writers draw the same weights for the same seed (`tiny_weights`), so a test can load one model
in both formats and compare. The GGUF writer does what llama.cpp's converter does, independently of
the loader's code: its own tensor-name table, the q/k row permutation for the `llama` arch, and
quantization with `gguf.quants`. The tokenizer is a real byte-level BPE trained here on a small
corpus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from roofline.engine.loading import load_checkpoint
from roofline.errors import UserError

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2
BOS_ID, EOS_ID = 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "def add(a, b):\n    return a + b\n",
    "In 2024 there were 2024 reasons, 42 of them good and 1,000 of them odd.",
    "Attention is computed over keys and values; the KV cache keeps them.",
    "hello hello hello world world tokens tokens merge merge",
]
# the family tests' prompts (Gemma 3, the mixtures of experts, gpt-oss): prose, a sentence left
# open, code
FAMILY_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France; Berlin is",
    "def add(a, b):\n    return a + b\n",
)
HF_ARCH = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}


@dataclass(frozen=True)
class TinyShape:
    n_layers: int = 2
    hidden: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5


def tiny_shape(arch: str = "llama") -> TinyShape:
    """The default tiny shape; qwen3 gets head_dim 32 (q_dim 128 != hidden 64), as real Qwen3 models
    do."""
    return replace(TinyShape(), head_dim=32) if arch == "qwen3" else TinyShape()


@lru_cache(maxsize=4)
def tiny_tokenizer_json(vocab_size: int = 320) -> str:
    """A byte-level BPE tokenizer trained on `_CORPUS`, as tokenizer.json text (cached: it is
    immutable)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return tok.to_str()


def tiny_vocab() -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) of the tiny tokenizer."""
    model = json.loads(tiny_tokenizer_json())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


def tiny_weights(
    arch: str = "llama", seed: int = 0, tie_embeddings: bool = False, shape: TinyShape | None = None
) -> dict[str, np.ndarray]:
    """Random float32 weights under HF names (Linear weights (out, in))."""
    s = shape or tiny_shape(arch)
    vocab = len(tiny_vocab()[0])
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    q_dim, kv_dim = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    w = {"model.embed_tokens.weight": rand(vocab, s.hidden), "model.norm.weight": norm(s.hidden)}
    if not tie_embeddings:
        w["lm_head.weight"] = rand(vocab, s.hidden)
    for i in range(s.n_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(s.hidden)
        w[p + "post_attention_layernorm.weight"] = norm(s.hidden)
        w[p + "self_attn.q_proj.weight"] = rand(q_dim, s.hidden)
        w[p + "self_attn.k_proj.weight"] = rand(kv_dim, s.hidden)
        w[p + "self_attn.v_proj.weight"] = rand(kv_dim, s.hidden)
        w[p + "self_attn.o_proj.weight"] = rand(s.hidden, q_dim)
        if arch == "qwen2":
            for x, n in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                w[p + f"self_attn.{x}_proj.bias"] = rand(n)
        if arch == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(s.head_dim)
            w[p + "self_attn.k_norm.weight"] = norm(s.head_dim)
        w[p + "mlp.gate_proj.weight"] = rand(s.ffn, s.hidden)
        w[p + "mlp.up_proj.weight"] = rand(s.ffn, s.hidden)
        w[p + "mlp.down_proj.weight"] = rand(s.hidden, s.ffn)
    return w


# ----------------------------------------------------------------------------------------------
# GGUF
GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GGUF_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def to_gguf_name(hf: str) -> str:
    if hf in _GGUF_GLOBAL_NAMES:
        return _GGUF_GLOBAL_NAMES[hf]
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}"


def llamacpp_permute(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter: within each head, HF row h*hd/2 + i goes to row 2*i + h (pairs for its
    RoPE)."""
    head_dim = rows.shape[0] // n_heads
    return (
        rows.reshape(n_heads, 2, head_dim // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)
    )


# Where each block format keeps its fp16 scales (byte offsets in a block): random blocks get valid
# ones there.
FP16_SCALES_AT = {
    "Q8_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}
# gguf-py cannot quantize these: their tiny weights are random blocks
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")


def random_blocks(
    tensor_type: str, rows: int, n: int, rng: np.random.Generator, scale: float = 0.02
) -> np.ndarray:
    """Random rows of a GGML block type, (rows, bytes per row) uint8: random quants, finite fp16
    scales drawn around `scale` (K-quants' sub-block scales and mins are random 6-bit or int8
    values)."""
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.constants import GGMLQuantizationType as QT

    block, size = GGML_QUANT_SIZES[QT[tensor_type]]
    raw = rng.integers(0, 256, (rows, n // block, size), dtype=np.uint8)
    for at in FP16_SCALES_AT.get(tensor_type, ()):
        values = (rng.standard_normal((rows, n // block)) * scale).astype(np.float16)
        raw[:, :, at : at + 2] = values.view(np.uint8).reshape(rows, n // block, 2)
    if tensor_type == "MXFP4":  # the E8M0 byte: 2^(e - 128) around 2^-6, far from infinity
        raw[:, :, 0] = rng.integers(118, 126, (rows, n // block), dtype=np.uint8)
    return raw.reshape(rows, -1)


def gguf_encode(weight: np.ndarray, tensor_type: str):
    """(array to hand GGUFWriter, raw_dtype) for a weight stored as `tensor_type`; 1-D tensors stay
    F32. K-quants: random blocks (seeded from the weight's bytes, so a file is the same every
    time)."""
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import quantize

    if weight.ndim == 1 or tensor_type == "F32":
        return weight.astype(np.float32), None
    if tensor_type == "F16":
        return weight.astype(np.float16), None
    qtype = QT[tensor_type]
    rng = np.random.default_rng(int(weight.view(np.uint32)[..., :8].sum()) % 2**32)
    if tensor_type in K_QUANTS:
        return random_blocks(
            tensor_type, weight.shape[0], weight.shape[1], rng, scale=0.0005
        ), qtype
    try:
        return quantize(weight, qtype), qtype
    # a type gguf-py cannot write (Q8_1, ...): random blocks of its size
    except NotImplementedError:
        return random_blocks(tensor_type, weight.shape[0], weight.shape[1], rng), qtype


def _gguf_writer(path, arch, name, layers, context, hidden, ffn, heads, kv_heads, head_dim, eps):
    """A GGUFWriter for `arch` holding the keys every tiny model's file has: layers, context,
    widths, heads, head size, RMSNorm epsilon."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(eps)
    return writer


def tiny_gguf_writer(path, arch: str, name: str, config):
    """`_gguf_writer` from a family test's transformers config; the caller adds its family's own
    keys and the tiny tokenizer's, then `write_gguf_tensors`."""
    c = config
    return _gguf_writer(
        path, arch, name, c.num_hidden_layers, c.max_position_embeddings, c.hidden_size,
        c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
        c.rms_norm_eps,
    )  # fmt: skip


def write_gguf_tensors(writer, tensors: dict[str, np.ndarray], type_of) -> None:
    """Each tensor encoded as type_of(name) (`gguf_encode`), then the file written and closed."""
    for name, w in tensors.items():
        data, raw_dtype = gguf_encode(np.ascontiguousarray(w), type_of(name))
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def add_tiny_tokenizer(writer, pre: str = "gpt2", chat_template: str = CHATML_TEMPLATE) -> None:
    """The tiny byte-level BPE tokenizer's keys, as llama.cpp's converter writes them."""
    tokens, merges = tiny_vocab()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    # 3 = CONTROL, 1 = NORMAL
    writer.add_token_types([3 if t in SPECIAL_TOKENS else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template)


def write_tiny_gguf(
    path,
    *,
    tensor_type: str = "F32",
    seed: int = 0,
    arch: str = "llama",
    tie_embeddings: bool = False,
    pre: str = "gpt2",
    name: str = "tiny-llama",
    type_overrides: dict[str, str] | None = None,
    rope_freqs: np.ndarray | None = None,
    shape: TinyShape | None = None,
) -> Path:
    """A tiny random model as a GGUF file, written like llama.cpp's converter would. `path` is the
    file or a directory to put `tiny-{arch}.{tensor_type}.gguf` in; `type_overrides` maps HF tensor
    names to another GGML type name (e.g. "Q5_0"); `rope_freqs` adds Llama 3.1-style frequency
    divisors. Returns the file path."""

    path = Path(path)
    if path.suffix != ".gguf":
        path.mkdir(parents=True, exist_ok=True)
        path = path / f"tiny-{arch}.{tensor_type}.gguf"
    s = shape or tiny_shape(arch)
    writer = _gguf_writer(
        path, arch, name, s.n_layers, s.max_seq_len, s.hidden, s.ffn, s.n_heads, s.n_kv_heads,
        s.head_dim, s.rms_eps,
    )  # fmt: skip
    writer.add_rope_dimension_count(s.head_dim)
    writer.add_rope_freq_base(s.rope_theta)
    add_tiny_tokenizer(writer, pre)
    tensors, types = {}, {}
    for hf, weight in tiny_weights(arch, seed, tie_embeddings, s).items():
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            weight = llamacpp_permute(weight, s.n_heads if ".q_proj." in hf else s.n_kv_heads)
        tensors[to_gguf_name(hf)] = weight
        types[to_gguf_name(hf)] = (type_overrides or {}).get(hf, tensor_type)
    if rope_freqs is not None:
        tensors["rope_freqs.weight"] = np.asarray(rope_freqs, dtype=np.float32)
        types["rope_freqs.weight"] = "F32"
    write_gguf_tensors(writer, tensors, types.__getitem__)
    return path


def write_tiny_spm_gguf(path) -> Path:
    """A vocabulary-only GGUF with a SentencePiece-style tokenizer (tokenizer.ggml.model "llama"):
    U+2581 for spaces, <0x00>..<0xFF> byte-fallback tokens, scores instead of merges (score = -id,
    so earlier merges rank first), as llama.cpp's converter writes Llama 2 / Mistral
    vocabularies."""
    import gguf
    from tokenizers import SentencePieceBPETokenizer

    trained = SentencePieceBPETokenizer(add_prefix_space=True)
    trained.train_from_iterator(
        _CORPUS * 4, vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    pieces = sorted(json.loads(trained.to_str())["model"]["vocab"].items(), key=lambda kv: kv[1])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokens = [
        "<unk>",
        "<s>",
        "</s>",
        *byte_tokens,
        *[p for p, _ in pieces if p not in ("<unk>", "<s>", "</s>")],
    ]
    types = [2, 3, 3, *[6] * 256, *[1] * (len(tokens) - 259)]  # UNKNOWN, CONTROL, BYTE, NORMAL
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    path = path / "tiny-spm.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(len(tokens))])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ------------------------------------------------------------------------------------------ HF dirs
def write_tiny_hf_dir(
    path,
    *,
    shards: int = 1,
    dtype: str = "float32",
    seed: int = 0,
    arch: str = "llama",
    tie_embeddings: bool = False,
) -> Path:
    """A tiny random model as a Hugging Face directory: config.json, `shards` safetensors files
    (with model.safetensors.index.json when > 1), tokenizer.json, tokenizer_config.json,
    generation_config.json."""
    import torch
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    s = tiny_shape(arch)
    architecture, model_type = HF_ARCH[arch]
    weights = {
        k: torch.from_numpy(v).to(getattr(torch, dtype))
        for k, v in tiny_weights(arch, seed, tie_embeddings).items()
    }
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": s.hidden,
        "intermediate_size": s.ffn,
        "num_hidden_layers": s.n_layers,
        "num_attention_heads": s.n_heads,
        "num_key_value_heads": s.n_kv_heads,
        "head_dim": s.head_dim,
        "max_position_embeddings": s.max_seq_len,
        "rope_theta": s.rope_theta,
        "rms_norm_eps": s.rms_eps,
        "vocab_size": len(tiny_vocab()[0]),
        "tie_word_embeddings": tie_embeddings,
        "hidden_act": "silu",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": dtype,
        "attention_bias": arch == "qwen2",
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    names = list(weights)
    if shards == 1:
        save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for k in range(shards):
            file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n] for n in names[k::shards]}
            save_file(part, str(path / file), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, file))
        total = sum(t.numel() * t.element_size() for t in weights.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    write_tiny_tokenizer_files(path, s.max_seq_len)
    return path


def write_tiny_tokenizer_files(path: Path, max_seq_len: int) -> None:
    """tokenizer.json, tokenizer_config.json and generation_config.json of the tiny tokenizer."""
    (path / "tokenizer.json").write_text(tiny_tokenizer_json())
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "unk_token": None,
        "add_bos_token": False,
        "chat_template": CHATML_TEMPLATE,
        "model_max_length": max_seq_len,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (path / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
    )


def assert_load_fails(path, *fragments) -> str:
    """Loading `path` raises a one-line UserError that contains every fragment; returns the
    message."""
    with pytest.raises(UserError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def greedy_ids(runner, prompt_ids: list[int], n: int, slot: int = 0) -> list[int]:
    """Plain one-sequence greedy decoding by hand: prefill, then argmax and decode until n tokens;
    the slot is released afterwards."""
    out = [int(np.argmax(runner.prefill(slot, prompt_ids)))]
    while len(out) < n:
        out.append(int(np.argmax(runner.decode([slot], [out[-1]])[0])))
    runner.release(slot)
    return out


def greedy_logits(runner, prompt_ids: list[int], steps: int = 8) -> np.ndarray:
    """The logits of a prefill and of `steps` greedy decode steps after it, stacked (slot 0,
    released afterwards)."""
    out = [runner.prefill(0, prompt_ids)]
    for _ in range(steps):
        out.append(runner.decode([0], [int(np.argmax(out[-1]))])[0])
    runner.release(0)
    return np.stack(out)


def assert_speculation_keeps_greedy_ids(runner, prompts: list[list[int]], n: int) -> None:
    """generate with the ngram proposer gives each prompt's plain greedy ids."""
    from roofline.engine import SamplingParams, generate
    from roofline.engine.runtime.speculate.base import SpecOptions
    from roofline.engine.runtime.speculate.step import speculation_factory

    make = speculation_factory(SpecOptions("ngram", k=6, prompt_lookup_min=1), runner)
    params = SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)
    for ids in prompts:
        want = greedy_ids(runner, ids, n)
        assert list(generate(runner, ids, params, speculation=make())) == want


def four_streams(prompts: list[list[int]]) -> list[list[int]]:
    """The prompts and the first one's first 5 ids, to make four."""
    return [*prompts, prompts[0][:5]]


def side_by_side_ids(runner, cases: list[list[int]], n: int) -> list[list[int]]:
    """The greedy ids of each case, the cases decoded side by side in slots 0, 1, ..."""
    out = [[int(np.argmax(runner.prefill(s, ids)))] for s, ids in enumerate(cases)]
    while len(out[0]) < n:
        logits = runner.decode(list(range(len(cases))), [o[-1] for o in out])
        for o, row in zip(out, logits):
            o.append(int(np.argmax(row)))
    for s in range(len(cases)):
        runner.release(s)
    return out


def assert_four_streams_equal_one(runner, prompts: list[list[int]], n: int) -> None:
    """`four_streams` decoded side by side in slots 0-3 give each one's greedy ids alone."""
    cases = four_streams(prompts)
    assert side_by_side_ids(runner, cases, n) == [greedy_ids(runner, ids, n) for ids in cases]


def assert_logits_match_transformers(hf_model, folder, runner, prompts, rtol=1e-4, atol=2e-5):
    """The decode passes' logits of every prompt position (prefills of each prefix, slot 0), and
    kernels/reference.py's forward over whole prompts, against transformers' (hf_model)."""
    import torch

    from roofline.engine.kernels import reference

    checkpoint = load_checkpoint(str(folder))
    rope = reference.rope_table_stack(checkpoint.config, 128)
    for ids in prompts:
        with torch.no_grad():
            want = hf_model(input_ids=torch.tensor([ids])).logits[0]
            ours = reference.forward(
                checkpoint.config, checkpoint.tensors, torch.tensor(ids), rope=rope
            )
        torch.testing.assert_close(ours, want, rtol=rtol, atol=atol)
        got = np.stack([runner.prefill(0, ids[: i + 1]) for i in range(len(ids))])
        runner.release(0)
        np.testing.assert_allclose(got, want.numpy(), rtol=rtol, atol=atol)


def family_prompt_ids(folder) -> list[list[int]]:
    """FAMILY_PROMPTS encoded by the tokenizer of the model folder."""
    tokenizer = load_checkpoint(str(folder)).tokenizer
    return [tokenizer.encode(text) for text in FAMILY_PROMPTS]
