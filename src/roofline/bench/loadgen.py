"""How requests are launched: one stream, a closed loop of N streams, or open-loop arrivals.

- sequential: one request at a time (the B200 study's single-stream method);
- concurrency=N (closed loop): N slots, each sends its next request when its last one ends;
- rate=R/s (open loop): arrivals drawn in advance, due whatever came before (Poisson: exponential
  gaps of mean 1/R; gamma: shape b, scale 1/(R b), burstier when b < 1; constant: 1/R apart).

A request's *intended* send is its arrival (open) or when its slot freed (closed); TTFT and E2E
start there, so client waiting counts (also reported as send lag): no coordinated omission.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from time import perf_counter_ns

from roofline.bench.client import Client
from roofline.bench.metrics import NS_PER_S
from roofline.bench.records import RequestRecord
from roofline.bench.workloads import Job

ARRIVALS = ("poisson", "gamma", "constant")


class ScenarioKind(StrEnum):
    """How a scenario launches its requests."""

    SEQUENTIAL = "sequential"  # one at a time
    CONCURRENCY = "concurrency"  # a closed loop of N streams
    RATE = "rate"  # open-loop arrivals


@dataclass(frozen=True)
class Scenario:
    kind: ScenarioKind  # given as its value ("rate") too
    concurrency: int = 1
    rate_per_s: float = 0.0
    arrivals: str = "poisson"
    burstiness: float = 1.0  # gamma shape; 1 is Poisson
    # open loop: requests beyond it wait (the wait counts in TTFT)
    max_concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ScenarioKind(self.kind))  # ValueError for another

    @property
    def name(self) -> str:
        if self.kind == ScenarioKind.RATE:
            return f"rate={self.rate_per_s:g}/s"
        if self.kind == ScenarioKind.CONCURRENCY:
            return f"concurrency={self.concurrency}"
        return "sequential"

    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "kind": self.kind,
            "num_requests": self.num_requests,
            "duration_s": self.duration_s,
        }
        if self.kind == ScenarioKind.RATE:
            d.update(
                rate_per_s=self.rate_per_s,
                arrivals=self.arrivals,
                burstiness=self.burstiness,
                max_concurrency=self.max_concurrency,
            )
        else:
            d["concurrency"] = self.concurrency
        return d


def default_num_requests(s: Scenario, prompts: int, reps: int) -> int:
    """prompts x reps; at least 4 requests per stream (closed loop) or 20 s of arrivals (open
    loop)."""
    base = prompts * reps
    if s.kind == ScenarioKind.CONCURRENCY:
        return max(base, 4 * s.concurrency)
    if s.kind == ScenarioKind.RATE:
        return max(base, math.ceil(20 * s.rate_per_s))
    return base


def planned_requests(s: Scenario, prompts: int, reps: int) -> int | None:
    """The measured requests a scenario sends: its own count, else the default, or None when only
    its duration bounds it."""
    return s.num_requests or (None if s.duration_s else default_num_requests(s, prompts, reps))


def arrival_offsets_s(
    rate_per_s: float,
    arrivals: str,
    burstiness: float,
    *,
    count: int | None,
    duration_s: float | None,
    seed: int,
) -> list[float]:
    """Arrival times in seconds from the start: `count` of them, or all that fall inside
    duration_s."""
    if count is None and duration_s is None:
        raise ValueError("arrivals need a count or a duration")
    rng = random.Random(seed)
    out, t = [], 0.0
    while (count is None or len(out) < count) and (duration_s is None or t < duration_s):
        out.append(t)
        if arrivals == "constant":
            t += 1.0 / rate_per_s
        elif arrivals == "gamma":
            t += rng.gammavariate(burstiness, 1.0 / (rate_per_s * burstiness))
        else:
            t += rng.expovariate(rate_per_s)
    return out


Sink = Callable[[RequestRecord], None]
BodyFor = Callable[[Job], bytes]


async def _one(client: Client, rec: RequestRecord, body: bytes, sink: Sink) -> None:
    try:
        await client.stream(rec, body)
    finally:  # written also when cancelled: a request is never silently dropped
        sink(rec)


def _record(job_id: int, job: Job, scenario: Scenario, worker: int) -> RequestRecord:
    return RequestRecord(
        id=job_id, scenario=scenario.name, prompt=job.prompt.id, rep=job.rep, worker=worker
    )


async def closed_loop(
    client: Client,
    scenario: Scenario,
    streams: int,
    jobs: Iterator[tuple[int, Job]],
    body_for: BodyFor,
    sink: Sink,
    *,
    start_ns: int,
    worker: int = 0,
) -> None:
    """`streams` slots sending back to back until `jobs` runs out or the duration has passed."""
    end_ns = start_ns + int(scenario.duration_s * NS_PER_S) if scenario.duration_s else None

    async def slot() -> None:
        while True:
            now = perf_counter_ns()
            if end_ns is not None and now >= end_ns:
                return
            try:
                job_id, job = next(jobs)
            except StopIteration:
                return
            rec = _record(job_id, job, scenario, worker)
            rec.intended_ns = max(now, start_ns)
            if rec.intended_ns > now:
                await asyncio.sleep((rec.intended_ns - now) / NS_PER_S)
            await _one(client, rec, body_for(job), sink)

    await _gather_or_cancel([slot() for _ in range(streams)])


async def open_loop(
    client: Client,
    scenario: Scenario,
    arrivals: Iterable[tuple[float, int, Job]],
    body_for: BodyFor,
    sink: Sink,
    *,
    start_ns: int,
    worker: int = 0,
    max_concurrency: int | None = None,
) -> None:
    """Send each job at start + its arrival offset; at most max_concurrency in flight (others
    wait)."""
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    tasks: list[asyncio.Task] = []

    async def gated(rec: RequestRecord, job: Job) -> None:
        if gate is None:
            await _one(client, rec, body_for(job), sink)
            return
        try:
            await gate.acquire()
        except asyncio.CancelledError:
            rec.error_kind, rec.error = "cancelled", "cancelled while waiting for a free slot"
            rec.end_ns = perf_counter_ns()
            sink(rec)
            raise
        try:
            await _one(client, rec, body_for(job), sink)
        finally:
            gate.release()

    try:
        for offset_s, job_id, job in arrivals:
            due = start_ns + int(offset_s * NS_PER_S)
            delay = (due - perf_counter_ns()) / NS_PER_S
            if delay > 0:
                await asyncio.sleep(delay)
            rec = _record(job_id, job, scenario, worker)
            rec.intended_ns = due
            tasks.append(asyncio.ensure_future(gated(rec, job)))
            if len(tasks) % 256 == 0:  # keep the list short on long runs
                tasks = [t for t in tasks if not t.done()]
        await _gather_or_cancel(tasks)
    except asyncio.CancelledError:
        await _cancel_all(tasks)
        raise


async def _gather_or_cancel(aws: list) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        await _cancel_all(tasks)
        raise


async def _cancel_all(tasks: list[asyncio.Future]) -> None:
    """Cancel the tasks and wait until each has ended (and written its record)."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def numbered(
    jobs: Iterator[Job], first_id: int, *, share: tuple[int, int] = (0, 1), limit: int | None = None
) -> Iterator[tuple[int, Job]]:
    """(id, job) pairs, ids counting from first_id; a worker's share takes every count-th job."""
    index, count = share
    pairs = zip(itertools.count(first_id), jobs)
    if limit is not None:
        pairs = itertools.islice(pairs, limit)
    return itertools.islice(pairs, index, None, count)
