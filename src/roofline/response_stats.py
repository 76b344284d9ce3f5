"""The `"roofline"` figures a server adds to its `/v1/models` entry: one schema for the embedded
engine, which writes them, and bench, which holds a run against them (bench must not import the
engine, so the schema lives here, stdlib only).

    bytes_per_token        weight bytes the engine reads per decoded token at its own dtype
    file_bytes_per_token   the same count over the weights as the model's file stores them
    dtype                  the engine's weight format
    hardware, max_batch, max_seq_len   what the engine runs on and how far it goes
    cross_request_memory   true when what one request taught the engine (a draft trie shared by
                           the server) speeds up later ones: a repeated prompt then measures memory
                           (bench's --repeat-policy)
    position_acceptance    per proposer, match-length bucket and draft position: how often the
                           position was offered and how often the accepted path reached it
    pass_costs             {"rows": time of a weight pass over that many rows of one sequence
                           relative to one row}, as the engine measured them at start-up (the
                           cost of verifying a draft: what a predicted speculation ladder needs)
    one_row_pass_s         seconds of a one-row weight pass in that measurement (what a decode
                           step costs beyond its per-token work)

Another server may send anything under that key: `from_json` keeps a field only when it has the
right type (a number, not a bool; a string), so a malformed entry reads as unknown, never as an
error. Whether a byte count is plausible is bench's judgement (`bench.against.plausible_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _positive(v: Any) -> float | None:
    n = _number(v)
    return float(n) if n is not None and n > 0 else None


def _count(v: Any) -> int | None:
    """A count (an int >= 0), else None."""
    return v if v.__class__ is int and v >= 0 else None


def _number(v: Any) -> int | float | None:
    return v if v.__class__ in (int, float) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _costs(v: Any) -> tuple[tuple[int, float], ...] | None:
    """{"rows": cost} with whole rows >= 1 and positive costs, as sorted pairs; None otherwise."""
    if not isinstance(v, Mapping) or not v:
        return None
    out = []
    for k, c in v.items():
        rows = int(k) if isinstance(k, str) and k.isdigit() else None
        if not rows or _number(c) is None or not c > 0:
            return None
        out.append((rows, float(c)))
    return tuple(sorted(out))


@dataclass(frozen=True)
class PositionAcceptance:
    """Draft position (depth) `position` of `proposer`'s drafts whose match length fell in bucket
    `match` was offered `offered` times and reached by the accepted path `survived` times."""

    proposer: str
    match: str
    position: int
    offered: int
    survived: int

    @property
    def rate(self) -> float:
        return self.survived / self.offered if self.offered else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "proposer": self.proposer,
            "match": self.match,
            "position": self.position,
            "offered": self.offered,
            "survived": self.survived,
        }

    @classmethod
    def from_json(cls, d: Any) -> PositionAcceptance | None:
        """The row, or None when a field is missing or of the wrong type."""
        if not isinstance(d, Mapping):
            return None
        names, counts = (
            (d.get("proposer"), d.get("match")),
            (
                d.get("position"),
                d.get("offered"),
                d.get("survived"),
            ),
        )
        if not all(isinstance(v, str) for v in names):
            return None
        if not all(v.__class__ is int and v >= 0 for v in counts):
            return None
        return cls(*names, *counts)


def _rows(v: Any) -> tuple[PositionAcceptance, ...]:
    rows = [PositionAcceptance.from_json(r) for r in v] if isinstance(v, list) else []
    return tuple(r for r in rows if r is not None)


def moe_bytes_per_pass(
    bytes_per_token: float, expert_read_bytes: float, one_row_reads: int, reads: int, passes: int
) -> float:
    """Weight bytes a mixture of experts' decode pass read on average, over `passes` passes that
    read `reads` experts in all (summed over layers): `bytes_per_token` counts one row's experts
    (`one_row_reads` a pass: layers x experts a row is routed to); a pass over several rows reads
    the union of its rows' experts, each `expert_read_bytes` (one expert of one layer):

        bytes a pass = bytes_per_token + expert_read_bytes x (reads - passes x one_row) / passes
    """
    return bytes_per_token + expert_read_bytes * (reads - passes * one_row_reads) / passes


@dataclass(frozen=True)
class ServerStats:
    bytes_per_token: int | float | None = None
    file_bytes_per_token: int | float | None = None
    dtype: str | None = None
    hardware: str | None = None
    max_batch: int | None = None
    max_seq_len: int | None = None
    cross_request_memory: bool | None = None
    position_acceptance: tuple[PositionAcceptance, ...] = ()
    pass_costs: tuple[tuple[int, float], ...] | None = None  # (rows, relative cost), ascending
    one_row_pass_s: float | None = None
    # the decode passes the server ran since it started and, for a mixture of experts, the experts
    # they read (summed over layers and passes: a pass reads the union of its rows'), the bytes of
    # one expert of one layer as the engine holds it, and the reads of a one-row pass (layers x
    # experts a row is routed to): a run's bench reads them before and after (`experts_read`)
    decode_passes: int | None = None
    expert_reads: int | None = None
    expert_read_bytes: float | None = None
    one_row_expert_reads: int | None = None
    # the run-time shapes of the engine's matrix kernels and where they came from (one line)
    kernels: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry's `"roofline"` object; unknown figures are left out."""
        out = {
            "bytes_per_token": self.bytes_per_token,
            "file_bytes_per_token": self.file_bytes_per_token,
            "dtype": self.dtype,
            "hardware": self.hardware,
            "max_batch": self.max_batch,
            "max_seq_len": self.max_seq_len,
            "cross_request_memory": self.cross_request_memory,
            "position_acceptance": [r.to_json() for r in self.position_acceptance] or None,
            "pass_costs": (
                None if self.pass_costs is None else {str(r): c for r, c in self.pass_costs}
            ),
            "one_row_pass_s": self.one_row_pass_s,
            "decode_passes": self.decode_passes,
            "expert_reads": self.expert_reads,
            "expert_read_bytes": self.expert_read_bytes,
            "one_row_expert_reads": self.one_row_expert_reads,
            "kernels": self.kernels,
        }
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, d: Any) -> ServerStats | None:
        """The figures of a `"roofline"` object; None when there is no object."""
        if not isinstance(d, Mapping):
            return None
        batch, seq = _number(d.get("max_batch")), _number(d.get("max_seq_len"))
        return cls(
            bytes_per_token=_number(d.get("bytes_per_token")),
            file_bytes_per_token=_number(d.get("file_bytes_per_token")),
            dtype=_text(d.get("dtype")),
            hardware=_text(d.get("hardware")),
            max_batch=batch if isinstance(batch, int) else None,
            max_seq_len=seq if isinstance(seq, int) else None,
            cross_request_memory=_bool(d.get("cross_request_memory")),
            position_acceptance=_rows(d.get("position_acceptance")),
            pass_costs=_costs(d.get("pass_costs")),
            one_row_pass_s=_positive(d.get("one_row_pass_s")),
            decode_passes=_count(d.get("decode_passes")),
            expert_reads=_count(d.get("expert_reads")),
            expert_read_bytes=_positive(d.get("expert_read_bytes")),
            one_row_expert_reads=_count(d.get("one_row_expert_reads")),
            kernels=_text(d.get("kernels")),
        )
