"""Which files make a model checkpoint, their tensors, and the spec their metadata gives.

    model.gguf                     one file: header metadata (gguf_config) + tensor infos
    folder/ (config.json + *.safetensors; model.safetensors.index.json names the shards when there)
    folder/model.safetensors       one file, with config.json beside it

Headers only; `files.count_weights` then counts the tensors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.gguf_config import config_from_gguf
from roofline.modelspec.gguf_header import MAGIC, read_gguf_header
from roofline.modelspec.model import ModelSpec
from roofline.modelspec.parse import read_config_file, spec_from_config
from roofline.modelspec.safetensors_header import read_safetensors_header
from roofline.modelspec.tensor_roles import StoredTensor

INDEX_NAME = "model.safetensors.index.json"
_SHARD = re.compile(r"-\d{3,6}-of-(\d{3,6})\.safetensors$")


class FileKind(StrEnum):
    """The format of a model's files."""

    GGUF = "gguf"
    SAFETENSORS = "safetensors"  # a file, or a checkpoint folder of them


@dataclass(frozen=True)
class ModelFiles:
    kind: FileKind
    source: str  # the path as given
    name: str  # the model's name in the output: the file's or the folder's
    paths: tuple[Path, ...]
    tensors: tuple[StoredTensor, ...]
    spec: ModelSpec  # from config.json or the GGUF metadata, before the tensors are counted
    quantized: bool  # config.json has a quantization_config: stored elements are not parameters


def model_file_kind(path: Path) -> FileKind | None:
    """The format when the path is a model file or a safetensors checkpoint folder."""
    try:
        if path.is_dir():
            return FileKind.SAFETENSORS if any(path.glob("*.safetensors")) else None
        if not path.is_file():
            return None
        suffix = path.suffix.lower()
        if suffix in (".gguf", ".safetensors"):
            return FileKind(suffix[1:])
        with open(path, "rb") as f:
            return FileKind.GGUF if f.read(4) == MAGIC else None
    except OSError:
        return None


def _gguf(path: Path, source: str) -> ModelFiles:
    header = read_gguf_header(path)
    names = {t.name: t for t in header.tensors}
    embed = names.get("token_embd.weight")
    cfg = config_from_gguf(
        header,
        has_output="output.weight" in names,
        vocab_rows=embed.row_count if embed else None,
        expert_router_bias=any("exp_probs_b" in n for n in names),
    )
    try:
        spec = spec_from_config(cfg, name=path.name)
    except UserError as e:
        raise UserError(f"{path}: {e} (the config read from the GGUF metadata)") from None
    return ModelFiles(
        FileKind.GGUF, source, path.name, (path,), header.tensors, spec, quantized=False
    )


def _shard_files(folder: Path) -> list[Path]:
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError):
            weight_map = None  # not JSON, or not an object
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"{index} holds no readable weight_map; fix or remove it")
        files = [folder / str(f) for f in sorted(set(map(str, weight_map.values())))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise UserError(
                f"{index} names {len(missing)} file(s) the folder lacks "
                f"({missing[0]} ...); the download is incomplete"
            )
        return files
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(folder.glob("*.safetensors"))


def _quantized(cfg: dict[str, Any]) -> bool:
    text = cfg.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, dict) else None
    return bool(cfg.get("quantization_config") or inner)


def _safetensors(path: Path, source: str) -> ModelFiles:
    if path.is_dir():
        folder, files = path, _shard_files(path)
    else:
        m = _SHARD.search(path.name)
        if m:
            raise UserError(
                f"{path} is one shard of {int(m.group(1))}; point at its folder to count them all"
            )
        folder, files = path.parent, [path]
    config = folder / "config.json"
    if not config.is_file():
        raise UserError(
            f"{path}: no config.json beside the safetensors file(s); the shape of the "
            "model (layers, heads, context) comes from it"
        )
    cfg = read_config_file(config)
    name = folder.resolve().name or str(folder)
    spec = spec_from_config(cfg, name=name)
    tensors: list[StoredTensor] = []
    where: dict[str, Path] = {}
    for f in files:
        for t in read_safetensors_header(f).tensors:
            if t.name in where:
                raise UserError(
                    f"tensor {t.name!r} is in both {where[t.name]} and {f}; one "
                    "checkpoint per folder (or a model.safetensors.index.json naming "
                    "the shards)"
                )
            where[t.name] = f
            tensors.append(t)
    return ModelFiles(
        FileKind.SAFETENSORS, source, name, tuple(files), tuple(tensors), spec, _quantized(cfg)
    )


def locate_model_files(path: Path, source: str) -> ModelFiles | None:
    """The model files at `path` with their tensors and spec; None when it is not a model file."""
    kind = model_file_kind(path)
    if kind == FileKind.GGUF:
        return _gguf(path, source)
    if kind == FileKind.SAFETENSORS:
        return _safetensors(path, source)
    return None
