"""Several client processes for one scenario, when one event loop cannot keep up (`--workers`).

Each worker opens its own connections, reports ready, and all start at one perf_counter_ns time
chosen by the parent (CLOCK_MONOTONIC is shared by the machine's processes, so every record stays
on one clock). Workers append to the same requests.jsonl (O_APPEND, one write per line) and tell
the parent about each finished request for the progress bar; at the end each reports its CPU time.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import signal
import time
from time import perf_counter_ns
from typing import Any

from roofline.bench.loadgen import Scenario
from roofline.bench.measure import measure_share
from roofline.bench.plan import BenchPlan, RequestSpec, Share
from roofline.bench.results import RequestLog

_START_MARGIN_NS = 50_000_000  # after the last worker is ready


def _worker_main(
    plan: BenchPlan,
    spec: RequestSpec,
    scenario: Scenario,
    share: Share,
    first_id: int,
    log_path: str,
    origin_ns: int,
    q: Any,
    start: Any,
    go: Any,
) -> None:
    from roofline.bench.launch import die_with_parent
    from roofline.bench.tokens import load_tokenizer

    die_with_parent()
    # the parent decides when to stop (it sends SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tokenizer = load_tokenizer(plan.tokenizer) if plan.tokenizer else None
    log = RequestLog(log_path, origin_ns)

    def sink(rec) -> None:
        log.write(rec)
        q.put(("done", rec.ok, rec.id))

    async def start_at() -> int:
        q.put(("ready", share.index))
        while not go.is_set():
            await asyncio.sleep(0.002)
        return start.value

    async def main() -> float:
        task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await measure_share(
            plan,
            spec,
            scenario,
            share,
            first_id,
            sink,
            worker=share.index,
            tokenizer=tokenizer,
            start_at=start_at,
        )

    # CPU seconds as one process counts them (measure_share: from the common start to the last
    # record); only a cancelled share falls back to the whole run's, set-up included.
    cpu0 = time.process_time()
    cpu = None
    try:
        cpu = asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass
    finally:
        log.close()
        q.put(("cpu", share.index, cpu if cpu is not None else time.process_time() - cpu0))


async def run_workers(
    plan: BenchPlan,
    spec: RequestSpec,
    scenario: Scenario,
    parts: list[Share],
    first_id: int,
    log: RequestLog,
    progress: Any,
) -> tuple[float, int]:
    """Run the shares in worker processes; (their total CPU seconds, the highest request id)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = ctx.Value("q", 0)
    go = ctx.Event()
    log_path = str(log.path)
    procs = [
        ctx.Process(
            target=_worker_main,
            daemon=True,
            args=(plan, spec, scenario, p, first_id, log_path, log.origin_ns, q, start, go),
        )
        for p in parts
    ]
    for p in procs:
        p.start()
    ready, cpu, last_id, reported = 0, 0.0, -1, 0
    try:
        while reported < len(procs):
            try:
                msg = q.get_nowait()
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and q.empty():
                    break
                await asyncio.sleep(0.02)
                continue
            if msg[0] == "ready":
                ready += 1
                if ready == len(procs):
                    start.value = perf_counter_ns() + _START_MARGIN_NS
                    go.set()
            elif msg[0] == "done":
                progress.advance(msg[1])
                last_id = max(last_id, msg[2])
            elif msg[0] == "cpu":
                cpu += msg[2]
                reported += 1
    except asyncio.CancelledError:
        for p in procs:
            if p.is_alive():
                # SIGTERM: the worker cancels its requests and writes them as cancelled
                p.terminate()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        raise
    for p in procs:
        p.join(10)
    return cpu, last_id
