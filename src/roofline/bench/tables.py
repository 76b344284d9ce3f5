"""The summary as tables (title, headers, rows, notes) for the terminal, and summary.md for people.

Everything here reads the typed `RunSummary` (bench.summary), never summary.json's keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from roofline.bench.against import percent_text, read_ratio_line
from roofline.bench.experts_read import experts_table
from roofline.bench.positions import positions_table
from roofline.bench.repeats import repeats_table
from roofline.bench.scrape import cache_table
from roofline.bench.summary import CeilingFigures, Distribution, RunSummary, ScenarioSummary
from roofline.bench.verify import verify_line
from roofline.bench.workloads import workload_of

Table = tuple[str, list[str], list[list[str]], list[str]]

# What counted each request's output tokens, in words (bench.tokens names the sources).
TOKEN_SOURCE_WORDS = {
    "usage_per_chunk": "the server's running usage count in every chunk",
    "tokenizer": "the local tokenizer (--tokenizer)",
    "usage_total+tokenizer": "the local tokenizer, scaled to the server's final usage total",
    "usage_total": "the server's final usage total (it matched one token per text chunk)",
    "usage_total+chars": (
        "the server's final usage total, shared over the chunks by their characters"
    ),
    "chunks": (
        "one token per text chunk (the server reported no usage; multi-token chunks undercount)"
    ),
}


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 stream', '4 streams'."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _ms(d: Distribution | None, stat: str) -> str:
    return "-" if not d else f"{1e3 * getattr(d, stat):.1f}"


def num(x: float | None, fmt: str = "{:.1f}") -> str:
    """x formatted, or "-" when there is none."""
    return "-" if x is None else fmt.format(x)


def latency_table(summary: RunSummary) -> Table:
    headers = [
        "scenario",
        "ok",
        "failed",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p99 ms",
        "chunk gap p99 ms",
        "E2E p50 s",
    ]
    rows = []
    for s in summary.scenarios:
        m = s.metric
        e2e = m("e2e_s")
        rows.append(
            [
                s.name,
                str(s.requests.ok),
                str(s.requests.failed),
                _ms(m("ttft_s"), "p50"),
                _ms(m("ttft_s"), "p99"),
                _ms(m("tpot_s"), "p50"),
                _ms(m("tpot_s"), "p99"),
                _ms(m("itl_s"), "p99"),
                _ms(m("chunk_gap_s"), "p99"),
                num(e2e and e2e.p50, "{:.2f}"),
            ]
        )
    return ("latency", headers, rows, [])


def rates_table(summary: RunSummary) -> Table:
    has_slo = bool(summary.slo_s)
    has_ceiling = summary.ceiling is not None
    has_file = has_ceiling and bool(summary.ceiling.file_bytes_per_token)
    headers = ["scenario", "Output Speed p50 tok/s", "min", "max", "req/s", "output tok/s"]
    if has_slo:
        headers += ["goodput req/s", "goodput tok/s"]
    if has_ceiling:
        headers.append("% of ceiling")
    if has_file:
        headers.append("% of file's ceiling")
    rows = []
    for s in summary.scenarios:
        speed = s.metric("output_speed_tok_per_s")
        row = [
            s.name,
            num(speed and speed.p50),
            num(speed and speed.min),
            num(speed and speed.max),
            num(s.requests_per_s, "{:.2f}"),
            num(s.output_tok_per_s),
        ]
        if has_slo:
            g = s.goodput
            row += [num(g and g.requests_per_s, "{:.2f}"), num(g and g.output_tok_per_s)]
        if has_ceiling:
            row.append(percent_text(s.vs_ceiling))  # above 100%: the suspect figure beside it
        if has_file:
            row.append(num(s.vs_ceiling and s.vs_ceiling.percent_of_file_ceiling, "{:.1f}%"))
        rows.append(row)
    return ("rates", headers, rows, result_notes(summary))


def measured_locally(summary: RunSummary) -> bool:
    """The ceiling rests on this machine's measured bandwidth, not a catalogue figure."""
    return summary.ceiling is not None and summary.ceiling.hardware == "local"


def _ceiling_notes(summary: RunSummary) -> list[str]:
    c = summary.ceiling
    if c is None:
        return []
    notes = [
        (
            f"ceiling: {c.tok_per_s:.1f} tok/s = {c.bandwidth_bytes_per_s / 1e9:.1f} GB/s / "
            f"{c.bytes_per_token / 1e6:.1f} MB per token ({c.hardware or 'hardware'}, batch 1)"
        )
    ]
    notes += file_ceiling_notes(c)
    for s in summary.scenarios:
        v = s.vs_ceiling
        if v is None or v.measured_tok_per_s is None:
            continue
        if v.basis == "passes":
            notes.append(
                f"{s.name}: decode {v.measured_tok_per_s:.1f} tok/s = {v.passes_per_s:.1f} weight "
                f"passes/s x {v.tokens_per_pass:.2f} tokens/pass; passes/s = "
                f"{v.percent_of_ceiling:.1f}% of the ceiling (effective bandwidth "
                f"{v.effective_bandwidth_bytes_per_s / 1e9:.2f} GB/s). Speculation verifies "
                "several tokens per pass, so tokens/s may pass the one-token ceiling "
                f"({v.tokens_percent_of_one_token_ceiling:.1f}% of it) while every pass still "
                "reads all the weights"
            )
        else:
            notes.append(
                f"{s.name}: decode {v.measured_tok_per_s:.1f} tok/s = {v.percent_of_ceiling:.1f}% "
                "of the ceiling"
                + (
                    ""
                    if v.percent_of_file_ceiling is None
                    else f", {v.percent_of_file_ceiling:.1f}% of the file's"
                )
                + f", effective bandwidth {v.effective_bandwidth_bytes_per_s / 1e9:.2f} GB/s"
            )
        if v.note:  # above 100%: which figure is suspect, and why
            notes.append(f"{s.name}: {v.note}")
        ratio = read_ratio_line(
            c.bytes_per_token, c.file_bytes_per_token, v.percent_of_file_ceiling
        )
        if ratio:  # the engine reads more (or fewer) bytes than the file stores
            notes.append(f"{s.name}: {ratio}")
    notes += [f"assumption: {a}" for a in c.assumptions]
    return notes


def file_ceiling_notes(c: CeilingFigures) -> list[str]:
    """The file's ceiling beside the engine's ("file's ceiling: T tok/s = B GB/s / F MB per token
    (...)"), or why it is missing when the engine's own count was used."""
    if c.file_bytes_per_token and c.file_tok_per_s:
        return [
            (
                f"file's ceiling: {c.file_tok_per_s:.1f} tok/s = "
                f"{c.bandwidth_bytes_per_s / 1e9:.1f} GB/s / {c.file_bytes_per_token / 1e6:.1f} "
                "MB per token (the weights as the model's file stores them; the engine reads "
                f"{c.read_ratio:.2f}x that)"
            )
        ]
    if c.bytes_from_engine:
        return [
            "file's ceiling: unknown (the server does not report the bytes its model file stores, "
            "and no local model file was given to count them)"
        ]
    return []


def token_source_note(s: ScenarioSummary) -> str | None:
    """'sequential: output tokens counted by the server's running usage count in every chunk (12
    requests)'."""
    if not s.token_sources:
        return None
    parts = [
        f"{TOKEN_SOURCE_WORDS.get(k, k)} ({plural(n, 'request')})"
        for k, n in s.token_sources.items()
    ]
    return f"{s.name}: output tokens counted by " + "; ".join(parts)


def result_notes(summary: RunSummary) -> list[str]:
    notes = _ceiling_notes(summary)
    for s in summary.scenarios:
        lag = s.metric("send_lag_s")
        if lag:
            notes.append(
                f"{s.name}: send lag p50 {1e3 * lag.p50:.2f} ms, max {1e3 * lag.max:.2f} ms "
                "(counted in TTFT)"
            )
        src = token_source_note(s)
        if src:
            notes.append(src)
        p = s.passes
        if p and p.tokens_per_pass:
            notes.append(
                f"{s.name}: {p.tokens_per_pass:.2f} tokens per weight pass, "
                f"{num(p.passes_per_s)} passes/s (server-reported)"
            )
        tpc = s.metric("tokens_per_chunk")
        if tpc and tpc.mean > 1.01:
            notes.append(
                f"{s.name}: {tpc.mean:.2f} tokens per chunk on average (speculation or "
                f"stream interval > 1): ITL spreads each chunk gap over its tokens"
            )
        g = s.goodput
        if g:
            notes.append(
                f"{s.name}: {g.requests_meeting_slo} of {s.requests.ok} requests met every SLO; "
                "p99 within its limit: "
                + (
                    ", ".join(
                        f"{k} {'yes' if ok else 'no'}"
                        for k, ok in (s.slo_percentiles_met or {}).items()
                    )
                    or "-"
                )
            )
    if summary.verify is not None:
        notes.append(verify_line(summary.verify))
    if summary.unreadable_lines:
        notes.append(
            f"{plural(summary.unreadable_lines, 'unreadable line')} in requests.jsonl skipped "
            "(a line cut by an interrupted run)"
        )
    return notes


def prompts_table(summary: RunSummary) -> Table | None:
    workload = workload_of(summary.provenance)
    if workload is not None and not workload.per_prompt:
        return None
    rows = []
    for s in summary.scenarios:
        for p in s.prompts:
            rows.append(
                [
                    s.name,
                    p.prompt,
                    str(p.reps),
                    num(p.output_speed_median_tok_per_s),
                    num(p.output_speed_min_tok_per_s),
                    num(p.output_speed_max_tok_per_s),
                    num(p.spread_pct, "{:.1f}%"),
                    num(None if p.ttft_median_s is None else 1e3 * p.ttft_median_s),
                ]
            )
    if not rows:
        return None
    headers = [
        "scenario",
        "prompt",
        "reps",
        "median tok/s",
        "min",
        "max",
        "spread",
        "TTFT median ms",
    ]
    return ("per prompt (Output Speed over reps)", headers, rows, [])


def failures_table(summary: RunSummary) -> Table | None:
    rows = []
    for s in summary.scenarios:
        for kind, f in s.requests.failures.items():
            rows.append([s.name, kind, str(f.count), f.example[:100]])
    if not rows:
        return None
    return ("failed requests", ["scenario", "reason", "count", "example"], rows, [])


def tables(summary: RunSummary) -> list[Table]:
    return [
        t
        for t in (
            latency_table(summary),
            rates_table(summary),
            prompts_table(summary),
            repeats_table(summary),
            cache_table(summary),
            positions_table(summary),
            experts_table(summary),
            failures_table(summary),
        )
        if t
    ]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def title(summary: RunSummary) -> str:
    """'roofline bench: http://127.0.0.1:8000/v1/chat/completions (smollm2)'; the model only when
    known."""
    endpoint = summary.provenance.get("endpoint") or "?"
    model = summary.model_label
    return f"roofline bench: {endpoint}" + (f" ({model})" if model else "")


def hardware_profile_line(summary: RunSummary) -> str | None:
    """ "hardware profile: <cpu>, measured <when>" when the run used this machine's profile."""
    hp = summary.hardware_profile
    if not hp:
        return None
    return (
        f"hardware profile: {hp.get('cpu') or hp.get('name')}, "
        f"measured {hp.get('measured_at') or '?'}"
    )


def provenance_lines(summary: RunSummary) -> list[str]:
    """What ran, where and when; a key the run did not record is left out, not printed as None."""
    prov = summary.provenance
    out = []
    for key in (
        "time_utc",
        "roofline_version",
        "endpoint",
        "served_model",
        "model",
        "hardware",
        "usage_used",
    ):
        if prov.get(key) not in (None, ""):
            out.append(f"{key}: {prov[key]}")
    server = prov.get("server") or {}
    name = " ".join(str(x) for x in (server.get("header"), server.get("version")) if x)
    if name:
        out.append(f"server: {name}")
    engine = prov.get("engine") or {}
    if engine.get("name"):
        out.append(f"engine: {engine['name']} {engine.get('version') or ''}".rstrip())
    if prov.get("arguments"):
        out.append(f"arguments: `{' '.join(prov['arguments'])}`")
    if prov.get("interrupted"):
        out.append("interrupted: yes (the summary covers the requests that ended)")
    return out


def markdown(summary: RunSummary) -> str:
    """summary.md: every table with its notes, then the provenance."""
    out = [f"# {title(summary)}", ""]
    for name, headers, rows, notes in tables(summary):
        out += [f"## {name}", "", markdown_table(headers, rows), ""]
        out += [f"- {n}" for n in notes]
        if notes:
            out.append("")
    out += ["## provenance", ""] + [f"- {line}" for line in provenance_lines(summary)]
    return "\n".join(out) + "\n"


def write_markdown(run_dir: Path, summary: RunSummary) -> Path:
    from roofline.bench.results import SUMMARY_MD

    path = Path(run_dir) / SUMMARY_MD
    path.write_text(markdown(summary), encoding="utf-8")
    return path
