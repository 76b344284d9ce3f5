"""One ceiling analysis: a model, a machine and the options -> every bound, and the assumptions
behind it.

This is where the spec (bytes, FLOPs) meets the hardware (bandwidth, memory, FLOP/s); the formulas
themselves live in decode.py, prefill.py, parallel.py, speculative.py and cost.py. The request and
its checks are in request.py; `ceiling_for` is the short call for the batch-1 `Ceiling` alone.
"""

from __future__ import annotations

from roofline.bounds.ceiling import Ceiling
from roofline.bounds.cost import dollars_per_million_tokens
from roofline.bounds.decode import batch_decode
from roofline.bounds.humanize import fmt_bandwidth, fmt_bytes, fmt_flops
from roofline.bounds.parallel import tensor_parallel
from roofline.bounds.prefill import prefill_seconds_lower_bound
from roofline.bounds.request import CeilingRequest, check_request
from roofline.bounds.result import (
    BatchBound,
    CeilingAnalysis,
    ComponentBytes,
    DecodeBound,
    HardwareFigures,
    KvFigures,
    ModelFigures,
    PrefillBound,
    SpeculativeBound,
    TensorParallelBound,
)
from roofline.bounds.speculative import best_gamma, expected_tokens_per_pass, speedup
from roofline.errors import UserError
from roofline.hardware.catalogue import Hardware, get_hardware
from roofline.modelspec.budget import TokenBudget, token_budget
from roofline.modelspec.catalogue import load_spec
from roofline.modelspec.components import (
    active_params,
    matmul_params_per_token,
    total_params,
)
from roofline.modelspec.formats import parse_format
from roofline.modelspec.model import ModelSpec
from roofline.modelspec.quant import resolve_formats

# Weight format -> the tensor-core dtypes that can run its matrix multiplies, best first.
_COMPUTE_DTYPES = {
    "mxfp4": ("fp4", "fp8", "bf16", "fp16", "fp32"),
    "nvfp4": ("fp4", "fp8", "bf16", "fp16", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "int8": ("int8", "fp8", "bf16", "fp16", "fp32"),
    "fp32": ("fp32", "tf32", "bf16", "fp16"),
    "fp16": ("fp16", "bf16", "fp32"),
}
# bf16 checkpoints, and int4/GGUF dequantized
_DEFAULT_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")


def _main_format(budget: TokenBudget) -> str:
    """The format of the component with the most parameters per token: it sets the matmul dtype."""
    rows = [r for r in budget.rows if r.counted] or list(budget.rows)
    name = max(rows, key=lambda r: r.params_active).fmt.name
    try:  # a model file's stored types ('F8_E4M3+F32', 'BF16'): the largest one, by its format name
        return parse_format(name.split("+")[0]).name
    except UserError:
        return name  # 'Q4_K+Q6_K', 'int4-g128': dequantized for the matmul


def compute_dtype(weight_format: str, hw: Hardware) -> str | None:
    for dtype in _COMPUTE_DTYPES.get(weight_format, _DEFAULT_DTYPES):
        if dtype in hw.flops:
            return dtype
    return next(iter(hw.flops), None)


def _hardware(r: CeilingRequest) -> Hardware:
    hw = get_hardware(r.hardware, r.gpus)
    if r.tp is not None and r.gpus is None and hw.devices == 1 and not hw.measured and r.tp > 1:
        hw = hw.scaled(r.tp)  # --tp 8 on a single-GPU entry means eight of them
    if r.tp is not None and r.tp > hw.devices:
        raise UserError(
            f"--tp {r.tp} needs {r.tp} devices but {hw.key} has {hw.devices}; add --gpus {r.tp}"
        )
    return hw


def _assumptions(
    r: CeilingRequest, spec: ModelSpec, hw: Hardware, budget: TokenBudget, bw_peak: float
) -> list[str]:
    out = []
    per = fmt_bandwidth(hw.per_device_bandwidth_bytes_per_s)
    source = "given with --bandwidth" if r.bandwidth_bytes_per_s else hw.bandwidth_note
    devices = f"= {hw.devices} x {per} " if hw.devices > 1 and not r.bandwidth_bytes_per_s else ""
    out.append(
        f"bandwidth {fmt_bandwidth(bw_peak)} {devices}({source}) x efficiency {r.efficiency:.0%}"
    )
    if r.context:
        out.append(
            f"context {r.context:,} tokens: KV cache in {budget.kv_format.name} adds "
            f"{fmt_bytes(budget.kv_bytes_per_token)} per token, "
            f"{fmt_bytes(budget.kv_bytes)} per sequence"
            + (" (sliding-window layers capped at their window)" if any(spec.layer_windows) else "")
        )
    else:
        out.append("context 0: weights only, no KV cache read (set --context to add it)")
    out.append(
        f"weights: {spec.quant_note}"
        + (f"; overridden by --weights {r.weights}" if r.weights else "")
    )
    small = [row for row in budget.rows if not row.counted]
    if small:
        share = budget.small_bytes / max(budget.bytes_per_token + budget.small_bytes, 1.0)
        pct = f"{share:.1%}" if share >= 0.001 else "<0.1%"
        out.append(
            f"small tensors left out ({fmt_bytes(budget.small_bytes)}, {pct} of the bytes), "
            "so the bound stays an upper bound; --all-tensors counts them"
        )
    out.append(
        "fits = all weights (every expert) + batch x KV at the context <= memory; "
        "no room kept for activations"
    )
    if hw.devices > 1:
        out.append(
            f"{hw.devices} devices: bandwidth, memory and FLOP/s add up; "
            "no communication cost except --tp"
        )
    if spec.is_moe and max(r.batches) > 1:
        out.append(
            "batched MoE steps read the experts the batch touches: "
            "E x (1 - (1 - k/E)^batch), uniform routing"
        )
    out.extend(spec.notes)
    out.extend(hw.notes)
    return out


def analyse(r: CeilingRequest) -> tuple[Ceiling, CeilingAnalysis]:
    """The batch-1 Ceiling, and every number the command prints (`CeilingAnalysis.to_json` for
    --json)."""
    check_request(r)
    spec = load_spec(r.model, revision=r.revision)
    formats = resolve_formats(spec, r.weights)
    # None: the checkpoint dtype
    kv_fmt = parse_format(r.kv, what="KV-cache format") if r.kv else None
    budget = token_budget(
        spec, formats, context_tokens=r.context, kv_format=kv_fmt, all_tensors=r.all_tensors
    )
    hw = _hardware(r)
    bw_peak = r.bandwidth_bytes_per_s or hw.bandwidth_bytes_per_s
    bw = bw_peak * r.efficiency
    assumptions = _assumptions(r, spec, hw, budget, bw_peak)
    ceiling = Ceiling(
        budget.bytes_per_token, bw, model=spec.name, hardware=hw.key, assumptions=tuple(assumptions)
    )

    dtype = compute_dtype(_main_format(budget), hw)
    peak = hw.flops.get(dtype) if dtype else None
    flops_per_token = 2.0 * matmul_params_per_token(spec)
    experts = budget.row("experts")
    moe = spec.moe if spec.is_moe else None
    batches = []
    for b in r.batches:
        step = batch_decode(
            batch=b,
            weight_bytes=budget.weight_bytes,
            kv_bytes_per_sequence=budget.kv_bytes,
            bandwidth_bytes_per_s=bw,
            resident_weight_bytes=budget.resident_weight_bytes,
            memory_bytes=hw.memory_bytes,
            expert_bytes_at_top_k=experts.bytes_active
            if experts is not None and experts.counted
            else 0.0,
            num_experts=moe.num_experts if moe else 0,
            top_k=moe.top_k if moe else 0,
            flops_per_token=flops_per_token,
            peak_flops=peak,
        )
        batches.append(
            BatchBound(
                batch=b,
                seconds_per_step=step.seconds_per_step,
                tok_per_s_per_user=step.tok_per_s_per_user,
                tok_per_s_total=step.tok_per_s_total,
                bytes_per_step=step.bytes_per_step,
                resident_bytes=step.resident_bytes,
                fits=step.fits,
                limited_by=step.limited_by,
                experts_per_layer=step.experts_per_layer,
                dollars_per_million_tokens=(
                    dollars_per_million_tokens(r.price_per_hour, step.tok_per_s_total)
                    if r.price_per_hour is not None
                    else None
                ),
            )
        )

    tp_bound = prefill = spec_bound = None
    if r.tp is not None or r.allreduce_us is not None:
        tp = r.tp or hw.devices
        t = tensor_parallel(
            bytes_per_token=budget.bytes_per_token,
            tp=tp,
            per_device_bandwidth_bytes_per_s=bw_peak / hw.devices,
            efficiency=r.efficiency,
            num_layers=spec.num_layers,
            allreduce_seconds=(r.allreduce_us or 0.0) * 1e-6,
        )
        tp_bound = TensorParallelBound(
            tp=tp,
            allreduce_us=r.allreduce_us or 0.0,
            seconds_per_token=t.seconds_per_token,
            tok_per_s=t.tok_per_s,
            stream_seconds=t.stream_seconds,
            allreduce_seconds=t.allreduce_seconds,
            scaling_efficiency=t.scaling_efficiency,
        )
        latency = (
            f"{r.allreduce_us:g} µs"
            if r.allreduce_us is not None
            else "0 µs (not given: pass --allreduce-us)"
        )
        assumptions.append(
            f"tensor parallel {tp}: 2 all-reduces per layer x {spec.num_layers} layers x {latency}"
        )

    if r.prompt_tokens is not None:
        if peak is None:
            raise UserError(
                f"{hw.key} lists no FLOP/s figure, so there is no prefill bound; "
                "drop --prompt-tokens"
            )
        seconds = prefill_seconds_lower_bound(
            flops_per_token=flops_per_token,
            prompt_tokens=r.prompt_tokens,
            peak_flops=peak,
            mfu=r.mfu,
        )
        prefill = PrefillBound(
            prompt_tokens=r.prompt_tokens,
            mfu=r.mfu,
            dtype=dtype,
            peak_flops=peak,
            ttft_seconds=seconds,
        )
        assumptions.append(
            f"prefill: 2 x {active_or_matmul(spec)} params x tokens at {r.mfu:.0%} "
            f"of the {dtype} dense peak ({fmt_flops(peak)}); attention-score FLOPs not counted"
        )

    if r.alpha is not None:
        g_best, s_best = best_gamma(r.alpha, r.draft_cost)
        gamma = r.gamma or g_best
        s = speedup(r.alpha, gamma, r.draft_cost)
        spec_bound = SpeculativeBound(
            alpha=r.alpha,
            gamma=gamma,
            draft_cost=r.draft_cost,
            tokens_per_pass=expected_tokens_per_pass(r.alpha, gamma),
            speedup=s,
            tok_per_s=ceiling.tok_per_s * s,
            best_gamma=g_best,
            best_speedup=s_best,
        )
        assumptions.append(
            "speculative: a verify pass of gamma + 1 tokens costs one plain pass (memory-bound)"
        )

    result = CeilingAnalysis(
        model=ModelFigures(
            name=spec.name,
            architecture=spec.architecture,
            params_total=total_params(spec),
            params_active=active_params(spec),
            flops_per_token=flops_per_token,
            layers=spec.num_layers,
            kv_bytes_per_token=budget.kv_bytes_per_token,
        ),
        hardware=HardwareFigures(
            key=hw.key,
            name=hw.name,
            label=hw.label(),
            devices=hw.devices,
            bandwidth_bytes_per_s=hw.bandwidth_bytes_per_s,
            memory_bytes=hw.memory_bytes,
            flops=dict(hw.flops),
            interconnect=hw.interconnect,
            source=hw.source,
            read=hw.read,
            vendor_claim=hw.vendor_claim,
            measured=hw.measured,
        ),
        context_tokens=r.context,
        efficiency=r.efficiency,
        bandwidth_bytes_per_s=bw,
        components=tuple(
            ComponentBytes(
                key=row.key,
                label=row.label,
                params=row.params_active,
                params_stored=row.params_total,
                format=row.fmt.name,
                format_label=row.fmt.label(),
                bits_per_weight=row.fmt.bits_per_weight,
                bytes=row.bytes_active,
                bytes_stored=row.bytes_total,
                counted=row.counted,
            )
            for row in budget.rows
        ),
        kv=KvFigures(
            format=budget.kv_format.name,
            bytes_per_token=budget.kv_bytes_per_token,
            bytes_per_sequence=budget.kv_bytes,
        ),
        weight_bytes=budget.weight_bytes,
        small_bytes=budget.small_bytes,
        bytes_per_token=budget.bytes_per_token,
        resident_weight_bytes=budget.resident_weight_bytes,
        decode=DecodeBound(
            seconds_per_token=ceiling.seconds_per_token, tok_per_s=ceiling.tok_per_s
        ),
        batches=tuple(batches),
        compute_dtype=dtype,
        peak_flops=peak,
        tensor_parallel=tp_bound,
        prefill=prefill,
        speculative=spec_bound,
        assumptions=tuple(assumptions),
    )
    return ceiling, result


def ceiling_for(
    model: str,
    hardware: str,
    *,
    context: int = 0,
    gpus: int = 1,
    weights: str | None = None,
    kv: str | None = None,
) -> Ceiling:
    """The batch-1 decode ceiling of `model` on `hardware`.

    model: a catalogue name or alias ('openai/gpt-oss-120b', 'qwen3-8b'), a config.json, or its
    folder. hardware: a catalogue name ('b200', 'h100-sxm', 'gb200-nvl72') or 'local' (the profile
    `roofline probe` measured). gpus: how many devices (figures add up); 1 keeps the entry as listed
    (one card, or all 72 GPUs of 'gb200-nvl72'). weights/kv: format overrides as on the command line
    ('fp8', 'experts=mxfp4,attention=bf16'). Raises UserError on any bad input.
    """
    request = CeilingRequest(
        model=model,
        hardware=hardware,
        gpus=None if gpus == 1 else gpus,
        context=context,
        weights=weights,
        kv=kv,
    )
    ceiling, _ = analyse(request)
    return ceiling


def active_or_matmul(spec: ModelSpec) -> str:
    return "active" if spec.explicit is not None else "matmul"
