"""Verification: which drafted tokens the target keeps, given the logits of one verify pass.

The pass scored the root (row 0, the last token already chosen) and every draft node (row i + 1 for
node i). Row r's logits are the target's distribution for the token *after* row r's token, given the
path to it.

Greedy (temperature 0). Walk from the root: the target's next token is the argmax of the current
row; if a child of the current node carries exactly that token, the draft was right -- keep the
child and go on from its row; otherwise stop, and the argmax is the token the target chooses itself
(the correction, or the bonus token when every level was accepted). The kept tokens are the argmaxes
of rows whose logits are identical to plain one-token decoding (`ModelRunner.step` guarantees it),
so the output is plain greedy decoding's, token for token, whatever the draft was.

Sampling. The target's distribution p at a node (after temperature / top-k / top-p) must be what the
output follows. A proposer's guesses are deterministic (an n-gram draft, or a greedy draft model:
probability 1 on the guessed token), so the rejection rule of speculative sampling (Leviathan et
al., Chen et al.) reads: accept guess x with probability min(1, p(x) / q(x)) = p(x); on rejection
the next draw comes from the residual (p - q)+ normalised = p with x removed. With several children
(a tree), try them in order, each against the residual left by the ones rejected before it
(SpecInfer's multi-candidate rule); when all are rejected, draw the token from the last residual.
Every emitted token is then distributed exactly as p.
"""

from __future__ import annotations

import numpy as np

from roofline.engine.sampling import (
    SamplingParams,
    greedy_token,
    probabilities,
    sample,
    sample_from,
)
from roofline.engine.speculate.tree import DraftTree


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
        if not children[
            row
        ]:  # nothing drafted here: the target's own choice, exactly as without speculation
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
