"""Verification: which drafted tokens the target keeps, given the logits of one verify pass.

Row 0 is the root (the last chosen token), row i + 1 draft node i; row r's logits are the target's
distribution for the token after row r's, given the path to it.

Greedy: from the root, a child carrying the current row's argmax is kept and the walk goes on from
it; else the argmax is the correction (or the bonus token). Rows' logits equal plain decoding's
(`ModelRunner.step`), so the output is greedy decoding's, token for token.

Sampling (p: target distribution after temperature/top-k/top-p; q: draft's). Guesses are
deterministic (q(x) = 1): accept x with probability min(1, p(x) / q(x)) = p(x), else draw from
(p - q)+ normalised = p without x (Leviathan et al.). A tree tries children in order, each against
the residual the rejected ones left (SpecInfer); all rejected: draw from the last residual. Every
emitted token is distributed exactly as p.
"""

from __future__ import annotations

import numpy as np

from roofline.engine.runtime.sampling import (
    SamplingParams,
    greedy_token,
    probabilities,
    sample,
    sample_from,
)
from roofline.engine.runtime.speculate.tree import DraftTree


def _children_by_row(tree: DraftTree) -> list[list[int]]:
    """children[r] = the rows (node + 1) under row r, in the proposer's order (row 0 = the root)."""
    children: list[list[int]] = [[] for _ in range(len(tree) + 1)]
    for i, parent in enumerate(tree.parents):
        children[parent + 1].append(i + 1)
    return children


def accept(
    tree: DraftTree, logits: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """(kept rows, new tokens): kept rows are 0 then the accepted nodes' rows along one path; new
    tokens are the accepted drafts followed by the target's own next token (len(new tokens) ==
    len(kept rows))."""
    children = _children_by_row(tree)
    rows, tokens, row = [0], [], 0
    while True:
        # nothing drafted here: the target's own choice, exactly as without speculation
        if not children[row]:
            tokens.append(sample(logits[row], params, rng))
            return rows, tokens
        if params.greedy:
            want = greedy_token(logits[row])
            nxt = next((c for c in children[row] if tree.tokens[c - 1] == want), None)
        else:
            nxt, want = _sampled_step(
                logits[row], [tree.tokens[c - 1] for c in children[row]], children[row], params, rng
            )
        if nxt is None:
            tokens.append(want)
            return rows, tokens
        rows.append(nxt)
        tokens.append(tree.tokens[nxt - 1])
        row = nxt


def _sampled_step(
    logits: np.ndarray,
    guesses: list[int],
    rows: list[int],
    params: SamplingParams,
    rng: np.random.Generator,
) -> tuple[int | None, int]:
    """(accepted child row or None, the token drawn when none was accepted)."""
    p = probabilities(logits, params)
    for guess, row in zip(guesses, rows):
        if rng.random() < p[guess]:
            return row, guess
        p[guess] = 0.0  # the residual (p - q)+ for a point-mass q at the guess
        total = p.sum()
        if total <= 0.0:
            break
        p /= total
    return None, sample_from(p, rng)
