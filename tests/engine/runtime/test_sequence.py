"""Sequence: stop strings held back until they cannot be one, stop tokens / EOS / max_tokens, and
UTF-8 that arrives split across tokens."""

from __future__ import annotations

import pytest

from roofline.engine.runtime.sampling import SamplingParams
from roofline.engine.runtime.sequence import Sequence

EOS, IM_END = 0, 1


class ByteTokenizer:
    """Token i >= 2 stands for the bytes in PIECES[i]; 0 is EOS, 1 a special chat marker."""

    PIECES = (
        b"<eos>",
        b"<|im_end|>",
        b"Hel",
        b"lo",
        b" wor",
        b"ld",
        b"!",
        b"\xe2\x82",
        b"\xac",
        b" END",
        b"EN",
        b"D",
        b"\xf0\x9f\x98",
        b"\x80",
        b"E",
    )
    eos_ids = frozenset({EOS})
    special_ids = frozenset({EOS, IM_END})

    def token_bytes(self, token_id: int) -> bytes:
        return self.PIECES[token_id]


def run(tokens, **params):
    """Feed tokens until done; return (pieces released per token, flush, sequence)."""
    seq = Sequence([2, 3], SamplingParams(**{"max_tokens": 100, **params}), ByteTokenizer())
    pieces = []
    for t in tokens:
        pieces.append(seq.append(t))
        if seq.done:
            break
    return pieces, seq.flush(), seq


def test_plain_text_is_released_token_by_token():
    pieces, tail, seq = run([2, 3, 4, 5, 6])
    assert pieces == ["Hel", "lo", " wor", "ld", "!"] and tail == "" and not seq.done


def test_eos_stops_and_is_not_text_unless_ignored():
    pieces, tail, seq = run([2, 3, EOS, 4])
    assert (
        seq.finish_reason == "stop"
        and seq.output_ids == [2, 3, EOS]
        and "".join(pieces) + tail == "Hello"
    )
    pieces, tail, seq = run([2, EOS, 3], ignore_eos=True)
    assert not seq.done and "".join(pieces) == "Hello"  # special tokens are not text


def test_stop_token_ids_stop():
    pieces, tail, seq = run([2, 6, 4], stop_token_ids=(6,))
    assert seq.finish_reason == "stop" and "".join(pieces) + tail == "Hel"


def test_max_tokens_finishes_with_length():
    pieces, tail, seq = run([2, 3, 4, 5], max_tokens=3)
    assert (
        seq.finish_reason == "length"
        and len(seq.output_ids) == 3
        and "".join(pieces) + tail == "Hello wor"
    )


def test_stop_string_split_across_tokens_is_held_back_then_cut():
    # the stop string "END" arrives as "EN" + "D": the text before it stays, the stop string is
    # dropped
    pieces, tail, seq = run([2, 3, 10, 11, 6], stop=("END",))
    assert pieces == ["Hel", "lo", "", ""]  # "EN" held back (could be "END"), then "END" found
    assert seq.finish_reason == "stop" and tail == ""


def test_held_back_prefix_is_released_when_it_stops_matching():
    pieces, _tail, seq = run([2, 10, 6, 3], stop=("END",))
    assert pieces == ["Hel", "", "EN!", "lo"]  # "EN" then "!" -> cannot be "END"
    assert not seq.done


def test_held_back_prefix_is_flushed_at_the_end():
    pieces, tail, seq = run([2, 10], stop=("END",), max_tokens=2)
    assert pieces == ["Hel", ""] and seq.finish_reason == "length" and tail == "EN"


def test_earliest_of_several_stop_strings_wins():
    pieces, tail, seq = run([2, 3, 4, 5], stop=("ld", "lo w"))
    assert "".join(pieces) + tail == "Hel" and seq.finish_reason == "stop"


def test_utf8_split_across_tokens_waits_for_the_whole_character():
    pieces, _tail, _seq = run([2, 7, 8, 12, 13])
    assert pieces == ["Hel", "", "€", "", "😀"]


def test_incomplete_utf8_at_the_end_becomes_a_replacement_character():
    pieces, tail, _seq = run([2, 7], max_tokens=2)
    assert "".join(pieces) + tail == "Hel\ufffd"


def test_stop_string_with_multibyte_text_and_no_output_after_it():
    pieces, tail, seq = run([7, 8, 9, 12, 13], stop=("€ E",))
    assert "".join(pieces) + tail == "" and seq.finish_reason == "stop"


def test_append_after_done_raises_and_zero_max_tokens_is_done_at_once():
    _, _, seq = run([2, EOS])
    with pytest.raises(RuntimeError):
        seq.append(3)
    seq = Sequence([2], SamplingParams(max_tokens=0), ByteTokenizer())
    assert seq.done and seq.finish_reason == "length"


def test_seeded_rng_is_reproducible():
    a = Sequence([2], SamplingParams(seed=3), ByteTokenizer()).rng.random(3)
    b = Sequence([2], SamplingParams(seed=3), ByteTokenizer()).rng.random(3)
    assert (a == b).all()
