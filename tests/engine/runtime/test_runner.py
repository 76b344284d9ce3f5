"""ModelRunner: decode logits against the torch reference forward, batched == alone (bit-identical),
multi-token extend == one-by-one decode (bit-identical), slot bookkeeping and errors."""

from __future__ import annotations

import numpy as np
import pytest
from runner_helpers import FOLLOW, LONG_PROMPT, PROMPT, reference_logits, tiny_checkpoint

from roofline.engine.runtime.model_runner import ModelRunner, load_runner
from roofline.errors import UserError


@pytest.mark.parametrize(
    "arch,tie,prompt",
    [
        ("llama", False, PROMPT),
        ("llama", True, PROMPT),
        ("qwen2", False, PROMPT),
        ("qwen3", False, PROMPT),
        ("qwen2", False, LONG_PROMPT),
    ],
)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_decode_matches_reference_forward(arch, tie, prompt, dtype):
    """Logits of the prefill and of each decode step within fp32 rounding of the torch reference
    (model.forward over the whole sequence)."""
    ckpt = tiny_checkpoint(arch, tie)
    runner = ModelRunner(ckpt, dtype=dtype, max_batch=1, max_seq_len=64)
    ids = list(prompt)
    got = [runner.prefill(0, ids)]
    want = [reference_logits(ckpt, ids, dtype)]
    for t in FOLLOW:
        got.append(runner.decode([0], [t])[0])
        ids.append(t)
        want.append(reference_logits(ckpt, ids, dtype))
    assert runner.position(0) == len(ids)
    rel = 1e-4
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        err = np.abs(g - w.numpy()).max()
        assert err <= rel * np.abs(w.numpy()).max(), f"{arch} {dtype} step {step}: max |diff| {err}"


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_batched_decode_equals_each_slot_alone_bit_for_bit(dtype):
    runner = ModelRunner(tiny_checkpoint("qwen2"), dtype=dtype, max_batch=3, max_seq_len=64)
    prompts = {0: PROMPT[:3], 1: PROMPT, 2: PROMPT + FOLLOW + PROMPT[:2]}  # positions 3, 7, 14
    for slot, p in prompts.items():
        runner.prefill(slot, p)
    lengths = {s: runner.position(s) for s in prompts}
    batched = runner.decode([2, 0, 1], [11, 12, 13])
    for row, (slot, token) in enumerate([(2, 11), (0, 12), (1, 13)]):
        assert runner.position(slot) == lengths[slot] + 1
        runner.truncate(slot, lengths[slot])
        alone = runner.decode([slot], [token])[0]
        assert np.array_equal(alone, batched[row]), f"slot {slot} differs between batched and alone"


def test_extend_equals_token_by_token_decode_bit_for_bit():
    runner = ModelRunner(tiny_checkpoint("qwen3"), dtype="fp32", max_batch=2, max_seq_len=64)
    runner.prefill(1, PROMPT)
    many = runner.extend(1, FOLLOW)
    assert runner.position(1) == len(PROMPT) + len(FOLLOW)
    runner.truncate(1, len(PROMPT))
    for i, t in enumerate(FOLLOW):
        assert np.array_equal(runner.decode([1], [t])[0], many[i]), (
            f"row {i} of extend differs from decode"
        )


def test_prefill_resets_the_slot_and_release_frees_it():
    runner = ModelRunner(tiny_checkpoint(), dtype="fp32", max_batch=2, max_seq_len=64)
    first = runner.prefill(0, PROMPT)
    runner.decode([0], [9])
    again = runner.prefill(0, PROMPT)  # the old sequence is gone
    assert np.array_equal(first, again)
    assert runner.position(0) == len(PROMPT)
    runner.release(0)
    assert runner.position(0) == 0


def test_bytes_per_token_counts_weights_once_embedding_row_and_full_lm_head():
    for tie in (False, True):
        ckpt = tiny_checkpoint("qwen2", tie=tie)
        t = ckpt.tensors
        embed = t["model.embed_tokens.weight"]
        for dtype, matrix_bytes, scale_bytes in (("fp32", 4, 0), ("bf16", 2, 0), ("int8", 1, 4)):
            lm_head = embed if tie else t["lm_head.weight"]
            want = embed.shape[1] * matrix_bytes + scale_bytes  # one embedding row (and its scale)
            want += lm_head.size * matrix_bytes + lm_head.shape[0] * scale_bytes
            for name, x in t.items():
                if name in ("model.embed_tokens.weight", "lm_head.weight"):
                    continue
                # matrices with their row scales; norms and biases stay float32
                want += (
                    x.size * matrix_bytes + x.shape[0] * scale_bytes if x.ndim == 2 else x.size * 4
                )
            runner = ModelRunner(ckpt, dtype=dtype, max_batch=1, max_seq_len=8)
            assert runner.bytes_per_token == want, (tie, dtype)


def test_errors_are_clear():
    runner = ModelRunner(tiny_checkpoint(), dtype="fp32", max_batch=2, max_seq_len=8)
    runner.prefill(0, PROMPT)  # 7 of 8 positions
    runner.prefill(1, [1])
    with pytest.raises(ValueError, match="distinct"):
        runner.decode([0, 0], [1, 2])
    with pytest.raises(ValueError, match="out of range"):
        runner.decode([2], [1])
    with pytest.raises(ValueError, match=r"\[0, "):
        runner.decode([1], [10**6])
    runner.decode([0], [1])  # position 7: the last one
    with pytest.raises(ValueError, match="max_seq_len"):
        runner.decode([0], [1])
    with pytest.raises(ValueError, match="max_seq_len"):
        runner.prefill(1, list(range(9)))


def test_load_runner_from_a_hf_directory(tiny_hf_dir):
    runner = load_runner(str(tiny_hf_dir), dtype="bf16", threads=1, max_batch=2)
    assert runner.dtype == "bf16" and runner.max_batch == 2
    assert runner.max_seq_len == runner.config.max_seq_len and runner.path.endswith("tiny-llama")
    ids = runner.tokenizer.encode("Paris is the capital")
    assert runner.prefill(1, ids).shape == (runner.config.vocab_size,)
    with pytest.raises(UserError, match="dtype"):
        load_runner(str(tiny_hf_dir), dtype="fp8")
    with pytest.raises(UserError, match="max_seq_len"):
        load_runner(str(tiny_hf_dir), max_seq_len=10**6)
