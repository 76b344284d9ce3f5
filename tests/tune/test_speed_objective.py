"""The speed objective on requests whose tokens all came in one read (a speculative burst, or a
client late to read): no decode time was seen, so tokens / E2E, a lower bound, stands in for the
request's Output Speed instead of dropping it (a trial of such requests used to fail)."""

from __future__ import annotations

import pytest

from roofline.bench.records import RequestRecord
from roofline.tune.objectives import ObjectiveSettings, speed_value

MS = 1_000_000


def record(i: int, chunk_ms: list[int], tokens: list[int]) -> RequestRecord:
    return RequestRecord(
        i,
        "sequential",
        sent_ns=0,
        first_byte_ns=chunk_ms[0] * MS,
        end_ns=chunk_ms[-1] * MS,
        chunk_ns=[t * MS for t in chunk_ms],
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
        http_status=200,
    )


def test_streamed_requests_keep_their_output_speed():
    # 1 token at 10 ms, 10 more by 110 ms: 10 tokens in 0.1 s
    assert speed_value([record(0, [10, 110], [1, 10])], ObjectiveSettings()) == pytest.approx(100)


def test_a_request_in_one_read_counts_tokens_over_e2e():
    one_read = record(0, [50], [16])  # 16 tokens at 50 ms: 320 tok/s end to end
    assert speed_value([one_read], ObjectiveSettings()) == pytest.approx(320)
    streamed = record(1, [10, 110], [1, 10])
    assert speed_value([one_read, streamed, streamed], ObjectiveSettings()) == pytest.approx(100)


def test_a_single_token_has_no_speed():
    assert speed_value([record(0, [50], [1])], ObjectiveSettings()) is None
