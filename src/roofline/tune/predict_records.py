"""The typed parts of a predicted ladder: the streams replayed (`Stream`), what a replay counted
(`ReplayStats`), the verify-cost curve (`PassCosts`) and one setting's prediction
(`Prediction`), each with its `to_json`/`from_json`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from roofline.speculation import pass_cost_between


def _int_table(d: Any) -> tuple[tuple[int, Any], ...]:
    """{"rows": value} (JSON keys are text) as sorted (rows, value) pairs."""
    return tuple(sorted((int(k), v) for k, v in (d or {}).items()))


@dataclass(frozen=True)
class Stream:
    """One baseline request: its prompt's token ids and its greedy output's."""

    prompt_id: str
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]


@dataclass(frozen=True)
class ReplayStats:
    """A proposer replayed over streams. passes counts the prefill's, as the engine's `"roofline"`
    stats do; rows = (rows of a decode pass, how many passes had them)."""

    passes: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    rows: tuple[tuple[int, int], ...] = ()
    # the proposer's own time in the replay (the engine spends it too); a timing, not part of what
    # a replay is, so equal replays compare equal whatever it took
    proposer_s: float = field(default=0.0, compare=False)

    @property
    def tokens_per_pass(self) -> float | None:
        return self.tokens / self.passes if self.passes else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def cost(self, pass_cost: Callable[[int], float]) -> float:
        """The decode passes' time in one-row passes."""
        return sum(n * pass_cost(rows) / pass_cost(1) for rows, n in self.rows)

    def add(self, other: ReplayStats) -> ReplayStats:
        rows = dict(self.rows)
        for r, n in other.rows:
            rows[r] = rows.get(r, 0) + n
        return ReplayStats(
            self.passes + other.passes,
            self.tokens + other.tokens,
            self.drafted + other.drafted,
            self.accepted + other.accepted,
            tuple(sorted(rows.items())),
            self.proposer_s + other.proposer_s,
        )

    def to_json(self) -> dict:
        return {
            "passes": self.passes,
            "tokens": self.tokens,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "rows": {str(r): n for r, n in self.rows},
            "proposer_s": self.proposer_s,
            "tokens_per_pass": self.tokens_per_pass,
            "acceptance": self.acceptance,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayStats:
        return cls(
            int(d.get("passes", 0)),
            int(d.get("tokens", 0)),
            int(d.get("drafted_tokens", 0)),
            int(d.get("accepted_tokens", 0)),
            tuple((r, int(n)) for r, n in _int_table(d.get("rows"))),
            float(d.get("proposer_s", 0.0)),
        )


@dataclass(frozen=True)
class PassCosts:
    """Time of a weight pass against its rows, relative to one row, and where it came from."""

    points: tuple[tuple[int, float], ...]  # (rows, cost), rows ascending, (1, 1.0) first
    source: str  # "measured by the engine at start-up" | the model it came from
    one_row_s: float | None = None  # seconds of a one-row pass, where measured

    def __call__(self, rows: int) -> float:
        """The engine's rule (`speculation.pass_cost_between`); 1.0 with fewer than two points."""
        return pass_cost_between(self.points, rows) if len(self.points) >= 2 else 1.0

    def monotone(self) -> PassCosts:
        """The running maximum: a pass over more rows is never cheaper (a dip is timing noise)."""
        pts, top = [], 0.0
        for r, c in self.points:
            top = max(top, c)
            pts.append((r, top))
        return PassCosts(tuple(pts), self.source, self.one_row_s)

    def to_json(self) -> dict:
        out = {"points": {str(r): c for r, c in self.points}, "source": self.source}
        return out if self.one_row_s is None else {**out, "one_row_s": self.one_row_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PassCosts:
        pts = tuple((r, float(c)) for r, c in _int_table(d.get("points")))
        t1 = d.get("one_row_s")
        return cls(pts, str(d.get("source", "")), float(t1) if t1 else None)


@dataclass(frozen=True)
class Prediction:
    """One proposer setting: the space's knobs that make it, its replay (all streams and each
    prompt's), and the predicted speed-up over the baseline."""

    setting: Mapping[str, Any]
    stats: ReplayStats
    ratio: float | None
    tok_per_s: float | None = None
    prompts: Mapping[str, ReplayStats] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "setting": dict(self.setting),
            "stats": self.stats.to_json(),
            "ratio": self.ratio,
            "tok_per_s": self.tok_per_s,
            "prompts": {k: v.to_json() for k, v in self.prompts.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Prediction:
        return cls(
            dict(d.get("setting") or {}),
            ReplayStats.from_json(d.get("stats") or {}),
            d.get("ratio"),
            d.get("tok_per_s"),
            {k: ReplayStats.from_json(v) for k, v in (d.get("prompts") or {}).items()},
        )
