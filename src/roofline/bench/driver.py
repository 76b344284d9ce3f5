"""One benchmark run from start to summary: discover the server, warm up, measure every scenario
(in this process or several), and summarize what requests.jsonl holds.

Ctrl-C (or SIGTERM) cancels the requests in flight; they are written as `cancelled`, the summary
of what did end is still written, and the outcome says it was interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from roofline.bench import loadgen
from roofline.bench.api import (
    USAGE_LEVELS,
    USAGE_PER_CHUNK,
    choose_model,
    model_ids,
    parse_endpoint,
    roofline_info,
)
from roofline.bench.client import Client, FetchError, fetch
from roofline.bench.measure import measure_share
from roofline.bench.plan import BenchPlan, RequestSpec, shares
from roofline.bench.positions import AFTER_KEY
from roofline.bench.recorder import finish
from roofline.bench.records import Phase, RequestRecord
from roofline.bench.repeats import (
    GROUPED,
    REPEAT_WORDS,
    WARMUP_PROMPT,
    effective_policy,
    provenance_entry,
)
from roofline.bench.results import (
    PROVENANCE,
    SUMMARY_JSON,
    RequestLog,
    make_run_dir,
    read_requests,
    write_json,
)
from roofline.bench.scrape import PrefixCache, difference, read_metrics
from roofline.bench.summarize import summarize
from roofline.bench.summary import RunSummary, ScenarioSummary
from roofline.bench.tokens import load_tokenizer
from roofline.bench.verify import Greedy, Verify, run_verify
from roofline.bench.workers import run_workers
from roofline.bench.workloads import Job, jobs
from roofline.response_stats import ServerStats

if TYPE_CHECKING:
    from roofline.bench.engines.greedy import GreedyOutput


class Progress:
    """What the runner tells the user interface (the CLI draws a rich bar on stderr)."""

    def start(self, name: str, total: int | None, duration_s: float | None) -> None: ...
    def advance(self, ok: bool) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class Outcome:
    run_dir: Path
    summary: RunSummary
    interrupted: bool = False


async def discover(plan: BenchPlan) -> dict[str, Any]:
    """What the server says about itself: models, the roofline extension, version. Never raises."""
    ep = parse_endpoint(plan.url, api=plan.api, api_key=plan.api_key)
    info: dict[str, Any] = {"models": [], "roofline": None, "version": None, "error": None}
    try:
        status, _, body = await fetch(
            ep, f"{ep.base_path}/models", timeout_s=min(10.0, plan.timeout_s)
        )
        if status == 200:
            models_json = json.loads(body)
            info["models"] = model_ids(models_json)
            info["served"] = plan.served_model or choose_model(info["models"], plan.model)
            info["roofline"] = roofline_info(models_json, info["served"])
        else:
            info["error"] = f"GET {ep.base_path}/models answered HTTP {status}"
        status, headers, body = await fetch(
            ep, f"{ep.root_path}/version", timeout_s=min(5.0, plan.timeout_s)
        )
        if status == 200:
            info["version"] = body.decode("utf-8", "replace")[:200]
        info["server_header"] = headers.get(b"server", b"").decode("latin-1") or None
    except (FetchError, ValueError) as e:
        info["error"] = str(e)
    info.setdefault(
        "served", plan.served_model or plan.model or (info["models"][0] if info["models"] else None)
    )
    return info


def provenance(
    plan: BenchPlan, info: dict, spec: RequestSpec, origin_ns: int, ceiling_note: str | None
) -> dict:
    from roofline import __version__

    hw = None
    if plan.hardware == "local":
        from roofline.hardware.profile import load_local_profile

        p = load_local_profile()
        hw = (
            {
                k: p.get(k)
                for k in (
                    "name",
                    "cpu",
                    "threads",
                    "measured_at",
                    "bandwidth_bytes_per_s",
                    "best_read",
                )
            }
            if p
            else None
        )
    return {
        "roofline_version": __version__,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "origin_ns": origin_ns,
        "endpoint": spec.endpoint.url,
        "api": spec.endpoint.api,
        "served_model": spec.model,
        "model": plan.model,
        "hardware": plan.hardware,
        "hardware_profile": hw,
        "server": {
            "models": info.get("models"),
            "version": info.get("version"),
            "header": info.get("server_header"),
            "roofline": info.get("roofline"),
            "discovery_error": info.get("error"),
        },
        "arguments": plan.argv,
        "prompts": [{"id": p.id, "category": p.category} for p in plan.prompts],
        "reps": plan.reps,
        "max_tokens": plan.max_tokens,
        "temperature": plan.temperature,
        "ignore_eos": plan.ignore_eos,
        "usage_requested": plan.usage,
        "warmup": plan.warmup,
        "timeout_s": plan.timeout_s,
        "workers": plan.workers,
        "tokenizer": plan.tokenizer,
        "seed": plan.seed,
        "scenarios": [s.to_dict() for s in plan.scenarios],
        "ceiling_note": ceiling_note,
        "client": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "pid": os.getpid(),
        },
        **plan.provenance_extra,
    }


async def _warmup_request(
    client: Client,
    body: bytes,
    job: Job,
    rec_id: int,
    scenario: str,
    write: Callable,
    tokenizer: Any = None,
) -> RequestRecord:
    """Send one warm-up request and write it (phase warmup, rep -1): recorded, never measured."""
    rec = RequestRecord(
        id=rec_id, scenario=scenario, phase=Phase.WARMUP, prompt=job.prompt.id, rep=-1
    )
    rec.intended_ns = perf_counter_ns()
    try:
        await client.stream(rec, body)
    finally:
        write(finish(rec, tokenizer))
    return rec


async def negotiate_usage(
    client: Client,
    spec: RequestSpec,
    warm_prompts: list,
    write: Callable,
    next_id: Callable,
    scenario: str,
) -> str:
    """Ask for the richest token accounting the server accepts: fall back on 400/422 only."""
    job = next(jobs(warm_prompts, 1))
    for level in USAGE_LEVELS:
        rec = await _warmup_request(
            client, replace(spec, usage=level).body(job), job, next_id(), scenario, write
        )
        if rec.http_status not in (400, 422):
            return level
    return USAGE_PER_CHUNK


async def _scenario(
    plan: BenchPlan,
    spec: RequestSpec,
    scenario: loadgen.Scenario,
    log: RequestLog,
    progress: Progress,
    ids: list[int],
    tokenizer: Any,
    negotiate: bool,
    warm_prompts: list,
) -> tuple[RequestSpec, float, PrefixCache]:
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, main.cancel)

    def next_id() -> int:
        ids[0] += 1
        return ids[0] - 1

    def write(rec: RequestRecord) -> None:
        log.write(rec)
        ids[1] = max(ids[1], rec.id)
        if rec.phase != Phase.WARMUP:
            progress.advance(rec.ok)

    client = Client(spec.endpoint, timeout_s=plan.timeout_s)
    try:
        if negotiate:
            level = await negotiate_usage(client, spec, warm_prompts, write, next_id, scenario.name)
            spec = replace(spec, usage=level)
        for job in itertools.islice(jobs(warm_prompts, 1, cycle=True), plan.warmup):
            await _warmup_request(
                client, spec.body(job), job, next_id(), scenario.name, write, tokenizer
            )
    finally:
        await client.close()
    before = await read_metrics(spec.endpoint)  # the server's cache figures (bench.scrape)
    if plan.fresh_prompts:  # go on down the list where the last scenario stopped
        k = ids[0] % len(plan.prompts)
        plan = replace(plan, prompts=plan.prompts[k:] + plan.prompts[:k])
    parts = shares(scenario, plan.workers, plan)
    first_id = ids[0]
    if len(parts) == 1:
        cpu = await measure_share(
            plan, spec, scenario, parts[0], first_id, write, tokenizer=tokenizer
        )
    else:
        cpu, last_id = await run_workers(plan, spec, scenario, parts, first_id, log, progress)
        ids[1] = max(ids[1], last_id)
    ids[0] = max(ids[0], ids[1] + 1)
    return spec, cpu, difference(before, await read_metrics(spec.endpoint))


def run_bench(
    plan: BenchPlan,
    run_dir: Path,
    progress: Progress,
    *,
    ceiling: Any = None,
    info: dict | None = None,
    ceiling_note: str | None = None,
    settle_ceiling: Callable[[Any], tuple[Any, dict]] | None = None,
    greedy: Greedy | None = None,
    reference: Sequence[GreedyOutput] | None = None,
) -> Outcome:
    """Run every scenario, writing into run_dir; always returns the summary of what was measured.

    settle_ceiling(ceiling) -> (ceiling, provenance additions), called once the requests are done
    (not after an interrupt): the ceiling the run is finally held against, e.g. with this machine's
    bandwidth measured again after the run. With plan.verify, the greedy outputs under the run's
    load are then checked against each prompt alone (`bench.verify`), through `greedy` (a
    launcher's `greedy_outputs`; the OpenAI route when None), against `reference` (each prompt's
    output alone) when the caller has it."""
    origin_ns = perf_counter_ns()
    info = info if info is not None else asyncio.run(discover(plan))
    usage = USAGE_PER_CHUNK if plan.usage == "auto" else plan.usage
    spec = RequestSpec(
        parse_endpoint(plan.url, api=plan.api, api_key=plan.api_key),
        info.get("served") or "default",
        plan.max_tokens,
        plan.temperature,
        plan.ignore_eos,
        usage,
        plan.extra_body,
    )
    make_run_dir(run_dir)
    prov = provenance(plan, info, spec, origin_ns, ceiling_note)
    memory = getattr(ServerStats.from_json(info.get("roofline")), "cross_request_memory", None)
    policy = effective_policy(plan.repeat_policy, memory)
    prov["repeats"] = provenance_entry(plan.repeat_policy, policy, memory, plan.prompts)
    # warm-ups teach a remembering server nothing it is then measured on
    warm_prompts = [WARMUP_PROMPT] if policy in GROUPED else plan.prompts
    if memory:
        progress.note(
            "the server remembers across requests: a repeated prompt measures its memory "
            f"(--repeat-policy {policy}: {REPEAT_WORDS[policy]})"
        )
    write_json(run_dir / PROVENANCE, prov)
    tokenizer = load_tokenizer(plan.tokenizer) if plan.tokenizer else None
    log = RequestLog(run_dir / "requests.jsonl", origin_ns)
    cpu: dict[str, float] = {}
    cache: dict[str, PrefixCache] = {}
    interrupted = False
    ids = [0, -1]  # next id to give, highest id written
    try:
        for i, scenario in enumerate(plan.scenarios):
            progress.start(
                scenario.name,
                loadgen.planned_requests(scenario, len(plan.prompts), plan.reps),
                scenario.duration_s,
            )
            spec, cpu[scenario.name], cache[scenario.name] = asyncio.run(
                _scenario(
                    plan,
                    spec,
                    scenario,
                    log,
                    progress,
                    ids,
                    tokenizer,
                    negotiate=(i == 0 and plan.usage == "auto"),
                    warm_prompts=warm_prompts,
                )
            )
            prov["usage_used"] = spec.usage
        if info.get("roofline") is not None:  # a server with figures: as the run left them
            prov["server"][AFTER_KEY] = asyncio.run(discover(plan)).get("roofline")
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    finally:
        log.close()
        progress.stop()
    if settle_ceiling is not None and not interrupted:
        ceiling, settled = settle_ceiling(ceiling)
        prov.update(settled)
    checked = None
    if plan.verify and not interrupted:
        try:
            checked = run_verify(plan, spec.model, greedy, progress.note, reference)
        except KeyboardInterrupt:
            interrupted = True
    prov["interrupted"] = interrupted
    write_json(run_dir / PROVENANCE, prov)
    summary = summarize_run(
        run_dir, prov, ceiling=ceiling, slo_s=plan.slo_s, cpu_s=cpu, verify=checked, cache=cache
    )
    return Outcome(run_dir, summary, interrupted)


def summarize_run(
    run_dir: Path,
    prov: dict,
    *,
    ceiling: Any,
    slo_s: dict | None,
    cpu_s: dict[str, float] | None = None,
    verify: Verify | None = None,
    cache: dict[str, PrefixCache] | None = None,
) -> RunSummary:
    """The summary of what requests.jsonl holds, with this process's own figures (the client's
    CPU time, the server's cache figures, --verify), written to summary.json."""
    records, bad = read_requests(run_dir)
    summary = summarize(
        records, provenance=prov, ceiling=ceiling, slo_s=slo_s, unreadable_lines=bad
    )
    summary = replace(
        summary,
        scenarios=tuple(
            _with_run_figures(s, (cpu_s or {}).get(s.name), (cache or {}).get(s.name))
            for s in summary.scenarios
        ),
        verify=verify,
    )
    write_json(run_dir / SUMMARY_JSON, summary.to_json())
    return summary


def _with_run_figures(
    s: ScenarioSummary, cpu_s: float | None, cache: PrefixCache | None
) -> ScenarioSummary:
    """A scenario's summary with the client's CPU seconds (and per output token) and the server's
    cache figures, where this run has them."""
    if cpu_s is not None:
        per_token = 1e6 * cpu_s / s.output_tokens if s.output_tokens else None
        s = replace(s, client_cpu_s=cpu_s, client_cpu_us_per_token=per_token)
    return s if cache is None else replace(s, prefix_cache=cache)
