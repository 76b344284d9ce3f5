"""One trial: start the engine with one configuration, measure it, check it is exact, stop it.

    start_engine(config)     the launcher's argv, its own process group, /health; or the server
                             an earlier trial started, when they differ only in live knobs
                             (tune.servers): then every request below carries them
    greedy outputs           temperature 0, one prompt at a time: the exactness evidence; the
                             first repetition of the bench run below when it is one stream,
                             the engine streams token ids and the configuration teaches it no
                             speed (then a warm-up request comes first on a server just
                             started), else a pass of their own before it, the warm-up
    roofline bench           the objective's workload, in bench's own run folders; when the server
                             remembers across requests (a shared draft trie) and the policy is
                             fresh, this comes first, each prompt once: the timed requests are
                             prompts it has not seen (tune.engine_runs.bench_run)
    exactness gate           the greedy outputs against the baseline's
    stop the engine          whatever happened (no orphan processes); a server later trials
                             may share stops when the study ends

Outputs that differ from the baseline's make the trial *inexact*: recorded with its speed and the
first divergence, never best without --allow-inexact. An engine that does not start, crashes, hangs
or answers nonsense makes it *failed*, with its log tail; the study goes on.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from roofline.bench.driver import Progress
from roofline.bench.engines.greedy import Exactness
from roofline.bench.records import RequestRecord
from roofline.bench.summary import RunSummary
from roofline.tune.engine_runs import measure_served
from roofline.tune.objectives import measure
from roofline.tune.records import Machine, TrialMetrics
from roofline.tune.servers import Servers
from roofline.tune.settings import TrialSettings
from roofline.tune.slots import Slot, TrialStatus
from roofline.tune.trial_result import TrialResult


def machine() -> Machine:
    """Where this trial runs: host name, process, and this machine's measured read bandwidth if
    known."""
    try:
        from roofline.hardware.profile import load_local_profile

        p = load_local_profile()
    except Exception:  # a damaged profile must not fail a trial
        p = None
    if not p:
        return Machine(socket.gethostname(), os.getpid())
    return Machine(
        socket.gethostname(),
        os.getpid(),
        ((p.get("bandwidth_bytes_per_s") or {}).get("read") or {}).get("median"),
        p.get("cpu"),
    )


def skipped(number: int, slot: Slot, reason: str, objective: str) -> TrialResult:
    return TrialResult(
        number, slot, {}, TrialStatus.SKIPPED, objective, error=reason, machine=machine()
    )


def run_trial(
    settings: TrialSettings,
    number: int,
    slot: Slot,
    config: Mapping[str, Any],
    folder: Path,
    baseline: Sequence[Any] | None,
    progress: Progress,
    *,
    run_dir: Path | None = None,
    servers: Servers | None = None,
    report: Callable[[int, float], bool] | None = None,
) -> tuple[TrialResult, list[Any] | None]:
    """Run one configuration; (its result, its greedy outputs or None when it failed).

    With `baseline` None this trial is the baseline: its outputs become the reference. `servers`:
    the study's engine, kept across trials that can share it (tune.servers); None: a server of
    this trial's own, stopped at its end. `report(rep, value so far)`: the pruner, told after each
    repetition but the last; True stops the trial there (pruned). KeyboardInterrupt passes through
    after the engine is stopped; every other error makes a failed result."""

    if servers is None:
        with Servers(settings) as own:
            return run_trial(
                settings,
                number,
                slot,
                config,
                folder,
                baseline,
                progress,
                run_dir=run_dir,
                servers=own,
                report=report,
            )
    t0 = time.monotonic()
    common = trial_common(settings, number, slot, config, folder, run_dir)
    log_path = folder / "server.log"
    argv: list[str] = []
    try:
        served = servers.serve(config, log_path, lambda s: argv.extend(s.argv))
        log_path = served.log_path
        argv[:] = served.command or served.argv
        common.update(live=dict(served.body), launched=served.launched)
        try:
            outputs, summaries, lines, pruned = measure_served(
                settings,
                number,
                served,
                folder,
                progress,
                report,
                exact_gate(settings, baseline),
                config,
            )
        except BaseException as e:
            servers.failed(e)
            raise
        servers.done()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a crash, a hang past its timeout, nonsense answers: the study goes on
        return failure(e, common, log_path, argv, t0), None
    result = measured_result(
        settings, common, folder, baseline, outputs, summaries, lines, log_path, argv, t0
    )
    return replace(result, pruned_after=pruned), outputs


def exact_gate(settings: TrialSettings, baseline: Sequence[Any] | None) -> Callable | None:
    """outputs -> whether they may be best: exact against the baseline (None: any may, the
    baseline itself or --allow-inexact)."""
    if baseline is None or settings.allow_inexact:
        return None
    from roofline.bench.engines import compare_outputs

    return lambda outputs: compare_outputs(baseline, outputs).exact


def trial_common(
    settings: TrialSettings,
    number: int,
    slot: Slot,
    config: Mapping[str, Any],
    folder: Path,
    run_dir: Path | None,
) -> dict[str, Any]:
    """The fields of a trial's result known before it runs (its folder made)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "number": number,
        "slot": slot,
        "config": dict(config),
        "objective": settings.objective.name,
        "machine": machine(),
        "engine": settings.launcher.name,
        "engine_version": _version(settings.launcher),
        "folder": str(folder.relative_to(run_dir)) if run_dir else str(folder),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def failure(
    e: Exception, common: Mapping[str, Any], log_path: Path, argv: Sequence[str], t0: float
) -> TrialResult:
    """A failed result for the error a trial raised: a dead server's own words and log tail, or
    the error and the log's last lines."""
    from roofline.bench.launch import ServerDied

    if isinstance(e, ServerDied):
        error, tail = str(e), e.tail
    else:
        error = (
            f"{type(e).__name__}: {e}"
            if str(e)
            else "".join(traceback.format_exception_only(e)).strip()
        )
        tail = _tail(log_path)
    return TrialResult(
        status=TrialStatus.FAILED,
        error=error,
        log_tail=tail,
        argv=tuple(argv),
        seconds=time.monotonic() - t0,
        **common,
    )


def measured_result(
    settings: TrialSettings,
    common: Mapping[str, Any],
    folder: Path,
    baseline: Sequence[Any] | None,
    outputs: Sequence[Any],
    summaries: Sequence[RunSummary],
    lines: Sequence[RequestRecord],
    log_path: Path,
    argv: Sequence[str],
    t0: float,
) -> TrialResult:
    """The result of a trial that ran (its greedy outputs written to its folder): the objective
    over its request lines (from one or more bench runs: `summaries`, the last one's figures
    kept), exact when its greedy outputs equal the baseline's (None: it is the baseline) alone and
    under every run's load."""
    from roofline.bench.engines import compare_outputs

    _write_outputs(folder / "greedy.json", outputs)
    m = measure(settings.objective, lines, settings.objective_settings)
    found = TrialMetrics.of_run(summaries[-1])
    if m.value is None:
        return TrialResult(
            status=TrialStatus.FAILED,
            error=_no_value_reason(settings, lines, summaries[-1]),
            log_tail=_tail(log_path),
            argv=tuple(argv),
            metrics=found,
            seconds=time.monotonic() - t0,
            **common,
        )
    if baseline is None:
        basis = "token_ids" if all(o.token_ids is not None for o in outputs) else "text"
        exact = Exactness(True, len(outputs), basis)
    else:
        exact = compare_outputs(baseline, outputs)
    for summary in summaries:
        exact = under_load(exact, summary)
    return TrialResult(
        status=TrialStatus.OK if exact.exact else TrialStatus.INEXACT,
        value=m.value,
        spread=m.spread,
        rep_values=m.rep_values,
        units=m.units,
        metrics=found,
        exactness=exact,
        argv=tuple(argv),
        seconds=time.monotonic() - t0,
        **common,
    )


def under_load(alone: Exactness, summary: RunSummary) -> Exactness:
    """The gate under the objective's load: exact alone and every greedy output taken at the
    run's concurrency equal to the same prompt's alone (bench's `verify`; none at one stream). A
    check that could not finish is not evidence of exactness."""
    v = summary.verify
    if not alone.exact or v is None or (v.checked == 0 and v.error is None):
        return alone
    if v.error is not None:
        return replace(
            alone, exact=False, candidate_piece=f"under load: {v.error}", streams=v.streams
        )
    d = v.first_divergence
    if d is None:
        return alone
    return Exactness(
        exact=False,
        compared=v.checked,
        basis=d.basis,
        first_prompt=d.prompt,
        first_position=d.position,
        baseline_piece=d.reference,
        candidate_piece=d.loaded,
        streams=v.streams,
    )


def _version(launcher: Any) -> str | None:
    try:
        return launcher.version()
    except Exception:
        return None


def _no_value_reason(
    settings: TrialSettings, lines: Sequence[RequestRecord], summary: RunSummary
) -> str:
    ok = sum(1 for r in lines if r.ok and not r.warmup)
    if ok:
        return (
            f"the objective {settings.objective.name!r} is undefined on all {ok} requests that "
            "succeeded (too few tokens each?)"
        )
    return f"no request succeeded ({_failure_reasons(summary)})"


def _failure_reasons(summary: RunSummary) -> str:
    reasons = [
        f"{f.count} {kind}: {f.example[:120]}"
        for s in summary.scenarios
        for kind, f in s.requests.failures.items()
    ]
    return "; ".join(reasons) or "no requests"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_bytes()[-8192:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _write_outputs(path: Path, outputs: Sequence[Any]) -> None:
    from roofline.bench.results import write_json

    write_json(path, [o.to_json() for o in outputs])
