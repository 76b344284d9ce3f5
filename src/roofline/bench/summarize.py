"""From requests.jsonl lines to the summary: per scenario, every metric of `metrics.py`, failures
with reasons, the per-prompt spread, goodput, and the result held against the ceiling."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from roofline.bench import metrics
from roofline.bench.records import PHASE_WARMUP
from roofline.bench.repeats import (
    GROUPED,
    RepeatGroups,
    group_figures,
    repeated_ids,
    split_lines,
)

DISTRIBUTIONS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "chunk_gap_s",
    "e2e_s",
    "output_speed_tok_per_s",
    "send_lag_s",
    "tokens_per_chunk",
)


def scenario_names(lines: Sequence[Mapping[str, Any]], planned: Sequence[str] = ()) -> list[str]:
    names = list(planned)
    for ln in lines:
        if ln.get("scenario") not in names:
            names.append(ln.get("scenario"))
    return names


def summarize_scenario(
    lines: Sequence[Mapping[str, Any]],
    *,
    ceiling: Any = None,
    slo_s: Mapping[str, float] | None = None,
    repeats: Mapping[str, Any] | None = None,
    repeated: set[int] | None = None,
) -> dict:
    """One scenario's summary. `lines` may include warm-up lines; they are counted, not measured.
    With `repeats` (provenance's, policy fresh or split) first-time and repeated prompts (the line
    ids in `repeated`) are also summarized apart; under fresh the figures count first-time ones
    only (`bench.repeats`)."""
    warm = [ln for ln in lines if ln.get("phase") == PHASE_WARMUP]
    meas = [ln for ln in lines if ln.get("phase") != PHASE_WARMUP]
    groups = None
    if repeats is not None and repeats.get("policy") in GROUPED:
        first, again = split_lines(meas, repeated or set())
        groups = RepeatGroups(
            repeats["policy"],
            group_figures(first),
            group_figures(again),
            repeats.get("server_memory"),
        )
        if groups.policy == "fresh":
            meas = first
    ok = [ln for ln in meas if ln.get("ok")]
    failed = [ln for ln in meas if not ln.get("ok")]
    per = [metrics.request_metrics(ln) for ln in ok]
    window = metrics.window_seconds(meas)
    itl, gaps = [], []
    for ln in ok:
        itl += metrics.itl_per_token_seconds(ln["chunk_ns"], ln["chunk_tokens"])
        gaps += metrics.chunk_gaps_seconds(ln["chunk_ns"])
    values = {
        "ttft_s": [m["ttft_s"] for m in per],
        "tpot_s": [m["tpot_s"] for m in per],
        "itl_s": itl,
        "chunk_gap_s": gaps,
        "e2e_s": [m["e2e_s"] for m in per],
        "output_speed_tok_per_s": [m["output_speed_tok_per_s"] for m in per],
        "send_lag_s": [m["send_lag_s"] for m in per],
        "tokens_per_chunk": [m["tokens_per_chunk"] for m in per],
    }
    tokens = sum(m["output_tokens"] for m in per)
    out: dict[str, Any] = {
        "requests": {
            "measured": len(meas),
            "ok": len(ok),
            "failed": len(failed),
            "warmup": len(warm),
            "failures": _failures(failed),
        },
        "window_s": window,
        "output_tokens": tokens,
        "requests_per_s": metrics.rate_per_s(len(ok), window),
        "output_tok_per_s": metrics.rate_per_s(tokens, window),
        "metrics": {k: metrics.distribution(v) for k, v in values.items()},
        "token_sources": dict(Counter(ln.get("token_source") or "?" for ln in ok)),
        "prompts": prompt_spread(ok, per),
    }
    if slo_s:
        out["goodput"] = metrics.goodput(per, slo_s, window)
        out["slo_percentiles_met"] = _mlperf_check(out["metrics"], slo_s)
    out["passes"] = _passes(ok, per)
    if groups is not None:
        out["repeats"] = groups.to_json()
    if ceiling is not None:
        out["vs_ceiling"] = vs_ceiling(
            ceiling, out["metrics"]["output_speed_tok_per_s"], out["passes"]
        )
    return out


def _failures(failed: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for ln in failed:
        kind = ln.get("error_kind") or "unknown"
        entry = out.setdefault(kind, {"count": 0, "example": ln.get("error", "")})
        entry["count"] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["count"]))


def prompt_spread(ok: Sequence[Mapping[str, Any]], per: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per prompt over its reps: median Output Speed, min, max and spread = (max - min) / median."""
    by: dict[str, list[float]] = {}
    ttft: dict[str, list[float]] = {}
    for ln, m in zip(ok, per):
        if m["output_speed_tok_per_s"] is not None:
            by.setdefault(ln["prompt"], []).append(m["output_speed_tok_per_s"])
            ttft.setdefault(ln["prompt"], []).append(m["ttft_s"])
    rows = []
    for prompt, speeds in by.items():
        med = statistics.median(speeds)
        rows.append(
            {
                "prompt": prompt,
                "reps": len(speeds),
                "output_speed_median_tok_per_s": med,
                "output_speed_min_tok_per_s": min(speeds),
                "output_speed_max_tok_per_s": max(speeds),
                "spread_pct": 100.0 * (max(speeds) - min(speeds)) / med if med else None,
                "ttft_median_s": statistics.median(ttft[prompt]),
            }
        )
    return rows


def vs_ceiling(
    ceiling: Any, speed: Mapping[str, float] | None, passes: Mapping[str, Any] | None = None
) -> dict:
    """Median per-request decode rate against the batch-1 ceiling, and the bandwidth it implies.

    With speculation (more than one token per weight pass) the ceiling bounds passes, not tokens:
    Output Speed = passes/s x tokens/pass may beat it, so passes/s is held against it (basis
    "passes"). Above 100% the wrong figure is named (`bench.against.above_ceiling`). With the file's
    bytes per token, the rate is also held against the file's ceiling."""
    d = {
        "ceiling_tok_per_s": ceiling.tok_per_s,
        "bytes_per_token": ceiling.bytes_per_token,
        "bandwidth_bytes_per_s": ceiling.bandwidth_bytes_per_s,
        "basis": "tokens",
    }
    if speed:
        measured = speed["p50"]
        d.update(
            measured_tok_per_s=measured,
            percent_of_ceiling=ceiling.percent_of_ceiling(measured),
            effective_bandwidth_bytes_per_s=ceiling.effective_bandwidth_bytes_per_s(measured),
        )
        per_pass, rate = (passes or {}).get("tokens_per_pass"), (passes or {}).get("passes_per_s")
        if per_pass and rate and per_pass > 1.0:
            d.update(
                basis="passes",
                passes_per_s=rate,
                tokens_per_pass=per_pass,
                percent_of_ceiling=ceiling.percent_of_ceiling(rate),
                effective_bandwidth_bytes_per_s=ceiling.effective_bandwidth_bytes_per_s(rate),
                tokens_percent_of_one_token_ceiling=ceiling.percent_of_ceiling(measured),
            )
        from roofline.bench.against import ceiling_excess

        # above 100%: "suspect" and "note"
        d.update(ceiling_excess(ceiling, d["percent_of_ceiling"]) or {})
    file_bytes = getattr(ceiling, "file_bytes_per_token", None)
    if file_bytes:  # the same rate against the bytes the file stores: what the model needs
        d.update(file_bytes_per_token=file_bytes, file_ceiling_tok_per_s=ceiling.file_tok_per_s)
        if "measured_tok_per_s" in d:
            rate = d["passes_per_s"] if d["basis"] == "passes" else d["measured_tok_per_s"]
            d["percent_of_file_ceiling"] = ceiling.percent_of_file_ceiling(rate)
    return d


def _passes(ok: Sequence[Mapping[str, Any]], per: Sequence[Mapping[str, Any]]) -> dict | None:
    """Weight passes per second and tokens per pass, when the server reported its passes."""
    with_passes = [(ln, m) for ln, m in zip(ok, per) if ln.get("passes")]
    if not with_passes:
        return None
    passes = sum(ln["passes"] for ln, _ in with_passes)
    tokens = sum(m["output_tokens"] for _, m in with_passes)
    decode_s = sum((m["e2e_s"] - m["ttft_s"]) for _, m in with_passes if m["e2e_s"] is not None)
    return {
        "requests": len(with_passes),
        "tokens_per_pass": tokens / passes if passes else None,
        "passes_per_s": (passes - len(with_passes)) / decode_s if decode_s > 0 else None,
    }


def _mlperf_check(dists: Mapping[str, Any], slo_s: Mapping[str, float]) -> dict[str, bool | None]:
    """MLPerf-style: does the p99 of each bounded metric meet its limit?"""
    name = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "itl": "itl_s"}
    out = {}
    for key, limit in slo_s.items():
        d = dists.get(name[key])
        out[key] = None if d is None else d["p99"] <= limit
    return out


def summarize(
    lines: Sequence[Mapping[str, Any]],
    *,
    provenance: Mapping[str, Any],
    ceiling: Any = None,
    slo_s: Mapping[str, float] | None = None,
    unreadable_lines: int = 0,
) -> dict:
    planned = [s["name"] for s in provenance.get("scenarios", ())]
    repeats = provenance.get("repeats")
    repeated = repeated_ids(lines, repeats.get("same_as") or {}) if repeats else set()
    scenarios = []
    for name in scenario_names(lines, planned):
        sl = [ln for ln in lines if ln.get("scenario") == name]
        spec = next(
            (s for s in provenance.get("scenarios", ()) if s["name"] == name), {"name": name}
        )
        figures = summarize_scenario(
            sl, ceiling=ceiling, slo_s=slo_s, repeats=repeats, repeated=repeated
        )
        scenarios.append({"scenario": spec, **figures})
    return {
        "provenance": dict(provenance),
        "ceiling": ceiling.to_dict() if ceiling is not None else None,
        "slo_s": dict(slo_s) if slo_s else None,
        "unreadable_lines": unreadable_lines,
        "scenarios": scenarios,
    }
