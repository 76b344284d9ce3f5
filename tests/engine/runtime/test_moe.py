"""Mixture-of-experts models: a tiny random Qwen3MoeForCausalLM and MixtralForCausalLM built by
transformers (two layers, eight experts of which two route each token, renormalised), saved as a
Hugging Face folder and written as GGUF the way llama.cpp's converter does (each projection's
experts packed into one 3-D tensor, the router F32; Mixtral as `llama` with q/k rows permuted). Both
families share one compiled pass (the same array types): the second costs no compile.

Greedy ids equal transformers' from the folder and from the F32 GGUF; on a GGUF of Q8_0 with MXFP4
experts (llama-quantize's MXFP4_MOE mix; gpt-oss's test file is the same mix, so both families'
stored tests share one compiled pass) `--dtype stored` gives the fp32 logits bit for bit;
speculation on equals off; four streams equal one; a k-row pass equals k one-row passes, on one
thread or two; a pass reads the union of its rows' experts, each once."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fixtures import (
    GGUF_LAYER_NAMES,
    add_tiny_tokenizer,
    assert_four_streams_equal_one,
    assert_load_fails,
    assert_logits_match_transformers,
    assert_speculation_keeps_greedy_ids,
    family_prompt_ids,
    greedy_ids,
    greedy_logits,
    llamacpp_permute,
    tiny_gguf_writer,
    tiny_vocab,
    write_gguf_tensors,
    write_tiny_tokenizer_files,
)
from test_vs_transformers import hf_greedy

from roofline.engine import load_runner
from roofline.engine.kernels.experts import expert_work, route
from roofline.engine.loading import load_checkpoint

# every test but the pure ones needs a decode pass compiled for experts (fp32, stored Q8_0 with
# MXFP4 experts)
pytestmark = pytest.mark.slow

N_TOKENS = 32
LAYERS = 2
EXPERTS, USED = 8, 2
# the HF names of a layer's tensors -> GGUF names, and the router's
_GGUF_NAMES = {**GGUF_LAYER_NAMES, "mlp.gate.weight": "ffn_gate_inp.weight"}
_PACKED = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}


# family -> (GGUF architecture, the engine's block, q/k norms)
FAMILIES = {"qwen3moe": ("qwen3moe", "qwen3moe", True), "mixtral": ("llama", "llama", False)}


def _hf_model(family: str):
    import transformers

    common = dict(
        vocab_size=len(tiny_vocab()[0]),
        hidden_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts_per_tok=USED,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    if family == "qwen3moe":
        config = transformers.Qwen3MoeConfig(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_experts=EXPERTS,
            norm_topk_prob=True,
        )
        make = transformers.Qwen3MoeForCausalLM
    else:
        config = transformers.MixtralConfig(
            **common, intermediate_size=32, num_local_experts=EXPERTS, rope_theta=1_000_000.0
        )
        make = transformers.MixtralForCausalLM
    torch.manual_seed(0)
    hf = make(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            # norms around 1, routers wide enough that tokens go to many experts
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 if name.endswith("mlp.gate.weight") else 0.08))
    return hf


def _layer_tensors(state: dict, layer: int, config, layout: str) -> dict[str, np.ndarray]:
    """blk.{layer}.* of the HF state: each projection's experts packed (experts, out, in), as
    llama.cpp's converter stacks them (layout "packed"), gate and up fused in one tensor (each
    expert's gate rows, then its up rows: "fused") or one tensor per expert ("per_expert", as
    Mixtral GGUFs were written before the packing); a llama GGUF's q/k rows permuted for its
    RoPE."""
    p = f"model.layers.{layer}."
    out = {
        f"blk.{layer}.{g}": state[p + hf].float().numpy()
        for hf, g in _GGUF_NAMES.items()
        if p + hf in state
    }
    if config.model_type == "mixtral":
        for x, heads in (("q", config.num_attention_heads), ("k", config.num_key_value_heads)):
            name = f"blk.{layer}.attn_{x}.weight"
            out[name] = llamacpp_permute(out[name], heads)
    # transformers 5 holds the experts fused: gate_up_proj (experts, 2 ffn, hidden) = [Wg; Wu]
    gate, up = state[p + "mlp.experts.gate_up_proj"].float().chunk(2, dim=1)
    down = state[p + "mlp.experts.down_proj"].float()
    parts = {"gate_proj": gate, "up_proj": up, "down_proj": down}
    if layout == "fused":
        out[f"blk.{layer}.ffn_gate_up_exps.weight"] = torch.cat([gate, up], 1).numpy()
        del parts["gate_proj"], parts["up_proj"]
    for proj, w in parts.items():
        if layout == "per_expert":
            for e, w_e in enumerate(w):
                out[f"blk.{layer}.ffn_{proj[:-5]}.{e}.weight"] = w_e.contiguous().numpy()
        else:
            out[f"blk.{layer}.{_PACKED[proj]}.weight"] = w.contiguous().numpy()
    return out


def _write_gguf(
    path, hf, family: str, tensor_type: str, experts_type: str | None = None, layout="packed"
):
    """The GGUF of the model: `tensor_type` tensors, the experts `experts_type` (default the
    same), the router F32 (as llama.cpp keeps it); the experts' tensors in `layout`
    (`_layer_tensors`)."""
    c = hf.config
    writer = tiny_gguf_writer(path, FAMILIES[family][0], f"tiny-{family}", c)
    if family == "qwen3moe":  # Mixtral's experts have feed_forward_length rows
        writer.add_expert_feed_forward_length(c.moe_intermediate_size)
    writer.add_expert_count(EXPERTS)
    writer.add_expert_used_count(USED)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    add_tiny_tokenizer(writer)
    state = hf.state_dict()
    tensors = {
        "token_embd.weight": state["model.embed_tokens.weight"].numpy(),
        "output_norm.weight": state["model.norm.weight"].numpy(),
        "output.weight": state["lm_head.weight"].numpy(),
    }
    for layer in range(c.num_hidden_layers):
        tensors.update(_layer_tensors(state, layer, c, layout))

    def type_of(name: str) -> str:
        if name.endswith("ffn_gate_inp.weight"):
            return "F32"
        expert = name.endswith("_exps.weight") or name.split(".")[-2].isdigit()
        return experts_type or tensor_type if expert else tensor_type

    write_gguf_tensors(writer, tensors, type_of)
    return path


@pytest.fixture(scope="module", params=list(FAMILIES))
def moe(request, tmp_path_factory):
    """(transformers model, HF folder, F32 GGUF, Q8_0 GGUF with MXFP4 experts, family)."""
    family = request.param
    hf = _hf_model(family)
    folder = tmp_path_factory.mktemp(family) / f"tiny-{family}"
    hf.save_pretrained(str(folder))
    write_tiny_tokenizer_files(folder, hf.config.max_position_embeddings)
    f32 = _write_gguf(folder.parent / f"tiny-{family}.F32.gguf", hf, family, "F32")
    q8 = _write_gguf(folder.parent / f"tiny-{family}.Q8_0.gguf", hf, family, "Q8_0", "MXFP4")
    return hf, folder, f32, q8, family


@pytest.fixture(scope="module")
def folder_runner(moe):
    return load_runner(str(moe[1]), dtype="fp32", max_seq_len=128, max_batch=4, threads=2)


@pytest.fixture(scope="module")
def prompts(moe):
    return family_prompt_ids(moe[1])


@pytest.fixture(scope="module")
def reference(moe, prompts):
    """transformers' greedy ids of each prompt."""
    return [hf_greedy(moe[0], ids, N_TOKENS) for ids in prompts]


def _q8_runner(moe, dtype):
    return load_runner(str(moe[3]), dtype=dtype, max_seq_len=128, max_batch=4, threads=2)


@pytest.fixture(scope="module")
def q8_stored(moe):
    """The quantized GGUF's own blocks (a pass compiled for Q8_0 and MXFP4 rows)."""
    return _q8_runner(moe, "stored")


def test_the_config_is_a_mixture_of_experts(moe, folder_runner):
    gguf_runner = load_runner(str(moe[2]), dtype="fp32", max_seq_len=128, threads=2)
    _, arch, qk_norm = FAMILIES[moe[4]]
    for runner in (folder_runner, gguf_runner):
        c = runner.config
        assert c.arch == arch and c.moe and c.qk_norm == qk_norm and c.norm_topk
        assert (c.n_experts, c.n_experts_used, c.ffn) == (EXPERTS, USED, 32)
        # fp32: F32 rows of 64 weights (4 bytes each), through the stored kernels
        assert runner.weights.experts.wgu.shape == (LAYERS, EXPERTS, 64, 64 * 4)
        assert runner.weights.wgu.shape[1] == 0  # no dense MLP
    x = folder_runner.weights.experts
    assert np.array_equal(x.wd, gguf_runner.weights.experts.wd)
    assert np.array_equal(x.router, gguf_runner.weights.experts.router)
    # the llama GGUF's permuted q/k rows are back in HF order
    assert np.array_equal(folder_runner.weights.wqkv, gguf_runner.weights.wqkv)
    # a step reads every tensor but the experts and the embedding table, one embedding row, and
    # two experts a layer of eight (float32 here, as in the file)
    tensors = load_checkpoint(str(moe[1])).tensors
    want = sum(
        4 * t.size
        for name, t in tensors.items()
        if ".mlp.experts." not in name and name != "model.embed_tokens.weight"
    )
    want += 4 * 64 + (x.wgu.nbytes + x.wd.nbytes) * USED // EXPERTS
    assert folder_runner.bytes_per_token == folder_runner.file_bytes_per_token == want


def test_the_router_spreads_the_prompts_over_the_experts(moe, prompts):
    """transformers' own routing of the test prompts reaches most experts of every layer."""
    picked: dict[int, set[int]] = {i: set() for i in range(LAYERS)}
    hooks = [
        layer.mlp.gate.register_forward_hook(
            lambda _m, _i, out, i=i: picked[i].update(out[2].flatten().tolist())
        )
        for i, layer in enumerate(moe[0].model.layers)
    ]
    try:
        with torch.no_grad():
            for ids in prompts:
                moe[0](input_ids=torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    assert all(len(experts) >= 6 for experts in picked.values()), picked


@pytest.mark.parametrize("source", ["folder", "gguf-f32"])
def test_greedy_ids_equal_transformers(moe, prompts, reference, folder_runner, source):
    runner = (
        folder_runner
        if source == "folder"
        else load_runner(str(moe[2]), dtype="fp32", max_seq_len=128, threads=2)
    )
    for ids, want in zip(prompts, reference):
        assert greedy_ids(runner, ids, N_TOKENS) == want


def test_logits_and_the_reference_forward_match_transformers(moe, prompts, folder_runner):
    assert_logits_match_transformers(moe[0], moe[1], folder_runner, prompts)


def test_stored_q8_0_equals_fp32_bit_for_bit(moe, q8_stored, prompts):
    fp32 = _q8_runner(moe, "fp32")  # the file's blocks widened to float32 on load
    assert q8_stored.weights.experts.wgu.dtype == np.uint8
    assert q8_stored.bytes_per_token == q8_stored.file_bytes_per_token  # the routed MXFP4 rows
    for ids in prompts:
        assert np.array_equal(greedy_logits(q8_stored, ids), greedy_logits(fp32, ids))


@pytest.mark.parametrize("layout", ["per_expert", "fused"])
def test_other_expert_layouts_load_the_same_experts(moe, q8_stored, prompts, layout, tmp_path):
    """Experts one tensor each (early Mixtral GGUFs) or gate and up fused (converters since early
    2026): the same stored rows and scales as the packed file's, and the same greedy ids."""
    path = _write_gguf(tmp_path / f"{layout}.gguf", moe[0], moe[4], "Q8_0", "MXFP4", layout)
    runner = load_runner(str(path), dtype="stored", max_seq_len=128, max_batch=4, threads=2)
    a, b = runner.weights.experts, q8_stored.weights.experts
    for name in ("wgu", "gu_scale", "wd", "d_scale", "router"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert runner.bytes_per_token == q8_stored.bytes_per_token
    assert greedy_ids(runner, prompts[0], N_TOKENS) == greedy_ids(q8_stored, prompts[0], N_TOKENS)


def test_speculation_on_equals_off(q8_stored, prompts):
    assert_speculation_keeps_greedy_ids(q8_stored, prompts, N_TOKENS)


def test_four_streams_equal_one(q8_stored, prompts):
    assert_four_streams_equal_one(q8_stored, prompts, N_TOKENS)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_k_row_pass_equals_k_one_row_passes(q8_stored, prompts, threads):
    """extend (one pass over 12 rows of a slot, as a verify pass) == 12 decode steps, bit for bit,
    on one thread and on two."""
    runner = q8_stored
    runner.pass_threads = threads
    try:
        follow = prompts[2][:12]
        runner.prefill(1, prompts[1])
        many = runner.extend(1, follow)
        runner.truncate(1, len(prompts[1]))
        for i, t in enumerate(follow):
            assert np.array_equal(runner.decode([1], [t])[0], many[i]), f"row {i}"
        runner.release(1)
    finally:
        runner.pass_threads = None


def test_a_pass_reads_the_union_of_its_rows_experts_once():
    """Rows sharing experts: each expert of the union is one block of slots, its rows in row
    order, and each (row, rank) has its own slot."""
    ids = np.array([[3, 1], [1, 5], [5, 3], [3, 6]], dtype=np.int64)
    n_rows, start, chosen = (np.zeros(EXPERTS, np.int64) for _ in range(3))
    slot_of = np.zeros_like(ids)
    n = expert_work(ids, EXPERTS, n_rows, start, slot_of, chosen)
    assert chosen[:n].tolist() == [1, 3, 5, 6]  # the union, each expert once
    assert n_rows.tolist() == [0, 2, 0, 3, 0, 2, 1, 0]
    assert start[[1, 3, 5, 6]].tolist() == [0, 2, 5, 7]
    # expert 3's slots 2, 3, 4 hold rows 0, 2, 3; expert 1's slots 0, 1 rows 0, 1
    assert slot_of.tolist() == [[2, 0], [1, 5], [6, 3], [4, 7]]


def test_a_pass_counts_the_experts_it_read_and_their_bytes(moe, prompts, folder_runner):
    """One row reads n_experts_used experts a layer, the bytes `bytes_per_token` counts; a 12-row
    pass reads the union of its rows' experts (transformers' routing of the same positions) once,
    and `bytes_per_pass` adds those experts' bytes."""
    runner, ids, n = folder_runner, prompts[0], 12
    follow = prompts[2][:n]
    picked: list[list[int]] = [[] for _ in range(LAYERS)]
    hooks = [
        layer.mlp.gate.register_forward_hook(
            lambda _m, _i, out, i=i: picked[i].extend(out[2][-n:].flatten().tolist())
        )
        for i, layer in enumerate(moe[0].model.layers)
    ]
    try:
        with torch.no_grad():
            moe[0](input_ids=torch.tensor([ids + follow]))
    finally:
        for hook in hooks:
            hook.remove()
    union = sum(len(set(experts)) for experts in picked)
    assert union > LAYERS * USED  # the rows do not all share their experts
    passes, reads = runner.decode_passes, runner.decode_expert_reads
    runner.prefill(1, ids)
    runner.decode([1], [follow[0]])
    assert runner.last_expert_reads == LAYERS * USED
    assert runner.bytes_per_pass(LAYERS * USED, 1) == runner.bytes_per_token
    runner.truncate(1, len(ids))
    runner.extend(1, follow)
    runner.release(1)
    assert runner.last_expert_reads_by_layer.tolist() == [len(set(e)) for e in picked]
    assert runner.last_expert_reads == union
    # the server's counts (`ServerStats`): decode passes only, the prefill's not
    assert runner.decode_passes - passes == 2
    assert runner.decode_expert_reads - reads == LAYERS * USED + union
    x = runner.weights.experts
    per_expert = (x.wgu.nbytes + x.wd.nbytes) / (LAYERS * EXPERTS)
    more = runner.bytes_per_pass(union, 1) - runner.bytes_per_token
    assert more == pytest.approx(per_expert * (union - LAYERS * USED), rel=1e-12)
    # two passes, one of each: their mean
    both = runner.bytes_per_pass(union + LAYERS * USED, 2)
    assert both == pytest.approx(runner.bytes_per_token + more / 2, rel=1e-12)


def test_routing_is_softmax_top_k_renormalised_ties_to_the_lowest_index():
    logits = np.array([[0.0, 2.0, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0]], dtype=np.float32)
    ids, weights = np.zeros((2, 2), np.int64), np.zeros((2, 2), np.float32)
    probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
    route(logits, 2, True, ids, weights)
    assert ids.tolist() == [[1, 3], [0, 1]]
    np.testing.assert_allclose(weights, [[0.5, 0.5], [0.5, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(logits, probs, rtol=1e-6)  # logits become the probabilities
    logits = np.array([[0.0, 1.0, 3.0, 2.0]], dtype=np.float32)
    ids, weights = np.zeros((1, 2), np.int64), np.zeros((1, 2), np.float32)
    route(logits, 2, False, ids, weights)
    assert ids.tolist() == [[2, 3]]
    np.testing.assert_allclose(weights[0], logits[0, [2, 3]])  # not renormalised


def test_dense_layers_among_the_experts_are_refused(tmp_path):
    """Qwen3-MoE's dense layers (its mlp_only_layers key) are refused in one line."""
    folder = tmp_path / "mixed"
    _hf_model("qwen3moe").save_pretrained(str(folder))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, mlp_only_layers=[0])))
    assert_load_fails(folder, "mlp_only_layers", "not supported")
