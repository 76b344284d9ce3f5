"""Greedy decoding of the default model (SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to fp32) gives
the same 64 token ids as Hugging Face transformers loading the same file, on four prompts.

Both sides get the same prompt ids; transformers runs a plain greedy loop with its KV cache (no stop
on EOS, as the engine runs with ignore_eos), so the two sequences are compared position by
position."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from roofline.engine import SamplingParams, generate, load_runner
from roofline.modelspec.default_model import default_model_path

pytestmark = pytest.mark.slow

N_TOKENS = 64
PROMPTS = [
    ("raw", "The capital of France is Paris. The capital of Germany is"),
    ("chat", "Write a haiku about memory bandwidth."),
    ("raw", "def fibonacci(n):\n"),
    ("chat", "List the first ten prime numbers, separated by commas."),
]


@pytest.fixture(scope="module")
def runner():
    return load_runner(None, dtype="fp32", max_seq_len=256)


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = default_model_path()
    folder = tmp_path_factory.mktemp("hf_gguf")
    os.symlink(path, folder / path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


def hf_greedy(model, prompt_ids: list[int], n: int) -> list[int]:
    # transformers 5.x names the KV cache argument `cache`; 4.x `past_key_values`
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out, past = [], None
    feed = torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(n):
            res = model(input_ids=feed, use_cache=True, **{name: past})
            past = getattr(res, name)
            token = int(res.logits[0, -1].argmax())
            out.append(token)
            feed = torch.tensor([[token]])
    return out


def prompt_ids(tokenizer, kind: str, text: str) -> list[int]:
    if kind == "chat":
        return tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": text}]),
            add_special_tokens=False,
        )
    return tokenizer.encode(text)


@pytest.mark.parametrize("kind,text", PROMPTS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(PROMPTS)])
def test_greedy_ids_identical_to_transformers(runner, hf_model, kind, text):
    ids = prompt_ids(runner.tokenizer, kind, text)
    ours = list(
        generate(runner, ids, SamplingParams(max_tokens=N_TOKENS, temperature=0, ignore_eos=True))
    )
    theirs = hf_greedy(hf_model, ids, N_TOKENS)
    if ours != theirs:
        first = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
            min(len(ours), len(theirs)),
        )
        pytest.fail(
            f"first divergence at generated token {first}: ours {ours[first]} "
            f"({runner.tokenizer.decode(ours[first : first + 1])!r}) "
            f"vs transformers {theirs[first]} "
            f"({runner.tokenizer.decode(theirs[first : first + 1])!r}); common text "
            f"{runner.tokenizer.decode(ours[:first])!r}"
        )
    assert len(ours) == N_TOKENS
