"""The summary as tables (title, headers, rows, notes) for the terminal and for summary.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Table = tuple[str, list[str], list[list[str]], list[str]]


def _ms(d: Mapping | None, stat: str) -> str:
    return "-" if not d else f"{1e3 * d[stat]:.1f}"


def num(x: float | None, fmt: str = "{:.1f}") -> str:
    """x formatted, or "-" when there is none."""
    return "-" if x is None else fmt.format(x)


def latency_table(summary: Mapping[str, Any]) -> Table:
    headers = ["scenario", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms",
               "ITL p99 ms", "chunk gap p99 ms", "E2E p50 s"]
    rows = []
    for s in summary["scenarios"]:
        m = s["metrics"]
        rows.append([s["scenario"]["name"], str(s["requests"]["ok"]), str(s["requests"]["failed"]),
                     _ms(m["ttft_s"], "p50"), _ms(m["ttft_s"], "p99"), _ms(m["tpot_s"], "p50"), _ms(m["tpot_s"], "p99"),
                     _ms(m["itl_s"], "p99"), _ms(m["chunk_gap_s"], "p99"), num(m["e2e_s"] and m["e2e_s"]["p50"], "{:.2f}")])
    return ("latency", headers, rows, [])


def rates_table(summary: Mapping[str, Any]) -> Table:
    has_slo = bool(summary.get("slo_s"))
    has_ceiling = summary.get("ceiling") is not None
    headers = ["scenario", "Output Speed p50 tok/s", "min", "max", "req/s", "output tok/s"]
    if has_slo:
        headers += ["goodput req/s", "goodput tok/s"]
    if has_ceiling:
        headers.append("% of ceiling")
    rows = []
    for s in summary["scenarios"]:
        speed = s["metrics"]["output_speed_tok_per_s"] or {}
        row = [s["scenario"]["name"], num(speed.get("p50")), num(speed.get("min")), num(speed.get("max")),
               num(s["requests_per_s"], "{:.2f}"), num(s["output_tok_per_s"])]
        if has_slo:
            g = s.get("goodput") or {}
            row += [num(g.get("requests_per_s"), "{:.2f}"), num(g.get("output_tok_per_s"))]
        if has_ceiling:
            row.append(num((s.get("vs_ceiling") or {}).get("percent_of_ceiling"), "{:.1f}%"))
        rows.append(row)
    return ("rates", headers, rows, result_notes(summary))


def measured_locally(ceiling: Mapping[str, Any]) -> bool:
    """The ceiling rests on this machine's measured bandwidth, not a catalogue figure."""
    return ceiling.get("hardware") == "local"


def result_notes(summary: Mapping[str, Any]) -> list[str]:
    notes = []
    c = summary.get("ceiling")
    if c:
        notes.append(f"ceiling: {c['tok_per_s']:.1f} tok/s = {c['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s / "
                     f"{c['bytes_per_token'] / 1e6:.1f} MB per token ({c['hardware'] or 'hardware'}, batch 1)")
        for s in summary["scenarios"]:
            v = s.get("vs_ceiling") or {}
            if v.get("basis") == "passes":
                notes.append(f"{s['scenario']['name']}: decode {v['measured_tok_per_s']:.1f} tok/s = "
                             f"{v['passes_per_s']:.1f} weight passes/s x {v['tokens_per_pass']:.2f} tokens/pass; "
                             f"passes/s = {v['percent_of_ceiling']:.1f}% of the ceiling (effective bandwidth "
                             f"{v['effective_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s). Speculation verifies several "
                             f"tokens per pass, so tokens/s may pass the one-token ceiling "
                             f"({v['tokens_percent_of_one_token_ceiling']:.1f}% of it) while every pass still reads "
                             f"all the weights")
            elif "measured_tok_per_s" in v:
                notes.append(f"{s['scenario']['name']}: decode {v['measured_tok_per_s']:.1f} tok/s = "
                             f"{v['percent_of_ceiling']:.1f}% of the ceiling, effective bandwidth "
                             f"{v['effective_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s")
                if v["percent_of_ceiling"] > 100 and measured_locally(c):
                    notes.append("above 100%: the engine read memory faster than the probe's read kernel did when "
                                 "it was measured (bandwidth drifts on a shared machine); re-run `roofline probe`")
        for a in c.get("assumptions") or ():
            notes.append(f"assumption: {a}")
    for s in summary["scenarios"]:
        name = s["scenario"]["name"]
        lag = s["metrics"].get("send_lag_s")
        if lag:
            notes.append(f"{name}: send lag p50 {1e3 * lag['p50']:.2f} ms, max {1e3 * lag['max']:.2f} ms (counted in TTFT)")
        if s["token_sources"]:
            src = ", ".join(f"{k} ({v})" for k, v in s["token_sources"].items())
            notes.append(f"{name}: tokens counted by {src}")
        p = s.get("passes")
        if p and p.get("tokens_per_pass"):
            notes.append(f"{name}: {p['tokens_per_pass']:.2f} tokens per weight pass, "
                         f"{num(p.get('passes_per_s'))} passes/s (server-reported)")
        tpc = s["metrics"].get("tokens_per_chunk")
        if tpc and tpc["mean"] > 1.01:
            notes.append(f"{name}: {tpc['mean']:.2f} tokens per chunk on average (speculation or "
                         f"stream interval > 1): ITL spreads each chunk gap over its tokens")
        g = s.get("goodput")
        if g:
            notes.append(f"{name}: {g['requests_meeting_slo']} of {s['requests']['ok']} requests met every SLO; "
                         f"p99 within limits: {s.get('slo_percentiles_met')}")
    if summary.get("unreadable_lines"):
        notes.append(f"{summary['unreadable_lines']} unreadable line(s) in requests.jsonl were skipped")
    return notes


def prompts_table(summary: Mapping[str, Any]) -> Table | None:
    rows = []
    for s in summary["scenarios"]:
        for p in s.get("prompts") or ():
            rows.append([s["scenario"]["name"], p["prompt"], str(p["reps"]),
                         num(p["output_speed_median_tok_per_s"]), num(p["output_speed_min_tok_per_s"]),
                         num(p["output_speed_max_tok_per_s"]), num(p["spread_pct"], "{:.1f}%"),
                         num(1e3 * p["ttft_median_s"])])
    if not rows:
        return None
    headers = ["scenario", "prompt", "reps", "median tok/s", "min", "max", "spread", "TTFT median ms"]
    return ("per prompt (Output Speed over reps)", headers, rows, [])


def failures_table(summary: Mapping[str, Any]) -> Table | None:
    rows = []
    for s in summary["scenarios"]:
        for kind, f in s["requests"]["failures"].items():
            rows.append([s["scenario"]["name"], kind, str(f["count"]), f["example"][:100]])
    if not rows:
        return None
    return ("failed requests", ["scenario", "reason", "count", "example"], rows, [])


def tables(summary: Mapping[str, Any]) -> list[Table]:
    return [t for t in (latency_table(summary), rates_table(summary), prompts_table(summary), failures_table(summary)) if t]
