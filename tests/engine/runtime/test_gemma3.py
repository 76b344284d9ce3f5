"""Gemma 3 text models: a tiny random Gemma3ForCausalLM built by transformers (six layers, five
sliding ones with a window of 8 tokens and RoPE base 10000, one global with base 1e6 and linear
scaling 8; post norms, GELU, the scaled embedding, query_pre_attn_scalar, a final logit soft cap),
saved as a Hugging Face folder and written as GGUF the way llama.cpp's converter does (norms stored
as 1 + w).

Logits are close to transformers' and greedy ids equal from the folder and from the F32 GGUF; on a
Q8_0 GGUF `--dtype stored` gives the fp32 logits bit for bit; speculation on equals off; four
streams equal one; soft-capped attention logits are refused."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from fixtures import (
    add_tiny_tokenizer,
    assert_four_streams_equal_one,
    assert_load_fails,
    assert_speculation_keeps_greedy_ids,
    family_prompt_ids,
    gguf_encode,
    greedy_ids,
    greedy_logits,
    tiny_gguf_writer,
    tiny_vocab,
    write_tiny_tokenizer_files,
)
from runner_helpers import prompt_ids
from scheduler_helpers import LogitsScheduler, N, serve_all
from test_vs_transformers import hf_greedy

from roofline.engine import load_runner
from roofline.engine.kernels import reference as model
from roofline.engine.loading import load_checkpoint

N_TOKENS = 32
WINDOW = 8
LAYERS = 6
CAP = 2.0  # final_logit_softcapping: small, so that it bends these logits (|l| < 2)
_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _hf_model():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=len(tiny_vocab()[0]),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        sliding_window=WINDOW,
        query_pre_attn_scalar=32,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
        final_logit_softcapping=CAP,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # norms around 1 + 0, matrices wide enough that the greedy ids vary
            p.copy_(torch.randn_like(p) * (0.1 if name.endswith("norm.weight") else 0.06))
    return model


def _write_gguf(path, model, tensor_type: str):
    import gguf

    writer = tiny_gguf_writer(path, "gemma3", "tiny-gemma3", model.config)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(8.0)
    writer.add_sliding_window(WINDOW)
    writer.add_final_logit_softcapping(CAP)
    add_tiny_tokenizer(writer)
    for hf, t in model.state_dict().items():
        if hf == "lm_head.weight":  # tied
            continue
        w = t.float().numpy()
        if hf.endswith("norm.weight"):  # llama.cpp's converter stores 1 + w
            w = w + np.float32(1.0)
        if hf == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif hf == "model.norm.weight":
            name = "output_norm.weight"
        else:
            _, _, layer, rest = hf.split(".", 3)
            name = f"blk.{layer}.{_GGUF_NAMES[rest]}"
        data, raw_dtype = gguf_encode(np.ascontiguousarray(w), tensor_type)
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """(transformers model, HF folder, F32 GGUF, Q8_0 GGUF)."""
    model = _hf_model()
    folder = tmp_path_factory.mktemp("gemma3") / "tiny-gemma3"
    model.save_pretrained(str(folder))
    write_tiny_tokenizer_files(folder, model.config.max_position_embeddings)
    f32 = _write_gguf(folder.parent / "tiny-gemma3.F32.gguf", model, "F32")
    q8 = _write_gguf(folder.parent / "tiny-gemma3.Q8_0.gguf", model, "Q8_0")
    return model, folder, f32, q8


@pytest.fixture(scope="module")
def prompts(gemma):
    return family_prompt_ids(gemma[1])


@pytest.fixture(scope="module")
def reference(gemma, prompts):
    """transformers' greedy ids of each prompt."""
    return [hf_greedy(gemma[0], ids, N_TOKENS) for ids in prompts]


@pytest.fixture(scope="module")
def q8_runners(gemma):
    return {
        dtype: load_runner(str(gemma[3]), dtype=dtype, max_seq_len=128, max_batch=4, threads=2)
        for dtype in ("fp32", "stored")
    }


def test_the_config_has_both_kinds_of_layer_and_the_gemma_block(gemma):
    runner = load_runner(str(gemma[2]), dtype="fp32", max_seq_len=128, threads=2)
    hf = load_runner(str(gemma[1]), dtype="fp32", max_seq_len=128, threads=2)
    for c in (runner.config, hf.config):
        assert c.arch == "gemma3" and c.post_norms and c.qk_norm
        assert c.layer_windows == (WINDOW,) * 5 + (0,)
        assert c.layer_rope_tables == (1,) * 5 + (0,)
        assert c.local_rope_theta == 10_000.0 and c.rope_theta == 1_000_000.0
        assert c.rope_scaling == {"rope_type": "linear", "factor": 8.0}
        assert c.query_scale == 32**-0.5 and c.embed_scale == float(np.float32(8.0))
        assert c.max_seq_len == 256  # not capped at the window: the windows slide
        assert c.final_softcap == CAP
    # the folded 1 + w of the folder equals the file's 1 + w
    assert np.array_equal(runner.weights.attn_post_norm, hf.weights.attn_post_norm)


@pytest.mark.parametrize("source", ["folder", "gguf-f32"])
def test_greedy_ids_equal_transformers(gemma, prompts, reference, source):
    path = gemma[1] if source == "folder" else gemma[2]
    runner = load_runner(str(path), dtype="fp32", max_seq_len=128, threads=2)
    for ids, want in zip(prompts, reference):
        assert len(ids) + N_TOKENS > 2 * WINDOW  # the windows slide
        assert greedy_ids(runner, ids, N_TOKENS) == want


@pytest.mark.parametrize("source", ["folder", "gguf-f32"])
def test_logits_are_close_to_transformers(gemma, prompts, source):
    runner = load_runner(str(gemma[1 if source == "folder" else 2]), dtype="fp32", max_seq_len=128)
    for ids in prompts:
        with torch.no_grad():
            want = gemma[0](input_ids=torch.tensor([ids])).logits[0].numpy()
        got = np.stack([runner.prefill(0, ids[: i + 1]) for i in range(len(ids))])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
        assert np.abs(got).max() > CAP / 2  # the cap bends them


def test_the_reference_forward_matches_transformers(gemma, prompts):
    """kernels/reference.py's Gemma 3 forward, on the folder's weights as the loader hands them (1 +
    w folded in), over whole prompts at once (transformers' masks, not the decode passes)."""
    checkpoint = load_checkpoint(str(gemma[1]))
    rope = model.rope_table_stack(checkpoint.config, 128)
    for ids in prompts:
        with torch.no_grad():
            want = gemma[0](input_ids=torch.tensor([ids])).logits[0]
            got = model.forward(checkpoint.config, checkpoint.tensors, torch.tensor(ids), rope=rope)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5)


def _wrapped(text_model):
    """A Gemma3ForConditionalGeneration (a tiny vision tower, as the 4B/12B/27B checkpoints carry)
    whose language model holds text_model's weights."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, SiglipVisionConfig

    vision = SiglipVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    config = Gemma3Config(
        text_config=text_model.config.to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=4,
    )
    wrapped = Gemma3ForConditionalGeneration(config).eval()
    wrapped.model.language_model.load_state_dict(text_model.model.state_dict())
    return wrapped


def test_a_multimodal_checkpoint_runs_its_language_model(gemma, prompts, reference, tmp_path):
    """A Gemma3ForConditionalGeneration folder: the text model alone, its config under text_config
    and its tensors under the wrapper's prefix; the same weights give the same greedy ids."""
    folder = tmp_path / "tiny-gemma3-vision"
    _wrapped(gemma[0]).save_pretrained(str(folder))
    write_tiny_tokenizer_files(folder, gemma[0].config.max_position_embeddings)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForConditionalGeneration"]
    runner = load_runner(str(folder), dtype="fp32", max_seq_len=128, threads=2)
    text = load_runner(str(gemma[1]), dtype="fp32", max_seq_len=128, threads=2)
    assert runner.config == replace(text.config, name=runner.config.name)
    assert np.array_equal(runner.weights.wqkv, text.weights.wqkv)
    assert greedy_ids(runner, prompts[0], N_TOKENS) == reference[0]


def test_soft_capped_attention_logits_are_refused(gemma, tmp_path):
    folder = tmp_path / "capped"
    shutil.copytree(gemma[1], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, attn_logit_softcapping=50.0)))
    assert_load_fails(folder, "attn_logit_softcapping", "not supported")


def test_stored_q8_0_equals_fp32_bit_for_bit(q8_runners, prompts):
    for ids in prompts:
        assert np.array_equal(
            greedy_logits(q8_runners["stored"], ids), greedy_logits(q8_runners["fp32"], ids)
        )


def test_speculation_on_equals_off(q8_runners, prompts):
    assert_speculation_keeps_greedy_ids(q8_runners["stored"], prompts, N_TOKENS)


def test_four_streams_equal_one(q8_runners, prompts):
    assert_four_streams_equal_one(q8_runners["stored"], prompts, N_TOKENS)


def test_sliding_layers_release_what_no_window_reads_again(gemma, prompts):
    """A long sequence on the sliding layers (window 8): the pages of positions no later row's
    window reaches are handed back (they read as zeros) while the global layer keeps its own; the
    logits equal, bit for bit, those of a runner that releases nothing, decoding alone and with
    speculation (whose rejected rows are truncated back)."""
    n = 200  # well past the first boundary: 8 + the 16-token slack, in chunks of 128

    def runner(release: bool):
        r = load_runner(str(gemma[3]), dtype="stored", max_seq_len=256, threads=2)
        r.prefill_chunk_tokens = 16
        if not release:  # a cache that releases nothing: no layer it counts as sliding
            r.cache.sliding_layers = ()
        return r

    kept, released = runner(False), runner(True)
    ids = prompts[0]
    want = greedy_logits(kept, ids, steps=n)
    got = [released.prefill(0, ids)]
    for _ in range(n):
        got.append(released.decode([0], [int(np.argmax(got[-1]))])[0])
    assert np.array_equal(np.stack(got), want)
    cache, blocks = released.cache, 128 // 16
    assert cache.forgotten[0] >= 128 and cache.sliding_layers == (0, 1, 2, 3, 4)
    assert not cache.k[0, :5, :, :blocks].any() and not cache.v[0, :5, :, :128].any()
    assert cache.k[0, 5, :, :blocks].any() and cache.v[0, 5, :, :128].any()
    assert cache.k[0, :5, :, blocks].any()  # the chunk a window still reaches
    with pytest.raises(ValueError, match="no longer hold"):
        released.save_kv(0, 0, 16)
    released.release(0)
    assert cache.forgotten[0] == 0
    assert_speculation_keeps_greedy_ids(released, prompts[:2], n)
    assert [greedy_ids(released, p, n) for p in prompts[:2]] == [
        greedy_ids(kept, p, n) for p in prompts[:2]
    ]


def test_cached_prefixes_on_released_sliding_layers_give_cold_logits(gemma):
    """The prefix cache saves a prompt's granules while the slot still holds them, and loading
    them into a slot whose sliding layers release as they go gives a cold prefill's logits and
    greedy ids, bit for bit."""
    r = load_runner(str(gemma[3]), dtype="stored", max_seq_len=256, max_batch=2, threads=2)
    r.prefill_chunk_tokens = 16
    vocab = r.config.vocab_size
    base, rest = prompt_ids(200, seed=11, vocab=vocab), prompt_ids(40, seed=12, vocab=vocab)
    cases = [base, base[:170] + rest[:30], base[:150] + rest, base[:-1] + rest[:1]]
    cold = [(r.prefill(0, p).copy(), greedy_ids(r, p, N)) for p in cases]
    released, forget = [], r.cache.forget_outside_windows

    def spy(slot, slack):  # what each pass found released
        forget(slot, slack)
        released.append(int(r.cache.forgotten[slot]))

    r.cache.forget_outside_windows = spy
    with LogitsScheduler(r, prefix_cache_mb=8) as sched:
        serve_all(sched, [base])
        assert max(released) >= 128  # the sliding layers released as the prompt ran
        for p, (logits, ids) in zip(cases, cold):
            assert serve_all(sched, [p])[0] == ids
            assert np.array_equal(sched.accepted[-1], logits)
        assert sched.stats().prefix_cache.tokens_reused >= 4 * 144
