"""What a tuner optimizes, measured by `roofline bench` on each trial.

- speed (default): single-stream Output Speed, the B200 study's headline: the built-in prompts,
  greedy, one request at a time, `reps` times each; the median over all requests. Higher is better.
- goodput: output tok/s of the requests meeting every `--slo` (bench's definition), with
  `--concurrency` streams busy. Higher is better.
- cost: dollars per million output tokens at `--concurrency` streams' throughput, from
  `--price-per-hour` (`roofline.bounds.cost`). Lower is better.

Each is one function of the request lines; on each repetition alone it gives the values whose range
is the trial's spread, the noise a ladder gain must beat.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from roofline.bench import metrics
from roofline.bench.loadgen import Scenario
from roofline.bench.records import RequestRecord
from roofline.errors import UserError
from roofline.tune.paired import unit_values
from roofline.tune.slots import Direction


@dataclass(frozen=True)
class ObjectiveSettings:
    concurrency: int = 4  # goodput and cost: streams kept busy
    slo_s: Mapping[str, float] | None = None  # goodput: bench's --slo, in seconds
    price_per_hour: float | None = None  # cost: dollars per hour of the machine


def _ok_metrics(records: Sequence[RequestRecord]) -> list[metrics.RequestMetrics]:
    return [metrics.request_metrics(r) for r in records if r.ok]


def request_speed_tok_per_s(m: metrics.RequestMetrics) -> float | None:
    """One request's Output Speed; when all of its tokens (two or more) came in one read, the
    client saw no decode time (a burst from speculation, or a client late to read), and
    tokens / E2E, a lower bound of its Output Speed, stands in for it."""
    if m.output_speed_tok_per_s is not None:
        return m.output_speed_tok_per_s
    if m.output_tokens >= 2 and m.e2e_s:
        return m.output_tokens / m.e2e_s
    return None


def speed_value(records: Sequence[RequestRecord], settings: ObjectiveSettings) -> float | None:
    """Median Output Speed (tok/s after the first token) over the successful requests."""
    speeds = [s for m in _ok_metrics(records) if (s := request_speed_tok_per_s(m)) is not None]
    return statistics.median(speeds) if speeds else None


def goodput_value(records: Sequence[RequestRecord], settings: ObjectiveSettings) -> float | None:
    """Output tok/s of the requests meeting every SLO, over the measuring window."""
    per = _ok_metrics(records)
    if not per:
        return None
    window = metrics.window_seconds(records)
    return metrics.goodput(per, settings.slo_s or {}, window).output_tok_per_s


def cost_value(records: Sequence[RequestRecord], settings: ObjectiveSettings) -> float | None:
    """Dollars per million output tokens at the measured output tok/s."""
    from roofline.bounds.cost import dollars_per_million_tokens

    tokens = sum(m.output_tokens for m in _ok_metrics(records))
    rate = metrics.rate_per_s(tokens, metrics.window_seconds(records))
    if not rate:
        return None
    return dollars_per_million_tokens(settings.price_per_hour or 0.0, rate)


@dataclass(frozen=True)
class ObjectiveInfo:
    """What a result says about its objective (tune.json's "objective"): no measuring function."""

    name: str
    _: KW_ONLY  # three texts in a row: by keyword only
    direction: Direction = Direction.MAXIMIZE
    unit: str = "tok/s"
    label: str = ""

    @property
    def maximize(self) -> bool:
        return self.direction == Direction.MAXIMIZE

    def better_by(self, new: float, old: float) -> float:
        """new - old in the objective's direction (positive: new is better)."""
        return new - old if self.maximize else old - new

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "direction": self.direction,
            "unit": self.unit,
            "label": self.label,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ObjectiveInfo:
        return cls(
            str(d["name"]),
            direction=Direction(d.get("direction") or Direction.MAXIMIZE),
            unit=str(d.get("unit") or "tok/s"),
            label=str(d.get("label") or d["name"]),
        )


@dataclass(frozen=True)
class Objective:
    name: str
    direction: Direction
    unit: str
    label: str
    value: Callable[[Sequence[RequestRecord], ObjectiveSettings], float | None]
    concurrent: bool = False  # measured with --concurrency streams (else one stream)
    help: str = ""  # `roofline tune --objective`'s words for it
    # what it needs from the settings: None when it has it, else the message that asks for it
    missing: Callable[[ObjectiveSettings], str | None] = lambda settings: None

    @property
    def info(self) -> ObjectiveInfo:
        return ObjectiveInfo(self.name, direction=self.direction, unit=self.unit, label=self.label)

    def scenario(self, settings: ObjectiveSettings) -> Scenario:
        if self.concurrent:
            return Scenario("concurrency", concurrency=settings.concurrency)
        return Scenario("sequential")


# what a tune run optimizes when nobody says: the B200 study's headline metric
DEFAULT_OBJECTIVE = "speed"

OBJECTIVES: dict[str, Objective] = {
    "speed": Objective(
        "speed",
        Direction.MAXIMIZE,
        "tok/s",
        "Output Speed (single stream, median)",
        speed_value,
        help="single-stream Output Speed",
    ),
    "goodput": Objective(
        "goodput",
        Direction.MAXIMIZE,
        "tok/s",
        "goodput (output tok/s meeting the SLOs)",
        goodput_value,
        concurrent=True,
        help="tok/s meeting --slo",
        missing=lambda s: None if s.slo_s else "--slo, e.g. --slo ttft=2s,tpot=100ms",
    ),
    "cost": Objective(
        "cost",
        Direction.MINIMIZE,
        "$/Mtok",
        "cost per million output tokens",
        cost_value,
        concurrent=True,
        help="$/Mtok, needs --price-per-hour",
        missing=lambda s: (
            "--price-per-hour (the machine's price in dollars per hour)"
            if s.price_per_hour is None
            else None
        ),
    ),
}


def objective_info(name: str) -> ObjectiveInfo:
    """What a result says about the objective `name`, from the registry (its direction, unit and
    label); a name this version does not know keeps the defaults, labelled by its name."""
    objective = OBJECTIVES.get(name)
    return objective.info if objective else ObjectiveInfo(name, label=name)


def get_objective(name: str, settings: ObjectiveSettings) -> Objective:
    """The objective, after checking it has what it needs (UserError otherwise)."""
    if name not in OBJECTIVES:
        raise UserError(f"unknown objective {name!r}; choose {', '.join(OBJECTIVES)}")
    objective = OBJECTIVES[name]
    needed = objective.missing(settings)
    if needed:
        raise UserError(f"--objective {name} needs {needed}")
    if settings.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1 (got {settings.concurrency})")
    return objective


@dataclass(frozen=True)
class Measurement:
    value: float | None
    rep_values: tuple[float, ...] = ()
    spread: float | None = None  # max - min of rep_values (None with fewer than two)
    # the objective on each pairing unit (`tune.paired`): what a paired comparison reads
    units: Mapping[str, float] = field(default_factory=dict)


def measure(
    objective: Objective, records: Sequence[RequestRecord], settings: ObjectiveSettings
) -> Measurement:
    """The objective over the measured (non-warm-up) requests, its value on each repetition
    alone, and on each pairing unit (a request at one stream, a repetition under load)."""
    measured = [r for r in records if not r.warmup]
    value = objective.value(measured, settings)
    reps = sorted({r.rep for r in measured})
    rep_values = []
    for rep in reps:
        v = objective.value([r for r in measured if r.rep == rep], settings)
        if v is not None:
            rep_values.append(v)
    spread = max(rep_values) - min(rep_values) if len(rep_values) >= 2 else None
    units = unit_values(
        measured, lambda group: objective.value(group, settings), not objective.concurrent
    )
    return Measurement(value, tuple(rep_values), spread, units)
