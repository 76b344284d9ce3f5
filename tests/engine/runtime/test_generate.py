"""generate(): the single-sequence loop equals prefill + decode by hand, streams the same text the
tokenizer decodes, honours stops and the context, and reports timings; `roofline generate` end to
end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fixtures import greedy_ids

from roofline.engine import SamplingParams, generate, load_runner


@pytest.fixture(scope="module")
def runner(tiny_hf_dir):
    return load_runner(str(tiny_hf_dir), dtype="fp32", max_batch=2, max_seq_len=64)


def test_greedy_generation_equals_prefill_and_decode_by_hand(runner):
    ids = runner.tokenizer.encode("The quick brown fox")
    gen = generate(runner, ids, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    got = list(gen)
    assert got == greedy_ids(runner, ids, 12, slot=1)
    assert gen.sequence.finish_reason == "length" and gen.sequence.output_ids == got
    t = gen.timings
    assert t.prompt_tokens == len(ids) and t.generated_tokens == 12 and t.decode_tokens == 11
    assert t.prefill_seconds > 0 and t.decode_seconds > 0 and t.decode_tok_per_s > 0
    assert runner.position(0) == 0  # the slot is released afterwards


def test_streamed_text_is_the_decoded_text(runner):
    ids = runner.tokenizer.encode("Paris is the capital")
    params = SamplingParams(max_tokens=20, temperature=0.8, seed=1, ignore_eos=True)
    gen = generate(runner, ids, params)
    text = "".join(gen.text())
    assert text == runner.tokenizer.decode(gen.sequence.output_ids)
    again = generate(runner, ids, params)
    assert "".join(again.text()) == text  # same seed, same text


def test_stop_string_cuts_the_text(runner):
    ids = runner.tokenizer.encode("hello hello")
    free = generate(runner, ids, SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))
    full = "".join(free.text())
    stop = full[5:8]
    assert stop.strip(), "the tiny model should produce some text"
    cut = generate(
        runner, ids, SamplingParams(max_tokens=20, temperature=0, ignore_eos=True, stop=(stop,))
    )
    text = "".join(cut.text())
    assert text == full[: full.index(stop)] and cut.sequence.finish_reason == "stop"


def test_max_tokens_is_trimmed_to_the_context(runner):
    ids = list(range(3, 3 + 60))  # 60 of 64 positions
    gen = generate(runner, ids, SamplingParams(max_tokens=50, temperature=0, ignore_eos=True))
    assert len(list(gen)) == 4 and gen.sequence.finish_reason == "length"
    with pytest.raises(ValueError, match="context"):
        generate(runner, list(range(64)), SamplingParams())


def test_cli_generate_json(tiny_gguf):
    cmd = [
        sys.executable,
        "-m",
        "roofline",
        "generate",
        "Paris is",
        "--model",
        str(tiny_gguf),
        "--max-tokens",
        "6",
        "--no-chat",
        "--ignore-eos",
        "--json",
        "--threads",
        "1",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["generated_tokens"] == 6 and d["finish_reason"] == "length" and d["dtype"] == "stored"
    assert d["bytes_per_token"] > 0 and d["decode_tok_per_s"] > 0 and isinstance(d["text"], str)
    # held against this machine's read bandwidth measured right before and right after, the higher
    v = d["vs_ceiling"]
    window = v["local_bandwidth"]
    assert (
        window["bound_bytes_per_s"]
        == max(window["before_bytes_per_s"], window["after_bytes_per_s"])
        > 1e8
    )
    assert v["percent_of_ceiling"] == pytest.approx(
        100 * d["decode_tok_per_s"] * d["bytes_per_token"] / window["bound_bytes_per_s"]
    )
    assert ("note" in v) == (v["percent_of_ceiling"] > 100)
    # and against the bytes the file stores (this tiny fp32 GGUF: what the engine reads at fp32)
    assert d["file_bytes_per_token"] > 0
    assert d["read_ratio"] == pytest.approx(d["bytes_per_token"] / d["file_bytes_per_token"])
    assert v["percent_of_file_ceiling"] == pytest.approx(
        100 * d["decode_tok_per_s"] * d["file_bytes_per_token"] / window["bound_bytes_per_s"]
    )
    bad = subprocess.run(
        [sys.executable, "-m", "roofline", "generate", "x", "--dtype", "fp8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "dtype" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_generate_with_speculation_gives_the_same_text_in_fewer_passes(tiny_gguf):
    base = [
        sys.executable,
        "-m",
        "roofline",
        "generate",
        "a b c a b c a b c a b",
        "--model",
        str(tiny_gguf),
        "--max-tokens",
        "24",
        "--no-chat",
        "--ignore-eos",
        "--json",
        "--threads",
        "1",
    ]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=300)
    spec = subprocess.run(
        [*base, "--spec", "ngram", "--spec-k", "6", "--prompt-lookup-min", "1", "--no-adaptive"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    p, s = json.loads(plain.stdout), json.loads(spec.stdout)
    assert s["text"] == p["text"] and s["generated_tokens"] == p["generated_tokens"] == 24
    assert p["spec"] is None and p["weight_passes"] == 24
    assert s["spec"]["drafted_tokens"] > 0
    assert s["weight_passes"] == s["spec"]["passes"] == 24 - s["spec"]["accepted_tokens"]
    bad = subprocess.run(
        [*base, "--spec", "ngram", "--prompt-lookup-min", "4", "--prompt-lookup-max", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--prompt-lookup" in bad.stderr and "Traceback" not in bad.stderr
