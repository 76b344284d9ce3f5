"""The `"roofline"` figures a server adds to its `/v1/models` entry: one schema for the embedded
engine, which writes them, and bench, which holds a run against them (bench must not import the
engine, so the schema lives here, stdlib only).

    bytes_per_token        weight bytes the engine reads per decoded token at its own dtype
    file_bytes_per_token   the same count over the weights as the model's file stores them
    dtype                  the engine's weight format
    hardware, max_batch, max_seq_len   what the engine runs on and how far it goes
    pass_costs             {"rows": time of a weight pass over that many rows of one sequence
                           relative to one row}, as the engine measured them at start-up (the
                           cost of verifying a draft: what a predicted speculation ladder needs)

Another server may send anything under that key: `from_json` keeps a field only when it has the
right type (a number, not a bool; a string), so a malformed entry reads as unknown, never as an
error. Whether a byte count is plausible is bench's judgement (`bench.against.plausible_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _number(v: Any) -> int | float | None:
    return v if v.__class__ in (int, float) else None


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
class ServerStats:
    bytes_per_token: int | float | None = None
    file_bytes_per_token: int | float | None = None
    dtype: str | None = None
    hardware: str | None = None
    max_batch: int | None = None
    max_seq_len: int | None = None
    pass_costs: tuple[tuple[int, float], ...] | None = None  # (rows, relative cost), ascending

    def to_json(self) -> dict[str, Any]:
        """The entry's `"roofline"` object; unknown figures are left out."""
        out = {
            "bytes_per_token": self.bytes_per_token,
            "file_bytes_per_token": self.file_bytes_per_token,
            "dtype": self.dtype,
            "hardware": self.hardware,
            "max_batch": self.max_batch,
            "max_seq_len": self.max_seq_len,
            "pass_costs": (
                None if self.pass_costs is None else {str(r): c for r, c in self.pass_costs}
            ),
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
            pass_costs=_costs(d.get("pass_costs")),
        )
