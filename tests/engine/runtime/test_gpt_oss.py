"""gpt-oss: a tiny random GptOssForCausalLM built by transformers (two layers, the first sliding
with a window of 6 tokens, the second global; attention sinks; q/k/v/o, router and expert biases;
eight experts of which two route each token by a softmax over their logits; the clamped SwiGLU; YaRN
RoPE with factor 4 over an original context of 64, untruncated), saved as a Hugging Face folder (the
experts fused, gate and up interleaved; and as OpenAI ships it, the experts' MXFP4 blocks and
scales) and written as GGUF the way llama.cpp's converter does (gate, up and down packed apart with
their biases): F32; F32 with MXFP4 experts; Q8_0 with MXFP4 experts, the mix test_moe's quantized
files use, so that the two tests' stored passes are one compile.

Greedy ids equal transformers' (eager attention: its sinks are the eager kernel's) from the folder
and from the F32 GGUF for 32 tokens of three prompts, which cross the window; on the Q8_0 + MXFP4
GGUF `--dtype stored` gives the fp32 logits bit for bit; speculation on equals off; four streams
equal one; the bytes a step reads equal the file's count (`roofline ceiling`'s); the MXFP4
safetensors folder holds the MXFP4 GGUF's expert rows byte for byte and gives its dequantized logits
bit for bit (transformers' own dequantizer agrees with its weights); the file's chat template is the
one applied."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures import (
    add_tiny_tokenizer,
    assert_four_streams_equal_one,
    assert_logits_match_transformers,
    assert_speculation_keeps_greedy_ids,
    family_prompt_ids,
    four_streams,
    greedy_ids,
    greedy_logits,
    side_by_side_ids,
    tiny_gguf_writer,
    tiny_vocab,
    write_gguf_tensors,
    write_tiny_tokenizer_files,
)
from safetensors import safe_open
from test_vs_transformers import hf_greedy

from roofline.engine import load_runner
from roofline.engine.kernels.experts import route_topk_softmax
from roofline.engine.kernels.reference import as_torch
from roofline.engine.loading import load_checkpoint
from roofline.engine.loading.config import Activation, Routing
from roofline.engine.loading.mxfp4_experts import openai_blocks
from roofline.engine.runtime.model_runner import available_cores

# every test but the pure ones needs a decode pass compiled for gpt-oss's experts
pytestmark = pytest.mark.slow

N_TOKENS = 32
LAYERS, WINDOW = 2, 6
EXPERTS, USED, FFN = 8, 2, 32
YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 64,
    "rope_theta": 150000.0,
}
# a harmony-like template (gpt-oss files carry the real one as tokenizer.chat_template)
HARMONY = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
# HF names of a layer's tensors -> llama.cpp's (gpt-oss's post_attention_norm is the MLP's norm)
_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight",
    "mlp.router.bias": "ffn_gate_inp.bias",
    **{
        f"self_attn.{x}_proj.{k}": f"attn_{y}.{k}"
        for x, y in zip("qkvo", ["q", "k", "v", "output"])
        for k in ("weight", "bias")
    },
}


def _hf_model():
    import transformers

    config = transformers.GptOssConfig(
        vocab_size=len(tiny_vocab()[0]),
        hidden_size=64,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=EXPERTS,
        num_experts_per_tok=USED,
        sliding_window=WINDOW,
        max_position_embeddings=256,
        rope_parameters=dict(YARN),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            # norms around 1, routers wide enough that tokens go to many experts, sinks near the
            # scores
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 if ".router." in name else 0.08))
    return hf


def _layer_tensors(state: dict, layer: int, fuse_gate_up: bool = False) -> dict[str, np.ndarray]:
    """blk.{layer}.* of the HF state as llama.cpp's converter writes them: the fused experts split
    into gate, up and down (each (experts, out, in)) with their biases; with `fuse_gate_up`, gate
    and up in one ffn_gate_up_exps (each expert's gate rows, then its up rows), as converters may
    write them since early 2026."""
    p = f"model.layers.{layer}."
    out = {f"blk.{layer}.{g}": state[p + hf].float().numpy() for hf, g in _GGUF_NAMES.items()}
    gate_up = state[p + "mlp.experts.gate_up_proj"].float()  # (E, hidden, 2 ffn), interleaved
    gate_up_bias = state[p + "mlp.experts.gate_up_proj_bias"].float()
    parts = {
        "gate": (gate_up[..., ::2].transpose(1, 2), gate_up_bias[..., ::2]),
        "up": (gate_up[..., 1::2].transpose(1, 2), gate_up_bias[..., 1::2]),
        "down": (
            state[p + "mlp.experts.down_proj"].float().transpose(1, 2),
            state[p + "mlp.experts.down_proj_bias"].float(),
        ),
    }
    for proj, (w, b) in parts.items():
        out[f"blk.{layer}.ffn_{proj}_exps.weight"] = w.contiguous().numpy()
        out[f"blk.{layer}.ffn_{proj}_exps.bias"] = b.contiguous().numpy()
    if fuse_gate_up:
        for kind in ("weight", "bias"):
            g, u = (out.pop(f"blk.{layer}.ffn_{x}_exps.{kind}") for x in ("gate", "up"))
            out[f"blk.{layer}.ffn_gate_up_exps.{kind}"] = np.concatenate([g, u], axis=1)
    return out


def _write_gguf(path, hf, tensor_type: str, experts_type: str, fuse_gate_up: bool = False):
    """The GGUF of the model: `tensor_type` matrices, the experts' weights `experts_type`, every
    vector and the router F32 (as llama.cpp keeps them)."""
    import gguf

    c = hf.config
    writer = tiny_gguf_writer(path, "gpt-oss", "tiny-gpt-oss", c)
    writer.add_expert_feed_forward_length(c.intermediate_size)
    writer.add_expert_count(EXPERTS)
    writer.add_expert_used_count(USED)
    writer.add_rope_freq_base(YARN["rope_theta"])
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(YARN["factor"])
    writer.add_rope_scaling_orig_ctx_len(YARN["original_max_position_embeddings"])
    writer.add_sliding_window(WINDOW)
    add_tiny_tokenizer(writer)
    state = hf.state_dict()
    tensors = {
        "token_embd.weight": state["model.embed_tokens.weight"].numpy(),
        "output_norm.weight": state["model.norm.weight"].numpy(),
        "output.weight": state["lm_head.weight"].numpy(),
    }
    for layer in range(c.num_hidden_layers):
        tensors.update(_layer_tensors(state, layer, fuse_gate_up))

    def type_of(name: str) -> str:
        if name.endswith("_exps.weight"):
            return experts_type
        # the router and the (expert) biases stay F32
        return "F32" if name.endswith(("ffn_gate_inp.weight", ".bias")) else tensor_type

    write_gguf_tensors(writer, tensors, type_of)
    return path


def _write_mxfp4_folder(folder, hf):
    """The model as OpenAI ships gpt-oss: each layer's experts as MXFP4 blocks and scales
    (gate_up rows interleaved, (experts, rows, n / 32, 16) and (experts, rows, n / 32)), quantized
    by gguf-py row by row as the MXFP4 GGUF's experts are; every other tensor as saved."""
    import shutil

    from gguf import GGMLQuantizationType as QT
    from gguf.quants import quantize
    from safetensors.torch import save_file

    out = {}
    for name, t in hf.state_dict().items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[name] = t.contiguous()
            continue
        # x @ W layout (experts, n, rows) -> rows of n, quantized by blocks of 32 along n
        rows = quantize(np.ascontiguousarray(t.float().transpose(1, 2).numpy()), QT.MXFP4)
        blocks, scales = openai_blocks(rows)
        out[name + "_blocks"] = torch.from_numpy(np.ascontiguousarray(blocks))
        out[name + "_scales"] = torch.from_numpy(scales)
    folder.mkdir()
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder.parent / "tiny-gpt-oss" / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def oss(tmp_path_factory):
    """(transformers model, HF folder, F32 GGUF, Q8_0 GGUF with MXFP4 experts); beside them an
    F32 GGUF with MXFP4 experts and the MXFP4 safetensors folder."""
    hf = _hf_model()
    folder = tmp_path_factory.mktemp("gpt-oss") / "tiny-gpt-oss"
    hf.save_pretrained(str(folder))
    write_tiny_tokenizer_files(folder, hf.config.max_position_embeddings)
    f32 = _write_gguf(folder.parent / "tiny-gpt-oss.F32.gguf", hf, "F32", "F32")
    _write_gguf(folder.parent / "tiny-gpt-oss.F32-MXFP4.gguf", hf, "F32", "MXFP4")
    mxfp4 = _write_gguf(folder.parent / "tiny-gpt-oss.Q8_0-MXFP4.gguf", hf, "Q8_0", "MXFP4")
    _write_mxfp4_folder(folder.parent / "tiny-gpt-oss-mxfp4", hf)
    return hf, folder, f32, mxfp4


def _runner(path, dtype="fp32"):
    # two threads where there are two cores: the phases' hand-offs between threads run too
    threads = min(2, available_cores())
    return load_runner(str(path), dtype=dtype, max_seq_len=128, max_batch=4, threads=threads)


@pytest.fixture(scope="module")
def folder_runner(oss):
    return _runner(oss[1])


@pytest.fixture(scope="module")
def mxfp4_stored(oss):
    """The Q8_0 + MXFP4 GGUF's own blocks (a pass compiled for Q8_0 and MXFP4 rows:
    test_moe's)."""
    return _runner(oss[3], "stored")


@pytest.fixture(scope="module")
def prompts(oss):
    return family_prompt_ids(oss[1])


@pytest.fixture(scope="module")
def reference(oss, prompts):
    """transformers' greedy ids of each prompt."""
    return [hf_greedy(oss[0], ids, N_TOKENS) for ids in prompts]


def test_the_config_is_gpt_oss(oss, folder_runner):
    gguf_runner = _runner(oss[2])
    for runner in (folder_runner, gguf_runner):
        c = runner.config
        assert c.arch == "gpt-oss" and c.sinks and c.o_bias and c.attn_bias and c.expert_bias
        assert c.routing == Routing.TOPK_SOFTMAX and c.activation == Activation.SWIGLU_OAI
        assert (c.n_experts, c.n_experts_used, c.ffn) == (EXPERTS, USED, FFN)
        assert c.windows == (WINDOW, 0)
        assert (c.swiglu_limit, c.swiglu_alpha) == (7.0, 1.702)
        assert c.rope_scaling["rope_type"] == "yarn" and c.rope_scaling["truncate"] is False
    a, b = folder_runner.weights, gguf_runner.weights
    for name in ("wqkv", "bqkv", "wo", "bo", "sinks", "mlp_norm"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("router", "router_bias", "wgu", "gu_bias", "wd", "d_bias"):
        assert np.array_equal(getattr(a.experts, name), getattr(b.experts, name)), name
    # the same RoPE tables from the folder's rope_parameters and from the GGUF's keys
    assert np.array_equal(folder_runner._cos, gguf_runner._cos)


def test_the_router_spreads_the_prompts_over_the_experts(oss, prompts):
    """transformers' own routing of the test prompts reaches most experts of every layer."""
    picked: dict[int, set[int]] = {i: set() for i in range(LAYERS)}
    hooks = [
        layer.mlp.router.register_forward_hook(
            lambda _m, _i, out, i=i: picked[i].update(out[2].flatten().tolist())
        )
        for i, layer in enumerate(oss[0].model.layers)
    ]
    try:
        with torch.no_grad():
            for ids in prompts:
                oss[0](input_ids=torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    assert all(len(experts) >= 6 for experts in picked.values()), picked


def test_the_prompts_cross_the_window(prompts):
    assert all(len(ids) + N_TOKENS > 4 * WINDOW for ids in prompts)


@pytest.mark.parametrize("source", ["folder", "gguf-f32"])
def test_greedy_ids_equal_transformers(oss, prompts, reference, folder_runner, source):
    runner = folder_runner if source == "folder" else _runner(oss[2])
    for ids, want in zip(prompts, reference):
        assert greedy_ids(runner, ids, N_TOKENS) == want


def test_logits_and_the_reference_forward_match_transformers(oss, prompts, folder_runner):
    assert_logits_match_transformers(oss[0], oss[1], folder_runner, prompts)


def test_stored_mxfp4_equals_fp32_bit_for_bit(oss, mxfp4_stored, prompts):
    fp32 = _runner(oss[3])  # the file's blocks widened to float32 on load
    assert mxfp4_stored.weights.experts.wgu.dtype == np.uint8
    for ids in prompts:
        assert np.array_equal(greedy_logits(mxfp4_stored, ids), greedy_logits(fp32, ids))


def test_mxfp4_safetensors_hold_the_mxfp4_ggufs_rows(oss, prompts):
    """OpenAI's MXFP4 blocks, rewritten as llama.cpp's rows on load, are the GGUF's rows byte for
    byte (what `--dtype stored` computes on; a stored pass of the folder would be one more
    compile for F32 and MXFP4 rows), dequantized they give the F32 + MXFP4 GGUF's logits bit for
    bit, and transformers' own dequantizer gives the weights ours do."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    folder = oss[1].parent / "tiny-gpt-oss-mxfp4"
    gguf = oss[1].parent / "tiny-gpt-oss.F32-MXFP4.gguf"
    rows = load_checkpoint(str(folder), dequantize=False).raw
    want = load_checkpoint(str(gguf), dequantize=False).raw
    experts = [n for n in want if ".mlp.experts." in n]
    assert len(experts) == LAYERS * EXPERTS * 3 and set(rows) == set(experts)
    for name in experts:
        assert rows[name][0] == want[name][0] == "MXFP4"
        assert np.array_equal(rows[name][1], want[name][1]), name
    checkpoint = load_checkpoint(str(folder))
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        p = "model.layers.1.mlp.experts."
        gate_up = convert_moe_packed_tensors(
            f.get_tensor(p + "gate_up_proj_blocks"),
            f.get_tensor(p + "gate_up_proj_scales"),
            dtype=torch.float32,
        )  # (experts, hidden, 2 ffn), interleaved, as transformers computes x @ W
    for e in range(EXPERTS):
        for proj, cols in (("gate_proj", gate_up[e][:, ::2]), ("up_proj", gate_up[e][:, 1::2])):
            assert torch.equal(as_torch(checkpoint.tensors[f"{p}{e}.{proj}.weight"]), cols.T)
    fp32, gguf_fp32 = _runner(folder), _runner(gguf)
    for ids in prompts[:2]:
        assert np.array_equal(greedy_logits(fp32, ids), greedy_logits(gguf_fp32, ids))


def test_speculation_on_equals_off(mxfp4_stored, prompts):
    assert_speculation_keeps_greedy_ids(mxfp4_stored, prompts, N_TOKENS)


def test_four_streams_equal_one(mxfp4_stored, prompts):
    assert_four_streams_equal_one(mxfp4_stored, prompts, N_TOKENS)


def test_four_streams_equal_one_every_time(mxfp4_stored, prompts):
    """The same, 300 times over (a few seconds): once a thread late to a layer's router could
    route from the next layer's logits and claim units that did not exist, and 4 to 9 runs in a
    thousand gave other ids (docs/measured.md). Deterministic code passes every time; code with
    that race fails here with a probability that depends on the host's scheduling."""
    cases = four_streams(prompts)
    alone = [greedy_ids(mxfp4_stored, ids, N_TOKENS) for ids in cases]
    for i in range(300):
        assert side_by_side_ids(mxfp4_stored, cases, N_TOKENS) == alone, f"run {i}"


def test_bytes_per_token_equal_the_ceilings_count(oss, mxfp4_stored):
    from roofline.modelspec.files import file_weight_bytes_per_token

    want = file_weight_bytes_per_token(oss[3])
    assert mxfp4_stored.bytes_per_token == mxfp4_stored.file_bytes_per_token == want


def test_the_files_chat_template_is_applied(tmp_path):
    """A GGUF's tokenizer.chat_template (gpt-oss files carry harmony's) renders the chat."""
    import gguf

    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt-oss")
    add_tiny_tokenizer(writer, chat_template=HARMONY)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from roofline.engine.loading.gguf import gguf_metadata, open_gguf
    from roofline.engine.loading.gguf_tokenizer import tokenizer_from_gguf

    tokenizer = tokenizer_from_gguf(gguf_metadata(open_gguf(path)), path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], True)
    assert text == "<|start|>user<|message|>hi<|end|><|start|>assistant"


def test_routing_is_a_softmax_over_the_top_k_logits():
    logits = np.array([[0.0, 2.0, 1.0, 2.0], [3.0, -1.0, 0.5, 1.0]], dtype=np.float32)
    ids, weights = np.zeros((2, 2), np.int64), np.zeros((2, 2), np.float32)
    before = logits.copy()
    route_topk_softmax(logits, 2, ids, weights)
    assert ids.tolist() == [[1, 3], [0, 3]]  # ties to the lowest index
    want = torch.softmax(torch.tensor([[2.0, 2.0], [3.0, 1.0]]), dim=-1).numpy()
    np.testing.assert_allclose(weights, want, rtol=1e-6)
    assert np.array_equal(logits, before)


def test_the_gpt_4o_pre_tokenizer_splits_words_as_o200k():
    """gpt-oss GGUFs name the pre-tokenizer "gpt-4o" (o200k): capitals then lower-case letters
    are one word, a contraction stays on its word, digits go in threes."""
    from roofline.engine.loading.gguf_tokenizer import byte_level_pre_tokenizer

    words = byte_level_pre_tokenizer("gpt-4o").pre_tokenize_str("Hello WORLD's HTTPServer 12345")
    assert [w for w, _ in words] == ["Hello", "ĠWORLD's", "ĠHTTPServer", "Ġ", "123", "45"]


def test_gate_and_up_fused_in_one_tensor_load_the_same_experts(
    oss, mxfp4_stored, prompts, tmp_path
):
    """ffn_gate_up_exps (weights and biases): the same stored rows, scales and biases as the
    split file's, and the same greedy ids."""
    path = _write_gguf(tmp_path / "fused.gguf", oss[0], "Q8_0", "MXFP4", fuse_gate_up=True)
    runner = _runner(path, "stored")
    a, b = runner.weights.experts, mxfp4_stored.weights.experts
    for name in ("wgu", "gu_scale", "wd", "d_scale", "router", "gu_bias", "d_bias"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert runner.config.expert_bias and runner.bytes_per_token == mxfp4_stored.bytes_per_token
    assert greedy_ids(runner, prompts[0], N_TOKENS) == greedy_ids(
        mxfp4_stored, prompts[0], N_TOKENS
    )
