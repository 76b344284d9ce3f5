"""One process's share of a scenario's measured requests: open its connections, wait for the
common start, drive the load (closed loop or arrivals), record every request.

The driver runs one share in its own process; `workers` runs several, one per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from roofline.bench import loadgen
from roofline.bench.client import Client
from roofline.bench.plan import BenchPlan, RequestSpec, Share
from roofline.bench.recorder import Recorder
from roofline.bench.records import RequestRecord


async def measure_share(
    plan: BenchPlan,
    spec: RequestSpec,
    scenario: loadgen.Scenario,
    share: Share,
    first_id: int,
    sink: Callable[[RequestRecord], None],
    *,
    worker: int = 0,
    tokenizer: Any = None,
    start_at: Callable[[], Any] | None = None,
) -> float:
    """Run one process's share of a scenario's measured requests; return the CPU seconds it took.

    Connections are opened first; `start_at`, when given, is awaited for the common start time
    (worker processes start together); otherwise measuring starts at once."""
    client = Client(spec.endpoint, timeout_s=plan.timeout_s)
    recorder = Recorder(sink, tokenizer)
    try:
        await client.open(share.streams)
        start_ns = await start_at() if start_at else perf_counter_ns()
        cpu0 = time.process_time()
        recorder.start()
        if scenario.kind == loadgen.ScenarioKind.RATE:
            await loadgen.open_loop(
                client,
                scenario,
                share.arrivals(plan, scenario, first_id),
                spec.body,
                recorder.submit,
                start_ns=start_ns,
                worker=worker,
                max_concurrency=share.max_in_flight(scenario),
            )
        else:
            await loadgen.closed_loop(
                client,
                scenario,
                share.streams,
                share.closed_jobs(plan, scenario, first_id),
                spec.body,
                recorder.submit,
                start_ns=start_ns,
                worker=worker,
            )
        await recorder.close()  # decoding what is left counts in the CPU time
        return time.process_time() - cpu0
    finally:
        await recorder.close()  # on cancellation too: what ended (or was cancelled) is written
        await client.close()
