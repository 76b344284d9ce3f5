"""A model file -> the bytes one decoded token reads, from its tensors' types and shapes.

Reads GGUF, a safetensors folder or one .safetensors file beside a config.json: headers only,
stdlib only. The counting rule is the embedded engine's (`engine.weights`):

    bytes_per_token = sum of every tensor's n_bytes       each weight read once per token
                      - embedding table + one row         a lookup reads one row
                      + lm_head in full                   tied (no lm_head tensor): the embeddings
    routed experts: top-k / E of their bytes              (stacked or one tensor per expert)

Parameters come from the shapes (a GGUF shape counts weights whatever the type), except in a
quantized safetensors checkpoint (several weights per element): there from config.json. Vision,
audio and multi-token-prediction tensors do not decode text: left out, and said so.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.components import components
from roofline.modelspec.formats import WeightFormat, parse_format
from roofline.modelspec.model import COMPONENT_KEYS, ModelSpec, StoredComponent
from roofline.modelspec.model_files import (
    FileKind,
    ModelFiles,
    gguf_part_names,
    locate_model_files,
)
from roofline.modelspec.tensor_roles import StoredTensor, TensorRole, role_of


@dataclass(frozen=True)
class ComponentWeights:
    key: str  # one of model.COMPONENT_KEYS
    format: str  # the stored types, most bytes first: 'Q4_1', 'Q4_K+Q6_K', 'BF16'
    params_stored: int
    params_read: int  # per decoded token: experts top-k of E, embeddings one row
    bytes_stored: int
    bytes_read: int

    @property
    def bits_per_weight(self) -> float:
        """Bits per parameter read (scales included); the stored ratio when nothing is read."""
        if self.params_read:
            return 8.0 * self.bytes_read / self.params_read
        return 8.0 * self.bytes_stored / self.params_stored if self.params_stored else 0.0


@dataclass(frozen=True)
class FileWeights:
    source: str  # the path as given
    kind: FileKind
    files: tuple[str, ...]  # the files whose headers were read
    components: tuple[ComponentWeights, ...]
    type_bytes: Mapping[str, int]  # stored bytes per tensor type, most first
    tied_embeddings: bool  # no lm_head/output tensor: the embedding table is read as lm_head
    tensors_counted: int
    tensors_skipped: int  # vision/audio towers, multi-token-prediction layers
    bytes_skipped: int
    params_from_config: bool = False  # quantized safetensors: params from config.json

    @property
    def tensor_types(self) -> tuple[str, ...]:
        return tuple(self.type_bytes)

    @property
    def params_total(self) -> int:
        return sum(c.params_stored for c in self.components)

    @property
    def params_read(self) -> int:
        """Distinct parameters one token reads (the tied embedding row is part of the lm_head)."""
        return sum(
            c.params_read
            for c in self.components
            if not (c.key == "embeddings" and self.tied_embeddings)
        )

    @property
    def bytes_stored(self) -> int:
        return sum(c.bytes_stored for c in self.components)

    @property
    def bytes_per_token(self) -> int:
        """Weight bytes one batch-1 decode step reads, by the engine's rule (every tensor)."""
        return sum(c.bytes_read for c in self.components)

    def bytes_per_token_at(self, bits_per_weight: float | None) -> float:
        """Weight bytes a batch-1 decode step reads with every weight it reads held at
        `bits_per_weight` (scales not counted); None: as the file stores them."""
        if bits_per_weight is None:
            return float(self.bytes_per_token)
        return self.params_read * bits_per_weight / 8.0

    def component(self, key: str) -> ComponentWeights | None:
        return next((c for c in self.components if c.key == key), None)

    def to_json(self) -> dict[str, Any]:
        """Every field, plus the totals (bytes_per_token, params_total, ...), as JSON values."""
        out = dataclasses.asdict(self)
        out["type_bytes"] = dict(self.type_bytes)
        out.update(
            bytes_per_token=self.bytes_per_token,
            bytes_stored=self.bytes_stored,
            params_total=self.params_total,
            params_read=self.params_read,
        )
        return out


def _format_name(type_bytes: Mapping[str, int]) -> str:
    return "+".join(sorted(type_bytes, key=lambda t: (-type_bytes[t], t)))


class _Tally:
    """Per component: parameters and bytes (plain, routed-expert, one embedding row), and bytes
    per stored type."""

    def __init__(self) -> None:
        self.params: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.bytes: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.types: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def add(self, t: StoredTensor, role: TensorRole) -> None:
        p, b = self.params[role.key], self.bytes[role.key]
        if role.key == "embeddings":  # a lookup reads one row of each embedding tensor
            rows = max(t.row_count, 1)
            p[2] += t.n_elements // rows
            b[2] += t.n_bytes // rows
        slot = 1 if role.expert else 0
        p[slot] += t.n_elements
        b[slot] += t.n_bytes
        self.types[role.key][t.type_name] += t.n_bytes

    def has_experts(self) -> bool:
        return "experts" in self.params and self.params["experts"][1] > 0

    def component(self, key: str, top_k: int, num_experts: int) -> ComponentWeights:
        (p_plain, p_exp, p_row), (b_plain, b_exp, b_row) = self.params[key], self.bytes[key]
        if key == "embeddings":
            p_read, b_read = p_row, b_row
        else:
            p_read = p_plain + p_exp * top_k // num_experts
            b_read = b_plain + b_exp * top_k // num_experts
        return ComponentWeights(
            key, _format_name(self.types[key]), p_plain + p_exp, p_read, b_plain + b_exp, b_read
        )


def _moe_shape(spec: ModelSpec, source: str) -> tuple[int, int]:
    if spec.moe is None:
        raise UserError(
            f"{source} holds routed-expert tensors but its metadata names no experts "
            "(their count and how many each token uses); the file is incomplete"
        )
    return spec.moe.top_k, spec.moe.num_experts


def count_weights(files: ModelFiles, spec: ModelSpec) -> FileWeights:
    """The file's tensors, sorted into components and counted under the engine's rule."""
    tally, skipped, skipped_bytes = _Tally(), 0, 0
    type_bytes: dict[str, int] = defaultdict(int)
    for t in files.tensors:
        role = role_of(t.name, gguf=files.kind == FileKind.GGUF, num_layers=spec.num_layers)
        if role is None:
            skipped, skipped_bytes = skipped + 1, skipped_bytes + t.n_bytes
            continue
        tally.add(t, role)
        type_bytes[t.type_name] += t.n_bytes
    top_k, n_exp = _moe_shape(spec, files.source) if tally.has_experts() else (1, 1)
    tied = "lm_head" not in tally.params
    built = {k: tally.component(k, top_k, n_exp) for k in COMPONENT_KEYS if k in tally.params}
    if "embeddings" not in built:
        raise UserError(f"{files.source} holds no token embedding tensor; is it a language model?")
    if tied:
        e = built["embeddings"]
        built["lm_head"] = ComponentWeights(
            "lm_head", e.format, 0, e.params_stored, 0, e.bytes_stored
        )
    if files.quantized:
        built = _with_config_params(built, dataclasses.replace(spec, tie_word_embeddings=tied))
    by_type = dict(sorted(type_bytes.items(), key=lambda kv: (-kv[1], kv[0])))
    return FileWeights(
        source=files.source,
        kind=files.kind,
        files=files.files,
        components=tuple(built[k] for k in COMPONENT_KEYS if k in built),
        type_bytes=by_type,
        tied_embeddings=tied,
        tensors_counted=len(files.tensors) - skipped,
        tensors_skipped=skipped,
        bytes_skipped=skipped_bytes,
        params_from_config=files.quantized,
    )


def _with_config_params(
    built: dict[str, ComponentWeights], spec: ModelSpec
) -> dict[str, ComponentWeights]:
    """Quantized safetensors pack weights into integer elements: parameters from the config."""
    arithmetic = {c.key: c for c in components(spec)}
    out = {}
    for key, c in built.items():
        a = arithmetic.get(key)
        out[key] = (
            c
            if a is None
            else dataclasses.replace(
                c, params_stored=round(a.params_total), params_read=round(a.params_active)
            )
        )
    return out


def bytes_text(n: float) -> str:
    """A byte count as the notes write it: MB from 0.1 MB, else kB."""
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


def _note(fw: FileWeights, name: str) -> str:
    types = ", ".join(f"{t} {bytes_text(b)}" for t, b in fw.type_bytes.items())
    tied = ", which as the tied lm_head is also read in full" if fw.tied_embeddings else ""
    params = "; params from config.json (packed quantized tensors)" if fw.params_from_config else ""
    return (
        f"as stored in {name} ({fw.tensors_counted} tensors: {types}); every tensor read once "
        f"per token except the embedding table (one row){tied}{params}"
    )


def spec_with_file_weights(base: ModelSpec, fw: FileWeights, name: str) -> ModelSpec:
    """The spec a config (or GGUF metadata) gives, with components, formats and bytes from the
    file's tensors."""
    fallback = parse_format(base.dtype)
    formats = {k: fallback for k in COMPONENT_KEYS}
    for c in fw.components:
        formats[c.key] = WeightFormat(c.format, c.bits_per_weight, "as stored in the file")
    notes = list(base.notes)
    if fw.tensors_skipped:
        notes.append(
            f"{fw.tensors_skipped} tensors ({bytes_text(fw.bytes_skipped)}: vision/audio towers, "
            "multi-token-prediction layers) are not read to decode text, not counted"
        )
    return dataclasses.replace(
        base,
        tie_word_embeddings=fw.tied_embeddings,
        default_formats=formats,
        quant_note=_note(fw, name),
        notes=tuple(notes),
        stored=tuple(StoredComponent(c.key, c.params_stored, c.params_read) for c in fw.components),
    )


def _stamp(path: Path) -> tuple[str, tuple[int, ...]]:
    """The path and what changes when its files do (a folder: its own and its config's times; a
    split GGUF's part: every part's)."""
    st = path.stat()
    times = [st.st_mtime_ns, st.st_size]
    config = path / "config.json" if path.is_dir() else path.parent / "config.json"
    if config.is_file():
        times.append(config.stat().st_mtime_ns)
    parts = gguf_part_names(path.name) if path.is_file() else ()
    for sibling in (path.with_name(p) for p in parts if p != path.name):
        times.extend(
            (sibling.stat().st_mtime_ns, sibling.stat().st_size) if sibling.is_file() else (-1,)
        )
    return str(path.resolve()), tuple(times)


@lru_cache(maxsize=8)
def _read(stamp: tuple[str, tuple[int, ...]], source: str) -> tuple[FileWeights, ModelSpec]:
    files = locate_model_files(Path(stamp[0]), source)
    if files is None:
        raise UserError(
            f"{source} is not a GGUF file, a .safetensors file or a folder holding a "
            "safetensors checkpoint"
        )
    fw = count_weights(files, files.spec)
    return fw, spec_with_file_weights(files.spec, fw, files.name)


def _read_path(path: str | os.PathLike[str]) -> tuple[FileWeights, ModelSpec]:
    p = Path(path).expanduser()
    try:
        stamp = _stamp(p)
    except OSError:
        raise UserError(f"no such file or folder {str(path)!r}; check the path") from None
    return _read(stamp, str(path))


def read_file_weights(path: str | os.PathLike[str]) -> FileWeights:
    """What a GGUF file or a safetensors checkpoint reads per decoded token, by component.

    Raises UserError (one line naming the file) for a file that is truncated or corrupt, has an
    unknown tensor type, or a header that lies about its length."""
    return _read_path(path)[0]


def file_weight_bytes_per_token(path: str | os.PathLike[str]) -> int:
    """Weight bytes one batch-1 decode step reads from this model file (the module's rule)."""
    return read_file_weights(path).bytes_per_token


def spec_from_file(path: str | os.PathLike[str]) -> ModelSpec:
    """The ModelSpec of a GGUF file or safetensors checkpoint, its components counted from the
    tensors."""
    return _read_path(path)[1]
