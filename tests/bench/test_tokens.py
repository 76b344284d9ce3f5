import json

import pytest

from roofline.bench.records import RequestRecord
from roofline.bench.tokens import apportion, finalize, tokens_per_text_piece


def chat(text=None, usage=None, finish=None, role=False):
    delta = {"role": "assistant", "content": ""} if role else {"content": text}
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage}
    return json.dumps(obj).encode()


def usage_only(total):
    return json.dumps(
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": total}}
    ).encode()


def run(payloads, saw_done=True, tokenizer=None):
    rec = RequestRecord(id=0, scenario="t")
    finalize(rec, list(range(10, 10 + 10 * len(payloads), 10)), payloads, saw_done, tokenizer)
    return rec


def test_usage_per_chunk_counts_multi_token_chunks_exactly():
    rec = run(
        [
            chat(role=True, usage=0),
            chat(" a b", usage=2),
            chat(" c", usage=3),
            chat(" d e f", usage=6, finish="length"),
            usage_only(6),
        ]
    )
    assert rec.ok and rec.token_source == "usage_per_chunk"
    assert rec.chunk_tokens == [2, 1, 3]
    assert rec.chunk_ns == [20, 30, 40]  # the role chunk and the usage chunk carry no token
    assert rec.output_tokens == 6 and rec.prompt_tokens == 5 and rec.finish_reason == "length"
    assert rec.text == " a b c d e f"


def test_final_usage_equal_to_chunk_count_is_one_each():
    rec = run([chat(role=True), chat(" a"), chat(" b", finish="stop"), usage_only(2)])
    assert rec.token_source == "usage_total" and rec.chunk_tokens == [1, 1]


def test_final_usage_spread_by_characters():
    rec = run([chat(" aa"), chat(" bbbbbb", finish="stop"), usage_only(9)])
    assert rec.token_source == "usage_total+chars"
    assert rec.chunk_tokens == [3, 6] and rec.output_tokens == 9


def test_no_usage_counts_chunks():
    rec = run([chat(" a b c"), chat(" d", finish="stop")])
    assert rec.token_source == "chunks" and rec.chunk_tokens == [1, 1]


def test_tokenizer_credits_tokens_to_the_chunk_where_they_start(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"a": 0, "b": 1, "cd": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    tok = Tokenizer.from_file(str(path))
    # "cd" is split across two chunks: counted once, in the chunk where it starts
    assert tokens_per_text_piece(tok, [" a b c", "d a", ""]) == [3, 1, 0]
    rec = run([chat(" a b c"), chat("d a", finish="stop")], tokenizer=tok)
    assert rec.token_source == "tokenizer" and rec.chunk_tokens == [3, 1]
    rec = run([chat(" a b c"), chat("d a", finish="stop"), usage_only(8)], tokenizer=tok)
    assert rec.token_source == "usage_total+tokenizer" and rec.chunk_tokens == [6, 2]


def test_completions_text_field():
    p = [
        json.dumps({"choices": [{"text": " hi", "finish_reason": None}]}).encode(),
        json.dumps({"choices": [{"text": " there", "finish_reason": "stop"}]}).encode(),
    ]
    rec = run(p)
    assert rec.ok and rec.text == " hi there" and rec.chunk_tokens == [1, 1]


def test_bad_streams_are_failures_with_reasons():
    assert run([chat(" a"), b"{not json"]).error_kind == "malformed_sse"
    assert run([chat(" a"), b"[1, 2]"]).error_kind == "malformed_sse"
    r = run([chat(" a"), json.dumps({"error": {"message": "overloaded"}}).encode()])
    assert r.error_kind == "stream_error" and "overloaded" in r.error
    r = run([chat(" a"), chat(" b")], saw_done=False)
    assert r.error_kind == "stream_cut"
    assert run([chat(role=True)], saw_done=True).error_kind == "no_tokens"


def test_token_ids_in_the_stream_are_kept_with_the_prompts():
    def ids(obj, chunk_ids, **top):
        obj = json.loads(obj)
        obj["choices"][0]["token_ids"] = chunk_ids
        return json.dumps({**obj, **top}).encode()

    p = [ids(chat(role=True), [], prompt_token_ids=[7, 8]), ids(chat(" a b"), [4, 5])]
    rec = run([*p, ids(chat(" c", finish="stop"), [6])])
    assert rec.ok and rec.token_ids == [4, 5, 6] and rec.prompt_token_ids == [7, 8]
    line = rec.to_json(0)
    assert line["token_ids"] == [4, 5, 6] and line["prompt_token_ids"] == [7, 8]
    plain = run([chat(" a"), chat(" b", finish="stop")])
    assert plain.token_ids is None and "token_ids" not in plain.to_json(0)
    for bad in (["4"], [-1], "4 5", [True]):
        r = run([ids(chat(" a"), bad)])
        assert r.error_kind == "malformed_event" and "token ids" in r.error


def test_passes_reported_by_server():
    p = [
        chat(" a b"),
        json.dumps(
            {"choices": [], "usage": {"completion_tokens": 2, "spec_verify_ct": 1}}
        ).encode(),
    ]
    assert run(p).passes == 1


@pytest.mark.parametrize(
    "total,weights", [(10, [1, 1, 1]), (7, [0.5, 3, 0, 2]), (0, [1, 2]), (5, [0, 0])]
)
def test_apportion_sums_to_total(total, weights):
    parts = apportion(total, weights)
    assert sum(parts) == (total if sum(weights) else 0)
    assert all(p == 0 for p, w in zip(parts, weights) if w == 0)
