"""The model catalogue (data/models/*.json) and `load_spec`: a file, a folder, or a catalogue name
-> ModelSpec. A GGUF file or a safetensors checkpoint goes to `modelspec.files`.

Each catalogue file holds one model: {"id": "openai/gpt-oss-120b", "aliases": [...], "source": URL,
"retrieved": date, "config": {... the config.json contents ...}}. Names resolve case-insensitively
by id or alias.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.files import spec_from_file
from roofline.modelspec.model import ModelSpec
from roofline.modelspec.model_files import model_file_kind
from roofline.modelspec.parse import read_config_file, spec_from_config


@dataclass(frozen=True)
class CatalogueModel:
    id: str
    aliases: tuple[str, ...]
    source: str
    retrieved: str
    config: dict[str, Any]
    title: str = ""
    kind: str = "config.json"


def _models_dir():
    return resources.files("roofline") / "data" / "models"


def catalogue_models() -> list[CatalogueModel]:
    """Every catalogue entry, sorted by id."""
    out = []
    for entry in _models_dir().iterdir():
        if not entry.name.endswith(".json"):
            continue
        d = json.loads(entry.read_text(encoding="utf-8"))
        out.append(
            CatalogueModel(
                id=d["id"],
                aliases=tuple(d.get("aliases", ())),
                source=d["source"],
                retrieved=d["retrieved"],
                config=d["config"],
                title=d.get("title", ""),
                kind=d.get("kind", "config.json"),
            )
        )
    return sorted(out, key=lambda m: m.id.lower())


def find_model(name: str) -> CatalogueModel | None:
    key = name.strip().lower()
    for m in catalogue_models():
        if key == m.id.lower() or key in (a.lower() for a in m.aliases):
            return m
    return None


def load_spec(source: str) -> ModelSpec:
    """A ModelSpec from a GGUF file, a safetensors checkpoint (folder or file), a config.json
    path, a folder holding one, or a catalogue name/alias."""
    text = str(source).strip()
    if not text:
        raise UserError(
            "give a model: a catalogue name (see `roofline models list`), "
            "a config.json or its folder"
        )
    path = Path(text).expanduser()
    if model_file_kind(path) is not None:  # .gguf, .safetensors, a safetensors checkpoint folder
        return spec_from_file(path)
    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise UserError(
                f"{path} holds no config.json; point at the model's folder or its config.json"
            )
        return spec_from_config(read_config_file(cfg_path), name=path.resolve().name or text)
    if path.is_file():
        parent = path.resolve().parent.name
        return spec_from_config(read_config_file(path), name=parent or path.stem)
    entry = find_model(text)
    if entry is not None:
        return spec_from_config(entry.config, name=entry.id)
    if text.endswith(".json") or text.startswith((".", "/", "~")):
        raise UserError(f"no such file {text!r}; check the path to the config.json")
    raise UserError(
        f"unknown model {text!r}: not a file, a folder with a config.json, or a catalogue name; "
        "see `roofline models list`"
    )
