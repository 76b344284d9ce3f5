from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.bench.sse import SSEParser

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\ndata: first line\r\ndata: second line\r\n\r\n"
    b"data:no-space\r\rdata: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b"first line\nsecond line", b"no-space", b"[DONE]"]


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    p, out, last = SSEParser(), [], 0
    for c in sorted(set(cuts)):
        out += p.feed(data[last:c])
        last = c
    out += p.feed(data[last:])
    return out + p.close()


def test_whole_stream():
    assert feed_in_pieces(STREAM, []) == EXPECTED


def test_every_single_split_point():
    for i in range(len(STREAM) + 1):
        assert feed_in_pieces(STREAM, [i]) == EXPECTED, i


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_splits(cuts):
    assert feed_in_pieces(STREAM, cuts) == EXPECTED


def test_byte_by_byte_crlf():
    data = b"data: x\r\n\r\ndata: y\r\n\r\n"
    p = SSEParser()
    out = []
    for i in range(len(data)):
        out += p.feed(data[i : i + 1])
    assert out == [b"x", b"y"]
    assert not p.pending


def test_event_without_data_dispatches_nothing_and_event_name_is_kept():
    p = SSEParser()
    assert p.feed(b"event: ping\n\nevent: error\ndata: boom\n\n") == [b"boom"]
    assert p.events_named == [b"error"]


def test_unterminated_last_event_is_returned_by_close():
    p = SSEParser()
    assert p.feed(b"data: [DONE]") == []
    assert p.pending
    assert p.close() == [b"[DONE]"]


def test_empty_data_line_gives_empty_payload():
    assert SSEParser().feed(b"data:\n\n") == [b""]


def test_a_byte_order_mark_at_the_start_is_dropped_wherever_the_reads_split():
    data = b"\xef\xbb\xbf" + STREAM
    for i in range(8):
        for j in range(i, 8):
            assert feed_in_pieces(data, [i, j]) == EXPECTED, (i, j)
    assert feed_in_pieces(b"\xef\xbb", []) == []  # only part of a mark: nothing
    # only at the very start: later the same bytes are data
    assert SSEParser().feed(b"data: a\n\ndata: \xef\xbb\xbfb\n\n") == [b"a", b"\xef\xbb\xbfb"]
