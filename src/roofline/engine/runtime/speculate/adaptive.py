"""How much to draft: expected tokens per unit of cost, from the measured acceptance and the
measured cost of a verify pass, so that unpredictable text is not decoded slower than without
speculation.

With per-token acceptance alpha, a draft whose accepted path can be d deep yields (the +1 is the
target's own token)

    E(d) = 1 + alpha + ... + alpha^d = (1 - alpha^(d + 1)) / (1 - alpha)

and costs, in plain one-row decode passes (pass(rows): `ModelRunner.pass_cost`),

    cost(n) = pass(1 + n) / pass(1) + n_draft_passes * c_draft

The draft is cut to the prefix size n (best guesses come first) maximising E(depth(n)) / cost(n);
when none beats plain decoding by MARGIN, nothing is drafted. alpha is a running average per
request from PRIOR_ALPHA; after PROBE_EVERY steps without a draft a small one is tried, so alpha
can recover.

Per-position statistics refine E: the server counts, by proposer and match-length bucket, how often
draft position (depth) i was offered and how often the accepted path reached it,

    s_i = P(accepted depth >= i | depth i offered),   E(d) = 1 + s_1 + ... + s_d

so one more row is verified only when its position's s_i pays for the pass's extra cost (the ratio
E / cost keeps growing). A position with fewer than MIN_OFFERS offers in its bucket falls back to
the running-alpha model, alpha^i (E above is the same sum with s_i = alpha^i).

The table mixes requests (a file being copied next to an open story), so each request scales it by
its own record, c = (accepted + P) / (promised + P), where promised sums the unscaled E(d) - 1 of
its verified drafts: s_i' = min(1, c s_i). P pseudo-tokens (CALIBRATION_PRIOR) let a new request
trust the table until its own drafts say otherwise.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.response_stats import PositionAcceptance

PRIOR_ALPHA = 0.6
ALPHA_WEIGHT = 0.3  # weight of the newest step in the running average
MARGIN = 1.02  # drafting must promise at least this speed-up over one plain pass
PROBE_EVERY = 8
PROBE_NODES = 2
MIN_OFFERS = 16  # offers of a position in a bucket before its s_i replaces alpha^i
MATCH_BUCKETS = (1, 2, 4, 8, 16)  # upper ends of the match-length buckets; longer: "17+"
CALIBRATION_PRIOR = 2.0  # pseudo-tokens of a request's record that agree with the table


def expected_tokens(alpha: float, depth: int) -> float:
    """E(d) = sum_{i=0..d} alpha^i: tokens a verify step yields when the accepted path can be depth
    deep."""
    if alpha >= 1.0:
        return float(depth + 1)
    return (1.0 - alpha ** (depth + 1)) / (1.0 - alpha)


def match_bucket(match_len: int | None) -> str:
    """The bucket of a proposer's match length: "1", "2", "3-4", "5-8", "9-16", "17+"; "-" when
    the proposer reports none (a draft model)."""
    if match_len is None:
        return "-"
    low = 1
    for high in MATCH_BUCKETS:
        if match_len <= high:
            return str(high) if low == high else f"{low}-{high}"
        low = high + 1
    return f"{low}+"


class AcceptanceTable:
    """Per-position survival counts of one server's (or one generate call's) drafts, by proposer
    and match bucket. The scheduler thread records; `rows()` may be read from any thread."""

    def __init__(self, proposer: str) -> None:
        self.proposer = proposer
        self._counts: dict[str, list[list[int]]] = {}  # bucket -> [[offered, survived] per depth]
        self._lock = threading.Lock()

    def record(self, bucket: str, depth: int, accepted: int) -> None:
        """A verify step offered positions 1..depth; the accepted path reached `accepted`."""
        with self._lock:
            counts = self._counts.setdefault(bucket, [])
            while len(counts) < depth:
                counts.append([0, 0])
            for i in range(depth):
                counts[i][0] += 1
                counts[i][1] += i < accepted

    def survival(self, bucket: str, alpha: float, depth: int) -> list[float]:
        """s_1..s_depth: measured where a position has MIN_OFFERS offers, else alpha^i."""
        counts = self._counts.get(bucket, ())
        out = []
        for i in range(depth):
            if i < len(counts) and counts[i][0] >= MIN_OFFERS:
                out.append(counts[i][1] / counts[i][0])
            else:
                out.append(alpha ** (i + 1))
        return out

    def rows(self) -> list[PositionAcceptance]:
        with self._lock:
            return [
                PositionAcceptance(self.proposer, bucket, i + 1, offered, survived)
                for bucket, counts in sorted(self._counts.items())
                for i, (offered, survived) in enumerate(counts)
            ]


@dataclass
class SpecStats:
    """Per request (and summed per server): weight passes, drafted and accepted tokens."""

    passes: int = 0  # weight passes the request took part in, prefill included
    drafted: int = 0  # draft nodes verified
    accepted: int = 0  # draft nodes accepted (every accepted node is one output token)
    steps_with_draft: int = 0

    def add(self, other: SpecStats) -> None:
        self.passes += other.passes
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.steps_with_draft += other.steps_with_draft

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def to_json(self) -> dict:
        return {
            "passes": self.passes,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
        }


@dataclass
class DraftBudget:
    """The adaptive controller of one request. pass_cost(rows) -> time relative to a one-row pass;
    draft_pass_cost: cost of one draft-model pass (0 for proposers that read no weights)."""

    pass_cost: object  # Callable[[int], float]
    draft_pass_cost: float = 0.0
    adaptive: bool = True
    alpha: float = PRIOR_ALPHA
    idle_steps: int = 0
    stats: SpecStats = field(default_factory=SpecStats)
    table: AcceptanceTable | None = None  # shared by the server's requests: s_i per bucket
    bucket: str = "-"  # the match bucket of the draft being verified
    promised: float = 0.0  # accepted tokens the unscaled s_i promised for the verified drafts
    promise: float = 0.0  # what they promise for the draft being verified

    def cut(self, tree: DraftTree, match_len: int | None = None) -> DraftTree:
        """The prefix of `tree` worth verifying (possibly empty), for proposers whose drafting is
        free; match_len: the proposer's match for this draft (its statistics' bucket)."""
        self.bucket = match_bucket(match_len)
        if not self.adaptive or len(tree) == 0:
            return tree
        return tree.truncated(self._size(tree.depths()))

    def chain_length(self, k: int) -> int:
        """How many tokens a draft model should draft (each costs a draft pass), at most k."""
        self.bucket = match_bucket(None)
        if not self.adaptive or k <= 0:
            return max(k, 0)
        return self._size(tuple(range(1, k + 1)))

    def survival(self, depth: int) -> list[float]:
        """s_1..s_depth for the current bucket (alpha^i where nothing is measured), unscaled."""
        if self.table is None:
            return [self.alpha ** (i + 1) for i in range(depth)]
        return self.table.survival(self.bucket, self.alpha, depth)

    def calibration(self) -> float:
        """c: this request's accepted tokens against what the unscaled s_i promised for them."""
        return (self.stats.accepted + CALIBRATION_PRIOR) / (self.promised + CALIBRATION_PRIOR)

    def _size(self, depths: tuple[int, ...]) -> int:
        """The n maximising E(deepest of the first n nodes) / cost(n); 0 when nothing beats MARGIN,
        except for a small probe every PROBE_EVERY idle steps."""
        best_n, best_ratio, deepest = 0, MARGIN, 0
        c = self.calibration()
        raw = self.survival(max(depths, default=0))
        gains = [1.0]  # gains[d] = E(d) = 1 + s_1' + ... + s_d'
        for s in raw:
            gains.append(gains[-1] + min(1.0, c * s))
        for n in range(1, len(depths) + 1):
            deepest = max(deepest, depths[n - 1])
            cost = self.pass_cost(1 + n) + deepest * self.draft_pass_cost
            ratio = gains[deepest] / cost
            if ratio > best_ratio:
                best_n, best_ratio = n, ratio
        if best_n == 0:
            self.idle_steps += 1
            if self.idle_steps < PROBE_EVERY:
                return 0
            best_n = min(PROBE_NODES, len(depths))
        self.idle_steps = 0
        self.promise = sum(raw[: max(depths[:best_n])])
        return best_n

    def record(self, tree: DraftTree, accepted: int) -> None:
        """After a verify step: `accepted` nodes of `tree` were kept."""
        self.stats.passes += 1
        if len(tree) == 0:
            return
        self.stats.drafted += len(tree)
        self.stats.accepted += accepted
        self.promised += self.promise  # 0 unless `_size` cut this draft
        self.promise = 0.0
        self.stats.steps_with_draft += 1
        if self.table is not None:
            self.table.record(self.bucket, max(tree.depths()), accepted)
        # alpha per level: the accepted depth out of the levels offered, each level one Bernoulli
        # trial until the first miss (a chain of d levels with a accepted: a successes, min(a + 1,
        # d) trials)
        depth = max(tree.depths())
        trials = min(accepted + 1, depth)
        step_alpha = accepted / trials if trials else self.alpha
        self.alpha = (1 - ALPHA_WEIGHT) * self.alpha + ALPHA_WEIGHT * step_alpha
