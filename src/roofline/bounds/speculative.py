"""Speculative decoding (Leviathan et al.): a cheap draft proposes gamma tokens, the target verifies
them in one pass.

With per-token acceptance probability alpha and a draft pass costing c target passes:

    E[tokens per target pass] = (1 - alpha^(gamma+1)) / (1 - alpha)
    speedup                   = (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1))

(at alpha = 1 every draft is accepted: gamma + 1 tokens per pass). Decode being memory-bound, a
verify pass of gamma + 1 tokens costs about one plain pass, which is what makes this pay.
"""

from __future__ import annotations

from roofline.errors import UserError


def _check(alpha: float, gamma: int, draft_cost: float) -> None:
    if not 0 <= alpha <= 1:
        raise UserError(f"acceptance rate alpha must be in [0, 1] (got {alpha!r})")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise UserError(f"draft length gamma must be a whole number >= 0 (got {gamma!r})")
    if not draft_cost >= 0:
        raise UserError(f"draft cost must be >= 0 target passes (got {draft_cost!r})")


def expected_tokens_per_pass(alpha: float, gamma: int) -> float:
    _check(alpha, gamma, 0.0)
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def speedup(alpha: float, gamma: int, draft_cost: float) -> float:
    _check(alpha, gamma, draft_cost)
    return expected_tokens_per_pass(alpha, gamma) / (gamma * draft_cost + 1)


def best_gamma(alpha: float, draft_cost: float, max_gamma: int = 64) -> tuple[int, float]:
    """The draft length in 1..max_gamma with the largest speedup, and that speedup."""
    _check(alpha, 1, draft_cost)
    return max(
        ((g, speedup(alpha, g, draft_cost)) for g in range(1, max_gamma + 1)), key=lambda t: t[1]
    )
