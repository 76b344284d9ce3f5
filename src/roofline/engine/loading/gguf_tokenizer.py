"""The tokenizer a GGUF file describes (tokenizer.ggml.* metadata), rebuilt with the `tokenizers`
library.

Two vocabulary kinds are handled (`tokenizer.ggml.model`):
- "gpt2": byte-level BPE with explicit merges. How text is cut into words before merging depends on
  the model family (`tokenizer.ggml.pre`); each family's split rule is llama.cpp's, written as one
  regex here.
- "llama": SentencePiece-style BPE with U+2581 for spaces and <0xAB> byte-fallback tokens. The file
  has scores instead of merges; a pair (a, b) is merged with the priority of the score of the token
  a+b.
Tokens marked CONTROL (3) become special added tokens and USER_DEFINED (4) plain added tokens, so
chat markers like <|im_start|> always encode as their single id.
"""

from __future__ import annotations

from pathlib import Path

from roofline.engine.loading.tokenizer import Tokenizer
from roofline.errors import UserError

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = (
    1,
    2,
    3,
    4,
    5,
    6,
)

# Word-split regexes of byte-level families (llama.cpp's llama-vocab.cpp, tokenizer.json's Split
# patterns).
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
LLAMA3_SPLIT = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# o200k (gpt-4o, gpt-oss): a word is its capitals then its lower-case letters (or a run of
# capitals), a contraction kept on it; digits in threes; the regex of its tokenizer.json, which
# llama.cpp's GPT4O pre-tokenizer rewrites for its own regex engine
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
O200K_SPLIT = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's fallback for files that name no pre-tokenizer: four splits applied one after the
# other.
DEFAULT_SPLITS = (r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]")

# tokenizer.ggml.pre -> split family. "gpt2": GPT-2's own regex (ByteLevel's built-in one);
# "digits": every digit on its own first, then GPT-2's regex (SmolLM, StarCoder); absent ->
# "default".
PRE_TOKENIZER_FAMILY = {
    "default": "default",
    **dict.fromkeys(["gpt2", "mpt", "olmo", "jais"], "gpt2"),
    **dict.fromkeys(
        ["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"], "digits"
    ),
    **dict.fromkeys(
        ["llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "smaug-bpe"], "llama3"
    ),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "stablelm2"], "qwen2"),
    "gpt-4o": "o200k",
}
# llama.cpp matches a whole word against the vocabulary before merging for these (HF: BPE
# ignore_merges).
_IGNORE_MERGES = {"llama3"}


def byte_level_pre_tokenizer(pre: str | None):
    """The `tokenizers` pre-tokenizer for a byte-level GGUF's `tokenizer.ggml.pre` (absent ->
    llama.cpp's default)."""
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    family = PRE_TOKENIZER_FAMILY.get(pre or "default")
    if family is None:
        raise UserError(
            f"GGUF pre-tokenizer {pre!r} is not supported; supported: "
            f"{', '.join(sorted(PRE_TOKENIZER_FAMILY))}"
        )
    if family == "gpt2":
        return pt.ByteLevel(add_prefix_space=False, use_regex=True)
    if family == "default":
        splits = [pt.Split(Regex(rule), behavior="isolated") for rule in DEFAULT_SPLITS]
        return pt.Sequence([*splits, pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    if family == "digits":
        digits = pt.Split(Regex(r"\p{N}"), behavior="isolated")
        return pt.Sequence([digits, pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    split = {"llama3": LLAMA3_SPLIT, "o200k": O200K_SPLIT}.get(family, QWEN2_SPLIT)
    return pt.Sequence(
        [
            pt.Split(Regex(split), behavior="isolated"),
            pt.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _byte_level_backend(meta: dict):
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders
    from tokenizers.models import BPE

    tokens = meta["tokenizer.ggml.tokens"]
    merges = [
        tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", []) if m.count(" ") == 1
    ]
    pre = meta.get("tokenizer.ggml.pre")
    ignore = PRE_TOKENIZER_FAMILY.get(pre or "default") in _IGNORE_MERGES
    backend = Backend(
        BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, ignore_merges=ignore)
    )
    backend.pre_tokenizer = byte_level_pre_tokenizer(pre)
    backend.decoder = decoders.ByteLevel()
    return backend


def sentencepiece_merges(
    tokens: list[str], scores: list[float], types: list[int]
) -> list[tuple[str, str]]:
    """Merges implied by a SentencePiece vocabulary: every split of a normal token into two
    vocabulary pieces, best first by the score of the whole token (then by the pieces' ids, for a
    stable order)."""
    index = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for token, score, kind in zip(tokens, scores, types):
        if kind not in (TOKEN_NORMAL, TOKEN_USER_DEFINED) or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in index and right in index:
                ranked.append((-score, index[left], index[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece_backend(meta: dict):
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, normalizers
    from tokenizers.models import BPE

    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    types = meta.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    model = BPE(
        vocab={t: i for i, t in enumerate(tokens)},
        merges=sentencepiece_merges(tokens, scores, types),
        unk_token=tokens[unk_id] if unk_id is not None else None,
        fuse_unk=True,
        byte_fallback=True,
    )
    backend = Backend(model)
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    # SentencePiece writes a space as U+2581 and, with add_space_prefix, starts the text with one.
    steps = [normalizers.Prepend("\u2581")] if prefix else []
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "\u2581")])
    undo = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence([*undo, decoders.Strip(" ", 1, 0)] if prefix else undo)
    return backend


def _add_marked_tokens(backend, tokens: list[str], types: list[int]) -> None:
    """CONTROL tokens -> special added tokens, USER_DEFINED -> added tokens, both matched whole in
    text."""
    from tokenizers import AddedToken

    control = [
        AddedToken(t, special=True, normalized=False)
        for t, k in zip(tokens, types)
        if k == TOKEN_CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, k in zip(tokens, types)
        if k == TOKEN_USER_DEFINED
    ]
    size = backend.get_vocab_size(with_added_tokens=True)
    backend.add_special_tokens(control)
    backend.add_tokens(user)
    # they are vocabulary entries already
    if backend.get_vocab_size(with_added_tokens=True) != size:
        raise UserError(
            "the GGUF tokenizer marks tokens as special that its vocabulary lacks; "
            "the file is inconsistent"
        )


def tokenizer_from_gguf(meta: dict, path: str | Path = "") -> Tokenizer:
    """The Tokenizer of a GGUF file from its metadata (see module doc)."""
    kind = meta.get("tokenizer.ggml.model")
    if "tokenizer.ggml.tokens" not in meta:
        raise UserError(
            f"{path}: the GGUF file carries no tokenizer (tokenizer.ggml.tokens); "
            "it cannot be served"
        )
    if kind == "gpt2":
        backend, piece_kind, default_add_bos = _byte_level_backend(meta), "byte_level", False
    elif kind == "llama":
        backend, piece_kind, default_add_bos = _sentencepiece_backend(meta), "sentencepiece", True
    else:
        raise UserError(
            f"{path}: GGUF tokenizer model {kind!r} is not supported; supported: "
            "gpt2 (byte-level BPE), llama"
        )
    tokens = meta["tokenizer.ggml.tokens"]
    _add_marked_tokens(backend, tokens, meta.get("tokenizer.ggml.token_type") or [])

    def token_id(key: str) -> int | None:
        value = meta.get(f"tokenizer.ggml.{key}")
        return int(value) if value is not None and 0 <= int(value) < len(tokens) else None

    bos_id, eos_id = token_id("bos_token_id"), token_id("eos_token_id")
    # End-of-generation ids: EOS plus the end-of-turn / end-of-message markers some files name
    # separately.
    eos_ids = {
        i for i in (eos_id, token_id("eot_token_id"), token_id("eom_token_id")) if i is not None
    }
    return Tokenizer(
        backend,
        bos_id=bos_id,
        eos_ids=frozenset(eos_ids),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", default_add_bos)),
        chat_template=meta.get("tokenizer.chat_template"),
        bos_token=tokens[bos_id] if bos_id is not None else None,
        eos_token=tokens[eos_id] if eos_id is not None else None,
        piece_kind=piece_kind,
    )
