"""`roofline bench`'s options, checked: the `BenchPlan` and the engine to start, or one UserError.

The CLI hands over its options as one BenchOptions; everything a user can get wrong is caught here,
before anything is started or measured.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from roofline.bench.plan import BenchPlan
from roofline.errors import UserError


@dataclass(frozen=True)
class BenchOptions:
    """`roofline bench`'s options as given (defaults as the CLI's); times, lengths, sweeps and SLOs
    are still text, checked by plan_from_options and engine_from_options."""

    url: str | None = None
    model: str | None = None
    hardware: str | None = None
    gpus: int = 1
    served_model: str | None = None
    api: str | None = None
    api_key: str | None = None
    prompts: Path | None = None
    synthetic: bool = False
    workload: str | None = None  # a name in bench.workloads.WORKLOADS
    prefix_tokens: int = 1000
    suffix_tokens: int = 32
    input_len: str = "1024"
    output_len: str = "256"
    max_tokens: int = 256
    ignore_eos: bool = False
    temperature: float = 0.0
    reps: int = 3
    concurrency: str | None = None  # a sweep, "1,4,16"
    rate: str | None = None  # a sweep, "2,4,8"
    arrivals: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    duration: str | None = None
    num_requests: int | None = None
    warmup: int = 1
    timeout: str = "600s"
    slo: str | None = None
    workers: int = 1
    tokenizer: str | None = None
    usage: str = "auto"
    seed: int = 0
    out: Path | None = None
    label: str | None = None
    calibrate: bool = False
    engine: str | None = None
    engine_arg: tuple[str, ...] = ()
    engine_cmd: str | None = None
    engine_timeout: str = "300s"
    as_json: bool = False
    as_markdown: bool = False
    no_report: bool = False
    verify: bool = False
    repeat_policy: str = "auto"  # bench.repeats.POLICIES


def rates_per_s(text: str) -> list[float]:
    """'2,4,8' -> [2.0, 4.0, 8.0] arrivals per second."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(
            "--rate must be comma-separated numbers of requests per second, e.g. 2,4,8 (got "
            f"{text!r})"
        ) from None
    if not values or any(not (0 < v < float("inf")) for v in values):  # also rejects nan
        raise UserError(f"--rate values must be positive requests per second (got {text!r})")
    return values


def check_positive(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise UserError(
            f"{name} must be {'zero or more' if allow_zero else 'positive'} (got {value})"
        )


def seconds(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    from roofline.units import parse_seconds

    value = parse_seconds(text, what=name)
    if not value > 0:
        raise UserError(f"{name} must be a positive time, e.g. 60s (got {text!r})")
    return value


def host_label(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        return f"{parts.hostname}-{parts.port}" if parts.port else str(parts.hostname)
    except ValueError:
        return "bench"


def plan_from_options(o: BenchOptions) -> BenchPlan:
    """Check every option (UserError on the first bad one) and build the BenchPlan."""
    from roofline.bench.api import CHAT, COMPLETIONS, USAGE_LEVELS
    from roofline.bench.loadgen import ARRIVALS, Scenario, default_num_requests
    from roofline.bench.metrics import parse_slo
    from roofline.bench.repeats import check_policy
    from roofline.bench.workloads import WorkloadArgs, get_workload
    from roofline.units import parse_int_list

    if not (o.url or o.engine or o.engine_cmd):
        raise UserError("give a server URL, --engine NAME, --engine-cmd or --calibrate")
    if o.api not in (None, CHAT, COMPLETIONS):
        raise UserError(f"--api must be {CHAT} or {COMPLETIONS} (got {o.api!r})")
    if o.usage not in ("auto", *USAGE_LEVELS):
        raise UserError(f"--usage must be auto, {', '.join(USAGE_LEVELS)} (got {o.usage!r})")
    if o.arrivals not in ARRIVALS:
        raise UserError(f"--arrivals must be one of {', '.join(ARRIVALS)} (got {o.arrivals!r})")
    for name, value in (
        ("--max-tokens", o.max_tokens),
        ("--reps", o.reps),
        ("--workers", o.workers),
        ("--burstiness", o.burstiness),
        ("--gpus", o.gpus),
        ("--max-concurrency", o.max_concurrency),
        ("--num-requests", o.num_requests),
    ):
        check_positive(name, value)
    check_positive("--warmup", o.warmup, allow_zero=True)
    check_policy(o.repeat_policy)
    workload = get_workload(workload_name(o))
    duration = seconds("--duration", o.duration)
    timeout = seconds("--timeout", o.timeout)
    slo = parse_slo(o.slo) if o.slo is not None else None
    tokenizer = None
    if o.tokenizer:
        from roofline.bench.tokens import load_tokenizer

        tokenizer = load_tokenizer(o.tokenizer)
    scenarios = []
    if o.concurrency:
        scenarios += [
            Scenario("concurrency", concurrency=c, num_requests=o.num_requests, duration_s=duration)
            for c in parse_int_list(o.concurrency, what="--concurrency")
        ]
    if o.rate:
        scenarios += [
            Scenario(
                "rate",
                rate_per_s=r,
                arrivals=o.arrivals,
                burstiness=o.burstiness,
                max_concurrency=o.max_concurrency,
                num_requests=o.num_requests,
                duration_s=duration,
            )
            for r in rates_per_s(o.rate)
        ]
    if not scenarios:
        scenarios = [Scenario("sequential", num_requests=o.num_requests, duration_s=duration)]
    count = o.num_requests
    if workload.fresh_prompts:  # a prompt per request of every scenario and its warm-ups
        if o.num_requests is None and duration is None:  # each scenario's usual count
            scenarios = [replace(s, num_requests=default_num_requests(s, 64, 1)) for s in scenarios]
        wanted = [s.num_requests for s in scenarios]
        count = None if None in wanted else sum(n + o.warmup + 1 for n in wanted)
    args = WorkloadArgs(
        count=count,
        prompts_path=o.prompts,
        input_len=o.input_len,
        output_len=o.output_len,
        prefix_tokens=o.prefix_tokens,
        suffix_tokens=o.suffix_tokens,
        seed=o.seed,
        tokenizer=tokenizer,
    )
    prompts = workload.build(args)
    return BenchPlan(
        url=o.url or "",
        prompts=prompts,
        scenarios=scenarios,
        api=o.api,
        api_key=o.api_key,
        served_model=o.served_model,
        model=o.model,
        hardware=o.hardware,
        gpus=o.gpus,
        reps=1 if workload.fresh_prompts else o.reps,
        max_tokens=o.max_tokens,
        temperature=o.temperature,
        ignore_eos=o.ignore_eos or workload.sets_ignore_eos,
        usage=o.usage,
        warmup=o.warmup,
        timeout_s=timeout,
        workers=o.workers,
        tokenizer=o.tokenizer,
        seed=o.seed,
        slo_s=slo,
        label=o.label or _label(o),
        verify=o.verify,
        repeat_policy=o.repeat_policy,
        argv=list(sys.argv[1:]),
        fresh_prompts=workload.fresh_prompts,
        provenance_extra={"workload": {"name": workload.name, **workload.describe(args)}},
    )


def workload_name(o: BenchOptions) -> str:
    """The workload asked for: --workload NAME, or what --prompts / --synthetic say (builtin when
    none); UserError when they disagree."""
    if o.synthetic and o.prompts:
        raise UserError("give --prompts or --synthetic, not both")
    implied = "synthetic" if o.synthetic else "prompts" if o.prompts else None
    if o.workload and implied and o.workload != implied:
        flag = "--synthetic" if o.synthetic else "--prompts"
        raise UserError(f"--workload {o.workload} and {flag} disagree: give one of them")
    return o.workload or implied or "builtin"


def _label(o: BenchOptions) -> str:
    """The run folder's default name: the engine started ("engine" for a command template), else
    the server's host and port."""
    from roofline.bench.engines import get_launcher

    if o.engine:
        launcher = get_launcher(o.engine)
        return "engine" if launcher.takes_template else launcher.name
    return "engine" if o.engine_cmd else host_label(o.url or "")


def engine_from_options(o: BenchOptions):
    """The engine to start (None when a URL is measured): a launcher from the registry, its knobs
    checked before anything starts."""
    from roofline.bench.engines import COMMAND, check_config, get_launcher, parse_engine_args
    from roofline.bench.session import EngineSpec

    name, template = o.engine, o.engine_cmd
    if not (name or template):
        if o.engine_arg:
            raise UserError("--engine-arg goes with --engine or --engine-cmd")
        return None
    if o.url:
        raise UserError("give either a URL or an engine to start, not both")
    launcher = get_launcher(name) if name else COMMAND
    if template and not launcher.takes_template:
        raise UserError(
            f"--engine-cmd starts the {COMMAND.name} engine; drop --engine {name} or --engine-cmd"
        )
    if launcher.takes_template and not template:
        raise UserError(f"--engine {launcher.name} needs --engine-cmd TEMPLATE")
    config, extra = parse_engine_args(launcher, o.engine_arg)
    check_config(launcher, config)
    reason = launcher.unavailable()
    if reason:
        raise UserError(reason)
    return EngineSpec(
        launcher,
        config,
        tuple(extra),
        template,
        o.model,
        seconds("--engine-timeout", o.engine_timeout) or 300.0,
    )
