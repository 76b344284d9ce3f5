"""`roofline ceiling`, `roofline hardware list`, `roofline models list`.

Thin: parse options, call `roofline.bounds.analysis.analyse`, print (rich, --markdown or --json).
Imports stay light (no torch, numba, aiohttp, numpy): the answer must come in well under 1 s.
"""

from __future__ import annotations

from pathlib import Path

import typer

from roofline.cli.ceiling_output import print_ceiling
from roofline.cli.output import emit_table, print_json

_MODEL_HELP = (
    "A catalogue name or alias (see `roofline models list`), a config.json or a folder "
    "holding one, a .gguf file, a safetensors checkpoint (a folder with config.json "
    "and *.safetensors, or one .safetensors file with config.json beside it), or a "
    "Hugging Face Hub id owner/name (owner/name:Q4_K_M picks a GGUF by its quant tag). From a "
    "model file only the headers are read: the bytes per token are counted from each "
    "tensor's stored type and shape; from the Hub by range reads, no weights downloaded."
)
REVISION_HELP = (
    "The Hub repo's branch, tag or commit sha (default: main); with it a name the catalogue or "
    "this folder also has is read from the Hub."
)


def _warn_about_context(model: str, context: int, revision: str | None) -> None:
    """One line on stderr when --context is past what the model was built for; the run goes on."""
    from roofline.modelspec.budget import context_warning
    from roofline.modelspec.catalogue import load_spec

    line = context_warning(load_spec(model, revision=revision), context)
    if line:
        typer.echo(line, err=True)


def ceiling(
    model: str = typer.Argument(..., help=_MODEL_HELP),
    revision: str | None = typer.Option(None, "--revision", help=REVISION_HELP),
    hardware: str = typer.Option(
        "local",
        "--hardware",
        "-H",
        help="Catalogue name (see `roofline hardware list`), "
        "'8xh100' for eight, or 'local' for the profile `roofline probe` measured.",
    ),
    gpus: int | None = typer.Option(
        None, "--gpus", help="Number of devices; bandwidth, memory and FLOP/s add up."
    ),
    context: int = typer.Option(
        0, "--context", help="Tokens already in the context: adds their KV cache to every step."
    ),
    batch: str = typer.Option(
        "1", "--batch", help="Batch sizes to bound, comma-separated, e.g. 1,8,32."
    ),
    weights: str | None = typer.Option(
        None,
        "--weights",
        help="Weight format for everything (fp8, mxfp4, nvfp4, "
        "int4, q4_0...) and/or per component: experts=mxfp4,attention=bf16.",
    ),
    kv: str | None = typer.Option(
        None, "--kv", help="KV-cache format (bf16, fp8...); default: the checkpoint dtype."
    ),
    efficiency: float = typer.Option(
        1.0, "--efficiency", help="Share of the bandwidth an engine reaches, in (0, 1]."
    ),
    bandwidth: str | None = typer.Option(
        None, "--bandwidth", help="Use this bandwidth instead, e.g. 32.8GB/s."
    ),
    all_tensors: bool = typer.Option(
        False, "--all-tensors", help="Also count router, norms, biases and the embedding row."
    ),
    tp: int | None = typer.Option(
        None, "--tp", help="Tensor-parallel degree: adds 2 all-reduces per layer."
    ),
    allreduce_us: float | None = typer.Option(
        None, "--allreduce-us", help="Latency of one all-reduce, microseconds."
    ),
    prompt_tokens: int | None = typer.Option(
        None, "--prompt-tokens", help="Bound the prefill (TTFT) of a prompt this long."
    ),
    mfu: float = typer.Option(
        0.4, "--mfu", help="Model FLOPs utilisation assumed for prefill, in (0, 1]."
    ),
    price_per_hour: float | None = typer.Option(
        None,
        "--price-per-hour",
        help="Dollars per hour for all the devices: adds cost per million output tokens.",
    ),
    alpha: float | None = typer.Option(
        None, "--alpha", help="Speculative decoding: per-token acceptance rate."
    ),
    gamma: int | None = typer.Option(
        None, "--gamma", help="Speculative decoding: draft length (default: the best)."
    ),
    draft_cost: float = typer.Option(
        0.05, "--draft-cost", help="Speculative decoding: one draft pass in target passes."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every number as JSON."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print Markdown tables."),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="Also write the roofline chart (intensity against "
        "FLOP/s: the decode points at each --batch, the prefill point) to this "
        ".html, .svg or .png file.",
    ),
) -> None:
    """How fast can this model decode on this machine: bytes per token / bandwidth, and the bounds
    around it."""
    from roofline.bounds.analysis import CeilingRequest, analyse
    from roofline.units import parse_bytes_per_s, parse_int_list

    request = CeilingRequest(
        model=model,
        revision=revision,
        hardware=hardware,
        gpus=gpus,
        context=context,
        batches=tuple(parse_int_list(batch, what="--batch")),
        weights=weights,
        kv=kv,
        efficiency=efficiency,
        bandwidth_bytes_per_s=parse_bytes_per_s(bandwidth) if bandwidth is not None else None,
        all_tensors=all_tensors,
        tp=tp,
        allreduce_us=allreduce_us,
        prompt_tokens=prompt_tokens,
        mfu=mfu,
        price_per_hour=price_per_hour,
        alpha=alpha,
        gamma=gamma,
        draft_cost=draft_cost,
    )
    _, result = analyse(request)
    _warn_about_context(model, context, revision)
    if as_json:
        print_json(result.to_json())
    else:
        print_ceiling(result, as_markdown=as_markdown)
    if plot is not None:
        from roofline.report.build import write_ceiling_plot  # matplotlib only when asked for

        path = write_ceiling_plot(result, plot)
        typer.echo(f"roofline chart: {path}", err=True)


def _local_hardware():
    """The `local` entry from the saved probe profile, or None when there is none yet."""
    from roofline.errors import UserError
    from roofline.hardware.catalogue import get_hardware

    try:
        return get_hardware("local")
    except UserError:
        return None


def hardware_list(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table."),
) -> None:
    """The hardware catalogue: bandwidth, memory, dense FLOP/s, interconnect and source of each
    entry."""
    from dataclasses import asdict

    from roofline.bounds.humanize import fmt_bandwidth, fmt_bytes, fmt_flops
    from roofline.hardware.catalogue import catalogue_hardware

    entries = catalogue_hardware()
    if as_json:
        print_json([asdict(h) for h in entries])
        return
    local = _local_hardware()  # this machine's row, once `roofline probe` has measured it
    shown = [*entries, local] if local else entries
    rows = [
        [
            h.key,
            h.name,
            str(h.devices),
            fmt_bandwidth(h.bandwidth_bytes_per_s),
            fmt_bytes(h.memory_bytes),
            ", ".join(
                f"{k} {fmt_flops(v)}" for k, v in h.flops.items() if k in ("bf16", "fp8", "fp4")
            ),
            "vendor" if h.vendor_claim else "measured",
            h.read[:10] or "?",
        ]
        for h in shown
    ]
    notes = [
        "dense (no sparsity) peaks; figures cover all devices of an entry; --gpus N scales them",
        "local: this machine, as `roofline probe` last measured it"
        if local
        else "local: this machine, once `roofline probe` has measured it",
        "sources (taken down on the date in the 'read' column):",
        *(f"{h.key}: {h.source or 'no source recorded'}" for h in shown),
    ]
    emit_table(
        "hardware",
        ["name", "what", "devices", "bandwidth", "memory", "dense FLOP/s", "figures", "read"],
        rows,
        as_markdown=as_markdown,
        notes=notes,
    )


def models_list(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table."),
) -> None:
    """The model catalogue: config.json snapshots (with source and date) and the guide's
    illustrative shapes."""
    from roofline.bounds.humanize import fmt_params
    from roofline.modelspec.catalogue import catalogue_models
    from roofline.modelspec.components import active_params, total_params
    from roofline.modelspec.parse import spec_from_config

    entries = []
    for m in catalogue_models():
        spec = spec_from_config(m.config, name=m.id)
        entries.append(
            {
                "id": m.id,
                "aliases": list(m.aliases),
                "architecture": spec.architecture,
                "params_total": total_params(spec),
                "params_active": active_params(spec),
                "source": m.source,
                "retrieved": m.retrieved,
                "kind": m.kind,
            }
        )
    if as_json:
        print_json(entries)
        return
    # the short aliases; the other repository names an entry answers to are in --json
    rows = [
        [
            e["id"],
            ", ".join(a for a in e["aliases"] if "/" not in a),
            e["architecture"],
            fmt_params(e["params_total"]),
            fmt_params(e["params_active"]),
            e["retrieved"],
        ]
        for e in entries
    ]
    emit_table(
        "models",
        ["id", "aliases", "architecture", "params", "active", "read"],
        rows,
        as_markdown=as_markdown,
        notes=["sources and every alias: `roofline models list --json`"],
    )


def register(app: typer.Typer) -> None:
    app.command("ceiling")(ceiling)
    hardware_app = typer.Typer(help="The hardware catalogue.", no_args_is_help=True)
    hardware_app.command("list")(hardware_list)
    app.add_typer(hardware_app, name="hardware")
    models_app = typer.Typer(help="The model catalogue.", no_args_is_help=True)
    models_app.command("list")(models_list)
    app.add_typer(models_app, name="models")
