"""The bound formulas on their own: limits, monotonicity, and the user errors."""

from __future__ import annotations

import math

import pytest

from roofline.bounds.analysis import CeilingRequest, analyse, ceiling_for, check_request
from roofline.bounds.ceiling import Ceiling
from roofline.bounds.cost import dollars_per_million_tokens
from roofline.bounds.decode import batch_decode, decode_seconds_per_token
from roofline.bounds.parallel import expected_distinct_experts, tensor_parallel
from roofline.bounds.prefill import prefill_seconds_lower_bound
from roofline.bounds.speculative import best_gamma, expected_tokens_per_pass, speedup
from roofline.errors import UserError
from roofline.hardware import profile as profile_mod


def test_expected_distinct_experts() -> None:
    assert expected_distinct_experts(128, 4, 1) == pytest.approx(4)
    assert expected_distinct_experts(128, 4, 0) == 0
    assert expected_distinct_experts(8, 2, 10_000) == pytest.approx(8)
    # 4 + 4 x (124/128): the second token repeats some experts
    two = expected_distinct_experts(128, 4, 2)
    assert two == pytest.approx(4 + 4 * 124 / 128)
    with pytest.raises(UserError):
        expected_distinct_experts(8, 9, 1)


def test_moe_batch_reads_touched_experts_only() -> None:
    step = batch_decode(
        batch=64,
        weight_bytes=10e9,
        kv_bytes_per_sequence=0,
        bandwidth_bytes_per_s=1e12,
        resident_weight_bytes=100e9,
        memory_bytes=200e9,
        expert_bytes_at_top_k=8e9,
        num_experts=128,
        top_k=4,
    )
    touched = expected_distinct_experts(128, 4, 64)
    assert step.weight_bytes_per_step == pytest.approx(2e9 + 8e9 * touched / 4)
    assert step.experts_per_layer == pytest.approx(touched) and step.fits


def test_compute_bound_at_large_batch() -> None:
    step = batch_decode(
        batch=4096,
        weight_bytes=1e9,
        kv_bytes_per_sequence=0,
        bandwidth_bytes_per_s=1e12,
        resident_weight_bytes=1e9,
        memory_bytes=1e12,
        flops_per_token=2e9,
        peak_flops=1e15,
    )
    assert step.limited_by == "compute" and step.seconds_per_step == pytest.approx(
        4096 * 2e9 / 1e15
    )


def test_fits_counts_kv_per_sequence() -> None:
    args = dict(
        weight_bytes=50e9,
        kv_bytes_per_sequence=1e9,
        bandwidth_bytes_per_s=1e12,
        resident_weight_bytes=50e9,
        memory_bytes=80e9,
    )
    assert batch_decode(batch=30, **args).fits and not batch_decode(batch=31, **args).fits


def test_tensor_parallel_terms() -> None:
    t = tensor_parallel(
        bytes_per_token=1e9,
        tp=4,
        per_device_bandwidth_bytes_per_s=1e12,
        efficiency=0.5,
        num_layers=10,
        allreduce_seconds=1e-5,
    )
    assert t.stream_seconds == pytest.approx(1e9 / (4 * 1e12 * 0.5))
    assert t.allreduce_seconds == pytest.approx(10 * 2 * 1e-5)
    assert 0 < t.scaling_efficiency < 1
    assert (
        tensor_parallel(
            bytes_per_token=1e9,
            tp=1,
            per_device_bandwidth_bytes_per_s=1e12,
            efficiency=1,
            num_layers=10,
            allreduce_seconds=1e-5,
        ).allreduce_seconds
        == 0
    )
    with pytest.raises(UserError):
        tensor_parallel(
            bytes_per_token=1e9,
            tp=0,
            per_device_bandwidth_bytes_per_s=1e12,
            efficiency=1,
            num_layers=1,
            allreduce_seconds=0,
        )


def test_speculative_limits() -> None:
    assert expected_tokens_per_pass(0.0, 5) == 1
    assert expected_tokens_per_pass(1.0, 5) == 6
    assert speedup(0.0, 4, 0.05) < 1  # a draft never accepted only costs
    assert best_gamma(0.95, 0.0)[0] == 64  # free drafts: the longest wins
    for bad in ((1.5, 4, 0.05), (0.5, -1, 0.05), (0.5, 4, -1.0)):
        with pytest.raises(UserError):
            speedup(*bad)


def test_prefill_and_cost_errors() -> None:
    assert (
        prefill_seconds_lower_bound(flops_per_token=2, prompt_tokens=10, peak_flops=10, mfu=1) == 2
    )
    with pytest.raises(UserError):
        prefill_seconds_lower_bound(flops_per_token=2, prompt_tokens=10, peak_flops=10, mfu=0)
    with pytest.raises(UserError):
        dollars_per_million_tokens(1.0, 0.0)
    with pytest.raises(UserError):
        decode_seconds_per_token(1e9, 0.0)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"context": -1}, "--context"),
        ({"efficiency": 0.0}, "--efficiency"),
        ({"efficiency": 1.5}, "--efficiency"),
        ({"bandwidth_bytes_per_s": 0.0}, "bandwidth"),
        ({"bandwidth_bytes_per_s": math.nan}, "bandwidth"),
        ({"batches": (0,)}, "--batch"),
        ({"mfu": 2.0}, "--mfu"),
        ({"tp": 0}, "--tp"),
        ({"allreduce_us": -1.0}, "--allreduce-us"),
        ({"price_per_hour": -5.0}, "--price-per-hour"),
        ({"alpha": 1.2}, "--alpha"),
        ({"gamma": 0}, "--gamma"),
        ({"draft_cost": -0.1}, "--draft-cost"),
    ],
)
def test_nonsense_numbers(change: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        check_request(CeilingRequest(model="qwen3-8b", hardware="h100", **change))


def test_ceiling_for_contract() -> None:
    c = ceiling_for("qwen3-8b", "h100-sxm", context=4096, gpus=2, weights="fp8", kv="fp8")
    assert isinstance(c, Ceiling) and c.model == "Qwen/Qwen3-8B" and c.hardware == "h100-sxm"
    assert c.bandwidth_bytes_per_s == 2 * 3.35e12
    assert c.percent_of_ceiling(c.tok_per_s / 2) == pytest.approx(50)
    assert any("context 4,096" in a for a in c.assumptions)
    for bad in (
        dict(model="nope/nope", hardware="h100"),
        dict(model="qwen3-8b", hardware="h900"),
        dict(model="qwen3-8b", hardware="h100", context=-3),
    ):
        with pytest.raises(UserError):
            ceiling_for(**bad)


def test_ceiling_for_local(monkeypatch) -> None:
    profile = {
        "measured_at": "2026-11-29T10:00:00Z",
        "cpu": "Test CPU",
        "threads": 2,
        "memory_bytes": 25e9,
        "bandwidth_bytes_per_s": {
            "read": {"median": 3.1e10, "min": 2.9e10, "max": 3.2e10, "runs": [1, 2]}
        },
        "flops": {"matmul_fp32": {"median": 1.85e11}},
    }
    monkeypatch.setattr(profile_mod, "load_local_profile", lambda: profile)
    c = ceiling_for("smollm2-135m", "local")
    assert c.bandwidth_bytes_per_s == 3.1e10 and c.hardware == "local"
    assert any("measured read bandwidth" in a for a in c.assumptions)
    # bf16 SmolLM2: every matrix once (the tied lm_head in full), no KV at context 0.
    assert c.bytes_per_token == pytest.approx(
        2 * (134_515_008 - 576 * 61 - 49152 * 576 + 49152 * 576), rel=1e-9
    )


def test_all_tensors_adds_the_small_ones() -> None:
    _, lean = analyse(CeilingRequest(model="gpt-oss-120b", hardware="b200"))
    _, full = analyse(CeilingRequest(model="gpt-oss-120b", hardware="b200", all_tensors=True))
    assert full.bytes_per_token == pytest.approx(lean.bytes_per_token + lean.small_bytes)
    assert full.small_bytes == 0


def test_overrides_must_name_components_the_model_has() -> None:
    with pytest.raises(UserError, match="no experts component"):
        analyse(CeilingRequest(model="llama-3.1-8b", hardware="h100", weights="experts=mxfp4"))
    _, d = analyse(
        CeilingRequest(model="llama-3.1-8b", hardware="h100", weights="mlp=int4,lm_head=q8_0")
    )
    fmts = {c.key: c.format for c in d.components}
    assert (fmts["mlp"], fmts["lm_head"], fmts["attention"]) == ("int4", "q8_0", "bf16")
