"""`roofline ceiling`'s answer for people: the bytes-per-token breakdown and the bounds, as rich
tables or Markdown (--json prints the record itself).
"""

from __future__ import annotations

import typer

from roofline.cli.output import console, emit_table, print_wrapped


def _breakdown(result) -> tuple[list[list[str]], list[str]]:
    from roofline.bounds.humanize import fmt_bytes, fmt_params

    # One unit for the whole column: GB (two decimals, as the guide quotes them), MB for small
    # models.
    scale, unit = (1e9, "GB") if result.bytes_per_token >= 1e9 else (1e6, "MB")

    def size(n: float) -> str:
        return f"{n / scale:,.2f} {unit}"

    rows, left_out = [], []
    for c in result.components:
        if c.counted:
            rows.append([c.label, fmt_params(c.params), c.format_label, size(c.bytes)])
        else:
            left_out.append(f"{c.label} {fmt_bytes(c.bytes)}")
    kv = result.kv
    if result.context_tokens:
        rows.append(
            [
                f"KV cache ({result.context_tokens:,} tokens)",
                "",
                kv.format,
                size(kv.bytes_per_sequence),
            ]
        )
    rows.append(
        [
            "total",
            fmt_params(sum(c.params for c in result.components if c.counted)),
            "",
            size(result.bytes_per_token),
        ]
    )
    notes = [f"not counted (small tensors): {'; '.join(left_out)}"] if left_out else []
    return rows, notes


def _bounds(result) -> list[list[str]]:
    from roofline.bounds.humanize import fmt_bytes, fmt_dollars, fmt_rate, fmt_seconds

    mem = result.hardware.memory_bytes
    rows = []
    for b in result.batches:
        fits = "fits" if b.fits else "DOES NOT FIT"
        notes = [f"{fits} ({fmt_bytes(b.resident_bytes, 1)} of {fmt_bytes(mem, 1)})"]
        if b.experts_per_layer is not None and b.batch > 1:
            notes.append(f"{b.experts_per_layer:.1f} experts/layer")
        if b.limited_by == "compute":
            notes.append("compute-bound")
        if b.dollars_per_million_tokens is not None:
            notes.append(f"{fmt_dollars(b.dollars_per_million_tokens)}/M tokens")
        rate = fmt_rate(b.tok_per_s_per_user)
        if b.batch > 1:
            rate = f"{rate}/user, {fmt_rate(b.tok_per_s_total)} total"
        rows.append(
            [f"decode batch {b.batch}", fmt_seconds(b.seconds_per_step), rate, "; ".join(notes)]
        )
    t = result.tensor_parallel
    if t:
        rows.append(
            [
                f"TP {t.tp}, {t.allreduce_us:g} µs all-reduce",
                fmt_seconds(t.seconds_per_token),
                fmt_rate(t.tok_per_s),
                f"{t.scaling_efficiency:.0%} streaming bytes",
            ]
        )
    p = result.prefill
    if p:
        rows.append(
            [
                f"prefill {p.prompt_tokens:,} tokens (TTFT)",
                f">= {fmt_seconds(p.ttft_seconds)}",
                "",
                f"{p.mfu:.0%} MFU, {p.dtype} peak",
            ]
        )
    s = result.speculative
    if s:
        rows.append(
            [
                f"speculative a={s.alpha:g} g={s.gamma} c={s.draft_cost:g}",
                fmt_seconds(1 / s.tok_per_s),
                f"{fmt_rate(s.tok_per_s)} ({s.speedup:.2f}x)",
                f"{s.tokens_per_pass:.2f} tok/pass; best g={s.best_gamma}: {s.best_speedup:.2f}x",
            ]
        )
    return rows


_SPECULATIVE_LEGEND = (
    "speculative row: a = the chance that each drafted token is accepted (--alpha), g = tokens "
    "drafted before one verify pass (--gamma), c = what one draft pass costs, in passes of the "
    "target model (--draft-cost; 0.05: a draft model reading 1/20 of the target's bytes)"
)


def _line(text: str, *, as_markdown: bool) -> None:
    if as_markdown:
        typer.echo(text)
        return
    print_wrapped(console(), text, hanging="")


def print_ceiling(result, *, as_markdown: bool) -> None:
    from roofline.bounds.humanize import fmt_bandwidth, fmt_bytes, fmt_params

    m, hw = result.model, result.hardware
    head = "## " if as_markdown else ""
    _line(f"{head}{m.name} on {hw.label}", as_markdown=as_markdown)
    _line("", as_markdown=as_markdown)
    _line(
        f"{fmt_params(m.params_total)} params, {fmt_params(m.params_active)} active "
        f"({m.architecture}); {fmt_bandwidth(result.bandwidth_bytes_per_s)} usable bandwidth, "
        f"{fmt_bytes(hw.memory_bytes, 1)} memory",
        as_markdown=as_markdown,
    )
    _line("", as_markdown=as_markdown)
    rows, notes = _breakdown(result)
    emit_table(
        None,
        ["bytes per decoded token", "params", "format", "bytes"],
        rows,
        as_markdown=as_markdown,
        notes=notes,
    )
    _line("", as_markdown=as_markdown)
    assumptions = ["assumptions:"] + [f"- {a}" for a in result.assumptions]
    if result.speculative:
        assumptions.append(f"- {_SPECULATIVE_LEGEND}")
    if as_markdown:
        assumptions = [
            "**assumptions**",
            *result.assumptions,
            *([_SPECULATIVE_LEGEND] if result.speculative else []),
        ]
    emit_table(
        None,
        ["bound", "time", "tok/s", "notes"],
        _bounds(result),
        as_markdown=as_markdown,
        notes=assumptions,
    )
