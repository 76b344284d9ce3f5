"""Measure the measuring client against the null server, whose schedule is known exactly.

Each case runs the null server as its own process on loopback and the normal benchmark path
against it, then reports: each metric as the client saw it vs. the schedule (`schedule.truth`)
and vs. the server's own send stamps (its lateness included); the client's delay per chunk
(client timestamp - server stamp, same clock); the server's lateness at the first token; tokens/s
reached and client CPU time per token (all client processes).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roofline.bench import metrics
from roofline.bench.driver import Progress, run_bench
from roofline.bench.launch import LocalServer, free_port
from roofline.bench.loadgen import Scenario
from roofline.bench.plan import BenchPlan
from roofline.bench.records import Phase
from roofline.bench.results import read_requests
from roofline.bench.schedule import Schedule
from roofline.bench.summarize import summarize_scenario
from roofline.bench.summary import RunSummary
from roofline.bench.tables import num, plural
from roofline.bench.workloads import Prompt

COMPARED = (
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT"),
    ("itl_s", "ITL per token"),
    ("chunk_gap_s", "chunk gap"),
    ("e2e_s", "E2E"),
    ("output_speed_tok_per_s", "Output Speed"),
)


@dataclass(frozen=True)
class Case:
    name: str
    schedule: Schedule
    concurrency: int
    requests: int
    workers: int = 1
    server_workers: int = 1


@dataclass
class CaseResult:
    case: Case
    rows: list[dict] = field(default_factory=list)  # metric, truth, reported (means), error_pct
    facts: dict[str, Any] = field(default_factory=dict)


DEFAULT_CASES = (
    Case("c=1 k=2", Schedule(0.05, 0.01, 32, 2), 1, 6),
    Case("c=16 k=2", Schedule(0.05, 0.01, 32, 2), 16, 48),
    # two server processes: one Python process cannot send ~50,000 events/s on time by itself
    Case("c=256 fast", Schedule(0.02, 0.005, 100, 1), 256, 512, server_workers=2),
)


def truth_means(s: Schedule) -> dict[str, float]:
    t = s.truth()
    return {
        "ttft_s": t["ttft_s"],
        "tpot_s": t["tpot_s"],
        "itl_s": t["itl_mean_s"],
        "chunk_gap_s": t["chunk_gap_mean_s"],
        "e2e_s": t["e2e_s"],
        "output_speed_tok_per_s": t["output_speed_tok_per_s"],
    }


def server_command(s: Schedule, port: int, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "roofline.bench.nullserver",
        "--port",
        str(port),
        "--ttft",
        f"{s.ttft_s}s",
        "--gap",
        f"{s.gap_s}s",
        "--tokens",
        str(s.tokens),
        "--tokens-per-chunk",
        str(s.tokens_per_chunk),
        "--workers",
        str(workers),
    ]


def run_case(case: Case, folder: Path, progress: Progress | None = None) -> CaseResult:
    port = free_port()
    server = LocalServer(
        server_command(case.schedule, port, case.server_workers),
        host="127.0.0.1",
        port=port,
        log_path=folder / "nullserver.log",
        ready_timeout_s=30,
    )
    plan = BenchPlan(
        url=f"http://127.0.0.1:{port}",
        prompts=[Prompt("null", "calibration")],
        reps=1,
        scenarios=[
            Scenario("concurrency", concurrency=case.concurrency, num_requests=case.requests)
        ],
        max_tokens=case.schedule.tokens,
        usage="per-chunk",
        warmup=2,
        timeout_s=60,
        workers=case.workers,
        label="calibrate",
    )
    with server:
        outcome = run_bench(plan, folder / "run", progress or Progress())
    return compare(case, outcome.summary, folder / "run")


def compare(case: Case, summary: RunSummary, run_dir: Path) -> CaseResult:
    scen = summary.scenarios[0]
    res = CaseResult(case)
    truth = truth_means(case.schedule)
    records, _ = read_requests(run_dir)
    ok = [r for r in records if r.ok and r.phase == Phase.MEASURED]
    # What the server actually did: the same metrics from its own send stamps (same clock, same
    # intended start). reported - this = the client's own error, whatever the server's lateness.
    server_view = summarize_scenario(
        [replace(r, chunk_ns=r.server_chunk_ns) for r in ok if r.server_chunk_ns],
        {"name": scen.name},
    )
    for key, label in COMPARED:
        d = scen.metric(key)
        sv = server_view.metric(key)
        reported = d.mean if d else None
        err = 100.0 * (reported - truth[key]) / truth[key] if reported is not None else None
        client_err = 100.0 * (reported - sv.mean) / sv.mean if reported is not None and sv else None
        res.rows.append(
            {
                "metric": label,
                "key": key,
                "truth": truth[key],
                "reported": reported,
                "reported_p99": d.p99 if d else None,
                "error_pct": err,
                "server_sent": sv.mean if sv else None,
                "client_error_pct": client_err,
            }
        )
    delay = metrics.distribution(
        c - s for r in ok for c, s in zip(r.chunk_ns, r.server_chunk_ns or ())
    )
    first_late = [
        r.server_chunk_offsets_ns[0] / 1e9 - case.schedule.ttft_s for r in ok if r.server_chunk_ns
    ]
    send_lag, ttft = scen.metric("send_lag_s"), scen.metric("ttft_s")
    res.facts = {
        "requests_ok": scen.requests.ok,
        "requests_failed": scen.requests.failed,
        "output_tok_per_s": scen.output_tok_per_s,
        "offered_tok_per_s": case.concurrency / (truth["e2e_s"] / case.schedule.tokens)
        if case.concurrency
        else None,
        "client_cpu_us_per_token": scen.client_cpu_us_per_token,
        "client_delay_p50_ms": delay["p50"] / 1e6 if delay else None,
        "client_delay_p99_ms": delay["p99"] / 1e6 if delay else None,
        "server_first_token_late_p50_ms": 1e3 * statistics.median(first_late)
        if first_late
        else None,
        "send_lag_p99_ms": 1e3 * send_lag.p99 if send_lag else None,
        "ttft_p99_ms": 1e3 * ttft.p99 if ttft else None,
        "run_dir": str(run_dir),
    }
    return res


def run_calibration(
    cases=DEFAULT_CASES,
    *,
    workers: int = 1,
    out_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[CaseResult]:
    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="roofline-calibrate-"))
    results = []
    for i, case in enumerate(cases):
        if workers != case.workers and case.concurrency > 1:
            case = replace(case, workers=workers)
        results.append(run_case(case, root / f"case{i}", progress))
    return results


def table_rows(results: list[CaseResult]) -> tuple[list[str], list[list[str]], list[str]]:
    headers = ["case", "metric", "truth", "reported mean", "error", "server sent", "client error"]
    rows, notes = [], []
    for r in results:
        for row in r.rows:
            unit, scale = ("tok/s", 1.0) if row["key"] == "output_speed_tok_per_s" else ("ms", 1e3)

            def fmt(x: float | None, scale: float = scale, unit: str = unit) -> str:
                return "-" if x is None else f"{x * scale:.3f} {unit}"

            rows.append(
                [
                    r.case.name,
                    row["metric"],
                    fmt(row["truth"]),
                    fmt(row["reported"]),
                    num(row["error_pct"], "{:+.2f}%"),
                    fmt(row["server_sent"]),
                    num(row["client_error_pct"], "{:+.2f}%"),
                ]
            )
        f = r.facts
        sc = r.case.schedule
        notes.append(
            f"{r.case.name}: {plural(r.case.concurrency, 'stream')}, "
            f"TTFT {1e3 * sc.ttft_s:g} ms, {sc.tokens} tokens "
            f"{1e3 * sc.gap_s:g} ms apart, {sc.tokens_per_chunk} per chunk; "
            f"{f['requests_ok']} ok / {f['requests_failed']} failed; "
            f"{num(f['output_tok_per_s'], '{:.0f}')} tok/s reached; "
            f"client CPU {num(f['client_cpu_us_per_token'])} µs/token "
            f"({r.case.workers} client process{'es' if r.case.workers > 1 else ''}); "
            f"client delay per chunk "
            f"p50 {num(f['client_delay_p50_ms'], '{:.3f}')} ms, "
            f"p99 {num(f['client_delay_p99_ms'], '{:.3f}')} ms; "
            f"first token sent {num(f['server_first_token_late_p50_ms'], '{:.3f}')} ms "
            f"after schedule (p50, server "
            f"lateness and request transit); "
            f"send lag p99 {num(f['send_lag_p99_ms'], '{:.3f}')} ms"
        )
    return headers, rows, notes
