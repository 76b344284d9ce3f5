"""What one benchmark run will do, as plain picklable data (worker processes get a copy)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from roofline.bench.api import USAGE_PER_CHUNK, Endpoint, request_body
from roofline.bench.loadgen import (
    Scenario,
    ScenarioKind,
    arrival_offsets_s,
    numbered,
    planned_requests,
)
from roofline.bench.workloads import Job, Prompt, jobs


@dataclass(frozen=True)
class RequestSpec:
    """Everything but the prompt that goes into a request body."""

    endpoint: Endpoint
    model: str
    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = False
    usage: str = USAGE_PER_CHUNK
    extra: dict | None = None

    def body(self, job: Job) -> bytes:
        p = job.prompt
        return request_body(
            self.endpoint,
            model=self.model,
            prompt=p.prompt,
            messages=p.messages,
            max_tokens=p.max_tokens or self.max_tokens,
            temperature=self.temperature,
            ignore_eos=self.ignore_eos,
            usage=self.usage,
            extra=self.extra,
        )


@dataclass
class BenchPlan:
    """One benchmark run (built from the CLI's BenchOptions by bench.options.plan_from_options)."""

    url: str
    prompts: list[Prompt]
    scenarios: list[Scenario]
    api: str | None = None
    api_key: str | None = None
    served_model: str | None = None  # the name to send; discovered from /v1/models when None
    model: str | None = None  # the model the ceiling is computed for
    hardware: str | None = None
    gpus: int = 1
    reps: int = 1
    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = False
    usage: str = "auto"  # auto | per-chunk | final | none
    warmup: int = 1
    timeout_s: float = 600.0
    workers: int = 1
    tokenizer: str | None = None
    seed: int = 0
    slo_s: dict[str, float] | None = None
    label: str = "bench"
    extra_body: dict | None = None
    verify: bool = False  # after the run: greedy outputs under its load against each prompt alone
    repeat_policy: str = "auto"  # how repeated identical prompts count (bench.repeats)
    # each scenario goes on down the prompt list where the last stopped (bench.workloads.Workload)
    fresh_prompts: bool = False
    argv: list[str] = field(default_factory=list)
    provenance_extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Share:
    """One process's part of a scenario's measured requests."""

    index: int = 0
    count: int = 1
    streams: int = 1  # closed loop: slots in this process; open loop: connections to pre-open

    def closed_jobs(
        self, plan: BenchPlan, scenario: Scenario, first_id: int
    ) -> Iterator[tuple[int, Job]]:
        limit = planned_requests(scenario, len(plan.prompts), plan.reps)
        cycle = scenario.duration_s is not None or (
            limit is not None and limit > len(plan.prompts) * plan.reps
        )
        return numbered(
            jobs(plan.prompts, plan.reps, cycle=cycle),
            first_id,
            share=(self.index, self.count),
            limit=limit,
        )

    def arrivals(
        self, plan: BenchPlan, scenario: Scenario, first_id: int
    ) -> list[tuple[float, int, Job]]:
        offsets = open_loop_offsets_s(plan, scenario)
        all_jobs = zip(
            offsets, itertools.count(first_id), jobs(plan.prompts, plan.reps, cycle=True)
        )
        return [a for i, a in enumerate(all_jobs) if i % self.count == self.index]

    def max_in_flight(self, scenario: Scenario) -> int | None:
        """Open loop: this process's part of --max-concurrency (None: no limit)."""
        if not scenario.max_concurrency:
            return None
        return max(1, _part(scenario.max_concurrency, self.index, self.count))


def _part(total: int, index: int, count: int) -> int:
    """Part `index` of `total` dealt as evenly as it goes over `count` parts."""
    return total // count + (index < total % count)


def open_loop_offsets_s(plan: BenchPlan, scenario: Scenario) -> list[float]:
    return arrival_offsets_s(
        scenario.rate_per_s,
        scenario.arrivals,
        scenario.burstiness,
        count=planned_requests(scenario, len(plan.prompts), plan.reps),
        duration_s=scenario.duration_s,
        seed=plan.seed,
    )


def shares(scenario: Scenario, workers: int, plan: BenchPlan) -> list[Share]:
    """Split a scenario over processes: streams as evenly as they go, requests dealt round-robin."""
    if scenario.kind == ScenarioKind.RATE:
        n = len(open_loop_offsets_s(plan, scenario))
        cap = scenario.max_concurrency or 64
        workers = max(1, min(workers, n))
        return [Share(i, workers, max(1, min(cap // workers, 64))) for i in range(workers)]
    streams = scenario.concurrency if scenario.kind == ScenarioKind.CONCURRENCY else 1
    workers = max(1, min(workers, streams))
    return [Share(i, workers, _part(streams, i, workers)) for i in range(workers)]
