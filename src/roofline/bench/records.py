"""One measured request: what the client saw, every time on one monotonic clock.

Times are `perf_counter_ns()` (CLOCK_MONOTONIC on Linux, shared by the machine's processes). In
`requests.jsonl` `intended_ns` is relative to the run's origin and the request's other times
(`sent_ns`, `first_byte_ns`, `end_ns`, `chunk_ns`) to its `intended_ns`, so a line reads on its
own: `chunk_ns[0]` is the TTFT. `chunk_ns`/`chunk_tokens` list only events that carried output
tokens (not an OpenAI stream's role-only first chunk or usage-only last one).

`RequestRecord.from_json` reads a line back onto the run's clock with its origin at 0: every time
is absolute again (`intended_ns` + the line's offset), so `to_json(0)` writes the same line; the
`*_offset_ns` properties give the times after the intended send that the metrics read. A line
written by an older version (fields missing) reads with the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    """Why a request was sent."""

    WARMUP = "warmup"  # to warm the server up: recorded, never measured
    MEASURED = "measured"


@dataclass(slots=True)
class RequestRecord:
    id: int
    scenario: str  # e.g. "sequential", "concurrency=16", "rate=4/s"
    phase: Phase = Phase.MEASURED
    prompt: str = ""  # prompt id
    rep: int = 0
    worker: int = 0
    # absolute perf_counter_ns times (converted to offsets when written)
    intended_ns: int = 0  # when the load generator meant to send it (TTFT and E2E start here)
    sent_ns: int | None = None  # when its bytes were handed to the kernel (None: never sent)
    first_byte_ns: int | None = None  # first byte of the response
    end_ns: int | None = None  # end of the response (or of the failure)
    chunk_ns: list[int] = field(default_factory=list)  # arrival of each token-bearing event
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each of those events carried
    token_source: str = ""  # usage_per_chunk | tokenizer | usage_total | usage_total+chars | chunks
    output_tokens: int = 0
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    http_status: int = 0
    error_kind: str = ""  # "" when the request succeeded
    error: str = ""
    text: str = ""
    # a server's own send stamps (`roofline_t_ns`), if offered
    server_chunk_ns: list[int] | None = None
    passes: int | None = None  # weight passes (verify steps) the server reports, if it does
    # the output's and the prompt's token ids, when the stream carried them (`return_token_ids`
    # asked for: the embedded server, vLLM)
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    # sent again once on a fresh connection after a stale keep-alive one closed
    retried: bool = False
    # raw stream, kept from the last byte until `tokens.finalize` has decoded it (never written)
    raw_events_ns: list[int] | None = None
    raw_payloads: list[bytes] | None = None
    saw_done: bool = False

    @property
    def ok(self) -> bool:
        return not self.error_kind

    @property
    def warmup(self) -> bool:
        """Sent to warm the server up: recorded, never measured."""
        return self.phase == Phase.WARMUP

    @property
    def chunk_offsets_ns(self) -> list[int]:
        """Each token-bearing event after the intended send: [0] is the TTFT, [-1] the E2E."""
        return [t - self.intended_ns for t in self.chunk_ns]

    @property
    def server_chunk_offsets_ns(self) -> list[int] | None:
        """The server's own send stamps after the intended send, when it offered them."""
        if self.server_chunk_ns is None:
            return None
        return [t - self.intended_ns for t in self.server_chunk_ns]

    @property
    def sent_offset_ns(self) -> int | None:
        """Actual send - intended send (the send lag); None when it was never sent."""
        return None if self.sent_ns is None else self.sent_ns - self.intended_ns

    def to_json(self, origin_ns: int) -> dict[str, Any]:
        """The JSONL line: intended time relative to the run origin, the rest relative to
        intended."""
        base = self.intended_ns

        def rel(t: int | None) -> int | None:
            return None if t is None else t - base

        d: dict[str, Any] = {
            "id": self.id,
            "scenario": self.scenario,
            "phase": self.phase,
            "prompt": self.prompt,
            "rep": self.rep,
            "worker": self.worker,
            "ok": self.ok,
            "error_kind": self.error_kind,
            "error": self.error,
            "http_status": self.http_status,
            "intended_ns": base - origin_ns,
            "sent_ns": rel(self.sent_ns),
            "first_byte_ns": rel(self.first_byte_ns),
            "end_ns": rel(self.end_ns),
            "chunk_ns": [t - base for t in self.chunk_ns],
            "chunk_tokens": self.chunk_tokens,
            "token_source": self.token_source,
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "finish_reason": self.finish_reason,
            "retried": self.retried,
            "text": self.text,
        }
        if self.server_chunk_ns is not None:
            d["server_chunk_ns"] = [t - base for t in self.server_chunk_ns]
        if self.passes is not None:
            d["passes"] = self.passes
        if self.token_ids is not None:
            d["token_ids"] = self.token_ids
        if self.prompt_token_ids is not None:
            d["prompt_token_ids"] = self.prompt_token_ids
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RequestRecord:
        """A requests.jsonl line back as a record, its times on the run's clock (origin 0)."""
        base = int(d.get("intended_ns") or 0)

        def at(offset: Any) -> int | None:
            return None if offset is None else base + int(offset)

        def ids(v: Any) -> list[int] | None:  # checked where they are compared (token_ids_of)
            return list(v) if isinstance(v, list) else None

        server = d.get("server_chunk_ns")
        passes, prompt_tokens = d.get("passes"), d.get("prompt_tokens")
        return cls(
            id=int(d["id"]),
            scenario=str(d.get("scenario") or ""),
            phase=Phase(d.get("phase") or Phase.MEASURED),
            prompt=str(d.get("prompt") or ""),
            rep=int(d.get("rep") or 0),
            worker=int(d.get("worker") or 0),
            intended_ns=base,
            sent_ns=at(d.get("sent_ns")),
            first_byte_ns=at(d.get("first_byte_ns")),
            end_ns=at(d.get("end_ns")),
            chunk_ns=[base + int(t) for t in d.get("chunk_ns") or ()],
            chunk_tokens=[int(k) for k in d.get("chunk_tokens") or ()],
            token_source=str(d.get("token_source") or ""),
            output_tokens=int(d.get("output_tokens") or 0),
            prompt_tokens=None if prompt_tokens is None else int(prompt_tokens),
            finish_reason=d.get("finish_reason"),
            http_status=int(d.get("http_status") or 0),
            # a line that says it failed without saying why still reads as failed
            error_kind=str(d.get("error_kind") or ("" if d.get("ok", True) else "unknown")),
            error=str(d.get("error") or ""),
            text=str(d.get("text") or ""),
            server_chunk_ns=None if server is None else [base + int(t) for t in server],
            passes=None if passes is None else int(passes),
            token_ids=ids(d.get("token_ids")),
            prompt_token_ids=ids(d.get("prompt_token_ids")),
            retried=bool(d.get("retried", False)),
        )
