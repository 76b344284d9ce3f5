"""`roofline bench`: measure an OpenAI-compatible endpoint and hold it against the ceiling.

Only typer, rich and the standard library at module level; the benchmark code loads inside.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from roofline.cli.output import listed, run_until_signal

if TYPE_CHECKING:
    from roofline.bench.options import BenchOptions

HELP = (
    "Measure what an engine really delivers: TTFT, TPOT, per-token ITL, chunk gaps, "
    "Output Speed,\nE2E, requests/s, tokens/s and goodput, each request written to a run "
    "folder as it ends.\n\n"
    "Default: the B200 study's method: one stream, the built-in four fixed prompts, greedy, "
    "3 reps,\nmedian with the per-prompt spread. See docs/metrics.md for every definition."
)


def _print(summary, tables: list, *, as_markdown: bool) -> None:
    from roofline.bench.tables import markdown
    from roofline.cli import output

    if as_markdown:
        sys.stdout.write(markdown(summary))
        return
    for name, headers, rows, notes in tables:
        output.emit_table(name, headers, rows, as_markdown=False, notes=notes)


def register(app: typer.Typer) -> None:
    from roofline.bench.api import USAGE_LEVELS
    from roofline.bench.engines import LAUNCHERS
    from roofline.bench.loadgen import ARRIVALS
    from roofline.bench.metrics import SLO_METRICS
    from roofline.bench.workloads import WORKLOADS

    engines = listed(
        [
            f"{name} (with --engine-cmd)" if la.takes_template else name
            for name, la in LAUNCHERS.items()
        ]
    )

    @app.command("bench", help=HELP)
    def bench(
        url: str | None = typer.Argument(
            None, help="Server URL: http://HOST:PORT, .../v1, or .../v1/chat/completions."
        ),
        model: str | None = typer.Option(
            None,
            "--model",
            help="Model for the ceiling (catalogue name, config.json or folder); also the served "
            "name when the server lists it.",
        ),
        hardware: str | None = typer.Option(
            None,
            "--hardware",
            help="Hardware for the ceiling: a catalogue name, 'local' (the profile from `roofline "
            "probe`) or a bandwidth like 8TB/s.",
        ),
        gpus: int = typer.Option(
            1, "--gpus", help="GPUs the model is spread over, for the ceiling."
        ),
        served_model: str | None = typer.Option(
            None,
            "--served-model",
            help="Model name to send; default: found through GET /v1/models.",
        ),
        api: str | None = typer.Option(
            None,
            "--api",
            help="chat (/v1/chat/completions, default) or completions (/v1/completions).",
        ),
        api_key: str | None = typer.Option(
            None,
            "--api-key",
            envvar="ROOFLINE_API_KEY",
            help="Bearer token (or set ROOFLINE_API_KEY).",
        ),
        prompts: Path | None = typer.Option(
            None,
            "--prompts",
            help='JSONL prompt file: {"prompt": ...} or {"messages": [...]} per line, optional id '
            "and max_tokens.",
        ),
        synthetic: bool = typer.Option(
            False,
            "--synthetic",
            help="Random-word prompts of --input-len tokens asking for --output-len tokens (sets "
            "--ignore-eos).",
        ),
        workload: str | None = typer.Option(
            None,
            "--workload",
            help="What to send: "
            + "; ".join(f"{w.name}: {w.help}" for w in WORKLOADS.values())
            + " (default builtin; --prompts and --synthetic choose theirs).",
        ),
        prefix_tokens: int = typer.Option(
            1000,
            "--prefix-tokens",
            help="shared-prefix: tokens of the shared document (counted by --tokenizer when "
            "given, else one per word, as --input-len is).",
        ),
        suffix_tokens: int = typer.Option(
            32, "--suffix-tokens", help="shared-prefix: tokens of each request's own question."
        ),
        input_len: str = typer.Option(
            "1024",
            "--input-len",
            help="Synthetic prompt length: N, A-B (uniform) or MEAN~STD (normal).",
        ),
        output_len: str = typer.Option(
            "256", "--output-len", help="Synthetic output length: N, A-B or MEAN~STD."
        ),
        max_tokens: int = typer.Option(
            256,
            "--max-tokens",
            help="Most tokens to generate per request (a prompt's own max_tokens wins).",
        ),
        ignore_eos: bool = typer.Option(
            False,
            "--ignore-eos",
            help="Ask the server to keep generating past end-of-sequence (vLLM, SGLang, "
            "llama.cpp).",
        ),
        temperature: float = typer.Option(
            0.0,
            "--temperature",
            help="Sampling temperature; 0 is greedy (the default, for repeatable runs).",
        ),
        reps: int = typer.Option(
            3,
            "--reps",
            help="Times each prompt is sent; the summary shows the median and the spread.",
        ),
        concurrency: str | None = typer.Option(
            None, "--concurrency", help="Closed loop: streams kept busy, a sweep like 1,4,16,64."
        ),
        rate: str | None = typer.Option(
            None, "--rate", help="Open loop: arrivals per second, a sweep like 2,4,8."
        ),
        arrivals: str = typer.Option(
            "poisson", "--arrivals", help=f"Open-loop arrival process: {listed(ARRIVALS)}."
        ),
        burstiness: float = typer.Option(
            1.0,
            "--burstiness",
            help="Gamma shape for --arrivals gamma (below 1 burstier; 1 is Poisson).",
        ),
        max_concurrency: int | None = typer.Option(
            None,
            "--max-concurrency",
            help="Open loop: most requests in flight; later ones wait and the wait counts in TTFT.",
        ),
        duration: str | None = typer.Option(
            None,
            "--duration",
            help="Run each scenario this long (e.g. 60s, 2m) instead of a request count.",
        ),
        num_requests: int | None = typer.Option(
            None,
            "--num-requests",
            help="Measured requests per scenario (default: prompts x reps; 4 per stream; 20 s of "
            "arrivals).",
        ),
        warmup: int = typer.Option(
            1,
            "--warmup",
            help="Warm-up requests before each scenario, recorded but left out of the results.",
        ),
        timeout: str = typer.Option(
            "600s",
            "--timeout",
            help="Per-request timeout, e.g. 30s; a request past it fails as 'timeout'.",
        ),
        slo: str | None = typer.Option(
            None,
            "--slo",
            help=f"Goodput limits, e.g. ttft=450ms,tpot=40ms (keys: {', '.join(SLO_METRICS)}).",
        ),
        workers: int = typer.Option(
            1,
            "--workers",
            help="Client processes; use more when one cannot keep up (see --calibrate).",
        ),
        tokenizer: str | None = typer.Option(
            None,
            "--tokenizer",
            help="Local tokenizer.json to count tokens when the server gives no per-chunk usage.",
        ),
        usage: str = typer.Option(
            "auto",
            "--usage",
            help=f"Token accounting to ask for: {listed(['auto', *USAGE_LEVELS])} "
            "(auto falls back when refused).",
        ),
        seed: int = typer.Option(0, "--seed", help="Seed for arrivals and synthetic prompts."),
        out: Path | None = typer.Option(
            None, "--out", help="Run folder (default runs/<time>-<label>)."
        ),
        label: str | None = typer.Option(None, "--label", help="Name in the default run folder."),
        calibrate: bool = typer.Option(
            False,
            "--calibrate",
            help="Measure this client against a built-in null server with an exact schedule.",
        ),
        engine: str | None = typer.Option(
            None,
            "--engine",
            help=f"Start a local engine and benchmark it: {engines}; --model says what it serves.",
        ),
        engine_arg: list[str] = typer.Option(
            [],
            "--engine-arg",
            help="Engine setting (repeat): a knob as name=value (e.g. threads=2), or an argument "
            "passed as it is (e.g. --engine-arg=--max-seq-len --engine-arg=512).",
        ),
        engine_cmd: str | None = typer.Option(
            None,
            "--engine-cmd",
            help="Start this server command ({port}, {host}, {python}, {model} are filled in; "
            "never run by a shell).",
        ),
        engine_timeout: str = typer.Option(
            "300s",
            "--engine-timeout",
            help="How long a started engine may take to become ready (answer its health route).",
        ),
        verify: bool = typer.Option(
            False,
            "--verify",
            help="After the run, check exactness under load: each prompt's greedy output with the "
            "run's most requests in flight against the same prompt sent alone (token ids where "
            "the server gives them, else text). Reports how many were identical and the first "
            "divergence; the exit code stays 0. Nothing to check when every scenario runs one "
            "stream.",
        ),
        repeat_policy: str = typer.Option(
            "auto",
            "--repeat-policy",
            help="How repeats of an identical prompt count when the server remembers across "
            "requests (a shared draft trie): fresh (figures from first-time prompts only), split "
            "(all count, first-time and repeated also shown apart), repeat (all count alike); "
            "auto: split if the server says it remembers, else repeat.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        as_markdown: bool = typer.Option(
            False, "--markdown", help="Print the summary as Markdown."
        ),
        no_report: bool = typer.Option(
            False,
            "--no-report",
            help="Skip report.html (charts) at the end; summary.md is still written.",
        ),
    ) -> None:
        from roofline.bench.options import BenchOptions

        options = BenchOptions(
            url=url,
            model=model,
            hardware=hardware,
            gpus=gpus,
            served_model=served_model,
            api=api,
            api_key=api_key,
            prompts=prompts,
            synthetic=synthetic,
            workload=workload,
            prefix_tokens=prefix_tokens,
            suffix_tokens=suffix_tokens,
            input_len=input_len,
            output_len=output_len,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            temperature=temperature,
            reps=reps,
            concurrency=concurrency,
            rate=rate,
            arrivals=arrivals,
            burstiness=burstiness,
            max_concurrency=max_concurrency,
            duration=duration,
            num_requests=num_requests,
            warmup=warmup,
            timeout=timeout,
            slo=slo,
            workers=workers,
            tokenizer=tokenizer,
            usage=usage,
            seed=seed,
            out=out,
            label=label,
            calibrate=calibrate,
            engine=engine,
            engine_arg=tuple(engine_arg),
            engine_cmd=engine_cmd,
            engine_timeout=engine_timeout,
            as_json=as_json,
            as_markdown=as_markdown,
            no_report=no_report,
            verify=verify,
            repeat_policy=repeat_policy,
        )
        run_until_signal(_run, options)


def _run(o: BenchOptions) -> int:
    if o.calibrate:
        return _calibrate(o)
    from roofline.bench.launch import ServerDied
    from roofline.bench.options import engine_from_options, plan_from_options
    from roofline.bench.results import default_run_dir
    from roofline.bench.session import run_session
    from roofline.bench.tables import tables, write_markdown
    from roofline.cli.progress import ScenarioProgress

    engine = engine_from_options(o)
    plan = plan_from_options(o)
    # a URL: one line and exit 2 when no server answers; its bytes per token set the ceiling
    if engine is None:
        from roofline.bench.preflight import preflight

        plan = preflight(plan, lambda text: typer.echo(text, err=True))
    run_dir = o.out or default_run_dir(plan.label)
    progress = ScenarioProgress()
    try:
        outcome = run_session(plan, run_dir, progress, engine)
    except ServerDied as e:
        progress.stop()
        sys.stderr.write(f"--- last lines of the server's log ---\n{e.tail}\n---\n")
        raise
    finally:
        progress.stop()
    summary = outcome.summary
    write_markdown(outcome.run_dir, summary)
    if o.as_json:
        from roofline.cli import output

        output.print_json(summary.to_json())
    else:
        _print(summary, tables(summary), as_markdown=o.as_markdown)
    typer.echo(f"run folder: {outcome.run_dir}", err=True)
    if not o.no_report:
        from roofline.cli.report import write_report_after_run

        write_report_after_run(outcome.run_dir)
    if summary.verify is not None and not summary.verify.exact:  # said even under --json
        from roofline.bench.verify import verify_line

        typer.echo(verify_line(summary.verify), err=True)
    if outcome.interrupted:
        typer.echo("interrupted: the summary covers the requests that ended", err=True)
        return 130
    if summary.requests_ok == 0:
        typer.echo("no request succeeded (see the failure reasons above)", err=True)
        return 1
    return 0


def _calibrate(o: BenchOptions) -> int:
    from roofline.bench.calibrate import run_calibration, table_rows
    from roofline.bench.options import check_positive
    from roofline.bench.results import default_run_dir, write_json
    from roofline.cli import output
    from roofline.cli.progress import ScenarioProgress

    check_positive("--workers", o.workers)
    run_dir = o.out or default_run_dir("calibrate")
    progress = ScenarioProgress()
    try:
        results = run_calibration(workers=o.workers, out_dir=run_dir, progress=progress)
    finally:
        progress.stop()
    headers, rows, notes = table_rows(results)
    data = [
        {
            "case": r.case.name,
            "concurrency": r.case.concurrency,
            "workers": r.case.workers,
            "schedule": vars(r.case.schedule),
            "metrics": r.rows,
            **r.facts,
        }
        for r in results
    ]
    write_json(Path(run_dir) / "calibration.json", data)
    if o.as_json:
        output.print_json(data)
    else:
        output.emit_table(
            "client calibration against the null server (exact schedule)",
            headers,
            rows,
            as_markdown=o.as_markdown,
            notes=notes,
        )
    typer.echo(f"run folder: {run_dir}", err=True)
    return 0
