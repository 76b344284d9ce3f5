"""What a tuning run found, as data: `TuneResult`, written to RUN_DIR/tune.json for the report.

ceiling   the batch-1 ceiling the baseline was held against (model and hardware known)
baseline  the starting configuration's result (its greedy outputs are the exactness reference)
ladder    per step: knob, values tried, best, gain over the step's start, the spread it had to beat
sweeps    per knob, the objective at each value tried (the B200 study's breadth sweep)
trials    every trial and its status (ok / inexact / failed / skipped), log tail on failure
best      the best exact configuration (inexact only with --allow-inexact) and its engine command;
          for the ladder, where the climb ended: a faster result within the spread is noise
fastest   the fastest eligible trial measured (the same as best for grid and TPE)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofline.bench.summary import CeilingFigures
from roofline.tune.ladder import ladder_current, ladder_steps
from roofline.tune.objectives import ObjectiveInfo
from roofline.tune.records import LadderStep, StepStart, StudyInfo, SweepPoint
from roofline.tune.search import get_strategy
from roofline.tune.slots import TUNED, Rule, SlotKind
from roofline.tune.space_records import Space
from roofline.tune.trial_result import TrialResult


@dataclass(frozen=True)
class TuneResult:
    engine: str
    model: str | None
    strategy: str
    objective: ObjectiveInfo
    space: Mapping[str, Any]  # Space.to_json()
    study: StudyInfo
    run_dir: str
    allow_inexact: bool = False
    ceiling: CeilingFigures | None = None
    baseline: TrialResult | None = None
    best: TrialResult | None = None
    fastest: TrialResult | None = None
    ladder: tuple[LadderStep, ...] = ()
    sweeps: Mapping[str, tuple[SweepPoint, ...]] = field(default_factory=dict)
    trials: tuple[TrialResult, ...] = ()
    interrupted: bool = False
    wall_s: float | None = None

    @property
    def best_command(self) -> list[str]:
        """The best trial's command line exactly as it ran (tune.json keeps this one)."""
        return list(self.best.argv) if self.best else []

    @property
    def serve_command(self) -> list[str]:
        """The best trial's command line to run again: without the loopback host and free port the
        trial was given (`--host H`, `--port N`, or their `=` forms), so the engine's own defaults
        apply."""
        return without_trial_address(self.best_command)

    @property
    def gain(self) -> float | None:
        """best / baseline (maximize) or baseline / best (minimize): how many times better."""
        b, s = self.best, self.baseline
        if not b or not s or not b.value or not s.value:
            return None
        return b.value / s.value if self.objective.maximize else s.value / b.value

    def trial(self, number: int | None) -> TrialResult | None:
        """The trial with this number, if it finished."""
        return next((r for r in self.trials if r.number == number), None)

    def to_json(self) -> dict:
        return {
            "engine": self.engine,
            "model": self.model,
            "strategy": self.strategy,
            "objective": self.objective.to_json(),
            "space": dict(self.space),
            "study": self.study.to_json(),
            "run_dir": self.run_dir,
            "allow_inexact": self.allow_inexact,
            "ceiling": None if self.ceiling is None else self.ceiling.to_json(),
            "baseline": self.baseline.to_json() if self.baseline else None,
            "best": self.best.to_json() if self.best else None,
            "best_command": self.best_command,
            "fastest": self.fastest.to_json() if self.fastest else None,
            "gain": self.gain,
            "ladder": [s.to_json() for s in self.ladder],
            "sweeps": {k: [p.to_json() for p in v] for k, v in self.sweeps.items()},
            "trials": [t.to_json() for t in self.trials],
            "interrupted": self.interrupted,
            "wall_s": self.wall_s,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TuneResult:
        def trial(x: Any) -> TrialResult | None:
            return TrialResult.from_json(x) if x else None

        return cls(
            engine=d["engine"],
            model=d.get("model"),
            strategy=d["strategy"],
            objective=ObjectiveInfo.from_json(d["objective"]),
            space=dict(d.get("space") or {}),
            study=StudyInfo.from_json(d.get("study")),
            run_dir=d.get("run_dir", ""),
            allow_inexact=bool(d.get("allow_inexact", False)),
            ceiling=CeilingFigures.from_json(d.get("ceiling")),
            baseline=trial(d.get("baseline")),
            best=trial(d.get("best")),
            fastest=trial(d.get("fastest")),
            ladder=tuple(LadderStep.from_json(s) for s in d.get("ladder") or ()),
            sweeps={
                k: tuple(SweepPoint.from_json(p) for p in v)
                for k, v in (d.get("sweeps") or {}).items()
            },
            trials=tuple(TrialResult.from_json(t) for t in d.get("trials") or ()),
            interrupted=bool(d.get("interrupted", False)),
            wall_s=d.get("wall_s"),
        )


TRIAL_ADDRESS_FLAGS = ("--host", "--port")


def without_trial_address(argv: Sequence[str]) -> list[str]:
    """argv less every `--host`/`--port` flag and its value (whichever launcher built it)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in TRIAL_ADDRESS_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{f}=" for f in TRIAL_ADDRESS_FLAGS)):
            out.append(arg)
    return out


def build_result(
    options: Any,
    space: Space,
    run_dir: Path,
    results: Sequence[TrialResult],
    states: Mapping[str, int],
    *,
    interrupted: bool = False,
    wall_s: float | None = None,
    storage: str = "",
) -> TuneResult:
    """The TuneResult of a study's finished trials (options: the run's TuneOptions)."""
    from roofline.tune.objectives import OBJECTIVES

    obj = OBJECTIVES[options.objective]
    rule = Rule(obj.direction, options.allow_inexact)
    climbs = get_strategy(options.strategy).climbs
    baseline = rule.best([r for r in results if r.slot.kind == SlotKind.BASELINE])
    ceiling = (baseline.metrics.ceiling if baseline else None) or next(
        (r.metrics.ceiling for r in results if r.metrics.ceiling), None
    )
    return TuneResult(
        engine=options.engine,
        model=options.model,
        strategy=options.strategy,
        objective=obj.info,
        space=space.to_json(),
        study=StudyInfo(options.study, storage, dict(states)),
        run_dir=str(run_dir),
        allow_inexact=options.allow_inexact,
        ceiling=ceiling,
        baseline=baseline,
        best=ladder_current(space, results, rule, len(space.dimensions) + 1)
        if climbs
        else rule.best(results),
        fastest=rule.best(results),
        ladder=ladder_rows(space, results, rule) if climbs else (),
        sweeps=sweeps(space, results, rule),
        trials=tuple(results),
        interrupted=interrupted,
        wall_s=wall_s,
    )


def _point(r: TrialResult, knob_value: Any) -> SweepPoint:
    reps = r.rep_values or ()
    return SweepPoint(
        knob_value,
        r.value,
        min(reps) if reps else None,
        max(reps) if reps else None,
        r.spread,
        r.status,
        r.number,
    )


def ladder_rows(space: Space, results: Sequence[TrialResult], rule: Rule) -> tuple[LadderStep, ...]:
    """The ladder table as data: one row per step taken."""
    _, steps = ladder_steps(space, results, rule)
    rows = []
    for s in steps:
        best = s.best or rule.best(s.tried)
        before = s.before
        after = s.kept or before
        rows.append(
            LadderStep(
                round=s.round,
                knob=s.knob,
                before=None
                if before is None
                else StepStart(before.number, before.value, before.spread, dict(before.config)),
                tried=tuple(_point(r, r.config.get(s.knob)) for r in s.tried),
                best_value=None if best is None else best.config.get(s.knob),
                best_objective=None if best is None else best.value,
                kept=s.kept is not None,
                gain=s.gain,
                spread=max(before.spread or 0.0, best.spread or 0.0) if before and best else None,
                after=after.value if after else None,
                note=s.note,
                paired=s.paired,
                remeasured=None if s.remeasured is None else s.remeasured.number,
            )
        )
    return tuple(rows)


def sweeps(
    space: Space, results: Sequence[TrialResult], rule: Rule
) -> dict[str, tuple[SweepPoint, ...]]:
    """Per knob: the objective at each of its values. For each value the best measured trial that
    ran it (exact ones first), so the curve shows what the knob can do; inexact points stay
    marked."""
    out: dict[str, tuple[SweepPoint, ...]] = {}
    measured = [r for r in results if r.value is not None and r.status in TUNED]
    for d in space.dimensions:
        by_value: dict[Any, TrialResult] = {}
        for r in measured:
            eff = space.effective(r.config)
            v = eff.get(d.name)
            if v is None or not d.active(eff):
                continue
            have = by_value.get(v)
            if have is None or _preferred(r, have, rule):
                by_value[v] = r
        if len(by_value) >= 2:
            points = [_point(r, v) for v, r in by_value.items()]
            out[d.name] = tuple(sorted(points, key=lambda p: (isinstance(p.value, str), p.value)))
    return out


def _preferred(a: TrialResult, b: TrialResult, rule: Rule) -> bool:
    ea, eb = rule.eligible(a), rule.eligible(b)
    if ea != eb:
        return ea
    return rule.gain(a.value, b.value) > 0
