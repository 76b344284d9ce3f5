"""`roofline tune`'s options: as given (`TuneArgs`), and checked into `TuneOptions`, or one
UserError.

The CLI hands over its options as one TuneArgs; everything a user can get wrong is caught here
(`options_from_args`), before an engine is started or a study opened, as bench does in
`bench.options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.tune.objectives import DEFAULT_OBJECTIVE


@dataclass(frozen=True)
class TuneOptions:
    """Everything that defines a tuning run; saved in the run folder so --resume needs nothing
    else."""

    engine: str = "embedded"
    model: str | None = None
    # Space.to_json(), resolved when the run started
    space: Mapping[str, Any] = field(default_factory=dict)
    strategy: str = "ladder"
    objective: str = DEFAULT_OBJECTIVE
    trials: int | None = None  # budget; None = the strategy's whole plan (TPE: 20)
    reps: int = 3
    max_tokens: int = 64
    prompts: str | None = None  # a JSONL prompt file; None = the built-in four
    hardware: str | None = None
    storage: str | None = None  # None = RUN_DIR/study.db
    study: str = "tune"
    allow_inexact: bool = False
    concurrency: int = 4
    slo: str | None = None
    price_per_hour: float | None = None
    extra_args: tuple[str, ...] = ()  # passed to the engine as they are
    ready_timeout_s: float = 300.0
    request_timeout_s: float = 300.0
    stop_grace_s: float = 10.0
    seed: int = 0
    repeat_policy: str = "fresh"  # tune.settings.REPEAT_POLICIES

    def to_json(self) -> dict:
        d = asdict(self)
        d["space"] = dict(self.space)
        d["extra_args"] = list(self.extra_args)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TuneOptions:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["extra_args"] = tuple(kw.get("extra_args") or ())
        return cls(**kw)

    def fingerprint(self) -> dict:
        """What workers sharing one study must agree on."""
        return {
            "engine": self.engine,
            "space": dict(self.space),
            "strategy": self.strategy,
            "objective": self.objective,
        }


@dataclass(frozen=True)
class TuneArgs:
    """`roofline tune`'s options as given (defaults as the CLI's), before they are checked into
    TuneOptions; times are still text ("300s") and the space is a file or a preset name."""

    engine: str = "embedded"
    model: str | None = None
    space: Path | None = None  # a TOML search space file
    preset: str | None = None  # a built-in space; None: the engine's own
    strategy: str = "ladder"
    trials: int | None = None
    objective: str = DEFAULT_OBJECTIVE
    reps: int = 3
    max_tokens: int = 64
    prompts: Path | None = None
    hardware: str | None = None
    storage: str | None = None
    study: str = "tune"
    resume: Path | None = None  # a run folder to continue; the other options are read from it
    allow_inexact: bool = False
    runs: Path = Path("runs")
    engine_arg: tuple[str, ...] = ()  # knob=value, or passed to the engine as it is
    slo: str | None = None
    concurrency: int = 4
    price_per_hour: float | None = None
    engine_timeout: str = "300s"
    timeout: str = "300s"
    seed: int = 0
    repeat_policy: str = "fresh"
    as_json: bool = False
    as_markdown: bool = False
    no_report: bool = False


def positive_seconds(name: str, text: str) -> float:
    """A time given as text ("300s"), in seconds; UserError unless it is positive."""
    from roofline.units import parse_seconds

    value = parse_seconds(text, what=name)
    if not value > 0:
        raise UserError(f"{name} must be a positive time, e.g. 60s (got {text!r})")
    return value


def check_positive(name: str, value: float | None) -> None:
    """UserError when a number given (None: not given) is not positive."""
    if value is not None and not value > 0:
        raise UserError(f"{name} must be positive (got {value})")


def options_from_args(a: TuneArgs) -> TuneOptions:
    """Check every option (UserError on the first bad one) and build the TuneOptions."""
    from roofline.bench.engines import (
        LAUNCHERS,
        check_config,
        get_launcher,
        parse_engine_args,
    )
    from roofline.bench.metrics import parse_slo
    from roofline.tune.objectives import ObjectiveSettings, get_objective
    from roofline.tune.search import get_strategy
    from roofline.tune.settings import REPEAT_POLICIES
    from roofline.tune.space import default_preset, load_preset, load_space_file

    launcher = get_launcher(a.engine)
    if not launcher.knobs:
        tunable = ", ".join(name for name, la in LAUNCHERS.items() if la.knobs)
        raise UserError(f"engine {launcher.name} has no knobs to tune; tune one of: {tunable}")
    why = launcher.unavailable()
    if why:
        raise UserError(why)
    get_strategy(a.strategy)
    check_positive("--trials", a.trials)
    check_positive("--reps", a.reps)
    check_positive("--max-tokens", a.max_tokens)
    check_positive("--concurrency", a.concurrency)
    if a.repeat_policy not in REPEAT_POLICIES:
        raise UserError(
            f"--repeat-policy must be one of {', '.join(REPEAT_POLICIES)} (got {a.repeat_policy!r})"
        )
    get_objective(
        a.objective,
        ObjectiveSettings(a.concurrency, parse_slo(a.slo) if a.slo else None, a.price_per_hour),
    )
    if a.space and a.preset:
        raise UserError("give --space or --preset, not both")
    if a.space:
        sp = load_space_file(a.space, launcher)
    else:
        sp = load_preset(a.preset or default_preset(launcher.name), launcher)
    if not a.allow_inexact:
        sp = sp.exact_only()
    fixed, extra = parse_engine_args(launcher, a.engine_arg)
    if fixed:
        sp = sp.with_baseline(fixed)
        check_config(launcher, sp.baseline)
    # the launcher's own checks, e.g. no --model
    launcher.argv(model=a.model, port=1, host="127.0.0.1", config=sp.baseline, extra_args=extra)
    if not a.model:
        launcher.default_model()  # missing: a one-line error now, not a failed baseline
    hardware = a.hardware or launcher.default_hardware
    if hardware and a.model and not launcher.reports_bytes_per_token:
        # the ceiling needs the model: fail before launching, not after every trial
        from roofline.bench.against import resolve_ceiling
        from roofline.modelspec.catalogue import load_spec

        if hardware == "local":  # the bandwidth is measured per trial; the bytes need the config
            load_spec(a.model)
        else:
            resolve_ceiling(model=a.model, hardware=hardware, served=None, server_info=None)
    if a.prompts:
        from roofline.bench.workloads import load_prompts_jsonl

        load_prompts_jsonl(a.prompts)
    return TuneOptions(
        engine=a.engine,
        model=a.model,
        space=sp.to_json(),
        strategy=a.strategy,
        objective=a.objective,
        trials=a.trials,
        reps=a.reps,
        max_tokens=a.max_tokens,
        prompts=str(a.prompts.resolve()) if a.prompts else None,
        hardware=hardware,
        storage=a.storage,
        study=a.study,
        allow_inexact=a.allow_inexact,
        concurrency=a.concurrency,
        slo=a.slo,
        price_per_hour=a.price_per_hour,
        extra_args=tuple(extra),
        ready_timeout_s=positive_seconds("--engine-timeout", a.engine_timeout),
        request_timeout_s=positive_seconds("--timeout", a.timeout),
        seed=a.seed,
        repeat_policy=a.repeat_policy,
    )
