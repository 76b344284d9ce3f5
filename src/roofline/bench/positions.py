"""The server's per-position draft acceptance, as it stood when the run ended: how often each draft
position survived verification, by proposer and match-length bucket (`ServerStats`'s
`position_acceptance`, the adaptive budget's s_i). Counted over the server's lifetime, not this run
alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roofline.response_stats import ServerStats

AFTER_KEY = "roofline_after"  # provenance["server"][AFTER_KEY]: /v1/models' stats after the run


def stats_after(provenance: Mapping[str, Any]) -> ServerStats | None:
    server = provenance.get("server")
    return ServerStats.from_json(server.get(AFTER_KEY) if isinstance(server, Mapping) else None)


def positions_table(summary: Any) -> tuple[str, list[str], list[list[str]], list[str]] | None:
    """One row per proposer, match bucket and position of a `bench.summary.RunSummary`'s server
    (None when it reported none)."""
    stats = stats_after(summary.provenance)
    if stats is None or not stats.position_acceptance:
        return None
    rows = [
        [r.proposer, r.match, str(r.position), str(r.offered), f"{100 * r.rate:.0f}%"]
        for r in stats.position_acceptance
    ]
    headers = ["proposer", "match length", "position", "offered", "survived"]
    notes = ["the server's counts since it started, read after the run"]
    return ("draft positions accepted (server)", headers, rows, notes)
