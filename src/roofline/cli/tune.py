"""`roofline tune`: run an engine in one configuration after another; keep the exact ones.

Only typer, rich and the standard library at module level; the tuner and Optuna load inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from roofline.cli.output import listed, run_until_signal

if TYPE_CHECKING:
    from roofline.tune.options import TuneArgs

HELP = (
    "Close the gap: start an engine with one configuration after another, measure each with "
    "`roofline bench`, refuse any whose greedy outputs differ from the baseline's, and show what "
    "each setting bought.\n\n"
    "Default: the embedded engine on the default model, the `embedded` preset (precision, "
    "speculative proposer and its knobs, threads), the ladder strategy (the B200 study's method: "
    "one knob at a time, keep a value only when it beats the spread across repetitions), "
    "single-stream Output Speed on the four built-in prompts. Measures this machine first if "
    "`roofline probe` never ran here.\n\n"
    "Results go to a run folder (printed): tune.json (for `roofline report`), trials.jsonl, one "
    "folder per trial with the engine's log, and the study (study.db) that --resume continues "
    "after Ctrl-C or a kill. With --storage postgresql://... --study NAME, the same command on "
    "several machines shares one study: each worker claims different trials and records the "
    "machine it ran on."
)


def register(app: typer.Typer) -> None:
    from roofline.bench.engines import LAUNCHERS
    from roofline.tune.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
    from roofline.tune.search import STRATEGIES
    from roofline.tune.space import preset_names

    tunable = listed([name for name, la in LAUNCHERS.items() if la.knobs])
    strategies = listed([f"{name} ({s.help})" for name, s in STRATEGIES.items()])
    objectives = listed([f"{name} ({o.help})" for name, o in OBJECTIVES.items()])
    whole = listed([name for name, s in STRATEGIES.items() if s.default_budget is None])
    budgets = "".join(
        f"; {s.default_budget} for {name}"
        for name, s in STRATEGIES.items()
        if s.default_budget is not None
    )
    own_hardware = ", ".join(
        f"{name}: {la.default_hardware}" for name, la in LAUNCHERS.items() if la.default_hardware
    )

    @app.command("tune", help=HELP)
    def tune(
        engine: str = typer.Option("embedded", "--engine", help=f"Engine to start: {tunable}."),
        model: str | None = typer.Option(
            None,
            "--model",
            help="Model to serve, as the engine takes it (a .gguf file, a folder, a Hugging Face "
            "id); default: the engine's own where it has one.",
        ),
        space: Path | None = typer.Option(
            None, "--space", help="Search space TOML file (knobs, ranges or choices, conditions)."
        ),
        preset: str | None = typer.Option(
            None,
            "--preset",
            help=f"Built-in space: {', '.join(preset_names())} (default: the engine's own).",
        ),
        strategy: str = typer.Option(
            "ladder",
            "--strategy",
            help=f"{strategies}.",
        ),
        trials: int | None = typer.Option(
            None,
            "--trials",
            help=f"Most trials to run, baseline included (default: the whole {whole}{budgets}).",
        ),
        objective: str = typer.Option(
            DEFAULT_OBJECTIVE,
            "--objective",
            help=f"{objectives}.",
        ),
        reps: int = typer.Option(
            3,
            "--reps",
            help="Times each prompt is sent per trial; how a prompt's repetitions disagree is the "
            "noise a gain must beat.",
        ),
        max_tokens: int = typer.Option(
            64,
            "--max-tokens",
            help="Tokens generated per request (and compared by the exactness gate).",
        ),
        prompts: Path | None = typer.Option(
            None, "--prompts", help="JSONL prompt file instead of the four built-in prompts."
        ),
        hardware: str | None = typer.Option(
            None,
            "--hardware",
            help="Hardware for the ceiling: a catalogue name (b200), 'local', or a bandwidth like "
            f"8TB/s (default: the engine's own; {own_hardware}).",
        ),
        storage: str | None = typer.Option(
            None,
            "--storage",
            help="Study storage URL, e.g. postgresql://user@host/db to share one study between "
            "machines (default: SQLite in the run folder).",
        ),
        study: str = typer.Option(
            "tune",
            "--study",
            help="Study name in the storage (workers with the same name share it).",
        ),
        resume: Path | None = typer.Option(
            None,
            "--resume",
            help="Continue the run in this folder: interrupted trials run again, finished ones "
            "are kept.",
        ),
        allow_inexact: bool = typer.Option(
            False,
            "--allow-inexact",
            help="Let a configuration whose greedy outputs differ from the baseline's be chosen "
            "as best.",
        ),
        runs: Path = typer.Option(Path("runs"), "--runs", help="Folder the run folder is made in."),
        engine_arg: list[str] = typer.Option(
            [],
            "--engine-arg",
            help="knob=value fixes a knob for the baseline and every trial; anything else is "
            "passed to the engine as is (repeat).",
        ),
        slo: str | None = typer.Option(
            None, "--slo", help="goodput: limits like ttft=2s,tpot=100ms."
        ),
        concurrency: int = typer.Option(
            4, "--concurrency", help="goodput and cost: streams kept busy."
        ),
        price_per_hour: float | None = typer.Option(
            None, "--price-per-hour", help="cost: the machine's price in dollars per hour."
        ),
        engine_timeout: str = typer.Option(
            "300s",
            "--engine-timeout",
            help="How long an engine may take to answer its health check.",
        ),
        timeout: str = typer.Option(
            "300s", "--timeout", help="Per-request timeout; a request past it fails."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed for TPE's draws."),
        repeat_policy: str = typer.Option(
            "fresh",
            "--repeat-policy",
            help="fresh: when a trial's server remembers across requests (a shared draft trie), "
            "its objective counts only prompts it had not seen (each sent once, before the "
            "exactness pass); repeat: every request counts, as bench's --repeat-policy repeat.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print tune.json's content."),
        as_markdown: bool = typer.Option(False, "--markdown", help="Print the result as Markdown."),
        no_report: bool = typer.Option(
            False,
            "--no-report",
            help="Skip report.html (ladder, sweeps, roofline charts) at the end.",
        ),
        predict: bool = typer.Option(
            False,
            "--predict",
            help="Run the baseline only, then print the predicted ladder of every model-free "
            "proposer setting in the space (replayed over the baseline's greedy outputs; "
            "predicted.json) and stop. Without it, a run that can predict writes predicted.json "
            "too and shows predicted beside measured.",
        ),
    ) -> None:
        from roofline.tune.options import TuneArgs

        args = TuneArgs(
            engine=engine,
            model=model,
            space=space,
            preset=preset,
            strategy=strategy,
            trials=trials,
            objective=objective,
            reps=reps,
            max_tokens=max_tokens,
            prompts=prompts,
            hardware=hardware,
            storage=storage,
            study=study,
            resume=resume,
            allow_inexact=allow_inexact,
            runs=runs,
            engine_arg=tuple(engine_arg),
            slo=slo,
            concurrency=concurrency,
            price_per_hour=price_per_hour,
            engine_timeout=engine_timeout,
            timeout=timeout,
            seed=seed,
            repeat_policy=repeat_policy,
            as_json=as_json,
            as_markdown=as_markdown,
            no_report=no_report,
        )
        run_until_signal(lambda a: _run(a, predict=predict), args)


def _run(a: TuneArgs, *, predict: bool = False) -> int:
    from dataclasses import replace
    from types import SimpleNamespace

    from roofline.bench.results import default_run_dir
    from roofline.cli.tune_output import display_for, print_result
    from roofline.tune.options import check_positive, options_from_args
    from roofline.tune.predict_run import FAILED, predict_and_write
    from roofline.tune.tuner import prepare_engine, read_options, run_tune, write_options
    from roofline.tune.worker import BaselineFailed

    if a.resume:
        run_dir = a.resume
        options = read_options(run_dir)
        if a.trials is not None:
            check_positive("--trials", a.trials)
            options = replace(options, trials=a.trials)
    else:
        options = options_from_args(a)
        run_dir = default_run_dir(f"tune-{options.engine}", a.runs)
    write_options(run_dir, options)  # as asked: --resume continues past --predict's baseline
    if predict:  # the baseline is trial 0: a budget of one runs it alone
        options = replace(options, trials=1)
    display = display_for(options)
    try:
        if options.hardware == "local":
            from roofline.bench.session import ensure_local_profile

            ensure_local_profile(SimpleNamespace(note=display.note))
        line = file_ceiling_line(options)
        if line:
            display.note(line)
        prepare_engine(options, display.note, baseline_only=predict)
        display.clock_from_now()
        result = run_tune(options, run_dir, display)
    except KeyboardInterrupt:
        display.stop()
        typer.echo(
            f"interrupted: the engine was stopped and the study kept; continue with\n"
            f"  roofline tune --resume {run_dir}",
            err=True,
        )
        return 130
    except BaselineFailed as e:
        display.stop()
        typer.echo(f"error: {e}\nrun folder: {run_dir}", err=True)
        return 1
    finally:
        display.stop()
    ladder = predict_and_write(run_dir, options, result.baseline, result.trials)
    if predict:
        return _print_predicted(ladder, result, run_dir, a)
    if isinstance(ladder, str) and ladder.startswith(FAILED):  # the other reasons are normal
        typer.echo(f"note: {ladder}", err=True)
    print_result(result, as_json=a.as_json, as_markdown=a.as_markdown)
    typer.echo(f"run folder: {run_dir} (tune.json, trials.jsonl, trials/*/server.log)", err=True)
    if not a.no_report:
        from roofline.cli.report import write_report_after_run

        write_report_after_run(run_dir)
    return 0 if result.best is not None else 1


def file_ceiling_line(options) -> str | None:
    """The file's ceiling on the study's hardware, before anything is compiled or launched: the
    first useful figure of a fresh run (None when the model or the bandwidth is not known yet)."""
    from roofline.bench.against import (
        LOCAL,
        file_bytes_of_model,
        hardware_bandwidth_bytes_per_s,
    )
    from roofline.bench.engines import get_launcher
    from roofline.bounds.ceiling import Ceiling
    from roofline.errors import UserError

    if not options.hardware:
        return None
    try:
        model = options.model or get_launcher(options.engine).default_model()
        file_bytes, _ = file_bytes_of_model(model)
        bandwidth, _ = hardware_bandwidth_bytes_per_s(options.hardware)
    except UserError:
        return None  # said again, with its reason, where the trials need it
    if not model or not file_bytes:
        return None
    c = Ceiling(bytes_per_token=float(file_bytes), bandwidth_bytes_per_s=bandwidth)
    where = "this machine" if options.hardware == LOCAL else options.hardware
    return (
        f"the file's ceiling on {where}: {c.tok_per_s:,.1f} tok/s = "
        f"{bandwidth / 1e9:.1f} GB/s / {file_bytes / 1e6:,.1f} MB per token, the weights as "
        f"{Path(model).name} stores them (each trial is held against its own bytes and the "
        "bandwidth of its own minutes)"
    )


def _print_predicted(ladder, result, run_dir: Path, a: TuneArgs) -> int:
    """--predict's output; exit 2 with one line when the baseline gave nothing to replay."""
    from roofline.cli.tune_output import show_predicted

    if isinstance(ladder, str):
        typer.echo(f"error: {ladder}\nrun folder: {run_dir}", err=True)
        return 2
    baseline = result.baseline.config if result.baseline else None
    show_predicted(ladder, baseline, as_json=a.as_json, as_markdown=a.as_markdown)
    typer.echo(f"run folder: {run_dir} (predicted.json, trials/*/greedy.json)", err=True)
    return 0
