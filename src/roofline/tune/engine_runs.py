"""What a trial asks of a running engine: its greedy outputs, then a bench run of the objective
(`measure_served`: both, every request carrying the trial's live knobs).

Both talk to the engine over HTTP; the bench run goes through `in_thread` so that bench never takes
over the tuner's signal handlers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofline.bench.driver import Progress
from roofline.bench.summary import RunSummary

if TYPE_CHECKING:
    from roofline.bench.engines.greedy import GreedyOutput
    from roofline.hardware.window import ProbeChain
    from roofline.tune.servers import Served
    from roofline.tune.settings import TrialSettings


def discovered(url: str, settings: TrialSettings) -> dict[str, Any]:
    """What the trial's server says about itself (bench's discovery: served name, its stats)."""
    from roofline.bench.driver import discover
    from roofline.bench.plan import BenchPlan

    return asyncio.run(
        discover(
            BenchPlan(
                url=url,
                prompts=list(settings.prompts),
                scenarios=[],
                model=settings.ceiling_model,
                timeout_s=30.0,
            )
        )
    )


def first_time_only(settings: TrialSettings, info: dict[str, Any]) -> bool:
    """The trial's timed requests must be prompts its server has not seen: it says it remembers
    across requests (a shared draft trie) and the policy is fresh."""
    from roofline.response_stats import ServerStats

    stats = ServerStats.from_json(info.get("roofline"))
    return settings.repeat_policy == "fresh" and bool(stats and stats.cross_request_memory)


def greedy_outputs(
    launcher: Any,
    url: str,
    settings: TrialSettings,
    info: dict[str, Any] | None = None,
    body: dict[str, Any] | None = None,
) -> list[Any]:
    """One greedy output per prompt, in order: the exactness evidence, and the engine's warm-up.
    info: the server's discovery, when the caller has it; body: fields every request carries (the
    trial's live knobs)."""
    info = info if info is not None else discovered(url, settings)
    timeout = settings.request_timeout_s * max(1, len(settings.prompts))
    greedy = greedy_with(launcher, body)

    async def go() -> list[Any]:
        return await asyncio.wait_for(
            greedy(url, info.get("served"), list(settings.prompts), settings.max_tokens), timeout
        )

    outputs = asyncio.run(go())
    if len(outputs) != len(settings.prompts):
        raise RuntimeError(
            f"the engine gave {len(outputs)} greedy outputs for {len(settings.prompts)} prompts"
        )
    return outputs


def bench_run(
    settings: TrialSettings,
    url: str,
    out: Path,
    progress: Progress,
    alone: Sequence[GreedyOutput] | None = None,
    *,
    first_time: bool = False,
    body: dict[str, Any] | None = None,
    probes: ProbeChain | None = None,
) -> tuple[RunSummary, list[dict]]:
    """Bench the running engine with the objective's scenario: (its summary, its request lines).
    alone: the trial's greedy outputs, one prompt at a time: the reference its outputs under the
    objective's load are checked against (asked for again when None).

    first_time: the server remembers across requests and has seen none of the prompts (the caller
    runs this before the greedy pass): each prompt is sent once, after a warm-up with a prompt not
    in the set (bench's --repeat-policy fresh), and the lines returned are first-time prompts only
    (a prompt whose text an earlier one already had is left out): the first pass of each prompt is
    what the objective measures. One repetition leaves the trial without a spread. body: fields
    every request carries (the trial's live knobs), the verify pass's too. probes: runs back to
    back share the bandwidth probe between them (`trial_probes`)."""
    from roofline.bench.plan import BenchPlan
    from roofline.bench.repeats import repeated_ids, same_as
    from roofline.bench.results import read_requests
    from roofline.bench.session import run_session

    os_ = settings.objective_settings
    # "local": bench holds the trial against the read bandwidth measured right before and after it
    hardware = settings.hardware
    plan = BenchPlan(
        url=url,
        prompts=list(settings.prompts),
        scenarios=[settings.objective.scenario(os_)],
        model=settings.ceiling_model,
        hardware=hardware,
        reps=1 if first_time else settings.reps,
        max_tokens=settings.max_tokens,
        temperature=0.0,
        warmup=1 if first_time else 0,  # else the greedy pass warmed it up
        repeat_policy="fresh" if first_time else "auto",
        usage=settings.usage,
        timeout_s=settings.request_timeout_s,
        slo_s=dict(os_.slo_s) if os_.slo_s else None,
        label="tune-trial",
        verify=True,  # greedy outputs under the objective's load too (nothing sent at 1 stream)
        extra_body=body,
    )
    # a local model file gives the file's bytes per token when the server does not report them
    outcome = in_thread(
        lambda: run_session(
            plan,
            out,
            progress,
            model_file=settings.model,
            greedy=greedy_with(settings.launcher, body),
            reference=alone,
            measure_bandwidth=probes.for_run() if probes is not None else None,
        )
    )
    if outcome.interrupted:
        raise KeyboardInterrupt
    lines, _ = read_requests(outcome.run_dir)
    if first_time:
        again = repeated_ids(lines, same_as(settings.prompts))
        lines = [ln for ln in lines if ln["id"] not in again]
    return outcome.summary, lines


def bench_rep(
    once: TrialSettings,
    url: str,
    folder: Path,
    rep: int,
    progress: Progress,
    outputs: Sequence[Any],
    body: dict[str, Any] | None,
    probes: ProbeChain,
) -> tuple[RunSummary, list[dict]]:
    """Repetition `rep` as a bench run of its own (`once`: settings of one repetition) in
    folder/bench-<rep>, its lines' `rep` set to it so units pair across runs."""
    summary, lines = bench_run(
        once, url, folder / f"bench-{rep}", progress, outputs, body=body, probes=probes
    )
    return summary, [{**ln, "rep": rep} for ln in lines]


def trial_probes() -> ProbeChain:
    """The bandwidth probes of bench runs a trial or a block runs back to back."""
    from roofline.hardware.window import ProbeChain

    return ProbeChain(by="the run window of a tune trial")


def greedy_with(launcher: Any, body: dict[str, Any] | None) -> Any:
    """The launcher's greedy_outputs, its requests carrying `body` when given."""
    if not body:
        return launcher.greedy_outputs
    return functools.partial(launcher.greedy_outputs, extra_body=body)


def measure_served(
    settings: TrialSettings,
    number: int,
    served: Served,
    folder: Path,
    progress: Progress,
    report: Callable[[int, float], bool] | None = None,
    may_win: Callable[[list[Any]], bool] | None = None,
) -> tuple[list[Any], list[RunSummary], list[dict], int]:
    """The greedy pass and the bench run on a ready server, every request carrying the trial's
    live fields: (greedy outputs, bench summaries, bench request lines, repetitions run when it
    stopped early, else 0). With `report` the repetitions run one bench run each (`by_rep`).
    may_win(greedy outputs) False (inexact, not allowed to win): one repetition is measured."""
    shown = " ".join(served.argv)
    if not served.launched:
        shown = f"running engine ({shown}), per request: {json.dumps(dict(served.body))}"
    progress.note(f"trial {number}: engine ready ({shown})")
    info = discovered(served.url, settings)
    body = dict(served.body) or None
    if first_time_only(settings, info):  # timed first, while every prompt is new to it
        summary, lines = bench_run(
            settings, served.url, folder / "bench", progress, first_time=True, body=body
        )
        outputs = greedy_outputs(settings.launcher, served.url, settings, info, body)
        return outputs, [summary], lines, 0
    outputs = greedy_outputs(settings.launcher, served.url, settings, info, body)
    once = settings.reps > 1 and may_win is not None and not may_win(outputs)
    if once:
        progress.note(f"trial {number}: outputs differ from the baseline's: one repetition")
    elif report is not None and settings.reps > 1:
        return (outputs, *by_rep(settings, served.url, folder, progress, outputs, body, report))
    run = dataclasses.replace(settings, reps=1) if once else settings
    summary, lines = bench_run(
        run, served.url, folder / "bench", progress, outputs, body=body, probes=trial_probes()
    )
    return outputs, [summary], lines, int(once)


def by_rep(
    settings: TrialSettings,
    url: str,
    folder: Path,
    progress: Progress,
    outputs: Sequence[Any],
    body: dict[str, Any] | None,
    report: Callable[[int, float], bool],
) -> tuple[list[RunSummary], list[dict], int]:
    """One bench run per repetition (`bench-<rep>`, its lines' `rep` the repetition), the pruner
    told the objective so far after each but the last: (summaries, lines, repetitions run when
    it said stop, else 0)."""
    from roofline.tune.objectives import measure

    once, probes = dataclasses.replace(settings, reps=1), trial_probes()
    summaries: list[RunSummary] = []
    lines: list[dict] = []
    for rep in range(settings.reps):
        summary, got = bench_rep(once, url, folder, rep, progress, outputs, body, probes)
        summaries.append(summary)
        lines += got
        value = measure(settings.objective, lines, settings.objective_settings).value
        if rep < settings.reps - 1 and value is not None and report(rep, value):
            progress.note(f"pruned after {rep + 1} of {settings.reps} repetitions: {value:.4g}")
            return summaries, lines, rep + 1
    return summaries, lines, 0


def in_thread(fn: Any) -> Any:
    """fn() run in a thread, waited for here. In the main thread bench would take SIGTERM over for
    its event loop and leave it at the default when the loop closes, so a SIGTERM a moment later
    would kill the tuner outright (the study not told). In a thread bench leaves signals alone, and
    Ctrl-C or SIGTERM interrupt this wait at once: the caller stops the engine, and the thread's
    requests fail fast."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e

    t = threading.Thread(target=run, name="tune-bench", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.2)
    if "error" in box:
        raise box["error"]
    return box["value"]
