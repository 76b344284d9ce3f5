"""The model catalogue (data/models/*.json) and `load_spec`: a file, a folder, a catalogue name or
a Hugging Face Hub id -> ModelSpec. A GGUF file or a safetensors checkpoint goes to
`modelspec.files`, a Hub id (`owner/name[:quant]`) to `modelspec.hub`.

Resolution order: a local file or folder, a catalogue name, then the Hub. A name that is both (the
catalogue's `Qwen/Qwen3-8B`, or a folder `owner/name` here) is the local one, and a note says so;
a `revision` always reads the Hub.

Each catalogue file holds one model: {"id": "openai/gpt-oss-120b", "aliases": [...], "source": URL,
"retrieved": date, "config": {... the config.json contents ...}}. Names resolve case-insensitively
by id or alias.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.files import spec_from_file
from roofline.modelspec.hub import parse_hub_id  # light: huggingface_hub loads when used
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


def _local_spec(text: str) -> tuple[ModelSpec, str] | None:
    """The spec of a local file or folder, or of a catalogue entry, and which of them it is; None
    when the text names neither."""
    path = Path(text).expanduser()
    if model_file_kind(path) is not None:  # .gguf, .safetensors, a safetensors checkpoint folder
        return spec_from_file(path), f"the local {'folder' if path.is_dir() else 'file'} {text}"
    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise UserError(
                f"{path} holds no config.json; point at the model's folder or its config.json"
            )
        spec = spec_from_config(read_config_file(cfg_path), name=path.resolve().name or text)
        return spec, f"the local folder {text}"
    if path.is_file():
        parent = path.resolve().parent.name
        return spec_from_config(read_config_file(path), name=parent or path.stem), text
    entry = find_model(text)
    if entry is not None:
        spec = spec_from_config(entry.config, name=entry.id)
        return spec, f"roofline's catalogue entry {entry.id} (its config.json of {entry.retrieved})"
    return None


def load_spec(source: str, revision: str | None = None) -> ModelSpec:
    """A ModelSpec from a GGUF file, a safetensors checkpoint (folder or file), a config.json
    path, a folder holding one, a catalogue name/alias, or a Hub id `owner/name[:quant]` (read
    from the Hub at `revision`, or at main)."""
    text = str(source).strip()
    if not text:
        raise UserError(
            "give a model: a catalogue name (see `roofline models list`), "
            "a config.json or its folder, or a Hub id owner/name"
        )
    hub_id = parse_hub_id(text)
    if revision is not None and hub_id is None:
        raise UserError(f"--revision is for a Hub repo (owner/name); {text!r} is not one")
    if revision is None:
        found = _local_spec(text)
        if found is not None:
            spec, which = found
            if hub_id is None:
                return spec
            note = f"model: {which}, not the Hub repo of that name (--revision main reads that)"
            return dataclasses.replace(spec, notes=(*spec.notes, note))
    if hub_id is not None:
        from roofline.modelspec.hub import hub_model

        return hub_model(hub_id, revision, asked=text).spec
    if text.endswith(".json") or text.startswith((".", "/", "~")):
        raise UserError(f"no such file {text!r}; check the path to the config.json")
    raise UserError(
        f"unknown model {text!r}: not a file, a folder with a config.json, a catalogue name "
        "(see `roofline models list`) or a Hub id owner/name"
    )
