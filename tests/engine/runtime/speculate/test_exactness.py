"""Speculative decoding keeps greedy output bit-identical to plain decoding: every proposer (real
ones and test proposers that always guess right, never guess, always guess wrong, as chains and as
trees), fp32 / bf16 / int8, one sequence and the server under continuous batching; the KV cache
after a rejected draft is the cache of a run that never drafted; tree rows are bit-identical to
decoding their paths one by one."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures import greedy_ids, write_tiny_gguf
from runner_helpers import PROMPT, tiny_checkpoint

from roofline.engine import SamplingParams, generate, load_runner
from roofline.engine.runtime.model_runner import ModelRunner
from roofline.engine.runtime.speculate.adaptive import DraftBudget
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import RequestSpeculation, speculation_factory
from roofline.engine.runtime.speculate.tree import DraftTree

N = 24
PROMPTS = [
    "1, 2, 3, 4, 1, 2, 3, 4, 1, 2,",
    "The capital of France is",
    "def fib(n): return fib(n - 1)",
]


class Oracle:
    """Guesses from the reference output: right (`tree` puts the right token second among wrong
    siblings, so accepted paths are not the first children), or wrong (every guess differs from the
    reference)."""

    def __init__(self, reference, prompt_len, k=5, right=True, tree=False, vocab=300):
        self.ref, self.n0, self.k, self.right, self.tree, self.vocab = (
            reference,
            prompt_len,
            k,
            right,
            tree,
            vocab,
        )

    def _guess(self, i):
        t = self.ref[i] if i < len(self.ref) else 0
        return t if self.right else (t + 1) % self.vocab

    def propose(self, context, max_tokens):
        i = len(context) - self.n0  # output tokens so far: the next guess is reference[i]
        n = min(self.k, max_tokens)
        if n <= 0:
            return DraftTree.empty()
        if not self.tree:
            return DraftTree.chain([self._guess(i + j) for j in range(n)])
        tokens, parents, parent = [], [], -1
        # each level: a wrong sibling first, then the guess; descend through the guess
        for j in range(n):
            wrong = (self._guess(i + j) + 7) % self.vocab
            tokens += [wrong, self._guess(i + j)]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return DraftTree(tokens, parents).truncated(n)

    def accepted(self, context):
        pass


class Never:
    def propose(self, context, max_tokens):
        return DraftTree.empty()

    def accepted(self, context):
        pass


def fixed(runner, proposer):
    """A request's speculation that always verifies everything the proposer drafts (no adaptive
    cut)."""
    return RequestSpeculation(
        proposer, DraftBudget(runner.pass_cost, adaptive=False), chain_cost_first=False
    )


def first_divergence(got, want, runner=None, ids=None):
    """'' when equal, else where and by how much they differ (the logit gap of the reference
    step)."""
    if got == want:
        return ""
    i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    gap = ""
    if runner is not None and i < min(len(got), len(want)):
        logits = runner.prefill(0, list(ids) + list(want[:i]))
        runner.release(0)
        gap = f", logit gap {float(logits[want[i]] - logits[got[i]]):.3g}"
    return f"first divergent position {i}: {got[i : i + 3]} vs {want[i : i + 3]}{gap}"


@pytest.fixture(scope="module", params=["fp32", "bf16", "int8", "stored"])
def tiny(request, tiny_gguf, tmp_path_factory):
    # stored: the same model as Q4_1 blocks with a Q8_0 embedding (the shipped file's formats, so
    # the two share their kernels), computed on as stored
    path = (
        tiny_gguf
        if request.param != "stored"
        else write_tiny_gguf(
            tmp_path_factory.mktemp("tiny_q4_1"),
            tensor_type="Q4_1",
            type_overrides={"model.embed_tokens.weight": "Q8_0"},
        )
    )
    runner = load_runner(str(path), dtype=request.param, max_batch=4, max_seq_len=160)
    tok = runner.tokenizer
    cases = []
    for p in PROMPTS:
        ids = tok.encode(p)
        cases.append((ids, greedy_ids(runner, ids, N)))
    return runner, cases


TEST_PROPOSERS = {
    "never": lambda ref, n0, vocab: Never(),
    "oracle-chain": lambda ref, n0, vocab: Oracle(ref, n0, vocab=vocab),
    "oracle-tree": lambda ref, n0, vocab: Oracle(ref, n0, k=6, tree=True, vocab=vocab),
    "wrong-chain": lambda ref, n0, vocab: Oracle(ref, n0, right=False, vocab=vocab),
    "wrong-tree": lambda ref, n0, vocab: Oracle(ref, n0, k=6, right=False, tree=True, vocab=vocab),
}


@pytest.mark.parametrize("name", list(TEST_PROPOSERS))
def test_test_proposers_keep_greedy_output(tiny, name):
    runner, cases = tiny
    for ids, ref in cases:
        proposer = TEST_PROPOSERS[name](ref, len(ids), runner.config.vocab_size)
        g = generate(
            runner,
            ids,
            SamplingParams(max_tokens=N, temperature=0, ignore_eos=True),
            speculation=fixed(runner, proposer),
        )
        out = list(g)
        assert out == ref, f"{name} {runner.dtype}: {first_divergence(out, ref, runner, ids)}"
        stats = g.speculation.stats
        if name.startswith("oracle"):  # every guess right: k (or tree depth) + 1 tokens per pass
            assert stats.accepted == stats.drafted if name == "oracle-chain" else stats.accepted > 0
            assert g.timings.passes < N / 2
        else:  # nothing accepted: one token per pass, as without speculation
            assert stats.accepted == 0 and g.timings.passes == N


@pytest.mark.parametrize(
    "options",
    [
        SpecOptions("ngram", k=6, prompt_lookup_min=1),
        SpecOptions("trie"),
        SpecOptions("trie", tree=False),
        SpecOptions("trie", trie_scope="shared"),
        SpecOptions("draft", k=4),
        SpecOptions("ngram", k=8, adaptive=False),
        SpecOptions("suffix"),
        SpecOptions("suffix", tree=False, adaptive=False),
        SpecOptions("suffix", suffix_scope="shared", spec_min_prob=0.0, adaptive=False),
    ],
    ids=[
        "ngram",
        "trie",
        "trie-chain",
        "trie-shared",
        "draft-int8",
        "ngram-fixed",
        "suffix",
        "suffix-chain-fixed",
        "suffix-shared-fixed",
    ],
)
def test_real_proposers_keep_greedy_output(tiny, options):
    runner, cases = tiny
    make = speculation_factory(options, runner)
    drafted = 0
    for ids, ref in cases:
        g = generate(
            runner,
            ids,
            SamplingParams(max_tokens=N, temperature=0, ignore_eos=True),
            speculation=make(),
        )
        out = list(g)
        assert out == ref, (
            f"{options.method} {runner.dtype}: {first_divergence(out, ref, runner, ids)}"
        )
        drafted += g.speculation.stats.drafted
    if not options.adaptive or options.method == "draft":
        assert drafted > 0, "the proposer never drafted: the test would prove nothing"


def test_max_tokens_and_stop_strings_inside_a_draft(tiny):
    """A draft that runs past max_tokens or past a stop string: the output ends exactly where plain
    decoding ends (same tokens, same text, same finish reason)."""
    runner, cases = tiny
    ids, ref = cases[0]
    text = runner.tokenizer.decode(ref)
    for params in (
        SamplingParams(max_tokens=7, temperature=0, ignore_eos=True),
        SamplingParams(
            max_tokens=N, temperature=0, ignore_eos=True, stop=(text[len(text) // 3 :][:3],)
        ),
    ):
        plain = generate(runner, ids, params)
        plain_text = "".join(plain.text())
        spec = generate(runner, ids, params, speculation=fixed(runner, Oracle(ref, len(ids), k=8)))
        spec_text = "".join(spec.text())
        assert spec.sequence.output_ids == plain.sequence.output_ids
        assert (
            spec_text == plain_text and spec.sequence.finish_reason == plain.sequence.finish_reason
        )
        assert len(spec.sequence.output_ids) <= params.max_tokens


def test_rejected_draft_leaves_the_cache_of_a_run_that_never_drafted():
    runner = ModelRunner(
        tiny_checkpoint("llama"), dtype="fp32", threads=2, max_batch=2, max_seq_len=64
    )
    for slot in (0, 1):
        runner.prefill(slot, PROMPT)
    start = runner.position(0)
    # a tree; keep only the root
    logits = runner.step([(0, [11, 40, 41, 7, 99], [-1, 0, 0, 1, 2])])[0]
    runner.keep(0, start, [0])
    plain = runner.decode([1], [11])[0]
    assert np.array_equal(logits[0], plain)
    assert runner.position(0) == runner.position(1)
    assert np.array_equal(runner.cache.k[0], runner.cache.k[1]) and np.array_equal(
        runner.cache.v[0], runner.cache.v[1]
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8", "stored"])
@pytest.mark.parametrize("context", [len(PROMPT), 124], ids=["short", "across-a-chunk"])
def test_tree_rows_equal_decoding_their_paths(dtype, context):
    """Every row of a tree verify pass (GQA, qk-norm model) is bit-identical to decoding its path
    alone, also when the tree straddles an attention chunk; keeping a non-first path leaves the
    cache of plain decoding."""
    runner = ModelRunner(
        tiny_checkpoint("qwen3"), dtype=dtype, threads=2, max_batch=3, max_seq_len=300
    )
    prompt = (PROMPT * 40)[:context]
    tokens, parents = [11, 40, 41, 7, 99, 12, 3], [-1, 0, 0, 1, 2, 3, 1]
    runner.prefill(0, prompt)
    start = runner.position(0)
    rows = runner.step([(0, tokens, parents)])[0]
    for i in range(len(tokens)):
        path = [i]
        while parents[path[-1]] != -1:
            path.append(parents[path[-1]])
        runner.prefill(2, prompt)
        for j in reversed(path):
            want = runner.decode([2], [tokens[j]])[0]
        assert np.array_equal(rows[i], want), f"row {i} ({dtype})"
    runner.keep(0, start, [0, 1, 3, 5])
    runner.prefill(2, prompt)
    runner.decode([2], [11])
    runner.decode([2], [40])
    runner.decode([2], [7])
    runner.decode([2], [12])
    assert np.array_equal(runner.cache.k[0], runner.cache.k[2]) and np.array_equal(
        runner.cache.v[0], runner.cache.v[2]
    )
