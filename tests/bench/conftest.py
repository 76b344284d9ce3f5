"""Fixtures for the bench tests: a null server in its own process (its timing must not share our
GIL)."""

from __future__ import annotations

import pytest
from bench_helpers import nullserver


@pytest.fixture(scope="module")
def null_url():
    """A server with a quick schedule: 20 ms to the first token, then 8 tokens 2 ms apart, 2 per
    chunk."""
    with nullserver(
        "--ttft", "20ms", "--gap", "2ms", "--tokens", "8", "--tokens-per-chunk", "2"
    ) as url:
        yield url
