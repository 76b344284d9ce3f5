"""Prefill (time to first token) lower bound: the prompt's matrix multiplies at a given MFU.

    TTFT >= 2 x active_params x prompt_tokens / (MFU x dense_peak_flops x n_devices)

2 FLOPs (a multiply and an add) per parameter per token. Attention-score FLOPs, which grow with the
square of the prompt, are left out: the bound stays a lower bound.
"""

from __future__ import annotations

from roofline.errors import UserError


def prefill_seconds_lower_bound(
    *, flops_per_token: float, prompt_tokens: int, peak_flops: float, mfu: float
) -> float:
    """`peak_flops` is the dense peak of all devices together; `flops_per_token` = 2 x active
    params."""
    if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 0:
        raise UserError(f"prompt tokens must be a whole number >= 0 (got {prompt_tokens!r})")
    if not 0 < mfu <= 1:
        raise UserError(f"MFU must be in (0, 1] (got {mfu!r}); e.g. 0.4 for 40%")
    if not peak_flops > 0:
        raise UserError(f"peak FLOP/s must be positive (got {peak_flops!r})")
    return flops_per_token * prompt_tokens / (mfu * peak_flops)
