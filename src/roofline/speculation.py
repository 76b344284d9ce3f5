"""Speculative decoding options and proposer names, declared once (stdlib only).

The CLI flags of `generate` and `serve` (cli/speculation_flags.py), the embedded launcher's knobs
(bench/engines/launchers.py) and the engine (engine/speculate) all read this module:

    SpecOptions   one field per option; each field's `Option` metadata holds its flag (also the
                  launcher knob, in snake_case), its range and its help
    PROPOSERS     proposer name -> its traits (chain or tree, loads a draft model, options read)
                  and where its factory lives in the engine ("module:attribute", imported only
                  when the engine makes one)

Adding a proposer: its module and one entry here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, get_type_hints

from roofline.dtypes import DTYPE_NAMES


@dataclass(frozen=True)
class ProposerTraits:
    """What the CLI, the launcher and the presets know of a proposer without importing it."""

    help: str  # one line for --help
    tree: bool  # drafts a tree (verified in one pass) rather than a chain
    factory: str  # "module:attribute" of its engine.speculate.base.ProposerFactory
    draft_model: bool = False  # loads a second, cheaper model
    reads: tuple[str, ...] = ()  # the SpecOptions fields it reads (besides method and adaptive)
    # the SpecOptions field whose "shared" value makes one request's drafts learn from earlier ones
    shared_by: str | None = None


PROPOSERS: MappingProxyType[str, ProposerTraits] = MappingProxyType(
    {
        "ngram": ProposerTraits(
            "prompt lookup: copy what followed the longest repeated n-gram",
            tree=False,
            factory="roofline.engine.runtime.speculate.prompt_lookup:PromptLookupProposer.factory",
            reads=("k", "prompt_lookup_min", "prompt_lookup_max"),
        ),
        "trie": ProposerTraits(
            "suffix trie over the request's tokens, a draft tree verified in one pass",
            tree=True,
            factory="roofline.engine.runtime.speculate.trie:TrieProposer.factory",
            reads=(
                "max_bfs_breadth",
                "min_bfs_breadth",
                "max_trie_depth",
                "num_draft_tokens",
                "trie_capacity",
                "trie_scope",
                "tree",
            ),
            shared_by="trie_scope",
        ),
        "suffix": ProposerTraits(
            "suffix decoding: drafts as long as the match, over prompt + output (+ past outputs)",
            tree=True,
            factory="roofline.engine.runtime.speculate.suffix:SuffixProposer.factory",
            reads=(
                "num_draft_tokens",
                "tree",
                "spec_max_factor",
                "spec_offset",
                "spec_min_prob",
                "suffix_max_depth",
                "suffix_scope",
                "suffix_cache_requests",
            ),
            shared_by="suffix_scope",
        ),
        "draft": ProposerTraits(
            "a cheaper model drafts: the target's own int8 copy by default",
            tree=False,
            factory="roofline.engine.runtime.speculate.draft_model:draft_factory",
            draft_model=True,
            reads=("k", "draft_dtype", "draft_model"),
        ),
    }
)

# the draft copy's precisions: every one of roofline.dtypes (engine.speculate checks the engine
# packs the same list)
DRAFT_DTYPES = DTYPE_NAMES
TRIE_SCOPES = ("request", "shared")  # also suffix_scope's
# fields a request may not set (`roofline_speculation`): a file path is the server owner's choice
SERVER_ONLY = ("draft_model",)
# (low, high) fields: low <= high
ORDERED = (("prompt_lookup_min", "prompt_lookup_max"), ("min_bfs_breadth", "max_bfs_breadth"))


def methods() -> tuple[str, ...]:
    """The values of SpecOptions.method: "none" and every proposer's name."""
    return ("none", *PROPOSERS)


@dataclass(frozen=True)
class Option:
    """One option's flag and range. `flag` without "--" is also the launcher knob's name with "_"
    for "-" (spec-k -> spec_k); a bool has `flag` for true and `off` for false."""

    flag: str
    help: str
    minimum: float | None = None  # a number's smallest value (relations: __post_init__)
    choices: tuple[str, ...] = ()  # a str's values; the method's are methods()
    off: str = ""  # a bool's false flag; "" = no-<flag>

    @property
    def knob(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def off_flag(self) -> str:
        return self.off or "no-" + self.flag


def _opt(default: Any, flag: str, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"option": Option(flag, help, **kw)})


@dataclass(frozen=True)
class SpecOptions:
    """Speculative decoding settings for all proposers; one field per CLI flag."""

    method: str = _opt("none", "spec", "Speculative decoding proposer")  # help: option_help()
    k: int = _opt(4, "spec-k", "Tokens drafted per step by ngram and draft.", minimum=1)
    prompt_lookup_min: int = _opt(
        2, "prompt-lookup-min", "ngram: shortest n-gram to match.", minimum=1
    )
    prompt_lookup_max: int = _opt(
        5, "prompt-lookup-max", "ngram: longest n-gram to match.", minimum=1
    )
    max_bfs_breadth: int = _opt(  # SGLang's default
        10,
        "max-bfs-breadth",
        "trie: children expanded per level for short (uncertain) matches.",
        minimum=1,
    )
    min_bfs_breadth: int = _opt(
        1, "min-bfs-breadth", "trie: children per level for long (confident) matches.", minimum=1
    )
    max_trie_depth: int = _opt(
        18, "max-trie-depth", "trie: longest n-gram stored (match + draft).", minimum=2
    )
    num_draft_tokens: int = _opt(
        12,
        "num-draft-tokens",
        "trie, suffix: draft tree size (nodes, the root not counted) at most.",
        minimum=1,
    )
    trie_capacity: int = _opt(
        1_000_000,
        "trie-capacity",
        "trie: nodes kept; the least recently used leaves are evicted beyond.",
        minimum=1,
    )
    trie_scope: str = _opt(
        "request",
        "trie-scope",
        "trie: each request's own tokens, or one trie shared across requests (repeated answers "
        "help later ones).",
        choices=TRIE_SCOPES,
    )
    tree: bool = _opt(
        True,
        "spec-tree",
        "trie, suffix: verify the whole draft tree, or only its best path (chain).",
        off="spec-chain",
    )
    spec_max_factor: float = _opt(  # ArcticInference's and vLLM's default
        1.0,
        "spec-max-factor",
        "suffix: draft at most factor x match length + offset tokens (a long match earns a long "
        "draft).",
        minimum=0.0,
    )
    spec_offset: float = _opt(
        0.0, "spec-offset", "suffix: tokens added to factor x match length (may be negative)."
    )
    spec_min_prob: float = _opt(
        0.1,
        "spec-min-prob",
        "suffix: drop draft tokens whose estimated probability (product of count ratios along "
        "the path) is below this, in [0, 1].",
        minimum=0.0,
    )
    suffix_max_depth: int = _opt(  # vLLM's default
        24,
        "suffix-max-depth",
        "suffix: longest n-gram stored; a match and its draft together are at most this long.",
        minimum=2,
    )
    suffix_scope: str = _opt(
        "request",
        "suffix-scope",
        "suffix: the request's own prompt + output, or also one structure over past and concurrent "
        "requests' outputs, kept as long as the server.",
        choices=TRIE_SCOPES,
    )
    suffix_cache_requests: int = _opt(
        1000,
        "suffix-cache-requests",
        "suffix, shared scope: requests' outputs kept; the oldest is removed beyond.",
        minimum=1,
    )
    draft_dtype: str = _opt(
        "int8", "draft-dtype", "draft: precision of the draft copy.", choices=DRAFT_DTYPES
    )
    draft_model: str | None = _opt(
        None,
        "draft-model",
        "draft: another checkpoint with the same tokenizer instead of the target's own weights.",
    )
    adaptive: bool = _opt(
        True,
        "adaptive",
        "Draft only as much as the measured acceptance and verify cost make worth it (nothing on "
        "unpredictable text).",
    )

    def __post_init__(self) -> None:
        if self.method not in methods():
            raise ValueError(f"method must be one of {', '.join(methods())}; got {self.method!r}")
        highs = {high: low for low, high in ORDERED}  # checked after their low sides
        kinds = get_type_hints(SpecOptions)
        for name, opt in options().items():
            value = getattr(self, name)
            if name in highs:
                continue
            if kinds[name] is float:
                object.__setattr__(self, name, _check_float(name, value, opt.minimum))
            elif opt.minimum is not None:
                _check_int(name, value, int(opt.minimum))
            elif opt.choices and value not in opt.choices:
                raise ValueError(f"{name} must be one of {', '.join(opt.choices)}; got {value!r}")
        for high, low in highs.items():
            _check_int(high, getattr(self, high), getattr(self, low), f"{low} must be <= {high}")
        if self.spec_min_prob > 1:
            raise ValueError(f"spec_min_prob must be <= 1; got {self.spec_min_prob}")
        floor = min_trie_capacity(self.max_trie_depth)
        if self.trie_capacity < floor:
            raise ValueError(
                f"trie_capacity must be >= max_trie_depth * (max_trie_depth + 1) / 2 = {floor} "
                "(the nodes one insertion step may pin)"
            )
        for name in ("tree", "adaptive"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")
        if self.draft_model is not None and (
            not isinstance(self.draft_model, str) or not self.draft_model
        ):
            raise ValueError(
                f"draft_model must be None or a non-empty string; got {self.draft_model!r}"
            )


def cross_request(options: SpecOptions) -> bool:
    """Whether one request's drafts learn from earlier requests under these options (the engine's
    maker says the same: its `cross_request`)."""
    traits = PROPOSERS.get(options.method)
    return bool(traits and traits.shared_by and getattr(options, traits.shared_by) == "shared")


def options() -> dict[str, Option]:
    """SpecOptions field name -> its Option, in field order (the order of flags and knobs)."""
    return {f.name: f.metadata["option"] for f in fields(SpecOptions)}


def option_type(name: str) -> Any:
    """The field's type as an object: int, float, bool, str or str | None."""
    return get_type_hints(SpecOptions)[name]


def option_choices(name: str) -> tuple[str, ...]:
    """The values a str field takes (the method's: methods()); () for a free or non-str field."""
    return methods() if name == "method" else options()[name].choices


def option_help(name: str) -> str:
    """The field's help; the method's lists the proposers from PROPOSERS."""
    if name != "method":
        opt = options()[name]
        return f"{opt.help} One of: {', '.join(opt.choices)}." if opt.choices else opt.help
    listed = "; ".join(f"{n} ({t.help})" for n, t in PROPOSERS.items())
    return f"Speculative decoding: none; {listed}. Greedy output stays identical to none."


def min_trie_capacity(max_trie_depth: int) -> int:
    """Smallest trie pool that always has an evictable leaf: the suffixes of length <=
    max_trie_depth that one insertion step touches span at most 1 + 2 + ... + max_trie_depth
    nodes."""
    return max_trie_depth * (max_trie_depth + 1) // 2


def pass_cost_between(points: Sequence[tuple[int, float]], rows: int) -> float:
    """The cost of a verify pass over `rows` rows relative to one row, from measured (rows, cost)
    points in ascending rows (at least two): linear between them, extrapolated past the last along
    the last segment. The engine's draft budget and tune's replays price passes by this one rule."""
    for (r0, c0), (r1, c1) in itertools.pairwise(points):
        if rows <= r1:
            return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
    (r0, c0), (r1, c1) = points[-2], points[-1]
    return c1 + (c1 - c0) * (rows - r1) / (r1 - r0)


def draft_speedup_bound(draft_cost: float, k: int) -> float:
    """The most a draft model can speed decoding up, `draft_cost` (c) the price of one draft pass
    in target passes and k the tokens it drafts a step at most. A step drafting j <= k tokens costs
    j draft passes and one verify pass over j + 1 rows (at least one target pass) and yields at most
    j + 1 tokens, so

        speed-up <= max over j of (j + 1) / (j c + 1)  =  (k + 1) / (k c + 1)  for c < 1,
                                                          1 (j = 0: no drafting) for c >= 1.

    The engine prices a draft pass the same way (c = the draft's bytes per token over the
    target's; engine.speculate.step)."""
    return (k + 1) / (k * draft_cost + 1) if draft_cost < 1.0 else 1.0


def copied_share(context: Sequence[int], answer: Sequence[int], span: int = 8) -> float:
    """Share of the answer's tokens that lie in a run of `span` tokens already seen earlier in
    context + answer (an earlier start; the runs may overlap, as in LZ77): how much of the answer a
    proposer that drafts from what it has seen (ngram, trie, suffix) can copy in long runs (shorter
    runs are not counted). 0.0 for an empty answer.

    A window w of the answer (tokens p..p+span-1 of context + answer) counts when the same tokens
    start at some q < p; every token of a counted window is covered."""
    if span < 1:
        raise ValueError(f"span must be >= 1; got {span}")
    text, start = [*context, *answer], len(context)
    first: dict[tuple[int, ...], int] = {}
    covered = [False] * len(answer)
    for p in range(len(text) - span + 1):
        gram = tuple(text[p : p + span])
        seen = first.setdefault(gram, p)
        if seen < p and p + span > start:
            for i in range(max(p, start), p + span):
                covered[i - start] = True
    return sum(covered) / len(answer) if answer else 0.0


def hindsight_tokens_per_pass(
    context: Sequence[int], answer: Sequence[int], max_draft: int, min_match: int = 1
) -> float:
    """Tokens per verify pass when every pass drafts, with hindsight, the best continuation of seen
    text: of all earlier places where the last `min_match` tokens of context + answer so far were
    seen, the one whose next tokens agree longest with the answer (at most `max_draft` of them);
    the pass yields those plus the target's own token. 0.0 for an empty answer.

    No proposer drafting from one request's seen text (ngram, trie, suffix, trees included: an
    accepted path continues one place) after a match of >= min_match tokens, with <= max_draft
    accepted a pass, does better: taking the longest run each pass is optimal, because the reach
    i + run(i) never falls as i grows (the run found at i, less its first token, is there at
    i + 1)."""
    if max_draft < 0 or min_match < 1:
        raise ValueError(f"need max_draft >= 0 and min_match >= 1; got {max_draft}, {min_match}")
    text, start = [*context, *answer], len(context)
    after: dict[tuple[int, ...], list[int]] = {}  # tokens -> positions that follow them
    indexed = min_match  # positions < indexed are in `after`
    passes, i = 0, start
    while i < len(text):
        for j in range(indexed, i):
            after.setdefault(tuple(text[j - min_match : j]), []).append(j)
        indexed = max(indexed, i)
        best = 0
        for j in after.get(tuple(text[i - min_match : i]), ()) if i >= min_match else ():
            run = 0  # drafts copy seen text only: j + run < i
            while (
                run < max_draft
                and j + run < i
                and i + run < len(text)
                and text[j + run] == text[i + run]
            ):
                run += 1
            best = max(best, run)
        i += best + 1
        passes += 1
    return len(answer) / passes if passes else 0.0


def _check_float(name: str, value: object, low: float | None) -> float:
    """`value` as a float: an int or float (not a bool), finite, >= low when low is given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low:g}; got {value}")
    return float(value)


def _check_int(name: str, value: object, low: int, message: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int; got {value!r}")
    if value < low:
        raise ValueError(message or f"{name} must be >= {low}; got {value}")
