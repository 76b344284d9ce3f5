"""What `roofline ceiling` is asked: a model, a machine and the options, checked before any
bound is computed (nonsense numbers are the user's to fix, one line each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from roofline.errors import UserError


@dataclass(frozen=True)
class CeilingRequest:
    model: str
    hardware: str = "local"
    gpus: int | None = None
    context: int = 0
    batches: tuple[int, ...] = (1,)
    weights: str | None = None
    kv: str | None = None
    efficiency: float = 1.0
    bandwidth_bytes_per_s: float | None = None  # replaces the hardware's figure
    all_tensors: bool = False
    tp: int | None = None
    allreduce_us: float | None = None
    prompt_tokens: int | None = None
    mfu: float = 0.4
    price_per_hour: float | None = None
    alpha: float | None = None
    gamma: int | None = None
    draft_cost: float = 0.05
    revision: str | None = None  # of a Hub repo; None: main (a local or catalogue model first)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _whole(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_request(r: CeilingRequest) -> None:
    """Nonsense numbers are the user's to fix: one line each, saying what is allowed."""
    if not _whole(r.context) or not 0 <= r.context <= 10**9:
        raise UserError(f"--context must be a whole number of tokens from 0 up (got {r.context!r})")
    if not _number(r.efficiency) or not 0 < r.efficiency <= 1:
        raise UserError(
            "--efficiency must be in (0, 1], e.g. 0.7 for 70% of peak bandwidth "
            f"(got {r.efficiency!r})"
        )
    if r.bandwidth_bytes_per_s is not None and not (
        _number(r.bandwidth_bytes_per_s) and r.bandwidth_bytes_per_s > 0
    ):
        raise UserError(
            f"bandwidth must be positive, e.g. 8TB/s (got {r.bandwidth_bytes_per_s!r} B/s)"
        )
    if not r.batches or any(not _whole(b) or b < 1 for b in r.batches):
        raise UserError(f"--batch must list whole numbers >= 1 (got {r.batches!r})")
    if not _number(r.mfu) or not 0 < r.mfu <= 1:
        raise UserError(f"--mfu must be in (0, 1], e.g. 0.4 for 40% (got {r.mfu!r})")
    checks = (
        (r.gpus, lambda v: _whole(v) and v >= 1, "--gpus must be a whole number >= 1"),
        (r.tp, lambda v: _whole(v) and v >= 1, "--tp must be a whole number >= 1"),
        (
            r.allreduce_us,
            lambda v: _number(v) and v >= 0,
            "--allreduce-us must be >= 0 microseconds",
        ),
        (
            r.prompt_tokens,
            lambda v: _whole(v) and v >= 1,
            "--prompt-tokens must be a whole number >= 1",
        ),
        (
            r.price_per_hour,
            lambda v: _number(v) and v >= 0,
            "--price-per-hour must be >= 0 dollars",
        ),
        (
            r.alpha,
            lambda v: _number(v) and 0 <= v <= 1,
            "--alpha (acceptance rate) must be in [0, 1]",
        ),
        (
            r.gamma,
            lambda v: _whole(v) and 1 <= v <= 1024,
            "--gamma (draft length) must be a whole number from 1 to 1024",
        ),
    )
    for value, ok, message in checks:
        if value is not None and not ok(value):
            raise UserError(f"{message} (got {value!r})")
    if not _number(r.draft_cost) or r.draft_cost < 0:
        raise UserError(f"--draft-cost must be >= 0 target passes (got {r.draft_cost!r})")
