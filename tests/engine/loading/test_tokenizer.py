"""Tokenizers rebuilt from GGUF metadata and read from HF directories, on the tiny fixtures."""

from __future__ import annotations

import json

import pytest
from fixtures import CHATML_TEMPLATE, write_tiny_gguf, write_tiny_hf_dir, write_tiny_spm_gguf

from roofline.engine.loading import load_checkpoint
from roofline.engine.loading.gguf import gguf_metadata, open_gguf
from roofline.engine.loading.gguf_tokenizer import PRE_TOKENIZER_FAMILY, tokenizer_from_gguf
from roofline.engine.loading.tokenizer import Tokenizer
from roofline.errors import UserError

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "hello world 2024, 42 and 1,000!",
    "  two leading spaces\tand a tab\n\nnew lines  ",
    "naïve café 🦙 日本",
    "<|im_start|>user\nhello<|im_end|>\n",
    "def add(a, b):\n    return a + b\n",
    "",
]


def _gguf_tokenizer(path) -> Tokenizer:
    return tokenizer_from_gguf(gguf_metadata(open_gguf(path)), path)


def test_gguf_and_hf_dir_tokenizers_agree(tiny_gguf, tiny_hf_dir):
    gg, hf = load_checkpoint(tiny_gguf).tokenizer, load_checkpoint(tiny_hf_dir).tokenizer
    assert (gg.bos_id, gg.eos_ids, gg.add_bos, gg.vocab_size) == (
        hf.bos_id,
        hf.eos_ids,
        hf.add_bos,
        hf.vocab_size,
    )
    assert (gg.bos_id, gg.eos_ids, gg.add_bos) == (1, frozenset({2}), False)
    for text in TEXTS:
        ids = gg.encode(text)
        assert ids == hf.encode(text), text
        assert gg.decode(ids, skip_special_tokens=False) == text
        assert b"".join(gg.token_bytes(i) for i in ids) == text.encode("utf-8")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert gg.apply_chat_template(messages) == hf.apply_chat_template(messages)


def test_chat_markers_are_single_special_ids(tiny_gguf):
    tok = load_checkpoint(tiny_gguf).tokenizer
    assert tok.encode("<|im_start|>") == [1]
    assert tok.encode("x<|im_end|>y")[1] == 2
    assert {0, 1, 2} <= tok.special_ids
    ids = tok.encode("<|im_start|>user\nhello<|im_end|>")
    assert tok.decode(ids) == "user\nhello"  # specials skipped by default
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhello<|im_end|>"


def test_smollm_pre_tokenizer_isolates_digits(tmp_path):
    """llama.cpp's "smollm" rule cuts every digit on its own before merging; "gpt2" does not. The
    tiny vocabulary has the merges for " 2024", so the two rules must give different ids."""
    gpt2 = _gguf_tokenizer(write_tiny_gguf(tmp_path / "a", pre="gpt2"))
    smollm = _gguf_tokenizer(write_tiny_gguf(tmp_path / "b", pre="smollm"))
    merged = gpt2.encode(" 2024")
    assert len(merged) == 1
    digits = smollm.encode(" 2024")
    assert [smollm.token_to_text(i) for i in digits] == ["Ġ", "2", "0", "2", "4"]
    assert smollm.decode(digits) == gpt2.decode(merged) == " 2024"


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2", "gpt2"])
def test_pre_tokenizers_match_transformers_gguf_conversion(tmp_path, pre):
    """transformers builds the same split rules independently from the same GGUF: ids must agree."""
    import transformers

    path = write_tiny_gguf(tmp_path, pre=pre)
    ours = _gguf_tokenizer(path)
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in [*TEXTS, "I'M HERE you'LL see 123456 ab12cd", "a\r\n\r\nb  \n c"]:
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False), (pre, text)


def test_sentencepiece_gguf_matches_transformers_and_round_trips(tmp_path):
    """tokenizer.ggml.model "llama": merges recovered from scores, byte fallback for unknown
    characters."""
    from transformers import AutoTokenizer

    path = write_tiny_spm_gguf(tmp_path)
    ours = _gguf_tokenizer(path)
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert (ours.bos_id, ours.eos_ids, ours.add_bos, ours.piece_kind) == (
        1,
        frozenset({2}),
        True,
        "sentencepiece",
    )
    for text in [
        "The quick brown fox",
        "two  spaces",
        "naïve café 🦙",
        "hello world\nnew line",
        "",
        "Paris is the capital",
    ]:
        ids = ours.encode(text)
        assert ids == ref.encode(text), text
        assert ours.decode(ids) == text
        if text:  # the space prefix is part of the first piece
            assert b"".join(ours.token_bytes(i) for i in ids[1:]) == (" " + text).encode("utf-8")
    assert "<0xC3>" in [ours.token_to_text(i) for i in ours.encode("é")]  # byte fallback
    # llama.cpp prefixes a space to the text as is: a leading space stays (transformers drops it).
    assert ours.decode(ours.encode(" leading")) == " leading"


def test_hf_dir_bos_from_post_processor_eos_from_generation_config_and_jinja_template(tmp_path):
    """Without add_bos_token in tokenizer_config.json, tokenizer.json's post-processor decides;
    every eos id of generation_config.json ends generation; chat_template.jinja wins over the config
    entry."""
    from tokenizers import Tokenizer as Backend
    from tokenizers.processors import TemplateProcessing

    folder = write_tiny_hf_dir(tmp_path / "m")
    backend = Backend.from_file(str(folder / "tokenizer.json"))
    backend.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)]
    )
    backend.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["add_bos_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": [2, 0]})
    )
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    )
    tok = load_checkpoint(folder).tokenizer
    assert tok.add_bos and tok.encode("hello")[:1] == [1] and tok.encode("hello")[1] != 1
    assert tok.encode("hello", add_special_tokens=False)[0] != 1
    assert tok.eos_ids == frozenset({0, 2})
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "<x>"


# llama.cpp's split rules per family (llama-vocab.cpp), applied one after the other; the reference
# below splits with Python's `regex` module, independently of the `tokenizers` pipeline under test.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA_CPP_RULES = {
    "gpt2": [_GPT2],
    "smollm": [r"\p{N}", _GPT2],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "llama-bpe": [
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ],
    "qwen2": [
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ],
}


def _reference_words(text: str, rules: list[str]) -> list[str]:
    import regex

    words = [text] if text else []
    for rule in rules:
        pattern, cut = regex.compile(rule), []
        for word in words:
            end = 0
            for match in pattern.finditer(word):
                cut += [w for w in (word[end : match.start()], match.group()) if w]
                end = match.end()
            cut += [word[end:]] if word[end:] else []
        words = cut
    return words


@pytest.mark.parametrize("pre", sorted(_LLAMA_CPP_RULES))
def test_pre_tokenizer_words_follow_llama_cpp_rules(pre):
    from roofline.engine.loading.gguf_tokenizer import byte_level_pre_tokenizer

    splitter = byte_level_pre_tokenizer(None if pre == "default" else pre)
    texts = [
        *TEXTS,
        "a+b=c; x<=y|z ~^ 1234567 ½ ٣٤٥ 3.14",
        "I'M HERE you'LL see 123456 ab12cd",
        "a\r\n\r\nb  \n c  ",
    ]
    for text in texts:
        words = [text[a:b] for _, (a, b) in splitter.pre_tokenize_str(text)]
        assert words == _reference_words(text, _LLAMA_CPP_RULES[pre]), (pre, text)


def test_unknown_pre_tokenizer_and_tokenizer_model_are_refused(tmp_path):
    meta = gguf_metadata(open_gguf(write_tiny_gguf(tmp_path, pre="no-such-family")))
    with pytest.raises(UserError, match="no-such-family"):
        tokenizer_from_gguf(meta)
    with pytest.raises(UserError, match="'bert'"):
        tokenizer_from_gguf({**meta, "tokenizer.ggml.model": "bert"})
    assert "llama-bpe" in PRE_TOKENIZER_FAMILY and "smollm" in PRE_TOKENIZER_FAMILY


def test_bos_is_added_only_when_asked(tiny_gguf):
    meta = gguf_metadata(open_gguf(tiny_gguf))
    tok = tokenizer_from_gguf({**meta, "tokenizer.ggml.add_bos_token": True})
    assert tok.encode("hello")[0] == 1 and tok.encode("hello", add_special_tokens=False)[0] != 1
    assert tokenizer_from_gguf(meta).encode("hello")[0] != 1


def test_chat_template_features(tiny_gguf):
    meta = gguf_metadata(open_gguf(tiny_gguf))
    strict = (
        "{{ bos_token }}{% for m in messages %}"
        "{% if m['role'] == 'tool' %}{{ raise_exception('no tools here') }}"
        "{% endif %}[{{ m['role'] }}]{{ m['content'] | trim }}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    tok = tokenizer_from_gguf({**meta, "tokenizer.chat_template": strict})
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": " hi "}, {"type": "text", "text": "there"}],
        }
    ]
    assert tok.apply_chat_template(messages) == "<|im_start|>[user]hi there<|im_end|>[assistant]"
    assert tok.apply_chat_template(messages, add_generation_prompt=False).endswith("<|im_end|>")
    with pytest.raises(UserError, match="no tools here"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}])
    # The template comes from the model file: the sandbox must refuse attribute escapes and
    # mutation.
    for hostile in ("{{ ''.__class__.__mro__ }}", "{{ messages.append(1) }}", "{% for %}"):
        with pytest.raises(UserError, match="chat template failed"):
            tokenizer_from_gguf({**meta, "tokenizer.chat_template": hostile}).apply_chat_template(
                messages
            )
    plain = tokenizer_from_gguf({k: v for k, v in meta.items() if k != "tokenizer.chat_template"})
    assert (
        plain.apply_chat_template([{"role": "user", "content": "hi"}]) == "user: hi\n\nassistant: "
    )
    assert load_checkpoint(tiny_gguf).tokenizer.chat_template == CHATML_TEMPLATE
