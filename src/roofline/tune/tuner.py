"""A tuning run from options to result: the run folder, the study, the worker loop.

    RUN_DIR/
        tune-config.json  the options, written first (what --resume reads back)
        study.db          the Optuna study (SQLite; absent with --storage)
        trials/NNN/       server.log, greedy.json, bench/ (bench's run folder)
        trials.jsonl      one TrialResult per line, appended as each trial ends
        tune.json         the TuneResult, rebuilt from the study after every trial

Nothing lives only in memory: a kill loses no finished trial.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.tune.options import TuneOptions

CONFIG = "tune-config.json"
TRIALS = "trials.jsonl"
RESULT = "tune.json"


def write_options(run_dir: Path, options: TuneOptions) -> None:
    from roofline.bench.results import write_json

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the run folder {str(run_dir)!r} ({e.strerror}); pass --runs DIR"
        ) from None
    write_json(run_dir / CONFIG, options.to_json())


def read_options(run_dir: Path) -> TuneOptions:
    try:
        return TuneOptions.from_json(json.loads((run_dir / CONFIG).read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UserError(
            f"{str(run_dir)!r} is not a tune run folder (no {CONFIG}); pass the folder a "
            "`roofline tune` run printed"
        ) from None
    except (ValueError, TypeError, KeyError) as e:
        raise UserError(f"cannot read {run_dir / CONFIG} ({e})") from None


def trial_settings(options: TuneOptions) -> Any:
    from roofline.bench.api import USAGE_PER_CHUNK
    from roofline.bench.engines import get_launcher
    from roofline.bench.metrics import parse_slo
    from roofline.bench.workloads import builtin_prompts, load_prompts_jsonl
    from roofline.hardware.window import ProbeBuffer
    from roofline.tune.objectives import ObjectiveSettings, get_objective
    from roofline.tune.settings import TrialSettings

    osettings = ObjectiveSettings(
        concurrency=options.concurrency,
        slo_s=parse_slo(options.slo) if options.slo else None,
        price_per_hour=options.price_per_hour,
    )
    launcher = get_launcher(options.engine)
    return TrialSettings(
        launcher=launcher,
        model=options.model,
        objective=get_objective(options.objective, osettings),
        objective_settings=osettings,
        prompts=load_prompts_jsonl(options.prompts) if options.prompts else builtin_prompts(),
        reps=options.reps,
        max_tokens=options.max_tokens,
        hardware=options.hardware,
        ceiling_model=None if launcher.reports_bytes_per_token else options.model,
        extra_args=tuple(options.extra_args),
        ready_timeout_s=options.ready_timeout_s,
        request_timeout_s=options.request_timeout_s,
        stop_grace_s=options.stop_grace_s,
        usage=USAGE_PER_CHUNK if launcher.usage_per_chunk else "auto",
        repeat_policy=options.repeat_policy,
        allow_inexact=options.allow_inexact,
        probe_buffer=ProbeBuffer(),
    )


def budget(options: TuneOptions) -> int | None:
    if options.trials is not None:
        return options.trials
    from roofline.tune.search import get_strategy

    return get_strategy(options.strategy).default_budget


class Display:
    """What the run tells the user interface (the CLI draws it with rich); every method may be a
    no-op."""

    def bench_progress(self) -> Any:
        from roofline.bench.driver import Progress

        return Progress()

    def trial_started(self, number: int, slot: Any, config: Mapping[str, Any]) -> None: ...
    def trial_ended(self, result: Any, best: Any) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


def served_model(options: TuneOptions) -> str | None:
    """The model the trials' engine serves: --model, else the launcher's default (None when it
    has none)."""
    from roofline.bench.engines import get_launcher

    return options.model or get_launcher(options.engine).default_model()


def prepare_engine(options: TuneOptions, note: Any, *, baseline_only: bool = False) -> float:
    """Run the launcher's once-per-install preparation for every value the study may give each
    knob (the baseline's alone: `baseline_only`), before the study's clock starts, so that no
    trial times it; seconds taken. The commands run side by side, one a core (each compiles on
    one thread); one that fails is reported and left to the trials."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from roofline.bench.engines import get_launcher
    from roofline.hardware.machine import usable_cpu_count
    from roofline.tune.space_records import Space

    space = Space.from_json(options.space)
    if baseline_only:
        values = {k: [v] for k, v in space.effective(space.baseline).items()}
    else:
        values = {d.name: [*d.values(), space.baseline.get(d.name)] for d in space.dimensions}
        values = {k: [v for v in vs if v is not None] for k, vs in values.items()}
    commands = get_launcher(options.engine).prepare_commands(options.model, values)
    t0 = time.monotonic()

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max(1, min(len(commands), usable_cpu_count()))) as pool:
        for p in pool.map(run, commands):
            last = (p.stdout.strip() or p.stderr.strip()).splitlines()[-1:] or [""]
            if p.returncode != 0:
                note(f"preparing the engine failed (exit {p.returncode}): {last[0][:200]}")
            else:
                note(f"prepared the engine: {last[0]}")
    return time.monotonic() - t0


def run_tune(options: TuneOptions, run_dir: Path, display: Display) -> Any:
    """Run (or continue) the study in run_dir as one worker; the TuneResult. Ctrl-C stops the
    running engine, puts its trial back in the queue, writes tune.json, and re-raises."""
    from roofline.bench.engines import GreedyOutput
    from roofline.tune import storage as stored
    from roofline.tune import study as st
    from roofline.tune.block import Blocks, fits, run_block, run_step_block
    from roofline.tune.predict_step import StepPredictor
    from roofline.tune.result import build_result
    from roofline.tune.search import get_strategy
    from roofline.tune.servers import Servers
    from roofline.tune.slots import Rule
    from roofline.tune.space_records import Space
    from roofline.tune.trial import run_trial
    from roofline.tune.worker import Worker, run_worker

    t0 = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = trial_settings(options)
    space = Space.from_json(options.space)
    strategy = get_strategy(options.strategy)
    rule = Rule(settings.objective.direction, options.allow_inexact)
    url = stored.storage_url(run_dir, options.storage)
    storage = stored.open_storage(url)
    # workers draw differently
    seed = options.seed if options.storage is None else options.seed + os.getpid()
    study, created = st.open_study(
        storage,
        options.study,
        strategy,
        space,
        options.fingerprint(),
        settings.objective.direction,
        seed,
        budget(options),
    )
    redo = st.recover(study, private=options.storage is None)
    if redo:
        display.note(f"re-running interrupted trial(s) {', '.join(map(str, redo))}")
    display.note(
        f"study {options.study!r} in {stored.shown_url(url)} ({'created' if created else 'joined'})"
    )
    for d in space.dimensions:
        if d.left_out():
            display.note(
                f"not tried: {d.name} {', '.join(map(str, d.left_out()))} (they change the output's"
                " bits, so the exactness gate would refuse them; --allow-inexact tries them)"
            )
    progress = display.bench_progress()

    def write_result(interrupted: bool = False) -> Any:
        from roofline.bench.results import write_json

        result = build_result(
            options,
            space,
            run_dir,
            st.results(study),
            study_state(study),
            interrupted=interrupted,
            wall_s=time.monotonic() - t0,
            storage=stored.shown_url(url),
        )
        write_json(run_dir / RESULT, result.to_json())
        return result

    servers = Servers(settings)  # one engine kept across trials that differ in live knobs only

    def evaluate(
        number: int, slot: Any, config: dict, reference: list[dict] | None, report: Any = None
    ):
        baseline = None if reference is None else [GreedyOutput.from_json(o) for o in reference]
        return run_trial(
            settings,
            number,
            slot,
            config,
            run_dir / "trials" / f"{number:03d}",
            baseline,
            progress,
            run_dir=run_dir,
            servers=servers,
            report=report,
        )

    def block(items: Any, reference: list[dict]) -> Any:
        baseline = [GreedyOutput.from_json(o) for o in reference]
        return run_block(settings, items, baseline, progress, servers, run_dir=run_dir)

    blocks = Blocks(
        lambda configs: fits(settings.launcher, configs),
        block,
        lambda number: run_dir / "trials" / f"{number:03d}",
    )

    def on_result(result: Any) -> None:
        _append_line(run_dir / TRIALS, result.to_json())
        tune = write_result()
        display.trial_ended(result, tune.best)

    worker = Worker(
        study,
        strategy,
        space,
        rule,
        budget=budget(options),
        objective=options.objective,
        predict=StepPredictor(run_dir, options.max_tokens, served_model(options)),
    )
    try:
        with servers:
            run_worker(
                worker,
                evaluate,
                on_start=display.trial_started,
                on_result=on_result,
                step_block=functools.partial(run_step_block, blocks),
            )
    except KeyboardInterrupt:
        write_result(interrupted=True)
        raise
    return write_result()


def study_state(study: Any) -> dict[str, int]:
    """How many trials are in each Optuna state (WAITING ones are the plan not yet run)."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    return counts


def _append_line(path: Path, obj: Any) -> None:
    data = (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
