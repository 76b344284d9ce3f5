"""Which files make a model checkpoint, their tensors, and the spec their metadata gives.

    model.gguf                     one file: header metadata (gguf_config) + tensor infos
    model-00001-of-00003.gguf      a split GGUF (llama.cpp's gguf-split): every part's tensor
                                   infos, the metadata of part 1; any part names the model
    folder/ (config.json + *.safetensors; model.safetensors.index.json names the shards when there)
    folder/model.safetensors       one file, with config.json beside it

Headers only; `files.count_weights` then counts the tensors. `gguf_model_files` and
`safetensors_model_files` build the record from parsed headers, wherever their bytes came from: a
local file here, range reads from the Hub in `modelspec.hub`.
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
from roofline.modelspec.gguf_header import MAGIC, GgufHeader, read_gguf_header
from roofline.modelspec.model import ModelSpec
from roofline.modelspec.parse import read_config_file, spec_from_config
from roofline.modelspec.safetensors_header import SafetensorsHeader, read_safetensors_header
from roofline.modelspec.tensor_roles import StoredTensor

INDEX_NAME = "model.safetensors.index.json"
_SHARD = re.compile(r"-\d{3,6}-of-(\d{3,6})\.safetensors$")
# llama.cpp's gguf-split names its parts "%s-%05d-of-%05d.gguf"
_GGUF_PART = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


class FileKind(StrEnum):
    """The format of a model's files."""

    GGUF = "gguf"
    SAFETENSORS = "safetensors"  # a file, or a checkpoint folder of them


@dataclass(frozen=True)
class ModelFiles:
    kind: FileKind
    source: str  # the path as given
    name: str  # the model's name in the output: the file's or the folder's
    files: tuple[str, ...]  # the files whose headers were read: paths, or places on the Hub
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


def _all_tensors(
    headers: tuple[GgufHeader, ...] | tuple[SafetensorsHeader, ...], advice: str
) -> tuple[StoredTensor, ...]:
    """Every file's tensors, in order; a name in two files is refused (`advice` says why)."""
    tensors: list[StoredTensor] = []
    where: dict[str, str] = {}
    for header in headers:
        for t in header.tensors:
            if t.name in where:
                raise UserError(
                    f"tensor {t.name!r} is in both {where[t.name]} and {header.source}; {advice}"
                )
            where[t.name] = header.source
            tensors.append(t)
    return tuple(tensors)


def gguf_part_names(name: str) -> tuple[str, ...]:
    """The file names of every part of a split GGUF, part 1 first, from any one part's name (its
    folder kept); the name alone when it names no part."""
    m = _GGUF_PART.match(name)
    if m is None or int(m.group("count")) < 1:
        return (name,)
    base, count = m.group("base"), int(m.group("count"))
    suffix = name[-len(".gguf") :]  # the extension as the files spell it
    return tuple(f"{base}-{i:05d}-of-{count:05d}{suffix}" for i in range(1, count + 1))


def gguf_model_files(
    headers: tuple[GgufHeader, ...], *, source: str, name: str, files: tuple[str, ...]
) -> ModelFiles:
    """The model of one GGUF file, or of a split one's parts (part 1 first: its metadata holds the
    shape; every part holds some of the tensor infos)."""
    tensors = _all_tensors(headers, "the parts are of different models")
    names = {t.name: t for t in tensors}
    embed = names.get("token_embd.weight")
    cfg = config_from_gguf(
        headers[0],
        has_output="output.weight" in names,
        vocab_rows=embed.row_count if embed else None,
        expert_router_bias=any("exp_probs_b" in n for n in names),
    )
    try:
        spec = spec_from_config(cfg, name=name)
    except UserError as e:
        raise UserError(
            f"{headers[0].source}: {e} (the config read from the GGUF metadata)"
        ) from None
    return ModelFiles(FileKind.GGUF, source, name, files, tensors, spec, quantized=False)


def _gguf(path: Path, source: str) -> ModelFiles:
    parts = [path.with_name(n) for n in gguf_part_names(path.name)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise UserError(
            f"{path} is part of a GGUF split in {len(parts)} files and {missing[0]} is not "
            "beside it; download every part"
        )
    headers = tuple(read_gguf_header(p) for p in parts)
    files = tuple(str(p) for p in parts)
    return gguf_model_files(headers, source=source, name=parts[0].name, files=files)


def index_shard_names(text: str, where: str) -> list[str]:
    """The shard files a model.safetensors.index.json names (its weight_map's values), sorted."""
    try:
        weight_map = json.loads(text).get("weight_map")
    except (UnicodeDecodeError, ValueError, RecursionError, AttributeError):
        weight_map = None  # not JSON, or not an object
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{where} holds no readable weight_map; fix or remove it")
    return sorted(set(map(str, weight_map.values())))


def default_shard_names(names: list[str]) -> list[str]:
    """Without an index: model.safetensors when there is one, else every .safetensors file."""
    if "model.safetensors" in names:
        return ["model.safetensors"]
    return sorted(n for n in names if n.endswith(".safetensors"))


def _shard_files(folder: Path) -> list[Path]:
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            text = index.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        files = [folder / name for name in index_shard_names(text, str(index))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise UserError(
                f"{index} names {len(missing)} file(s) the folder lacks "
                f"({missing[0]} ...); the download is incomplete"
            )
        return files
    return [folder / n for n in default_shard_names([p.name for p in folder.glob("*.safetensors")])]


def _quantized(cfg: dict[str, Any]) -> bool:
    text = cfg.get("text_config")
    inner = text.get("quantization_config") if isinstance(text, dict) else None
    return bool(cfg.get("quantization_config") or inner)


def safetensors_model_files(
    cfg: dict[str, Any],
    headers: tuple[SafetensorsHeader, ...],
    *,
    source: str,
    name: str,
    files: tuple[str, ...],
) -> ModelFiles:
    """The model of a config.json and the headers of its safetensors files."""
    spec = spec_from_config(cfg, name=name)
    tensors = _all_tensors(
        headers,
        "one checkpoint per folder (or a model.safetensors.index.json naming the shards)",
    )
    return ModelFiles(FileKind.SAFETENSORS, source, name, files, tensors, spec, _quantized(cfg))


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
    headers = tuple(read_safetensors_header(f) for f in files)
    return safetensors_model_files(
        read_config_file(config),
        headers,
        source=source,
        name=folder.resolve().name or str(folder),
        files=tuple(str(f) for f in files),
    )


def locate_model_files(path: Path, source: str) -> ModelFiles | None:
    """The model files at `path` with their tensors and spec; None when it is not a model file."""
    kind = model_file_kind(path)
    if kind == FileKind.GGUF:
        return _gguf(path, source)
    if kind == FileKind.SAFETENSORS:
        return _safetensors(path, source)
    return None
