"""What a trial asks of a running engine: its greedy outputs and bench runs of the objective
(`measure_served`: both, every request carrying the trial's live knobs).

At one stream, from an engine whose stream carries token ids, the first repetition is the greedy
pass: its requests are temperature 0, one at a time, so their ids are each prompt's greedy output
alone, and a separate pass would decode the same tokens again. Not for a configuration whose
requests teach the server speed (the embedded engine's draft statistics): its greedy pass is also
the warm-up; timed cold, a proposer's first round measured up to a quarter slower than its next.

Both talk to the engine over HTTP; the bench run goes through `in_thread` so that bench never takes
over the tuner's signal handlers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofline.bench.driver import Progress
from roofline.bench.records import Phase, RequestRecord
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
    warmup: int = 0,
) -> tuple[RunSummary, list[RequestRecord]]:
    """Bench the running engine with the objective's scenario: (its summary, its request lines).
    alone: the trial's greedy outputs, one prompt at a time: the reference its outputs under the
    objective's load are checked against (asked for again when None).

    first_time: the server remembers across requests and has seen none of the prompts (the caller
    runs this before the greedy pass): each prompt is sent once, after a warm-up with a prompt not
    in the set (bench's --repeat-policy fresh), and the lines returned are first-time prompts only
    (a prompt whose text an earlier one already had is left out): the first pass of each prompt is
    what the objective measures. One repetition leaves the trial without a spread. body: fields
    every request carries (the trial's live knobs), the verify pass's too. probes: runs back to
    back share the bandwidth probe between them (`trial_probes`). warmup: requests sent first,
    not measured (a server no greedy pass has warmed up)."""
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
        warmup=1 if first_time else warmup,
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
    records, _ = read_requests(outcome.run_dir)
    if first_time:
        again = repeated_ids(records, same_as(settings.prompts))
        records = [r for r in records if r.id not in again]
    return outcome.summary, records


def bench_rep(
    once: TrialSettings,
    url: str,
    folder: Path,
    rep: int,
    progress: Progress,
    outputs: Sequence[Any],
    body: dict[str, Any] | None,
    probes: ProbeChain,
    warmup: int = 0,
) -> tuple[RunSummary, list[RequestRecord]]:
    """Repetitions from `rep` on (`once`: settings of those repetitions) as one bench run in
    folder/bench-<rep>, its lines' `rep` counted from it so units pair across runs."""
    from roofline.tune.records import bench_folder

    summary, records = bench_run(
        once,
        url,
        bench_folder(folder, rep),
        progress,
        outputs,
        body=body,
        probes=probes,
        warmup=warmup,
    )
    return summary, [dataclasses.replace(r, rep=rep + r.rep) for r in records]


def trial_probes(settings: TrialSettings) -> ProbeChain:
    """The bandwidth probes of bench runs a trial or a block runs back to back (the study's probe
    buffer, when it keeps one)."""
    from roofline.hardware.window import ProbeChain

    return ProbeChain(by="the run window of a tune trial", buffer=settings.probe_buffer)


def ids_in_stream(settings: TrialSettings, config: Mapping[str, Any], warm: bool = False) -> bool:
    """Whether a bench run's first repetition can be the greedy pass of a configuration: the
    objective keeps one request in flight (its requests are greedy outputs alone), the engine
    streams token ids, and the configuration's requests teach the server nothing that speeds up
    later ones or the server ran it before (`warm`); else the greedy pass is also the warm-up
    the timed runs need."""
    from roofline.bench.verify import scenario_streams

    launcher = settings.launcher
    scenario = settings.objective.scenario(settings.objective_settings)
    one = scenario_streams(scenario, 1) == 1
    return one and launcher.stream_token_ids and (warm or not launcher.learns_speed(config))


def with_ids(body: dict[str, Any] | None) -> dict[str, Any]:
    """A request body's extra fields, token ids asked for."""
    return {**(body or {}), "return_token_ids": True}


def stream_outputs(
    records: Sequence[RequestRecord], prompts: Sequence[Any]
) -> list[GreedyOutput] | None:
    """The greedy outputs in a single-stream run's requests: per prompt, in order, its first
    measured request's text and token ids; None unless every prompt has one that succeeded with
    ids."""
    from roofline.bench.engines.greedy import GreedyOutput, token_ids_of

    first: dict[str, RequestRecord] = {}
    for r in records:
        if r.phase == Phase.MEASURED:
            first.setdefault(r.prompt, r)
    out = []
    for p in prompts:
        r = first.get(p.id)
        ids = token_ids_of(r.token_ids) if r and r.ok else None
        if ids is None:
            return None
        out.append(GreedyOutput(p.id, r.text, ids, token_ids_of(r.prompt_token_ids)))
    return out


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
    config: Mapping[str, Any] | None = None,
) -> tuple[list[Any], list[RunSummary], list[RequestRecord], int]:
    """The greedy outputs and the bench runs on a ready server, every request carrying the
    trial's live fields: (greedy outputs, bench summaries, bench request lines, repetitions run
    when it stopped early, else 0). The first repetition is the greedy pass where it can be
    (`ids_in_stream`); with `report` each repetition is a bench run of its own (`more_reps`).
    may_win(greedy outputs) False (inexact, not allowed to win): one repetition is measured."""
    shown = " ".join(served.argv)
    if not served.launched:
        shown = f"running engine ({shown}), per request: {json.dumps(dict(served.body))}"
    progress.note(f"trial {number}: engine ready ({shown})")
    info = discovered(served.url, settings)
    body = dict(served.body) or None
    if first_time_only(settings, info):  # timed first, while every prompt is new to it
        summary, lines = bench_run(
            settings,
            served.url,
            folder / "bench",
            progress,
            first_time=True,
            body=body,
            probes=trial_probes(settings),
        )
        outputs = greedy_outputs(settings.launcher, served.url, settings, info, body)
        return outputs, [summary], lines, 0
    probes = trial_probes(settings)
    runs: list[tuple[RunSummary, list[RequestRecord]]] = []
    if ids_in_stream(settings, config or {}, served.warm):  # the first repetition is greedy
        once = dataclasses.replace(settings, reps=1)
        warm = int(served.launched)  # the engine's first request is not measured
        runs.append(
            bench_rep(once, served.url, folder, 0, progress, None, with_ids(body), probes, warm)
        )
        outputs = stream_outputs(runs[0][1], settings.prompts)
    else:
        outputs = None
    if outputs is None:
        outputs = greedy_outputs(settings.launcher, served.url, settings, info, body)
    reps = settings.reps
    if reps > 1 and may_win is not None and not may_win(outputs):
        progress.note(f"trial {number}: outputs differ from the baseline's: one repetition")
        reps = 1
    run = dataclasses.replace(settings, reps=reps)
    runs += more_reps(run, served.url, folder, progress, outputs, body, report, probes, runs)
    ran = len(runs) if report is not None else reps  # with the pruner a run per repetition
    return (
        outputs,
        [summary for summary, _ in runs],
        [ln for _, got in runs for ln in got],
        (ran if ran < settings.reps else 0),
    )


def more_reps(
    settings: TrialSettings,
    url: str,
    folder: Path,
    progress: Progress,
    outputs: Sequence[Any],
    body: dict[str, Any] | None,
    report: Callable[[int, float], bool] | None,
    probes: ProbeChain,
    runs: Sequence[tuple[RunSummary, list[RequestRecord]]],
) -> list[tuple[RunSummary, list[RequestRecord]]]:
    """The repetitions after `runs` (those run already): with `report` (the pruner) one bench run
    each (`bench-<rep>`), the pruner told the objective so far after each but the last, and none
    after it says stop; else one run of them all."""
    from roofline.tune.objectives import measure

    done, left = len(runs), settings.reps - len(runs)
    if left <= 0:
        return []
    if report is None:
        rest = dataclasses.replace(settings, reps=left)
        return [bench_rep(rest, url, folder, done, progress, outputs, body, probes)]
    once = dataclasses.replace(settings, reps=1)
    out: list[tuple[RunSummary, list[RequestRecord]]] = []
    lines = [ln for _, got in runs for ln in got]
    for rep in range(done, settings.reps):
        if rep > 0:
            value = measure(settings.objective, lines, settings.objective_settings).value
            if value is not None and report(rep - 1, value):
                progress.note(f"pruned after {rep} of {settings.reps} repetitions: {value:.4g}")
                break
        out.append(bench_rep(once, url, folder, rep, progress, outputs, body, probes))
        lines += out[-1][1]
    return out


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
