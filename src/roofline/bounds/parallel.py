"""Bounds with the model spread over several accelerators.

Tensor parallelism: each of TP devices streams 1/TP of the bytes, then the layer's partial sums
are all-reduced twice per layer (after attention and after the MLP); an all-reduce of a small
vector costs its latency, not its bytes:

    seconds_per_token = bytes / (TP x per_device_bandwidth x efficiency)
                        + layers x 2 x allreduce_latency

Expert parallelism: with E experts and top-k routing, a batch of n tokens touches on average

    E x (1 - (1 - k/E)^n)   distinct experts per layer

(one token misses an expert with probability 1 - k/E, routing uniform and independent), so a
batched MoE step's bytes grow with that count, not with n.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.errors import UserError


def expected_distinct_experts(num_experts: int, top_k: int, tokens: int) -> float:
    if num_experts < 1 or not 1 <= top_k <= num_experts or tokens < 0:
        raise UserError(
            f"need 1 <= top_k <= experts and tokens >= 0 (got {top_k} of {num_experts}, {tokens})"
        )
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


@dataclass(frozen=True)
class TensorParallel:
    tp: int
    stream_seconds: float  # the bytes, split over TP devices
    allreduce_seconds: float  # layers x all-reduces per layer x latency

    @property
    def seconds_per_token(self) -> float:
        return self.stream_seconds + self.allreduce_seconds

    @property
    def tok_per_s(self) -> float:
        return 1.0 / self.seconds_per_token

    @property
    def scaling_efficiency(self) -> float:
        """Share of the step spent streaming bytes: 1.0 when all-reduces cost nothing."""
        return self.stream_seconds / self.seconds_per_token


def tensor_parallel(
    *,
    bytes_per_token: float,
    tp: int,
    per_device_bandwidth_bytes_per_s: float,
    efficiency: float,
    num_layers: int,
    allreduce_seconds: float,
    allreduces_per_layer: int = 2,
) -> TensorParallel:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserError(f"--tp must be a whole number >= 1 (got {tp!r})")
    if not per_device_bandwidth_bytes_per_s > 0 or not 0 < efficiency <= 1:
        raise UserError("bandwidth must be positive and efficiency in (0, 1]")
    if allreduce_seconds < 0:
        raise UserError(f"all-reduce latency must be >= 0 (got {allreduce_seconds!r} s)")
    stream = bytes_per_token / (tp * per_device_bandwidth_bytes_per_s * efficiency)
    comm = num_layers * allreduces_per_layer * allreduce_seconds if tp > 1 else 0.0
    return TensorParallel(tp=tp, stream_seconds=stream, allreduce_seconds=comm)
