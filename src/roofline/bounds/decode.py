"""Decode bounds: one pass over the weights (and each sequence's KV cache) per step.

seconds_per_step >= max(bytes_per_step / bandwidth, flops_per_step / peak_flops)
bytes_per_step    = weight bytes (experts: those the batch touches) + batch x KV bytes per sequence
per-user tok/s    = 1 / seconds_per_step;   aggregate tok/s = batch / seconds_per_step
fits              = resident weights (every expert) + batch x KV bytes per sequence <= memory
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.bounds.parallel import expected_distinct_experts
from roofline.errors import UserError


def decode_seconds_per_token(bytes_per_token: float, bandwidth_bytes_per_s: float) -> float:
    if not bandwidth_bytes_per_s > 0:
        raise UserError(f"bandwidth must be positive (got {bandwidth_bytes_per_s!r} B/s)")
    return bytes_per_token / bandwidth_bytes_per_s


def fits_in_memory(resident_bytes: float, memory_bytes: float) -> bool:
    return resident_bytes <= memory_bytes


@dataclass(frozen=True)
class BatchDecode:
    batch: int
    weight_bytes_per_step: float
    kv_bytes_per_step: float
    memory_seconds: float
    compute_seconds: float
    resident_bytes: float
    fits: bool
    experts_per_layer: float | None  # expected distinct experts a step touches per MoE layer

    @property
    def bytes_per_step(self) -> float:
        return self.weight_bytes_per_step + self.kv_bytes_per_step

    @property
    def seconds_per_step(self) -> float:
        return max(self.memory_seconds, self.compute_seconds)

    @property
    def limited_by(self) -> str:
        return "compute" if self.compute_seconds > self.memory_seconds else "memory bandwidth"

    @property
    def tok_per_s_per_user(self) -> float:
        return 1.0 / self.seconds_per_step

    @property
    def tok_per_s_total(self) -> float:
        return self.batch / self.seconds_per_step


def batch_decode(
    *,
    batch: int,
    weight_bytes: float,
    kv_bytes_per_sequence: float,
    bandwidth_bytes_per_s: float,
    resident_weight_bytes: float,
    memory_bytes: float,
    expert_bytes_at_top_k: float = 0.0,
    num_experts: int = 0,
    top_k: int = 0,
    flops_per_token: float = 0.0,
    peak_flops: float | None = None,
) -> BatchDecode:
    """The decode step of `batch` sequences at one context length.

    `weight_bytes` is what batch 1 reads, of which `expert_bytes_at_top_k` are routed experts: a
    batch reads the experts its tokens touch, E x (1 - (1 - k/E)^batch) per layer instead of k.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise UserError(f"batch sizes must be whole numbers >= 1 (got {batch!r})")
    experts = None
    read_weights = weight_bytes
    if num_experts and top_k and expert_bytes_at_top_k:
        experts = expected_distinct_experts(num_experts, top_k, batch)
        read_weights = (
            weight_bytes - expert_bytes_at_top_k + expert_bytes_at_top_k * experts / top_k
        )
    kv = batch * kv_bytes_per_sequence
    memory_s = decode_seconds_per_token(read_weights + kv, bandwidth_bytes_per_s)
    compute_s = batch * flops_per_token / peak_flops if peak_flops and flops_per_token else 0.0
    resident = resident_weight_bytes + kv
    return BatchDecode(
        batch=batch,
        weight_bytes_per_step=read_weights,
        kv_bytes_per_step=kv,
        memory_seconds=memory_s,
        compute_seconds=compute_s,
        resident_bytes=resident,
        fits=fits_in_memory(resident, memory_bytes),
        experts_per_layer=experts,
    )
