"""Shared by the report tests: the bench and tune test helpers, and the null server's figures."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for helper in ("bench", "tune"):
    if str(TESTS / helper) not in sys.path:
        sys.path.insert(0, str(TESTS / helper))

# The helpers live in the sibling folders added to sys.path just above.
from bench_helpers import nullserver  # noqa: E402
from tune_helpers import fake_tune_argv, marker, write_space  # noqa: E402

BYTES_PER_TOKEN = 100_000_000  # what the null server advertises
# and what its model file stores (an engine reading 4x the file's bytes)
FILE_BYTES_PER_TOKEN = 25_000_000
BANDWIDTH = "100GB/s"  # -> ceiling 1000 tok/s, 1 ms per token

__all__ = [
    "BANDWIDTH",
    "BYTES_PER_TOKEN",
    "FILE_BYTES_PER_TOKEN",
    "fake_tune_argv",
    "marker",
    "nullserver",
    "write_space",
]
