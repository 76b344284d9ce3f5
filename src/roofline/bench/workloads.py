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
from collections.abc import Callable, Iterator
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
_WORD_TEXT = (
    "the of and to in is it that for on with as was at by be this from or have an are not but "
    "all were when we there can more if no out so said what up its about into than them time "
    "only new some could these two may first then do any like my now over such our man me even "
    "most made after also did many off before must well back through years much where your way"
)
_WORDS = _WORD_TEXT.split()


def _sized(words: list[str], n: int, rng: random.Random, tokenizer: Any) -> str:
    """The words joined and cut to n tokens: exact with a tokenizer (cut at the end of token n),
    else n words (about one token each)."""
    if tokenizer is None:
        return " ".join(words[:n])
    text = " ".join(words)
    enc = tokenizer.encode(text, add_special_tokens=False)
    while len(enc.ids) < n:  # some words merge: add until long enough, then cut
        text += " " + " ".join(rng.choice(_WORDS) for _ in range(n - len(enc.ids)))
        enc = tokenizer.encode(text, add_special_tokens=False)
    return text[: enc.offsets[n - 1][1]]


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
        text = _sized(words, n_in, rng, tokenizer)
        out.append(
            Prompt(id=f"s{i}", prompt=text, max_tokens=output_len.draw(rng), category="synthetic")
        )
    return out


PREFIX_HEAD = "Answer the question at the end from these notes alone."
SHARED_PREFIX = "shared-prefix"


def shared_prefix_prompts(
    count: int,
    prefix_tokens: int,
    suffix_tokens: int,
    output_len: Length,
    *,
    seed: int = 0,
    tokenizer: Any = None,
) -> list[Prompt]:
    """`count` requests sharing one document of `prefix_tokens` tokens (the system message on the
    chat route), each followed by its own question of `suffix_tokens` tokens.

    Sized as synthetic prompts are: exact with a tokenizer, else one token per word. Prompt text
    (the completions route) is document + "\\n\\n" + question, as the chat messages joined: the
    newline ends the document's last pre-token, so its token ids do not depend on what follows. Each
    question opens with its own number ("Q7:"), so prompts differ within the question's first word:
    a prefix cache can reuse the document and at most a few tokens more."""
    rng = random.Random(seed)
    head = PREFIX_HEAD.split()
    words = head + [rng.choice(_WORDS) for _ in range(max(prefix_tokens - len(head), 0))]
    document = _sized(words, prefix_tokens, rng, tokenizer)
    out = []
    for i in range(count):
        words = [f"Q{i}:"] + [rng.choice(_WORDS) for _ in range(max(suffix_tokens - 1, 0))]
        question = _sized(words, suffix_tokens, rng, tokenizer)
        out.append(
            Prompt(
                id=f"q{i}",
                prompt=f"{document}\n\n{question}",
                messages=[
                    {"role": "system", "content": document},
                    {"role": "user", "content": question},
                ],
                max_tokens=output_len.draw(rng),
                category=SHARED_PREFIX,
            )
        )
    return out


@dataclass(frozen=True)
class WorkloadArgs:
    """What the workloads read from `roofline bench`'s options (lengths still text)."""

    count: int | None = None  # how many prompts to make (None: the workload's default)
    prompts_path: Path | None = None
    input_len: str = "1024"
    output_len: str = "256"
    prefix_tokens: int = 1000
    suffix_tokens: int = 32
    seed: int = 0
    tokenizer: Any = None  # a loaded tokenizers.Tokenizer, or None

    @property
    def sized_by(self) -> str:
        return "tokenizer" if self.tokenizer is not None else "words (about one token each)"


@dataclass(frozen=True)
class Workload:
    """One way to choose what is sent, and what it implies for the run.

    sets_ignore_eos: the output lengths are the workload's, so generation runs on to them.
    fresh_prompts: every measured request gets a prompt not sent before (each once, and a later
    scenario goes on down the list), so a server's cache sees only what the workload shares.
    reports_cache: the prefix-cache table is printed even when the server exposes no figures.
    per_prompt: the per-prompt table is printed (not for hundreds of one-off prompts)."""

    name: str
    help: str
    build: Callable[[WorkloadArgs], list[Prompt]]
    sets_ignore_eos: bool = False
    fresh_prompts: bool = False
    reports_cache: bool = False
    per_prompt: bool = True
    describe: Callable[[WorkloadArgs], dict] = lambda a: {}


def _file(a: WorkloadArgs) -> list[Prompt]:
    if a.prompts_path is None:
        raise UserError("--workload prompts needs --prompts FILE")
    return load_prompts_jsonl(a.prompts_path)


def _synthetic(a: WorkloadArgs) -> list[Prompt]:
    ins = parse_length(a.input_len, what="--input-len")
    outs = parse_length(a.output_len, what="--output-len")
    return synthetic_prompts(a.count or 64, ins, outs, seed=a.seed, tokenizer=a.tokenizer)


def _shared_prefix(a: WorkloadArgs) -> list[Prompt]:
    for flag, value in (("--prefix-tokens", a.prefix_tokens), ("--suffix-tokens", a.suffix_tokens)):
        if value < 1:
            raise UserError(f"{flag} must be a positive number of tokens (got {value})")
    outs = parse_length(a.output_len, what="--output-len")
    return shared_prefix_prompts(
        a.count or 2048,
        a.prefix_tokens,
        a.suffix_tokens,
        outs,
        seed=a.seed,
        tokenizer=a.tokenizer,
    )


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("builtin", "the four fixed prompts", lambda a: builtin_prompts()),
        Workload("prompts", "a JSONL prompt file (--prompts)", _file),
        Workload(
            "synthetic",
            "random words of --input-len tokens asking for --output-len",
            _synthetic,
            sets_ignore_eos=True,
            describe=lambda a: {"input_len": a.input_len, "sized_by": a.sized_by},
        ),
        Workload(
            SHARED_PREFIX,
            "one --prefix-tokens document (the chat system message) and a distinct "
            "--suffix-tokens question per request",
            _shared_prefix,
            sets_ignore_eos=True,
            fresh_prompts=True,
            reports_cache=True,
            per_prompt=False,
            describe=lambda a: {
                "prefix_tokens": a.prefix_tokens,
                "suffix_tokens": a.suffix_tokens,
                "sized_by": a.sized_by,
            },
        ),
    )
}


def workload_of(provenance: Any) -> Workload | None:
    """The workload a run's provenance.json names (None: an older run, or a name not known)."""
    return WORKLOADS.get((provenance.get("workload") or {}).get("name"))


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


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
