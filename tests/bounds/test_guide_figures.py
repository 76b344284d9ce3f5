"""Every figure of the brief's sections 1 and 2, recomputed from catalogue data and the bound
formulas."""

from __future__ import annotations

import pytest

from roofline.bounds.analysis import CeilingRequest, analyse, ceiling_for
from roofline.bounds.cost import dollars_per_million_tokens
from roofline.bounds.decode import batch_decode
from roofline.bounds.parallel import tensor_parallel
from roofline.bounds.prefill import prefill_seconds_lower_bound
from roofline.bounds.speculative import best_gamma, speedup
from roofline.hardware.catalogue import get_hardware
from roofline.modelspec.budget import token_budget
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.quant import resolve_formats

SHAPES = ["guide-1b", "guide-10b", "guide-100b", "guide-1t-dense", "guide-1t-moe"]
MACHINES = [
    ("h100-sxm", 1),
    ("h200", 1),
    ("b200", 1),
    ("h100-sxm", 8),
    ("h200", 8),
    ("gb200-nvl72", 1),
]
# Brief section 2: tok/s rounded, and whether the weights + KV at 8,192 tokens fit (False: "does not
# fit").
TABLE = {
    "guide-1b": [2954, 4232, 7053, 23629, 33856, 507839],
    "guide-10b": [314, 450, 750, 2511, 3599, 53978],
    "guide-100b": [33, 47, 79, 264, 379, 5684],
    "guide-1t-dense": [3, 5, 8, 27, 38, 574],
    "guide-1t-moe": [101, 145, 242, 812, 1163, 17442],
}
DOES_NOT_FIT = {
    ("guide-100b", 0),
    ("guide-1t-dense", 0),
    ("guide-1t-dense", 1),
    ("guide-1t-dense", 2),
    ("guide-1t-dense", 3),
    ("guide-1t-moe", 0),
    ("guide-1t-moe", 1),
    ("guide-1t-moe", 2),
    ("guide-1t-moe", 3),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_decode_table_row(shape: str) -> None:
    # Batch-1 bound = bandwidth / (active x 1 byte + KV bytes per token x 8,192), FP8 weights and
    # KV.
    for col, (hw, gpus) in enumerate(MACHINES):
        c = ceiling_for(shape, hw, gpus=gpus, context=8192, weights="fp8", kv="fp8")
        assert round(c.tok_per_s) == TABLE[shape][col], (shape, hw, gpus)


@pytest.mark.parametrize("shape", SHAPES)
def test_decode_table_fits(shape: str) -> None:
    # fits = all weights (1 byte each) + the KV of one 8,192-token sequence <= memory of all
    # devices.
    for col, (hw, gpus) in enumerate(MACHINES):
        r = CeilingRequest(
            model=shape,
            hardware=hw,
            gpus=None if gpus == 1 else gpus,
            context=8192,
            weights="fp8",
            kv="fp8",
        )
        _, result = analyse(r)
        assert result.batches[0].fits is ((shape, col) not in DOES_NOT_FIT), (shape, hw, gpus)


def test_kv_bytes_of_the_shapes() -> None:
    # 2 (K, V) x layers x kv_heads x head_dim x 1 byte: the 1B shape holds 16 KiB per token.
    spec = load_spec("guide-1b")
    b = token_budget(spec, resolve_formats(spec, "fp8"), context_tokens=8192, kv_format=_fp8())
    assert b.kv_bytes_per_token == 2 * 16 * 8 * 64
    assert b.kv_bytes == 2 * 16 * 8 * 64 * 8192
    assert b.weight_bytes == 1e9


def _fp8():
    from roofline.modelspec.formats import parse_format

    return parse_format("fp8")


def test_gpt_oss_120b_on_b200_breakdown() -> None:
    spec = load_spec("openai/gpt-oss-120b")
    b = token_budget(spec, resolve_formats(spec, None))
    shown = {r.key: f"{r.bytes_active / 1e9:.2f}" for r in b.rows if r.counted}
    assert shown == {"attention": "1.91", "experts": "1.90", "lm_head": "1.16"}
    assert f"{b.bytes_per_token / 1e9:.2f}" == "4.97"
    params = {r.key: r.params_active for r in b.rows}
    assert round(params["attention"] / 1e6) == 956  # 955.5 M: 36 x 2880 x (4096 + 512 + 512 + 4096)
    assert round(params["experts"] / 1e9, 2) == 3.58
    assert round(params["lm_head"] / 1e6) == 579
    assert b.row("experts").fmt.bits_per_weight == 4.25 and b.row("attention").fmt.name == "bf16"


def test_gpt_oss_120b_on_b200_bound() -> None:
    # The study quotes 4.97 GB / 8 TB/s = 0.621 ms -> 1,610 tok/s, dividing the rounded 4.97 GB. The
    # unrounded bytes (4,972,861,440) give 0.6216 ms and 1,608.7 tok/s: within 0.1% of the quoted
    # figures.
    c = ceiling_for("openai/gpt-oss-120b", "b200")
    assert c.bytes_per_token == 4_972_861_440
    assert c.seconds_per_token == pytest.approx(0.621e-3, rel=1.5e-3)
    assert c.tok_per_s == pytest.approx(1610, rel=1.5e-3)
    assert pytest.approx(0.621e-3, abs=5e-7) == 4.97e9 / 8e12 and round(8e12 / 4.97e9) == 1610


def test_prefill_ttft() -> None:
    # 2 x active x 8,192 / (40% x 1,979 TFLOPS x 8): 1T MoE 83 ms, 1T dense 2,587 ms.
    hw = get_hardware("h100-sxm", 8)
    for shape, ms in (("guide-1t-moe", 83), ("guide-1t-dense", 2587)):
        _, result = analyse(
            CeilingRequest(
                model=shape, hardware="h100-sxm", gpus=8, weights="fp8", prompt_tokens=8192, mfu=0.4
            )
        )
        assert result.prefill.dtype == "fp8" and result.prefill.peak_flops == hw.flops["fp8"]
        assert round(result.prefill.ttft_seconds * 1e3) == ms
    assert (
        round(
            prefill_seconds_lower_bound(
                flops_per_token=2 * 32e9, prompt_tokens=8192, peak_flops=8 * 1979e12, mfu=0.4
            )
            * 1e3
        )
        == 83
    )


def test_prefill_on_gb200_uses_5000_tflops_per_gpu() -> None:
    hw = get_hardware("gb200-nvl72")
    assert hw.flops["fp8"] / hw.devices == pytest.approx(5000e12)


def test_tensor_parallel_954_and_541() -> None:
    # 100B fp8 over TP 72 at 8 TB/s per GPU, 70% efficiency, 80 layers x 2 all-reduces.
    for us, tok in ((5, 954), (10, 541)):
        _, result = analyse(
            CeilingRequest(
                model="guide-100b",
                hardware="gb200-nvl72",
                weights="fp8",
                tp=72,
                allreduce_us=us,
                efficiency=0.7,
            )
        )
        assert round(result.tensor_parallel.tok_per_s) == tok
        t = tensor_parallel(
            bytes_per_token=100e9,
            tp=72,
            per_device_bandwidth_bytes_per_s=8e12,
            efficiency=0.7,
            num_layers=80,
            allreduce_seconds=us * 1e-6,
        )
        assert round(t.tok_per_s) == tok


def test_batch_and_cost_on_8xh100_at_half_bandwidth() -> None:
    # 100B fp8 on 8 x H100 at 50% of peak, context 8,192, fp8 KV: batch 1 132 tok/s/user, batch 32
    # 94; at $98.32/h: $206.55 vs $9.11 per million output tokens.
    _, result = analyse(
        CeilingRequest(
            model="guide-100b",
            hardware="h100-sxm",
            gpus=8,
            context=8192,
            batches=(1, 32),
            weights="fp8",
            kv="fp8",
            efficiency=0.5,
            price_per_hour=98.32,
        )
    )
    one, many = result.batches
    assert round(one.tok_per_s_per_user) == 132 and round(many.tok_per_s_per_user) == 94
    assert round(one.dollars_per_million_tokens, 2) == 206.55
    # The guide's $9.11 prices 32 x 93.7 tok/s (the per-user rate rounded first); unrounded it is
    # $9.105.
    assert many.dollars_per_million_tokens == pytest.approx(9.11, rel=1e-3)
    assert round(98.32 / (3600 * 32 * 93.7) * 1e6, 2) == 9.11
    assert one.limited_by == many.limited_by == "memory bandwidth"


def test_batch_formula_directly() -> None:
    kv = 2 * 80 * 8 * 128 * 8192  # bytes per sequence at 8,192 tokens, fp8
    step = batch_decode(
        batch=32,
        weight_bytes=100e9,
        kv_bytes_per_sequence=kv,
        bandwidth_bytes_per_s=13.4e12,
        resident_weight_bytes=100e9,
        memory_bytes=640e9,
    )
    assert round(step.tok_per_s_per_user) == 94
    assert dollars_per_million_tokens(98.32, step.tok_per_s_total) == pytest.approx(9.11, rel=1e-3)


def test_speculative_decoding_figures() -> None:
    assert round(speedup(0.8, 4, 0.05), 1) == 2.8
    assert best_gamma(0.6, 0.05)[0] == 4 and round(best_gamma(0.6, 0.05)[1], 2) == 1.92
    assert best_gamma(0.8, 0.05)[0] == 8 and round(best_gamma(0.8, 0.05)[1], 2) == 3.09
