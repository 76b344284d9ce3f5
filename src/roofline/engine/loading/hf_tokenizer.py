"""The tokenizer of a Hugging Face model directory: tokenizer.json plus the ids and template around
it.

tokenizer.json is read by the `tokenizers` library as is. tokenizer_config.json gives the chat
template (or chat_template.jinja next to it), the BOS/EOS strings and add_bos_token;
generation_config.json and config.json add end-of-generation ids (Llama 3 Instruct ends turns with
<|eot_id|>, listed only there).
"""

from __future__ import annotations

import json
from pathlib import Path

from roofline.engine.loading.hf_config import read_json
from roofline.engine.loading.tokenizer import Tokenizer
from roofline.errors import UserError


def _token_text(value) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list[int]:
    """An `eos_token_id`-style value: an int, a list of ints, or null."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _chat_template(folder: Path, tokenizer_config: dict) -> str | None:
    """chat_template.jinja when present (newer transformers save it there), else tokenizer_config's
    entry, which may be a list of named templates: take "default"."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        return named.get("default") or next(iter(named.values()), None)
    return template


def _piece_kind(backend) -> str | None:
    """How the vocabulary spells bytes, from the decoder tokenizer.json declares."""
    decoder = json.dumps(json.loads(backend.to_str()).get("decoder"))
    if '"ByteLevel"' in decoder:
        return "byte_level"
    if '"ByteFallback"' in decoder or '"Metaspace"' in decoder:
        return "sentencepiece"
    return None


def tokenizer_from_hf_dir(folder: Path, model_config: dict) -> Tokenizer:
    """The Tokenizer of an HF directory (see module doc); UserError when tokenizer.json is absent or
    broken."""
    from tokenizers import Tokenizer as Backend

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise UserError(
            f"{folder} has no tokenizer.json; "
            "save the model's fast tokenizer there (transformers' save_pretrained)"
        )
    try:
        backend = Backend.from_file(str(path))
    except Exception as exc:  # the Rust library raises a plain Exception for a malformed file
        raise UserError(
            f"{path} cannot be read by the tokenizers library ({str(exc)[:200]})"
        ) from None
    config_path, generation_path = (
        folder / "tokenizer_config.json",
        folder / "generation_config.json",
    )
    tok_cfg = read_json(config_path) if config_path.is_file() else {}
    gen_cfg = read_json(generation_path) if generation_path.is_file() else {}

    bos_token, eos_token = (
        _token_text(tok_cfg.get("bos_token")),
        _token_text(tok_cfg.get("eos_token")),
    )
    bos_id = backend.token_to_id(bos_token) if bos_token else None
    if bos_id is None:
        bos_id = next(
            iter(_ids(gen_cfg.get("bos_token_id")) or _ids(model_config.get("bos_token_id"))), None
        )
        bos_token = backend.id_to_token(bos_id) if bos_id is not None else None
    eos_ids = set(_ids(gen_cfg.get("eos_token_id"))) | set(_ids(model_config.get("eos_token_id")))
    if eos_token and backend.token_to_id(eos_token) is not None:
        eos_ids.add(backend.token_to_id(eos_token))
    if eos_token is None and eos_ids:
        eos_token = backend.id_to_token(min(eos_ids))

    if "add_bos_token" in tok_cfg:
        add_bos = bool(tok_cfg["add_bos_token"])
    else:  # the post-processor in tokenizer.json says whether special tokens wrap a text
        wrapped = backend.encode("a", add_special_tokens=True).ids
        add_bos = (
            bos_id is not None
            and wrapped[:1] == [bos_id]
            and backend.encode("a", add_special_tokens=False).ids[:1] != [bos_id]
        )
    # BOS is added by Tokenizer.encode, alike for every checkpoint kind
    backend.post_processor = None
    return Tokenizer(
        backend,
        bos_id=bos_id,
        eos_ids=frozenset(eos_ids),
        add_bos=add_bos,
        chat_template=_chat_template(folder, tok_cfg),
        bos_token=bos_token,
        eos_token=eos_token,
        piece_kind=_piece_kind(backend),
    )
