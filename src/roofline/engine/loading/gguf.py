"""GGUF checkpoints (llama.cpp's format): metadata -> ModelConfig, tensors -> HF layout. The header
is read by roofline's own parser (`modelspec.gguf_header`: 0.1 s for the shipped file, where the
`gguf` package's reader took 2.6 s at every server start); the `gguf` package gives the types and
dequantizes.

Two things differ from a Hugging Face checkpoint besides the names:
- GGUF stores a Linear weight with ne = (in_features, out_features), i.e. numpy shape (out, in): the
  HF layout. Quantized types pack each row into blocks of 32 or 256 values
  (`block_formats`), so a row of blocks is one output row and the raw bytes can be reordered
  by rows like a float matrix.
- For the `llama` architecture, llama.cpp's converter permutes the rows of q_proj and k_proj inside
  every head so that its RoPE can rotate adjacent pairs (x[2i], x[2i+1]) instead of HF's halves
  (x[i], x[i+hd/2]). Row 2*i + h of a GGUF head holds HF row h*hd/2 + i (h in {0, 1}, i < hd/2);
  `unpermute_rope_rows` undoes it. qwen2/qwen3 GGUFs are written unpermuted (llama.cpp runs their
  RoPE in the HF "neox" order).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGMLQuantizationType as QT

from roofline.engine.loading.block_formats import BLOCK_FORMATS
from roofline.engine.loading.checkpoint import BFLOAT16, Checkpoint, check_tensors, shape_only
from roofline.engine.loading.config import SUPPORTED_ARCHS, ModelConfig, Routing
from roofline.engine.loading.gguf_block import block_fields
from roofline.engine.loading.gguf_names import (
    NON_WEIGHT_TENSORS,
    expert_name,
    expert_tensor,
    hf_name,
    split_gate_up,
)
from roofline.engine.loading.rope_scaling import rope_scaling_from_gguf
from roofline.errors import UserError
from roofline.modelspec.families import get_family, model_type_of_gguf_arch
from roofline.modelspec.gguf_header import ArrayValue, GgufHeader, read_gguf_header

FLOAT_TYPES = {QT.F32: "F32", QT.F16: "F16", QT.BF16: "BF16"}
# the block formats the kernels compute on (block_formats' one table), by GGUF type
QUANT_TYPES = {QT[f.name]: f.name for f in BLOCK_FORMATS.values() if f.block > 1}


@dataclass(frozen=True)
class GgufTensor:
    """One tensor of a GGUF file: its GGML type id, dims (ne0 first), bytes, and its data as a
    numpy view of the mapped file, shaped as gguf's reader shapes it: F32 and F16 as such (dims
    reversed), every other type as uint8 rows of its blocks' bytes."""

    name: str
    tensor_type: int
    shape: tuple[int, ...]
    n_bytes: int
    data: np.ndarray


@dataclass(frozen=True)
class GgufFile:
    header: GgufHeader  # every array whole (the vocabulary's strings included)
    tensors: tuple[GgufTensor, ...]


def open_gguf(path: str | os.PathLike) -> GgufFile:
    """Parse a GGUF file's header (`modelspec.gguf_header`, every array whole) and map its tensors.
    mode="c" maps the file copy-on-write: tensors are writable, the file never is; pages are read
    when a tensor is."""
    header = read_gguf_header(path, whole_arrays=True)
    # a plain ndarray view: numpy's memmap subclass pays a Python-level hook on every slice
    mapped = np.memmap(path, mode="c").view(np.ndarray)
    tensors = []
    for t, start in zip(header.tensors, header.tensor_offsets_bytes):
        if t.type_name not in QT.__members__:
            raise UserError(
                f"{path}: tensor {t.name} is stored as {t.type_name}, a type the gguf package "
                "does not know; update it (pip install -U gguf)"
            )
        qtype = QT[t.type_name]
        dims = tuple(reversed(t.shape))  # numpy order
        raw = mapped[start : start + t.n_bytes]
        if qtype in (QT.F32, QT.F16):
            data = raw.view(np.float32 if qtype == QT.F32 else np.float16).reshape(dims)
        else:  # rows of blocks: (..., bytes of a row)
            data = raw.reshape((*dims[:-1], t.row_bytes) if dims else (t.n_bytes,))
        tensors.append(GgufTensor(t.name, int(qtype), t.shape, t.n_bytes, data))
    return GgufFile(header, tuple(tensors))


def _python_value(value: object) -> object:
    if isinstance(value, ArrayValue):
        return [_python_value(v) for v in value.items or ()]
    return value


def gguf_metadata(f: GgufFile) -> dict[str, object]:
    """Every key/value of the header as Python values (strings, numbers, lists)."""
    return {key: _python_value(v) for key, v in f.header.metadata.items()}


def display_name(path: Path) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct`: the file stem without its
    format suffix."""
    return re.sub(r"[.\-_](?:[QqIi]Q?\d\w*|[Ff]16|[Ff]32|[Bb][Ff]16)$", "", path.stem) or path.stem


def _uniform_int(meta: dict, key: str, path: Path, default: int | None = None) -> int:
    """An integer hyperparameter; GGUF may store a per-layer list, which must then be uniform."""
    value = meta.get(key, default)
    if value is None:
        raise UserError(f"{path}: GGUF metadata lacks {key}; the file is incomplete")
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise UserError(
                f"{path}: {key} varies per layer ({sorted(set(value))}); "
                "such models are not supported"
            )
        value = value[0]
    return int(value)


def _float32_value(value: object) -> float:
    """A float stored as float32, as its shortest decimal (9.99999974738e-06 -> 1e-05, like the HF
    config)."""
    return float(str(np.float32(value)))


# GGUF architectures whose experts the engine runs (Mixtral's is llama's)
MOE_ARCHS = ("qwen3moe", "llama", "gpt-oss")


def _moe_fields(meta: dict, arch: str, shapes: dict, path: Path) -> dict:
    """ModelConfig's mixture-of-experts fields ({} without experts); llama.cpp renormalises the
    picked experts' weights of these architectures (norm_topk), or (gpt-oss) softmaxes the picked
    logits alone (the family's routing). An expert's rows: expert_feed_forward_length, else
    (Mixtral) feed_forward_length. Expert biases: gpt-oss's bias tensors; its SwiGLU's clamp and
    gain are no GGUF key (llama.cpp fixes them): the family's transformers defaults."""
    n_experts = int(meta.get(f"{arch}.expert_count") or 0)
    if n_experts == 0:
        return {}
    if arch not in MOE_ARCHS:
        raise UserError(
            f"{path}: mixture-of-experts {arch} models are not supported (expert_count > 0); "
            f"supported: {', '.join(MOE_ARCHS)}"
        )
    family = get_family(model_type_of_gguf_arch().get(arch, arch))
    routing = Routing(family.routing) if family is not None else Routing.SOFTMAX_TOPK
    expert_bias = any(f"blk.0.ffn_{x}_exps.bias" in shapes for x in ("gate", "gate_up"))
    swiglu = (
        {k: float(family.defaults[k]) for k in ("swiglu_limit", "swiglu_alpha")}
        if family is not None and "swiglu_limit" in family.defaults
        else {}
    )
    return dict(
        n_experts=n_experts,
        n_experts_used=_uniform_int(meta, f"{arch}.expert_used_count", path),
        norm_topk=True,
        routing=routing,
        expert_bias=expert_bias,
        **swiglu,
        ffn=_uniform_int(
            meta,
            f"{arch}.expert_feed_forward_length",
            path,
            default=meta.get(f"{arch}.feed_forward_length"),
        ),
    )


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], path: Path) -> ModelConfig:
    """ModelConfig from `{arch}.*` metadata; `shapes` (GGUF name -> numpy shape) settle vocab, ties,
    biases."""
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise UserError(
            f"{path}: GGUF architecture {arch!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ARCHS)}"
        )
    moe = _moe_fields(meta, arch, shapes, path)
    n_heads = _uniform_int(meta, f"{arch}.attention.head_count", path)
    hidden = _uniform_int(meta, f"{arch}.embedding_length", path)
    head_dim = _uniform_int(
        meta, f"{arch}.attention.key_length", path, default=hidden // max(n_heads, 1)
    )
    if _uniform_int(meta, f"{arch}.attention.value_length", path, default=head_dim) != head_dim:
        raise UserError(f"{path}: key and value head sizes differ; such models are not supported")
    if _uniform_int(meta, f"{arch}.rope.dimension_count", path, default=head_dim) != head_dim:
        raise UserError(
            f"{path}: RoPE covers only part of each head (partial rotary); not supported"
        )
    if "token_embd.weight" not in shapes:
        raise UserError(f"{path}: tensor token_embd.weight is missing; the file is incomplete")
    n_layers = _uniform_int(meta, f"{arch}.block_count", path)
    try:
        return ModelConfig(
            arch=arch,
            name=display_name(path),
            n_layers=n_layers,
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=_uniform_int(meta, f"{arch}.attention.head_count_kv", path, default=n_heads),
            head_dim=head_dim,
            ffn=moe.pop("ffn", None) or _uniform_int(meta, f"{arch}.feed_forward_length", path),
            vocab_size=shapes["token_embd.weight"][0],
            max_seq_len=_uniform_int(meta, f"{arch}.context_length", path),
            rope_theta=_float32_value(meta.get(f"{arch}.rope.freq_base", 10000.0)),
            rms_eps=_float32_value(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
            rope_scaling=None,  # filled in by load_gguf (needs the rope_freqs tensor)
            tie_embeddings="output.weight" not in shapes,
            attn_bias="blk.0.attn_q.bias" in shapes,
            o_bias="blk.0.attn_output.bias" in shapes,
            sinks="blk.0.attn_sinks.weight" in shapes,
            qk_norm="blk.0.attn_q_norm.weight" in shapes,
            **block_fields(meta, arch, n_layers, hidden, n_heads, head_dim, path),
            **moe,
        )
    except ValueError as exc:
        raise UserError(f"{path}: inconsistent model hyperparameters ({exc})") from None


def unpermute_rope_rows(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (see module doc). Works on any array whose first axis is
    the output rows: float weights, biases, and rows of quantized blocks alike. Returns a contiguous
    copy."""
    head_dim = rows.shape[0] // n_heads
    # [head, i, h, ...] = GGUF row 2i+h
    grouped = rows.reshape(n_heads, head_dim // 2, 2, *rows.shape[1:])
    # [head, h, i, ...] = HF order
    return np.ascontiguousarray(grouped.swapaxes(1, 2)).reshape(rows.shape)


def _rope_heads(name: str, config: ModelConfig) -> int | None:
    """How many heads to un-permute for this tensor: q -> n_heads, k -> n_kv_heads, others ->
    None."""
    # the GGUF architecture's family (gemma3 is gemma3_text: not every name is a model type)
    family = get_family(model_type_of_gguf_arch().get(config.arch, config.arch))
    if family is None or not family.gguf_permutes_qk:
        return None
    if ".self_attn.q_proj." in name:
        return config.n_heads
    if ".self_attn.k_proj." in name:
        return config.n_kv_heads
    return None


def _convert(
    tensor, hf: str, config: ModelConfig, path: Path, dequantize: bool = True
) -> tuple[np.ndarray, str, np.ndarray | None]:
    """One GGUF tensor -> (HF-layout tensor, stored format, raw quantized rows or None). Without
    `dequantize`, a quantized tensor's is `shape_only`: only its rows are kept."""
    qtype = QT(tensor.tensor_type)
    data = tensor.data
    if data.nbytes != tensor.n_bytes:
        raise UserError(
            f"{path}: tensor {tensor.name} is cut short; the file is truncated: download it again"
        )
    heads = _rope_heads(hf, config)
    if heads is not None:
        data = unpermute_rope_rows(data, heads)
    if qtype in (QT.F32, QT.F16):
        return data, FLOAT_TYPES[qtype], None
    if qtype == QT.BF16:  # stored as uint8, two bytes per value
        return data.view(BFLOAT16), "BF16", None
    if qtype in QUANT_TYPES:
        if not dequantize:
            return shape_only(tuple(reversed(tensor.shape))), QUANT_TYPES[qtype], data
        return gguf.quants.dequantize(data, qtype), QUANT_TYPES[qtype], data
    raise UserError(
        f"{path}: tensor {tensor.name} is stored as {qtype.name}; supported: F32, F16, BF16, "
        f"{', '.join(QUANT_TYPES.values())} (re-quantize the model to one of those with "
        "llama.cpp's llama-quantize)"
    )


def load_gguf(path: str | os.PathLike, *, dequantize: bool = True) -> Checkpoint:
    """Load a GGUF file: config, HF-named tensors (quantized ones dequantized to float32, or with
    dequantize=False left as their raw rows only), tokenizer."""
    from roofline.engine.loading.gguf_tokenizer import tokenizer_from_gguf

    path = Path(path)
    gguf_file = open_gguf(path)
    meta = gguf_metadata(gguf_file)
    by_name = {t.name: t for t in gguf_file.tensors}
    shapes = {name: tuple(reversed(t.shape)) for name, t in by_name.items()}
    config = config_from_gguf(meta, shapes, path)
    freqs = by_name.get("rope_freqs.weight")
    family = get_family(model_type_of_gguf_arch().get(config.arch, config.arch))
    rope_scaling = rope_scaling_from_gguf(
        meta,
        config,
        None if freqs is None else np.asarray(freqs.data, np.float32),
        yarn_truncate=family is None or family.yarn_truncate,
    )
    if rope_scaling is not None:
        config = replace(config, rope_scaling=rope_scaling)

    unknown = [
        n
        for n in by_name
        if hf_name(n, config.post_norms) is None
        and n not in NON_WEIGHT_TENSORS
        and not (config.moe and expert_tensor(n))
    ]
    if unknown:
        raise UserError(
            f"{path}: tensors {unknown[:4]} are not part of a {config.arch} decoder; "
            "this model is not supported"
        )
    tensors, stored, raw = {}, {}, {}
    # Serial on purpose: gguf's dequantize is many small numpy steps, which a thread pool slowed.
    for name, tensor in by_name.items():
        if name in NON_WEIGHT_TENSORS:
            continue
        packed = expert_tensor(name)
        if packed is None:
            hf = hf_name(name, config.post_norms)
            tensors[hf], stored[hf], blocks = _convert(tensor, hf, config, path, dequantize)
            if blocks is not None:
                raw[hf] = (stored[hf], blocks)
            continue
        # every expert's projection (experts, out, in): one HF tensor each, a view into it
        layer, projection = packed
        t, fmt, blocks = _convert(
            tensor, expert_name(layer, 0, projection), config, path, dequantize
        )
        # a weight (experts, out, in), a bias (experts, out)
        if t.ndim != (2 if projection.endswith(".bias") else 3) or t.shape[0] != config.n_experts:
            raise UserError(
                f"{path}: tensor {name} has shape {tuple(t.shape)}, not "
                f"{config.n_experts} experts' matrices; the file is inconsistent"
            )
        for part, t_part, rows in split_gate_up(projection, t, blocks):
            for e in range(config.n_experts):
                hf = expert_name(layer, e, part)
                tensors[hf], stored[hf] = t_part[e], fmt
                if rows is not None:
                    raw[hf] = (fmt, rows[e])
    check_tensors(tensors, config, str(path))
    tokenizer = tokenizer_from_gguf(meta, path)
    return Checkpoint(
        config=config,
        tensors=tensors,
        tokenizer=tokenizer,
        path=str(path),
        stored_format=stored,
        raw=raw,
    )
