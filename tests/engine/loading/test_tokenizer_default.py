"""The default model's tokenizer against transformers' tokenizer built from the same GGUF file."""

from __future__ import annotations

import pytest

from roofline.engine.loading.gguf import gguf_metadata, open_gguf
from roofline.engine.loading.gguf_tokenizer import tokenizer_from_gguf
from roofline.modelspec.default_model import DEFAULT_MODEL_FILE, default_model_path

pytestmark = pytest.mark.slow

TEXTS = [
    "Hello world!",
    "The capital of France is Paris. The capital of Germany is",
    "  leading and trailing  ",
    "tabs\tand\nnewlines\n\n\nend\r\n",
    "naïve café — “quotes” «guillemets» ÀÉÎÕÜ ß ǅ",
    "emoji 🦙🔥👩‍👩‍👧 done 🇫🇷",
    "日本語のテキストと中文, 한국어",
    "def f(x):\n    return x**2  # comment\n\n\tif x != 0: pass",
    "1234567890 3.14159 -42 1e-5 0x1F 1,000,000 2024-11-29",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b<|im_end|><repo_name>x<filename>y",
    "<|im_start <|im_end",
    "     ",
    "",
    "I'm you're they'll we'd IT'S",
    "\u200b zero width \u00a0 nbsp",
    "Ġ weird Ġ chars Ċ",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("default_gguf")
    (folder / DEFAULT_MODEL_FILE).symlink_to(default_model_path())
    reference = AutoTokenizer.from_pretrained(str(folder), gguf_file=DEFAULT_MODEL_FILE)
    path = default_model_path()
    return tokenizer_from_gguf(gguf_metadata(open_gguf(path)), path), reference


def test_ids_and_round_trip_match_transformers(pair):
    ours, ref = pair
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text), text
        assert ours.decode(ids, skip_special_tokens=False) == text
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), text
        assert b"".join(ours.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert ours.vocab_size == len(ref) == 49152


def test_every_digit_stands_alone_like_llama_cpp(pair):
    """The file says pre-tokenizer "smollm": llama.cpp (and SmolLM2's own tokenizer.json) isolate
    every Unicode number character before merging. transformers' GGUF conversion skips that step,
    which shows only on numeric characters the vocabulary could merge with a space (e.g. ' ½');
    ASCII digits agree."""
    ours, _ = pair
    assert [ours.token_to_text(i) for i in ours.encode(" ½")] == ["Ġ", "Â½"]
    assert all(len(ours.token_to_text(i)) == 1 for i in ours.encode("31415926"))


def test_chat_template_matches_transformers(pair):
    ours, ref = pair
    conversations = [
        [{"role": "user", "content": "Hi there"}],
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "and 3+3?"},
        ],
    ]
    for messages in conversations:
        for gen in (True, False):
            text = ours.apply_chat_template(messages, add_generation_prompt=gen)
            assert text == ref.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=gen
            )
            expected_ids = ref.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=gen
            )
            if isinstance(expected_ids, dict) or hasattr(expected_ids, "keys"):
                expected_ids = expected_ids["input_ids"]
            assert ours.encode(text, add_special_tokens=False) == list(expected_ids)
    assert "You are a helpful AI assistant named SmolLM" in ours.apply_chat_template(
        conversations[0]
    )
