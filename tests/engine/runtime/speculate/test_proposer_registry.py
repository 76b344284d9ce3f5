"""Adding a proposer is its module plus one registry entry: a test-only proposer, registered from
here in roofline.speculation.PROPOSERS (its traits and where its factory lives), drafts in greedy
generation on the tiny model and leaves the output equal to generation without speculation. No
other file changes."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from fixtures import greedy_ids

from roofline import speculation
from roofline.engine import SamplingParams, generate, load_runner
from roofline.engine.runtime.speculate.step import speculation_factory
from roofline.engine.runtime.speculate.tree import DraftTree
from roofline.speculation import ProposerTraits, SpecOptions

N = 16


class RepeatProposer:
    """Guesses that the last token repeats k times: often wrong, sometimes right."""

    def __init__(self, k: int) -> None:
        self.k = k

    def propose(self, context, max_tokens):
        n = min(self.k, max_tokens)
        return DraftTree.chain([int(context[-1])] * n) if n > 0 else DraftTree.empty()

    def accepted(self, context) -> None:
        pass

    @classmethod
    def factory(cls, options: SpecOptions, target: object = None):
        return lambda: cls(options.k)


@pytest.fixture
def repeat_registered(monkeypatch):
    traits = ProposerTraits(
        "repeat the last token",
        tree=False,
        factory=f"{__name__}:RepeatProposer.factory",
        reads=("k",),
    )
    monkeypatch.setattr(
        speculation, "PROPOSERS", MappingProxyType({**speculation.PROPOSERS, "repeat": traits})
    )


def test_a_registered_proposer_is_an_option_and_keeps_greedy_output(repeat_registered, tiny_gguf):
    assert "repeat" in speculation.option_choices("method")
    assert "repeat (repeat the last token)" in speculation.option_help("method")
    runner = load_runner(str(tiny_gguf), dtype="fp32", max_batch=1, max_seq_len=96)
    make = speculation_factory(SpecOptions("repeat", k=3, adaptive=False), runner)
    params = SamplingParams(max_tokens=N, temperature=0, ignore_eos=True)
    for prompt in ("1, 2, 3, 4, 1, 2, 3, 4,", "The capital of France is"):
        ids = runner.tokenizer.encode(prompt)
        want = greedy_ids(runner, ids, N)
        g = generate(runner, ids, params, speculation=make())
        assert list(g) == want
        assert g.speculation.stats.drafted > 0


def test_an_unregistered_name_is_refused():
    with pytest.raises(ValueError, match="method must be one of none, ngram, trie, suffix, draft"):
        SpecOptions("repeat")
