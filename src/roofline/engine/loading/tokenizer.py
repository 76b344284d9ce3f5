"""Text <-> token ids for one checkpoint, and its chat template.

The splitting and merging is done by the `tokenizers` library (built from a GGUF's vocabulary or
read from an HF tokenizer.json by the loaders); this class adds what a runner needs around it:
BOS/EOS ids, whether to prepend BOS, exact bytes per token for streaming, and the checkpoint's Jinja
chat template rendered in a sandbox (the template comes from the model file, so it is untrusted
code).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

# How the vocabulary spells bytes: "byte_level" (GPT-2: every byte is a printable stand-in
# character), "sentencepiece" (U+2581 for a space, <0xAB> tokens for raw bytes), or None (plain
# text).
PIECE_KINDS = ("byte_level", "sentencepiece", None)


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes stand for themselves, the
    other 68 bytes (controls, space, ...) map to U+0100 onwards in byte order. Pure and constant,
    hence the cache."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# Above this many characters a text is tokenized through `encode_batch`, which releases the GIL
# (plain `encode` holds it, stalling every other thread, an event loop included, for as long as a
# long text takes). Short texts keep `encode`: a batch call also marks the library's thread pool
# used, after which a fork prints a warning.
_GIL_FREE_CHARS = 64 * 1024


def _backend_ids(backend, text: str) -> list[int]:
    if len(text) > _GIL_FREE_CHARS:
        return backend.encode_batch([text], add_special_tokens=False)[0].ids
    return backend.encode(text, add_special_tokens=False).ids


class _ChatTemplateError(Exception):
    """Raised by a template's raise_exception(); turned into a UserError with the template's
    message."""


def _render_chat_template(template: str, **context) -> str:
    """Render a Hugging Face-style chat template with jinja2's sandbox (the settings transformers
    uses)."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from roofline.errors import UserError

    def raise_exception(message: str) -> None:
        raise _ChatTemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(**context)
    except _ChatTemplateError as exc:
        raise UserError(f"the model's chat template rejected the messages: {exc}") from None
    except TemplateError as exc:  # syntax errors, sandbox refusals (SecurityError), undefined calls
        raise UserError(f"the model's chat template failed ({type(exc).__name__}: {exc})") from None


def _plain_chat(messages: list[dict], add_generation_prompt: bool) -> str:
    """Fallback for checkpoints without a template: 'role: content' paragraphs."""
    text = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages)
    return text + ("assistant: " if add_generation_prompt else "")


def _message_text(content) -> str:
    """OpenAI content may be a list of parts; templates expect a string: join the text parts."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else content


class Tokenizer:
    """A checkpoint's tokenizer. `backend` is a `tokenizers.Tokenizer` with no post-processor: BOS
    is added here, from `add_bos`, so GGUF and HF checkpoints behave alike."""

    def __init__(
        self,
        backend,
        *,
        bos_id: int | None,
        eos_ids: frozenset[int] | set[int],
        add_bos: bool,
        chat_template: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        piece_kind: str | None = "byte_level",
    ):
        if piece_kind not in PIECE_KINDS:
            raise ValueError(f"piece_kind must be one of {PIECE_KINDS}")
        self.backend = backend
        self.bos_id = bos_id
        self.eos_ids = frozenset(eos_ids)
        self.add_bos = bool(add_bos) and bos_id is not None
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.piece_kind = piece_kind
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(
            idx for idx, token in backend.get_added_tokens_decoder().items() if token.special
        )
        self._bytes_table: list[bytes] | None = None
        # a copy that reads special-token spellings as text (built on first use)
        self._plain_backend = None
        specials = {
            token.content: idx
            for idx, token in backend.get_added_tokens_decoder().items()
            if token.special
        }
        self._special_by_text = specials
        self._special_re = (
            re.compile("|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True)))
            if specials
            else None
        )

    # --- text <-> ids
    # -------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special markers in the text (e.g. <|im_start|>) become their single
        ids. BOS is prepended when the checkpoint asks for it (add_bos) and add_special_tokens is
        set."""
        ids = _backend_ids(self.backend, text)
        if add_special_tokens and self.add_bos:
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids` (invalid UTF-8 from a cut multi-byte character shows as U+FFFD)."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_text(self, token_id: int) -> str:
        """The vocabulary entry of one id as stored (e.g. 'Ġthe' in a byte-level vocabulary)."""
        return self.backend.id_to_token(int(token_id)) or ""

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token stands for (streaming decoders join these and cut at UTF-8
        boundaries)."""
        if self._bytes_table is None:
            self._bytes_table = self._build_bytes_table()
        token_id = int(token_id)
        return self._bytes_table[token_id] if 0 <= token_id < len(self._bytes_table) else b""

    def _build_bytes_table(self) -> list[bytes]:
        vocab = self.backend.get_vocab(with_added_tokens=True)
        table = [b""] * (max(vocab.values(), default=-1) + 1)
        added = {t.content for t in self.backend.get_added_tokens_decoder().values()}
        unstand = {ch: b for b, ch in byte_level_alphabet().items()}
        for piece, idx in vocab.items():
            if piece in added:
                table[idx] = piece.encode("utf-8")
            elif self.piece_kind == "byte_level" and all(ch in unstand for ch in piece):
                table[idx] = bytes(unstand[ch] for ch in piece)
            elif (
                self.piece_kind == "sentencepiece"
                and len(piece) == 6
                and piece.startswith("<0x")
                and piece.endswith(">")
            ):
                table[idx] = bytes([int(piece[3:5], 16)])
            elif self.piece_kind == "sentencepiece":
                table[idx] = piece.replace("\u2581", " ").encode("utf-8")
            else:
                table[idx] = piece.encode("utf-8")
        return table

    # --- chat
    # ---------------------------------------------------------------------------------------
    def apply_chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, **extra
    ) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}]) under the checkpoint's
        template; a plain 'role: content' layout when it has none. Encode the result with
        add_special_tokens=False (as transformers does): a template writes any BOS it wants
        itself."""
        messages = [{**m, "content": _message_text(m.get("content"))} for m in messages]
        if not self.chat_template:
            return _plain_chat(messages, add_generation_prompt)
        return _render_chat_template(
            self.chat_template,
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
            **extra,
        )

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` read as plain text: a special token's spelling (e.g. `<|im_start|>`)
        becomes ordinary tokens, never the control id. No BOS. For what a client wrote inside a
        message."""
        if self._special_re is None:
            return _backend_ids(self.backend, text)
        if self._plain_backend is None:  # a benign race: two threads may each build one
            from tokenizers import Tokenizer as Backend

            plain = Backend.from_str(self.backend.to_str())
            plain.encode_special_tokens = True
            self._plain_backend = plain
        return _backend_ids(self._plain_backend, text)

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """The prompt ids of a chat, where only the template may emit special tokens: what the
        messages contain is tokenized as text (`encode_text`), so `<|im_start|>system` in a user
        message cannot open a system turn. Equal to `encode(apply_chat_template(...),
        add_special_tokens=False)` whenever no message spells a special token. Raises ValueError
        (with a client-facing reason) when the template rewrites the contents in a way this cannot
        follow and a message spells a special token."""
        messages = [{**m, "content": _message_text(m.get("content"))} for m in messages]
        contents = [m["content"] for m in messages]
        if not self.chat_template:
            return self.encode_text(_plain_chat(messages, add_generation_prompt))
        real = self.apply_chat_template(messages, add_generation_prompt)
        if self._special_re is None:
            return self.encode(real, add_special_tokens=False)
        nonce = uuid.uuid4().hex
        marked = self.apply_chat_template(
            [{**m, "content": f"\ue000{nonce}:{i}\ue001"} for i, m in enumerate(messages)],
            add_generation_prompt,
        )
        # template, index, template, index, ..., template
        pieces = re.split(f"\ue000{nonce}:(\\d+)\ue001", marked)
        order = [int(i) for i in pieces[1::2]]
        if sorted(order) == list(range(len(messages))):
            # templates often `| trim` the content
            for variant in (
                contents,
                [c.strip() for c in contents],
            ):
                segments = [(pieces[0], True)]
                for k, i in enumerate(order):
                    segments += [(variant[i], False), (pieces[2 * k + 2], True)]
                if "".join(text for text, _ in segments) == real:
                    return self._encode_segments(segments)
        if any(self._special_re.search(c) for c in contents):
            raise ValueError(
                "a message spells a special token of this model (e.g. "
                f"{next(iter(self._special_by_text))!r}); "
                "leave such markers out of message contents"
            )
        return self.encode(real, add_special_tokens=False)

    def _encode_segments(self, segments: list[tuple[str, bool]]) -> list[int]:
        """(text, from_template) pieces -> ids: special-token spellings are control ids only in
        template pieces; the text between them (template and contents joined) is tokenized in one go
        as plain text, as the whole prompt would be."""
        ids: list[int] = []
        buf: list[str] = []
        for text, from_template in segments:
            if not from_template:
                buf.append(text)
                continue
            pos = 0
            for m in self._special_re.finditer(text):
                buf.append(text[pos : m.start()])
                if any(buf):
                    ids.extend(self.encode_text("".join(buf)))
                buf.clear()
                ids.append(self._special_by_text[m.group()])
                pos = m.end()
            buf.append(text[pos:])
        if any(buf):
            ids.extend(self.encode_text("".join(buf)))
        return ids

    @property
    def max_token_bytes(self) -> int | None:
        """The most bytes of input text one token stands for, when that is a safe bound: then a text
        of B bytes has at least ceil(B / max_token_bytes) tokens, and an over-long prompt can be
        refused before tokenizing it. None when a normalizer may shrink the text or unknown
        characters are fused."""
        if not hasattr(self, "_max_token_bytes"):
            self._max_token_bytes = self._safe_max_token_bytes()
        return self._max_token_bytes

    def _safe_max_token_bytes(self) -> int | None:
        spec = json.loads(self.backend.to_str())
        if (spec.get("model") or {}).get("fuse_unk"):
            return None
        norm = spec.get("normalizer")
        parts = (
            (norm.get("normalizers") or [])
            if norm and norm.get("type") == "Sequence"
            else [norm]
            if norm
            else []
        )
        # prepending, and spaces spelled U+2581 (which token_bytes maps back), only add text
        for part in parts:
            if part.get("type") == "Prepend":
                continue
            if (
                part.get("type") == "Replace"
                and part.get("pattern") == {"String": " "}
                and part.get("content") == "\u2581"
            ):
                continue
            return None
        if self._bytes_table is None:
            self._bytes_table = self._build_bytes_table()
        return max((len(b) for b in self._bytes_table), default=0) or None

    def __repr__(self) -> str:
        ids = f"bos_id={self.bos_id}, eos_ids={sorted(self.eos_ids)}, add_bos={self.add_bos}"
        return f"Tokenizer(vocab_size={self.vocab_size}, {ids})"
