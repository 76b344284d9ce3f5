"""The null server's exact token schedule, and the metrics a perfect client would report for it.

Request received at r. Chunk j (j = 0 .. m-1) leaves the server at

    r + ttft_s + j * tokens_per_chunk * gap_s

carrying tokens_per_chunk tokens (the last chunk what is left of n = output tokens), so the token
rate stays 1/gap_s whatever the chunking. The truth for a client is the same `metrics.py` functions
applied to these times, which is why calibration and tests can hold the client to a tight tolerance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from roofline.bench import metrics
from roofline.bench.metrics import NS_PER_S
from roofline.bench.records import RequestRecord


@dataclass(frozen=True)
class Schedule:
    ttft_s: float = 0.05
    gap_s: float = 0.01
    tokens: int = 32  # output tokens per request (fewer if the request's max_tokens is smaller)
    tokens_per_chunk: int = 1

    def output_tokens(self, max_tokens: int | None) -> int:
        return self.tokens if not max_tokens else max(1, min(self.tokens, int(max_tokens)))

    def chunk_offsets_ns(self, n_tokens: int) -> list[int]:
        """Send time of each chunk after the request was received, in ns."""
        k = self.tokens_per_chunk
        m = -(-n_tokens // k)
        return [round((self.ttft_s + j * k * self.gap_s) * NS_PER_S) for j in range(m)]

    def chunk_tokens(self, n_tokens: int) -> list[int]:
        k = self.tokens_per_chunk
        return [min(k, n_tokens - j) for j in range(0, n_tokens, k)]

    def truth(self, max_tokens: int | None = None) -> dict[str, float | None]:
        """What a perfect client would measure for one request (zero network and client delay)."""
        n = self.output_tokens(max_tokens)
        t = self.chunk_offsets_ns(n)
        k = self.chunk_tokens(n)
        # received and sent at the intended time, as a perfect client would
        request = RequestRecord(0, "", sent_ns=0, chunk_ns=t, chunk_tokens=k, output_tokens=n)
        itl = metrics.itl_per_token_seconds(t, k)
        gaps = metrics.chunk_gaps_seconds(t)
        return {
            **asdict(metrics.request_metrics(request)),
            "itl_mean_s": sum(itl) / len(itl) if itl else None,
            "chunk_gap_mean_s": sum(gaps) / len(gaps) if gaps else None,
        }
