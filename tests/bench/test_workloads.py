import json
import random

import pytest

from roofline.bench.workloads import (
    Length,
    builtin_prompts,
    jobs,
    load_prompts_jsonl,
    parse_length,
    synthetic_prompts,
)
from roofline.errors import UserError


def test_builtin_set_spans_predictability():
    prompts = builtin_prompts()
    assert len(prompts) >= 4
    cats = " ".join(p.category for p in prompts)
    for word in ("reasoning", "code", "table", "prose"):
        assert word in cats
    assert len({p.id for p in prompts}) == len(prompts)


def _builtin_prompt_file(name):
    """A built-in prompt set of the package data, loaded as `--prompts` loads it, after checking
    that every entry names its source and date."""
    from importlib import resources

    path = resources.files("roofline") / "data" / "prompts" / name
    for line in path.read_text(encoding="utf-8").splitlines():
        assert {"source", "date"} <= set(json.loads(line)), line[:40]
    return load_prompts_jsonl(path)


def test_code_work_set_is_a_prompt_file_of_whole_file_edits():
    """The built-in code-work set loads as `--prompts` does: about six prompts, each an edit,
    rename or fix of a 40-80 line file whose answer is the whole file; source and date on each."""
    prompts = _builtin_prompt_file("code_work.jsonl")
    assert 5 <= len(prompts) <= 8
    for word in ("edit", "rename", "fix"):
        assert any(word in p.category for p in prompts), word
    for p in prompts:
        code = p.prompt.split("```", 1)[1]
        assert 40 <= code.count("\n") <= 80 and "whole" in p.prompt + p.category, p.id


def test_copy_heavy_set_asks_for_its_input_back_verbatim():
    """The built-in copy-heavy set loads as `--prompts` does: a few prompts, each asking for a text
    of its own (a paragraph, a list, a file) back exactly; source and date on each."""
    prompts = _builtin_prompt_file("copy_heavy.jsonl")
    assert 3 <= len(prompts) <= 8
    for p in prompts:
        ask, text = p.prompt.split("\n\n", 1)
        assert "exactly" in ask and "verbatim" in p.category, p.id
        assert len(text) >= 200, p.id


def test_jsonl_prompts(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"id": "a", "prompt": "hi", "max_tokens": 5}\n\n"bare string"\n'
        '{"messages": [{"role": "user", "content": "yo"}]}\n'
    )
    ps = load_prompts_jsonl(f)
    assert [p.id for p in ps] == ["a", "p1", "p2"]
    assert (
        ps[0].max_tokens == 5
        and ps[1].prompt == "bare string"
        and ps[2].messages[0]["content"] == "yo"
    )
    for bad in (
        '{"id": 1}\n',
        "not json\n",
        '{"prompt": "x", "max_tokens": -1}\n',
        "",
        '{"id":"a","prompt":"x"}\n' * 2,
    ):
        f.write_text(bad)
        with pytest.raises(UserError):
            load_prompts_jsonl(f)


def test_lengths():
    assert parse_length("128", what="x") == Length(128, 128)
    rng = random.Random(0)
    u = parse_length("10-20", what="x")
    assert all(10 <= u.draw(rng) <= 20 for _ in range(200))
    n = parse_length("100~10", what="x")
    draws = [n.draw(rng) for _ in range(2000)]
    assert 97 < sum(draws) / len(draws) < 103
    for bad in ("0", "20-10", "x", "-5", "1~-1"):
        with pytest.raises(UserError):
            parse_length(bad, what="x")


def test_synthetic_lengths_exact_with_a_tokenizer(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from roofline.bench.workloads import _WORDS

    vocab = {w: i for i, w in enumerate(sorted(set(_WORDS)))}
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    ps = synthetic_prompts(20, Length(30, 60), Length(8, 8), seed=1, tokenizer=tok)
    for p in ps:
        n = len(tok.encode(p.prompt, add_special_tokens=False).ids)
        assert 30 <= n <= 60 and p.max_tokens == 8
    assert len({p.prompt.split(":")[0] for p in ps}) == 20  # unique prefixes: no shared cache


def test_reps_interleave_prompts():
    ps = builtin_prompts()[:2]
    assert [(j.prompt.id, j.rep) for j in jobs(ps, 2)] == [
        (ps[0].id, 0),
        (ps[1].id, 0),
        (ps[0].id, 1),
        (ps[1].id, 1),
    ]
