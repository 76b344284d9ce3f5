"""The experts a mixture of experts' server read during a run: its /v1/models counts
(`ServerStats`' decode passes and expert reads, over the server's lifetime) read before and after
the run, the difference being the run's. A decode pass of one row reads `one_row_expert_reads`
experts (layers x experts a row is routed to), the count the ceiling and `bytes_per_token` assume;
a pass over several rows (a verify, a batch) reads the union of its rows' experts, each once
(`response_stats.moe_bytes_per_pass`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.bench.positions import stats_after
from roofline.response_stats import ServerStats, moe_bytes_per_pass


@dataclass(frozen=True)
class ExpertsRead:
    passes: int  # the run's decode passes
    reads: int  # the experts they read, summed over layers and passes
    one_row_reads: int  # a one-row pass' reads (layers x experts a row is routed to)
    read_bytes: float  # bytes of one expert of one layer
    bytes_per_token: float  # the server's one-row count

    @property
    def bytes_per_pass(self) -> float:
        """Weight bytes a decode pass read, on average."""
        return moe_bytes_per_pass(
            self.bytes_per_token, self.read_bytes, self.one_row_reads, self.reads, self.passes
        )


def experts_read(before: ServerStats | None, after: ServerStats | None) -> ExpertsRead | None:
    """The run's reads from the server's counts before and after it; None for a dense model, a
    server that reported none, or a run without a decode pass."""
    if before is None or after is None:
        return None
    counts = (
        before.decode_passes,
        before.expert_reads,
        after.decode_passes,
        after.expert_reads,
        after.one_row_expert_reads,
        after.expert_read_bytes,
        after.bytes_per_token,
    )
    if any(v is None for v in counts):
        return None
    passes = after.decode_passes - before.decode_passes
    reads = after.expert_reads - before.expert_reads
    if passes <= 0 or reads < 0:
        return None
    return ExpertsRead(
        passes, reads, after.one_row_expert_reads, after.expert_read_bytes, after.bytes_per_token
    )


def experts_table(summary: Any) -> tuple[str, list[str], list[list[str]], list[str]] | None:
    """The run's experts read, from a `bench.summary.RunSummary`'s server stats (None: a dense
    model, or a server that reported none)."""
    x = experts_read(summary.server_stats, stats_after(summary.provenance))
    if x is None:
        return None
    rows = [
        [
            str(x.passes),
            f"{x.reads / x.passes:.1f} (one row: {x.one_row_reads})",
            f"{x.bytes_per_pass / 1e6:.1f} MB",
            f"{x.bytes_per_token / 1e6:.1f} MB",
        ]
    ]
    headers = ["decode passes", "experts read a pass", "weight bytes a pass", "at one row"]
    notes = [
        "the server's counts before and after the run: a pass over several rows (a verify, a "
        "batch) reads the union of its rows' experts once; the ceiling counts one row's"
    ]
    return ("experts read (server)", headers, rows, notes)
