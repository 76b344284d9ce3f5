"""Hugging Face model directories: config.json, single or sharded *.safetensors, tokenizer.json.
gpt-oss's experts come fused (`fused_experts`) or as MXFP4 blocks (`mxfp4_experts`: kept as
llama.cpp's MXFP4 rows, as a GGUF's quantized tensors are)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from roofline.engine.loading.block_formats import BLOCK_FORMATS
from roofline.engine.loading.checkpoint import (
    FLOAT_DTYPES,
    Checkpoint,
    check_tensors,
    hf_tensor_names,
    shape_only,
)
from roofline.engine.loading.fused_experts import split_fused_experts
from roofline.engine.loading.hf_config import config_from_hf, family_of, read_json
from roofline.engine.loading.mxfp4_experts import MXFP4_PART, split_mxfp4_experts
from roofline.errors import UserError
from roofline.modelspec.parse import language_model_config

# Mixtral's names of a mixture of experts' tensors -> the engine's (Qwen3-MoE's): w1 the gate, w3
# the up, w2 the down projection
_MIXTRAL_NAMES = {
    "block_sparse_moe.gate.": "mlp.gate.",
    ".w1.": ".gate_proj.",
    ".w3.": ".up_proj.",
    ".w2.": ".down_proj.",
}
INDEX_FILE = "model.safetensors.index.json"


def safetensors_files(folder: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The weight files of a directory and, when sharded, the index's tensor -> file map."""
    index_path = folder / INDEX_FILE
    if index_path.is_file():
        weight_map = read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"{index_path} has no weight_map; the checkpoint directory is damaged")
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise UserError(
                f"{folder}: shard(s) {', '.join(missing)} listed in {INDEX_FILE} are missing; "
                "download them"
            )
        return files, weight_map
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        others = sorted(p.name for p in folder.glob("*.bin")) + sorted(
            p.name for p in folder.glob("*.pth")
        )
        hint = f" (found {', '.join(others[:3])}: convert them to safetensors)" if others else ""
        raise UserError(f"{folder} holds no *.safetensors weights{hint}")
    return files, None


def _read_file(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file as numpy arrays (the library memory-maps it and copies
    each tensor out once; BF16 as ml_dtypes' bfloat16)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            # SIM118 does not apply: a safe_open handle is no dict and is not iterable
            return {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise UserError(
            f"{path} is not a readable safetensors file ({exc}); it is truncated or corrupt: "
            "download it again"
        ) from None


# A multimodal wrapper's language model, under transformers 5's names and 4's: its tensors are the
# text model's (the vision tower's are never asked for)
_WRAPPED_PREFIXES = {
    "model.language_model.": "model.",
    "language_model.model.": "model.",
    "language_model.lm_head.": "lm_head.",
}


def engine_name(name: str) -> str:
    """A checkpoint's tensor name as the engine calls it: a wrapped language model's unwrapped
    (`_WRAPPED_PREFIXES`), Mixtral's experts and gpt-oss's router renamed (`_MIXTRAL_NAMES`,
    `mlp.gate`), every other name as it is."""
    for old, new in _WRAPPED_PREFIXES.items():
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    if ".mlp.router." in name:  # gpt-oss's router
        return name.replace(".mlp.router.", ".mlp.gate.")
    if ".block_sparse_moe." not in name:
        return name
    name = name.replace(".block_sparse_moe.experts.", ".mlp.experts.")
    for old, new in _MIXTRAL_NAMES.items():
        name = name.replace(old, new)
    return name


def read_tensors(
    folder: Path, needed: set[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The `needed` tensors of a directory (other entries, e.g. rotary inv_freq buffers, are
    skipped), and of those stored as MXFP4 blocks (gpt-oss's experts) llama.cpp's MXFP4 rows."""
    files, weight_map = safetensors_files(folder)
    tensors: dict[str, np.ndarray] = {}
    mxfp4: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # (prefix, proj) -> blocks, scales
    for path in files:
        for name, value in _read_file(path).items():
            name = engine_name(name)
            if name in needed:
                tensors[name] = value
            # gpt-oss: a layer's experts in one tensor a projection, split into the needed ones
            for part, t in split_fused_experts(name, value).items():
                if part in needed:
                    tensors[part] = t
            match = MXFP4_PART.fullmatch(name)
            if match:
                prefix, projection, kind = match.groups()
                mxfp4.setdefault((prefix, projection), {})[kind] = value
    raw = {}
    for (prefix, projection), pair in mxfp4.items():
        if set(pair) != {"blocks", "scales"}:
            raise UserError(
                f"{folder}: {prefix}{projection} has MXFP4 {', '.join(pair)} but not both blocks "
                "and scales; the checkpoint is incomplete"
            )
        rows = split_mxfp4_experts(prefix, projection, pair["blocks"], pair["scales"])
        raw.update({name: r for name, r in rows.items() if name in needed})
    if weight_map is not None:
        absent = [
            name
            for name in weight_map
            if engine_name(name) in needed and engine_name(name) not in tensors
        ]
        if absent:
            raise UserError(
                f"{folder}: {absent[0]} is listed in {INDEX_FILE} but not in "
                f"{weight_map[absent[0]]}; the shard is damaged"
            )
    return tensors, raw


def _mxfp4_tensors(raw: dict[str, np.ndarray], dequantize: bool) -> dict[str, np.ndarray]:
    """The Checkpoint tensors of MXFP4 rows: float32 (dequantizing is exact), or with
    dequantize=False `shape_only` (only the rows are kept)."""
    import gguf
    from gguf.constants import GGMLQuantizationType as QT

    block = BLOCK_FORMATS["MXFP4"]
    out = {}
    for name, rows in raw.items():
        shape = (rows.shape[0], rows.shape[1] // block.block_bytes * block.block)
        out[name] = gguf.quants.dequantize(rows, QT.MXFP4) if dequantize else shape_only(shape)
    return out


def load_hf_dir(folder: str | Path, *, dequantize: bool = True) -> Checkpoint:
    """Load an HF directory: weights keep their stored float dtype; ties are honoured when lm_head
    is absent. MXFP4 experts (gpt-oss) are float32, or with dequantize=False only their rows."""
    from roofline.engine.loading.hf_tokenizer import tokenizer_from_hf_dir

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UserError(
            f"{folder} has no config.json; pass a Hugging Face model directory or a .gguf file"
        )
    raw_config = read_json(config_path)
    config = config_from_hf(raw_config, folder.name, folder)
    untied = replace(config, tie_embeddings=False)
    tensors, mxfp4 = read_tensors(folder, set(hf_tensor_names(untied)))
    if "lm_head.weight" not in tensors or config.tie_embeddings:
        # Tied checkpoints reuse the embedding as the output projection; some still save a copy of
        # it.
        tensors.pop("lm_head.weight", None)
        config = replace(config, tie_embeddings=True)
    for name, value in tensors.items():
        if value.dtype not in FLOAT_DTYPES:
            raise UserError(
                f"{folder}: tensor {name} is stored as {value.dtype}; "
                "supported: float32, float16, bfloat16"
            )
    stored = {name: FLOAT_DTYPES[value.dtype] for name, value in tensors.items()}
    tensors.update(_mxfp4_tensors(mxfp4, dequantize))
    stored.update(dict.fromkeys(mxfp4, "MXFP4"))
    check_tensors(tensors, config, str(folder))
    if family_of(raw_config, folder).norm_plus_one:
        # Gemma: the norm multiplies by 1 + w (in float32); 1 + w is folded in here, as llama.cpp's
        # converter stores it, so that every loader hands the kernels the factor itself
        for name in [n for n in tensors if n.endswith("norm.weight")]:
            tensors[name] = tensors[name].astype(np.float32) + np.float32(1.0)
    # a wrapper's bos/eos ids may sit in its text_config
    tokenizer = tokenizer_from_hf_dir(
        folder, {**language_model_config(raw_config)[0], **raw_config}
    )
    return Checkpoint(
        config=config,
        tensors=tensors,
        tokenizer=tokenizer,
        path=str(folder),
        stored_format=stored,
        raw={name: ("MXFP4", rows) for name, rows in mxfp4.items()},
    )
