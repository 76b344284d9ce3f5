"""One measured request: what the client saw, every time on one monotonic clock.

Times are `perf_counter_ns()` (CLOCK_MONOTONIC on Linux, shared by the machine's processes). In
`requests.jsonl` `intended_ns` is relative to the run's origin and the request's other times
(`sent_ns`, `first_byte_ns`, `end_ns`, `chunk_ns`) to its `intended_ns`, so a line reads on its
own: `chunk_ns[0]` is the TTFT. `chunk_ns`/`chunk_tokens` list only events that carried output
tokens (not an OpenAI stream's role-only first chunk or usage-only last one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASE_WARMUP = "warmup"
PHASE_MEASURED = "measured"


@dataclass(slots=True)
class RequestRecord:
    id: int
    scenario: str  # e.g. "sequential", "concurrency=16", "rate=4/s"
    phase: str = PHASE_MEASURED
    prompt: str = ""  # prompt id
    rep: int = 0
    worker: int = 0
    # absolute perf_counter_ns times (converted to offsets when written)
    intended_ns: int = 0  # when the load generator meant to send it (TTFT and E2E start here)
    sent_ns: int = 0  # when its bytes were handed to the kernel
    first_byte_ns: int = 0  # first byte of the response
    end_ns: int = 0  # end of the response (or of the failure)
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

    def to_json(self, origin_ns: int) -> dict[str, Any]:
        """The JSONL line: intended time relative to the run origin, the rest relative to
        intended."""
        base = self.intended_ns

        def rel(t: int) -> int | None:
            return t - base if t else None

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
