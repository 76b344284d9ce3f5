"""Bytes per decoded token, by component: parameters x bits per weight / 8, plus the KV cache.

bytes_per_token = sum over counted components of params_read x bits / 8
                + kv_bytes_at_context(context)
resident_bytes  = sum over all components of params_stored x bits / 8   (what must fit in memory)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from roofline.errors import UserError
from roofline.modelspec.components import components
from roofline.modelspec.formats import WeightFormat, parse_format
from roofline.modelspec.kv import kv_bytes_at_context, kv_bytes_per_token
from roofline.modelspec.model import ModelSpec


@dataclass(frozen=True)
class BudgetRow:
    key: str
    label: str
    params_active: float
    params_total: float
    fmt: WeightFormat
    counted: bool  # part of the ceiling's bytes (small tensors are not, unless --all-tensors)

    @property
    def bytes_active(self) -> float:
        return self.params_active * self.fmt.bytes_per_weight

    @property
    def bytes_total(self) -> float:
        return self.params_total * self.fmt.bytes_per_weight


@dataclass(frozen=True)
class TokenBudget:
    rows: tuple[BudgetRow, ...]
    kv_format: WeightFormat
    context_tokens: int
    kv_bytes: float  # cache one sequence holds at the context (and one decode step reads)
    kv_bytes_per_token: float  # what each token of context adds, before window caps
    all_tensors: bool

    @property
    def weight_bytes(self) -> float:
        """Weight bytes one decode step reads at batch 1 (counted components only)."""
        return sum(r.bytes_active for r in self.rows if r.counted)

    @property
    def small_bytes(self) -> float:
        return sum(r.bytes_active for r in self.rows if not r.counted)

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def resident_weight_bytes(self) -> float:
        return sum(r.bytes_total for r in self.rows)

    def row(self, key: str) -> BudgetRow | None:
        return next((r for r in self.rows if r.key == key), None)


def token_budget(
    spec: ModelSpec,
    formats: Mapping[str, WeightFormat],
    *,
    context_tokens: int = 0,
    kv_format: WeightFormat | None = None,
    all_tensors: bool = False,
) -> TokenBudget:
    """The per-component byte budget of decoding one token at `context_tokens` of context."""
    if (
        isinstance(context_tokens, bool)
        or not isinstance(context_tokens, int)
        or context_tokens < 0
    ):
        raise UserError(f"context must be a whole number of tokens >= 0 (got {context_tokens!r})")
    kv_fmt = kv_format or parse_format(spec.dtype)
    rows = tuple(
        BudgetRow(
            c.key,
            c.label,
            c.params_active,
            c.params_total,
            formats[c.key],
            all_tensors or not c.small,
        )
        for c in components(spec)
    )
    return TokenBudget(
        rows=rows,
        kv_format=kv_fmt,
        context_tokens=context_tokens,
        kv_bytes=kv_bytes_at_context(spec, context_tokens, kv_fmt),
        kv_bytes_per_token=kv_bytes_per_token(spec, kv_fmt),
        all_tensors=all_tensors,
    )


def context_warning(spec: ModelSpec, context_tokens: int) -> str | None:
    """One line when the context is longer than the model was built for (its
    max_position_embeddings): the bound is still computed, but no checkpoint of this shape decodes
    that far."""
    limit = spec.max_position_embeddings
    if limit is None or context_tokens <= limit:
        return None
    return (
        f"warning: --context {context_tokens:,} is beyond {spec.name}'s "
        f"max_position_embeddings ({limit:,}); "
        "the bound assumes the KV cache keeps growing as if it could"
    )
