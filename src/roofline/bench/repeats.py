"""Honest repeats: how requests for a prompt the server has already seen are counted.

A proposer that learns across requests (a draft trie shared by the whole server, `--trie-scope
shared`) answers a prompt it has seen from memory, so a benchmark that repeats a prompt measures
memory, not speculation. The server says it remembers (`ServerStats.cross_request_memory` in its
/v1/models entry); `--repeat-policy` says how repetitions count:

    auto     split when the server reports cross-request memory, else repeat (the default)
    fresh    the scenario's figures come from first-time prompts only; repeated requests are sent
             and recorded but counted apart, never in the headline
    split    every request counts; first-time and repeated prompts are also reported apart
    repeat   every request counts alike (what a server without memory measures anyway)

A request is *repeated* when an identical prompt (same text or messages) was sent earlier in this
run, by send time over every scenario, warm-ups included; what the server saw before the run is not
known to bench. Under fresh and split the warm-ups send WARMUP_PROMPT, which is not in the set, so
they teach the server nothing it is then measured on.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from roofline.bench import metrics
from roofline.bench.records import RequestRecord
from roofline.bench.workloads import Prompt
from roofline.errors import UserError

POLICIES = ("auto", "fresh", "split", "repeat")
GROUPED = ("fresh", "split")  # policies that tell first-time and repeated prompts apart
REPEAT_WORDS = {  # what each applied policy does, for the run's notes
    "fresh": "the figures count first-time prompts only",
    "split": "first-time and repeated prompts are reported apart",
    "repeat": "repeated prompts count like first-time ones",
}
WARMUP_PROMPT = Prompt(
    id="roofline-warmup",
    prompt="Count from one to twenty in words, separated by commas.",
    category="warmup",
)


def check_policy(policy: str, flag: str = "--repeat-policy") -> str:
    if policy not in POLICIES:
        raise UserError(f"{flag} must be one of {', '.join(POLICIES)} (got {policy!r})")
    return policy


def effective_policy(requested: str, server_memory: bool | None) -> str:
    """The policy a run applies: auto -> split when the server remembers, else repeat."""
    check_policy(requested)
    if requested != "auto":
        return requested
    return "split" if server_memory else "repeat"


def prompt_key(p: Prompt) -> str:
    """What makes two prompts identical to the server: the text or the messages."""
    return json.dumps([p.prompt, p.messages], sort_keys=True)


def same_as(prompts: Sequence[Prompt]) -> dict[str, str]:
    """prompt id -> the id of the first prompt with identical content (itself when unique)."""
    first: dict[str, str] = {}
    out: dict[str, str] = {}
    for p in [WARMUP_PROMPT, *prompts]:
        out[p.id] = first.setdefault(prompt_key(p), p.id)
    return out


def repeated_ids(records: Sequence[RequestRecord], identity: Mapping[str, str]) -> set[int]:
    """Ids of the requests whose prompt had been sent before them (by send time, any phase). A
    request never sent (no `sent_ns`) is classified but teaches the server nothing."""

    def when(r: RequestRecord) -> int:
        return r.intended_ns if r.sent_ns is None else r.sent_ns

    seen: set[str] = set()
    out: set[int] = set()
    for r in sorted(records, key=when):
        key = identity.get(r.prompt, r.prompt)
        if key in seen:
            out.add(r.id)
        elif r.sent_ns is not None:
            seen.add(key)
    return out


@dataclass(frozen=True)
class GroupFigures:
    """One group's measured requests: medians per request, tokens per weight pass."""

    requests: int = 0
    ok: int = 0
    output_tokens: int = 0
    output_speed_median_tok_per_s: float | None = None
    ttft_median_s: float | None = None
    tpot_median_s: float | None = None
    tokens_per_pass: float | None = None  # when the server reported its passes

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: Any) -> GroupFigures:
        d = d if isinstance(d, Mapping) else {}
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def group_figures(records: Sequence[RequestRecord]) -> GroupFigures:
    ok = [r for r in records if r.ok]
    per = [metrics.request_metrics(r) for r in ok]
    tokens = sum(m.output_tokens for m in per)
    with_passes = [(r, m) for r, m in zip(ok, per) if r.passes]
    passes = sum(r.passes for r, _ in with_passes)
    return GroupFigures(
        requests=len(records),
        ok=len(ok),
        output_tokens=tokens,
        output_speed_median_tok_per_s=_median([m.output_speed_tok_per_s for m in per]),
        ttft_median_s=_median([m.ttft_s for m in per]),
        tpot_median_s=_median([m.tpot_s for m in per]),
        tokens_per_pass=sum(m.output_tokens for _, m in with_passes) / passes if passes else None,
    )


@dataclass(frozen=True)
class RepeatGroups:
    """A scenario's first-time and repeated prompts apart (summary.json's "repeats")."""

    policy: str  # the policy applied: fresh or split
    first: GroupFigures
    repeated: GroupFigures
    server_memory: bool | None = None  # the server said it remembers across requests

    @property
    def counted(self) -> str:
        """Which requests the scenario's headline figures count."""
        return "first-time prompts only" if self.policy == "fresh" else "all requests"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "server_memory": self.server_memory,
            "first": self.first.to_json(),
            "repeated": self.repeated.to_json(),
        }

    @classmethod
    def from_json(cls, d: Any) -> RepeatGroups | None:
        if not isinstance(d, Mapping) or d.get("policy") not in GROUPED:
            return None
        memory = d.get("server_memory")
        return cls(
            policy=d["policy"],
            first=GroupFigures.from_json(d.get("first")),
            repeated=GroupFigures.from_json(d.get("repeated")),
            server_memory=memory if isinstance(memory, bool) else None,
        )


def split_lines(
    measured: Sequence[RequestRecord], repeated: set[int]
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(first-time requests, repeated requests) of a scenario's measured requests."""
    first = [r for r in measured if r.id not in repeated]
    return first, [r for r in measured if r.id in repeated]


def provenance_entry(requested: str, policy: str, server_memory: bool | None, prompts) -> dict:
    """provenance.json's "repeats": what summarize needs to tell the groups apart."""
    return {
        "requested": requested,
        "policy": policy,
        "server_memory": server_memory,
        "same_as": same_as(prompts),
    }


def repeats_table(summary: Any) -> tuple[str, list[str], list[list[str]], list[str]] | None:
    """First-time and repeated prompts side by side, per scenario of a `bench.summary.RunSummary`
    (None when no scenario splits them)."""

    def num(x: float | None, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        return "-" if x is None else fmt.format(scale * x)

    rows, notes = [], []
    for s in summary.scenarios:
        r = s.repeats
        if r is None:
            continue
        for name, g in (("first-time", r.first), ("repeated", r.repeated)):
            rows.append(
                [
                    s.name,
                    name,
                    str(g.ok),
                    num(g.output_speed_median_tok_per_s),
                    num(g.ttft_median_s, 1e3),
                    num(g.tpot_median_s, 1e3),
                    num(g.tokens_per_pass, fmt="{:.2f}"),
                ]
            )
        notes.append(
            f"{s.name}: the scenario's figures count {r.counted} (--repeat-policy {r.policy})"
        )
    if not rows:
        return None
    memory = any(s.repeats and s.repeats.server_memory for s in summary.scenarios)
    if memory:
        notes.insert(
            0,
            "the server remembers across requests: a repeated prompt measures its memory, not "
            "speculation",
        )
    headers = ["scenario", "prompts", "ok", "median tok/s", "TTFT ms", "TPOT ms", "tok/pass"]
    return ("first-time and repeated prompts", headers, rows, notes)
