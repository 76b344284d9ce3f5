"""Which files of a Hub repo make the model: a GGUF picked by its quant tag, or config.json with its
safetensors. File names only; `modelspec.hub` fetches what is picked.

    owner/name:Q4_K_M     the GGUF whose name holds the tag Q4_K_M (any case) between separators
                          (- . _ /): model-Q4_K_M.gguf, q4_k_m/model-q4_k_m-00001-of-00002.gguf
    owner/name:FILE.gguf  that file (any case): the way out when a tag names several files
    owner/name            config.json (with its safetensors) when the repo has one and
                          safetensors or no GGUF; else the repo's only GGUF

A split GGUF's parts (-00001-of-00003.gguf) are one model; vision projectors (mmproj*.gguf) are no
model a decoder reads. A tag that matches nothing or several models, or a repo that needs a tag and
has none, is one line listing what the repo has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from roofline.errors import UserError
from roofline.modelspec.model_files import gguf_part_names

_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")
_PROJECTOR = re.compile(r"(^|/)mmproj[^/]*$", re.IGNORECASE)
_MAX_LISTED = 12  # models named in one error line; the rest counted


@dataclass(frozen=True)
class GgufModel:
    """One GGUF model of a repo: its file, or its split parts, part 1 first."""

    files: tuple[str, ...]

    @property
    def stem(self) -> str:
        """The first part's name without the split suffix and the extension, lower-case: what a
        quant tag is matched against."""
        return _SPLIT_SUFFIX.sub("", self.files[0][: -len(".gguf")]).lower()

    @property
    def tag(self) -> str:
        """The last name segment: the quant tag most repos end their file names with."""
        name = _SPLIT_SUFFIX.sub("", self.files[0].rsplit("/", 1)[-1][: -len(".gguf")])
        return re.split(r"[-.]", name)[-1]

    @property
    def label(self) -> str:
        more = len(self.files) - 1
        return self.files[0] + (f" (+{more} part{'s' if more > 1 else ''})" if more else "")


def gguf_models(names: Iterable[str]) -> tuple[GgufModel, ...]:
    """The repo's GGUF models, sorted by name: split parts grouped, projectors left out."""
    ggufs = {n for n in names if n.lower().endswith(".gguf") and not _PROJECTOR.search(n)}
    models = {}
    for name in sorted(ggufs):
        parts = gguf_part_names(name)
        if all(p in ggufs for p in parts):  # a split with a part missing is no model
            models[parts[0]] = GgufModel(parts)
    return tuple(models.values())


def _listed(models: tuple[GgufModel, ...]) -> str:
    shown = ", ".join(m.label for m in models[:_MAX_LISTED])
    more = len(models) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _matching(models: tuple[GgufModel, ...], tag: str) -> tuple[GgufModel, ...]:
    key = tag.lower()
    if key.endswith(".gguf"):  # a file name: the one model holding it
        return tuple(
            m
            for m in models
            if any(key in (f.lower(), f.rsplit("/", 1)[-1].lower()) for f in m.files)
        )
    bounded = re.compile(rf"(^|[-._/]){re.escape(key)}($|[-._/])")
    return tuple(m for m in models if bounded.search(m.stem))


def choose_gguf(names: Iterable[str], tag: str | None, repo: str) -> GgufModel | None:
    """The GGUF model `repo:tag` names; None when the repo's config.json stands for the model.
    UserError (one line, listing the repo's GGUF models) when the tag matches none or several, or
    when the repo needs a tag."""
    names = list(names)
    models = gguf_models(names)
    has_config = "config.json" in names
    if tag is None:
        if has_config and (not models or any(n.endswith(".safetensors") for n in names)):
            return None
        if len(models) == 1:
            return models[0]
        if not models:
            raise UserError(
                f"{repo} holds neither a config.json nor a .gguf file; roofline reads one or the "
                "other"
            )
        raise UserError(
            f"{repo} holds {len(models)} GGUF models: {_listed(models)}; add the quant tag, "
            f"e.g. {repo}:{models[0].tag}"
        )
    if not models:
        drop = f"; {repo} alone reads its config.json" if has_config else ""
        raise UserError(f"{repo} holds no .gguf file for the tag :{tag} to pick{drop}")
    found = _matching(models, tag)
    if len(found) == 1:
        return found[0]
    if not found:
        raise UserError(f"no GGUF in {repo} matches :{tag}; it holds {_listed(models)}")
    raise UserError(
        f":{tag} matches {len(found)} GGUF models in {repo}: {_listed(found)}; give the "
        f"file name instead, e.g. {repo}:{found[0].files[0].rsplit('/', 1)[-1]}"
    )
