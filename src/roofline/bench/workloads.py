"""What is sent: the built-in fixed prompt set, JSONL prompt files, and synthetic prompts.

The built-in set follows the B200 study: four fixed prompts spanning how predictable the output is
(numbered reasoning, a code rewrite, a list/table, open prose), greedy, each repeated `--reps`
times, reported as a median with the per-prompt spread. Speculative decoding wins big on the first
three and barely on prose, so one number would hide it.

Prompt file (JSONL, one request per line): {"prompt": "..."} or {"messages": [...]}, optional "id"
and "max_tokens"; a bare JSON string is a prompt too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.errors import UserError


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str | None = None
    messages: Any = None  # a list of chat messages; used as-is
    max_tokens: int | None = None  # overrides --max-tokens for this prompt
    category: str = ""


def _prompt_from_obj(obj: Any, where: str, default_id: str) -> Prompt:
    if isinstance(obj, str):
        return Prompt(id=default_id, prompt=obj)
    if not isinstance(obj, dict):
        raise UserError(
            f"{where}: each line must be a JSON object or string (got {type(obj).__name__})"
        )
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if prompt is None and messages is None:
        raise UserError(f'{where}: needs "prompt" or "messages"')
    if prompt is not None and not isinstance(prompt, str):
        raise UserError(f'{where}: "prompt" must be a string')
    if messages is not None and not (
        isinstance(messages, list) and all(isinstance(m, dict) for m in messages)
    ):
        raise UserError(f'{where}: "messages" must be a list of {{"role", "content"}} objects')
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
        raise UserError(f'{where}: "max_tokens" must be a positive whole number')
    return Prompt(
        id=str(obj.get("id", default_id)),
        prompt=prompt,
        messages=messages,
        max_tokens=max_tokens,
        category=str(obj.get("category", "")),
    )


def parse_prompts_jsonl(text: str, source: str) -> list[Prompt]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise UserError(
                f"{source} line {n} is not JSON ({e.msg}); write one JSON object per line"
            ) from None
        out.append(_prompt_from_obj(obj, f"{source} line {n}", f"p{len(out)}"))
    if not out:
        raise UserError(f"{source} holds no prompts")
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise UserError(
            f"{source}: prompt ids must be unique "
            f"(repeated: {sorted({i for i in ids if ids.count(i) > 1})})"
        )
    return out


def load_prompts_jsonl(path: str | Path) -> list[Prompt]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot read prompt file {str(p)!r} ({e.strerror})") from None
    return parse_prompts_jsonl(text, p.name)


def builtin_prompts() -> list[Prompt]:
    text = (
        resources.files("roofline")
        .joinpath("data/prompts/builtin.jsonl")
        .read_text(encoding="utf-8")
    )
    return parse_prompts_jsonl(text, "builtin.jsonl")


@dataclass(frozen=True)
class Length:
    """A length distribution: fixed `N`, uniform `A-B`, or normal `MEAN~STD` (clipped at 1)."""

    low: int
    high: int
    mean: float = 0.0
    std: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.std > 0:
            return max(1, round(rng.gauss(self.mean, self.std)))
        return rng.randint(self.low, self.high)


def parse_length(text: str, *, what: str) -> Length:
    t = str(text).strip()
    try:
        if "~" in t:
            mean, std = (float(x) for x in t.split("~", 1))
            if mean >= 1 and std >= 0:
                return Length(1, 1, mean, std)
        elif "-" in t:
            lo, hi = (int(x) for x in t.split("-", 1))
            if 1 <= lo <= hi:
                return Length(lo, hi)
        else:
            n = int(t)
            if n >= 1:
                return Length(n, n)
    except ValueError:
        pass
    raise UserError(
        f"cannot read {what} {text!r}: "
        "write N (fixed), A-B (uniform) or MEAN~STD (normal), all positive"
    )


# Short common words, each about one token in the usual BPE vocabularies.
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "be",
    "this",
    "from",
    "or",
    "have",
    "an",
    "are",
    "not",
    "but",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "more",
    "if",
    "no",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "time",
    "only",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "off",
    "before",
    "must",
    "well",
    "back",
    "through",
    "years",
    "much",
    "where",
    "your",
    "way",
]


def synthetic_prompts(
    count: int, input_len: Length, output_len: Length, *, seed: int = 0, tokenizer: Any = None
) -> list[Prompt]:
    """Random word prompts of the drawn lengths (tokens: exact with a tokenizer, else ~1 per word).

    Each starts with a unique number so that no two share a cached prefix."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n_in = input_len.draw(rng)
        words = [f"{i}:"] + [rng.choice(_WORDS) for _ in range(max(n_in - 1, 0))]
        text = " ".join(words)
        if tokenizer is not None:
            enc = tokenizer.encode(text, add_special_tokens=False)
            while len(enc.ids) < n_in:  # some words merge: add until long enough, then cut
                text += " " + " ".join(rng.choice(_WORDS) for _ in range(n_in - len(enc.ids)))
                enc = tokenizer.encode(text, add_special_tokens=False)
            text = text[: enc.offsets[n_in - 1][1]]
        out.append(
            Prompt(id=f"s{i}", prompt=text, max_tokens=output_len.draw(rng), category="synthetic")
        )
    return out


@dataclass(frozen=True)
class Job:
    prompt: Prompt
    rep: int


def jobs(prompts: list[Prompt], reps: int, *, cycle: bool = False) -> Iterator[Job]:
    """Each rep runs every prompt once, interleaved (drift over time hits every prompt alike);
    with cycle=True it goes on with further reps for duration-bound runs."""
    rep = 0
    while cycle or rep < reps:
        for p in prompts:
            yield Job(p, rep)
        rep += 1
