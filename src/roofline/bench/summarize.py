"""From requests.jsonl's records to the summary (`RunSummary`): per scenario, every metric of
`metrics.py`, failures with reasons, the per-prompt spread, goodput, and the result held against the
ceiling."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from roofline.bench import metrics
from roofline.bench.records import RequestRecord
from roofline.bench.repeats import (
    GROUPED,
    RepeatGroups,
    group_figures,
    repeated_ids,
    split_lines,
)
from roofline.bench.summary import (
    CeilingFigures,
    Distribution,
    Failure,
    Passes,
    PromptSpread,
    RequestCounts,
    RunSummary,
    ScenarioInfo,
    ScenarioSummary,
    VsCeiling,
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


def scenario_names(records: Sequence[RequestRecord], planned: Sequence[str] = ()) -> list[str]:
    names = list(planned)
    for r in records:
        if r.scenario not in names:
            names.append(r.scenario)
    return names


def summarize_scenario(
    records: Sequence[RequestRecord],
    spec: Mapping[str, Any],
    *,
    ceiling: Any = None,
    slo_s: Mapping[str, float] | None = None,
    repeats: Mapping[str, Any] | None = None,
    repeated: set[int] | None = None,
) -> ScenarioSummary:
    """One scenario's summary (`spec`: what it was asked, provenance's entry). `records` may
    include warm-up requests; they are counted, not measured. With `repeats` (provenance's, policy
    fresh or split) first-time and repeated prompts (the ids in `repeated`) are also summarized
    apart; under fresh the figures count first-time ones only (`bench.repeats`)."""
    warm = [r for r in records if r.warmup]
    meas = [r for r in records if not r.warmup]
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
    ok = [r for r in meas if r.ok]
    failed = [r for r in meas if not r.ok]
    per = [metrics.request_metrics(r) for r in ok]
    window = metrics.window_seconds(meas)
    itl, gaps = [], []
    for r in ok:
        itl += metrics.itl_per_token_seconds(r.chunk_offsets_ns, r.chunk_tokens)
        gaps += metrics.chunk_gaps_seconds(r.chunk_offsets_ns)
    values = {
        "ttft_s": [m.ttft_s for m in per],
        "tpot_s": [m.tpot_s for m in per],
        "itl_s": itl,
        "chunk_gap_s": gaps,
        "e2e_s": [m.e2e_s for m in per],
        "output_speed_tok_per_s": [m.output_speed_tok_per_s for m in per],
        "send_lag_s": [m.send_lag_s for m in per],
        "tokens_per_chunk": [m.tokens_per_chunk for m in per],
    }
    tokens = sum(m.output_tokens for m in per)
    dists = {k: Distribution.from_json(metrics.distribution(v)) for k, v in values.items()}
    passes = _passes(ok, per)
    speed = dists["output_speed_tok_per_s"]
    return ScenarioSummary(
        scenario=ScenarioInfo.from_json(spec),
        requests=RequestCounts(
            measured=len(meas),
            ok=len(ok),
            failed=len(failed),
            warmup=len(warm),
            failures=_failures(failed),
        ),
        window_s=window,
        output_tokens=tokens,
        requests_per_s=metrics.rate_per_s(len(ok), window),
        output_tok_per_s=metrics.rate_per_s(tokens, window),
        metrics=dists,
        token_sources=dict(Counter(r.token_source or "?" for r in ok)),
        prompts=tuple(prompt_spread(ok, per)),
        goodput=metrics.goodput(per, slo_s, window) if slo_s else None,
        slo_percentiles_met=_mlperf_check(dists, slo_s) if slo_s else None,
        passes=passes,
        repeats=groups,
        vs_ceiling=None
        if ceiling is None
        else VsCeiling.from_json(
            vs_ceiling(ceiling, None if speed is None else {"p50": speed.p50}, passes)
        ),
    )


def _failures(failed: Sequence[RequestRecord]) -> dict[str, Failure]:
    out: dict[str, Failure] = {}
    for r in failed:
        kind = r.error_kind or "unknown"
        seen = out.get(kind)
        out[kind] = Failure(seen.count + 1, seen.example) if seen else Failure(1, r.error)
    return dict(sorted(out.items(), key=lambda kv: -kv[1].count))


def prompt_spread(
    ok: Sequence[RequestRecord], per: Sequence[metrics.RequestMetrics]
) -> list[PromptSpread]:
    """Per prompt over its reps: median Output Speed, min, max and spread = (max - min) / median."""
    by: dict[str, list[float]] = {}
    ttft: dict[str, list[float]] = {}
    for r, m in zip(ok, per):
        if m.output_speed_tok_per_s is not None:
            by.setdefault(r.prompt, []).append(m.output_speed_tok_per_s)
            ttft.setdefault(r.prompt, []).append(m.ttft_s)
    rows = []
    for prompt, speeds in by.items():
        med = statistics.median(speeds)
        rows.append(
            PromptSpread(
                prompt=prompt,
                reps=len(speeds),
                output_speed_median_tok_per_s=med,
                output_speed_min_tok_per_s=min(speeds),
                output_speed_max_tok_per_s=max(speeds),
                spread_pct=100.0 * (max(speeds) - min(speeds)) / med if med else None,
                ttft_median_s=statistics.median(ttft[prompt]),
            )
        )
    return rows


def vs_ceiling(
    ceiling: Any, speed: Mapping[str, float] | None, passes: Passes | None = None
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
        per_pass, rate = (passes.tokens_per_pass, passes.passes_per_s) if passes else (None, None)
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


def _passes(ok: Sequence[RequestRecord], per: Sequence[metrics.RequestMetrics]) -> Passes | None:
    """Weight passes per second and tokens per pass, when the server reported its passes."""
    with_passes = [(r, m) for r, m in zip(ok, per) if r.passes]
    if not with_passes:
        return None
    passes = sum(r.passes for r, _ in with_passes)
    tokens = sum(m.output_tokens for _, m in with_passes)
    decode_s = sum((m.e2e_s - m.ttft_s) for _, m in with_passes if m.e2e_s is not None)
    return Passes(
        requests=len(with_passes),
        tokens_per_pass=tokens / passes if passes else None,
        passes_per_s=(passes - len(with_passes)) / decode_s if decode_s > 0 else None,
    )


def _mlperf_check(
    dists: Mapping[str, Distribution | None], slo_s: Mapping[str, float]
) -> dict[str, bool | None]:
    """MLPerf-style: does the p99 of each bounded metric meet its limit?"""
    name = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "itl": "itl_s"}
    out = {}
    for key, limit in slo_s.items():
        d = dists.get(name[key])
        out[key] = None if d is None else d.p99 <= limit
    return out


def summarize(
    records: Sequence[RequestRecord],
    *,
    provenance: Mapping[str, Any],
    ceiling: Any = None,
    slo_s: Mapping[str, float] | None = None,
    unreadable_lines: int = 0,
) -> RunSummary:
    planned = [s["name"] for s in provenance.get("scenarios", ())]
    repeats = provenance.get("repeats")
    repeated = repeated_ids(records, repeats.get("same_as") or {}) if repeats else set()
    scenarios = []
    for name in scenario_names(records, planned):
        sl = [r for r in records if r.scenario == name]
        spec = next(
            (s for s in provenance.get("scenarios", ()) if s["name"] == name), {"name": name}
        )
        scenarios.append(
            summarize_scenario(
                sl, spec, ceiling=ceiling, slo_s=slo_s, repeats=repeats, repeated=repeated
            )
        )
    return RunSummary(
        provenance=dict(provenance),
        scenarios=tuple(scenarios),
        ceiling=CeilingFigures.from_json(ceiling.to_dict()) if ceiling is not None else None,
        slo_s=dict(slo_s) if slo_s else None,
        unreadable_lines=unreadable_lines,
    )
