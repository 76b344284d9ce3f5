"""The typed parts of a trial and of a tuning result, each with one `to_json`/`from_json`.

TrialMetrics  what a trial's bench run measured (first scenario), from bench's `RunSummary`
Machine       where a trial ran
SweepPoint    the objective at one knob value (a sweep point, or a value a ladder step tried)
LadderStep    one rung of the ladder as a table row
StudyInfo     the study's name, storage and trial counts by state

JSON keys are the names tune.json and trials.jsonl always used, so older run folders load; derived
figures are properties, still written by `to_json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roofline.bench.records import RequestRecord
from roofline.bench.summary import CeilingFigures, RunSummary
from roofline.tune.paired import PairedRatio
from roofline.tune.slots import TrialStatus


def bench_runs(folder: Path) -> list[Path]:
    """A trial folder's bench run folders in the order they ran: `bench/` (all repetitions in one
    run), or `bench-<rep>/` (a run from that repetition on: a repetition per run, or the first
    alone when it was the greedy pass too)."""
    numbered = [p for p in folder.glob("bench-*") if p.name[6:].isdigit()]
    plain = [folder / "bench"] if (folder / "bench").is_dir() else []
    return plain + sorted(numbered, key=first_rep)


def bench_folder(folder: Path, rep: int) -> Path:
    """The folder of a trial's bench run that starts at repetition `rep` (`first_rep` reads it)."""
    return folder / f"bench-{rep}"


def first_rep(run: Path) -> int:
    """The repetition a bench run folder starts at (`bench-<rep>`; `bench`: 0)."""
    return int(run.name[6:]) if run.name != "bench" else 0


def bench_lines(folder: Path) -> list[RequestRecord]:
    """The requests of a trial folder's bench runs, each `rep` counted across them."""
    from roofline.bench.results import read_requests

    out = []
    for run in bench_runs(folder):
        out += [replace(r, rep=first_rep(run) + r.rep) for r in read_requests(run)[0]]
    return out


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class PromptFigure:
    """One prompt's median Output Speed over its repetitions, and their spread."""

    prompt: str
    median_tok_per_s: float | None
    spread_pct: float | None

    def to_json(self) -> dict:
        return {
            "prompt": self.prompt,
            "median_tok_per_s": self.median_tok_per_s,
            "spread_pct": self.spread_pct,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PromptFigure:
        return cls(str(d.get("prompt", "")), d.get("median_tok_per_s"), d.get("spread_pct"))


@dataclass(frozen=True)
class TrialMetrics:
    """What a trial's bench run measured, from its first scenario. The ceiling figures are the
    run's: % of ceiling = the measured rate over ceiling.tok_per_s (passes/s with speculation)."""

    output_speed_median_tok_per_s: float | None = None
    output_speed_min_tok_per_s: float | None = None
    output_speed_max_tok_per_s: float | None = None
    ttft_median_s: float | None = None
    output_tok_per_s: float | None = None  # aggregate over the run's window
    requests_ok: int = 0
    requests_failed: int = 0
    percent_of_ceiling: float | None = None
    percent_of_file_ceiling: float | None = None  # the same rate against the file's ceiling
    ceiling_suspect: str | None = None  # above 100%: the figure that must be wrong
    ceiling_note: str | None = None  # above 100%: why
    goodput_tok_per_s: float | None = None
    tokens_per_pass: float | None = None  # speculation: tokens per weight pass
    prompts: tuple[PromptFigure, ...] = ()
    ceiling: CeilingFigures | None = None

    @property
    def ceiling_tok_per_s(self) -> float | None:
        return self.ceiling.tok_per_s if self.ceiling else None

    @property
    def bytes_per_token(self) -> float | None:
        return self.ceiling.bytes_per_token if self.ceiling else None

    @classmethod
    def of_run(cls, summary: RunSummary) -> TrialMetrics:
        """The trial's figures from bench's summary (its first scenario; empty when none ran)."""
        if not summary.scenarios:
            return cls()
        s = summary.scenarios[0]
        speed, ttft = s.metric("output_speed_tok_per_s"), s.metric("ttft_s")
        v = s.vs_ceiling
        return cls(
            output_speed_median_tok_per_s=speed.p50 if speed else None,
            output_speed_min_tok_per_s=speed.min if speed else None,
            output_speed_max_tok_per_s=speed.max if speed else None,
            ttft_median_s=ttft.p50 if ttft else None,
            output_tok_per_s=s.output_tok_per_s,
            requests_ok=s.requests.ok,
            requests_failed=s.requests.failed,
            percent_of_ceiling=v.percent_of_ceiling if v else None,
            percent_of_file_ceiling=v.percent_of_file_ceiling if v else None,
            ceiling_suspect=v.suspect if v and v.note else None,
            ceiling_note=v.note if v else None,
            goodput_tok_per_s=s.goodput.output_tok_per_s if s.goodput else None,
            tokens_per_pass=s.passes.tokens_per_pass if s.passes else None,
            prompts=tuple(
                PromptFigure(p.prompt, p.output_speed_median_tok_per_s, p.spread_pct)
                for p in s.prompts
            ),
            ceiling=summary.ceiling,
        )

    def to_json(self) -> dict:
        return {
            "output_speed_median_tok_per_s": self.output_speed_median_tok_per_s,
            "output_speed_min_tok_per_s": self.output_speed_min_tok_per_s,
            "output_speed_max_tok_per_s": self.output_speed_max_tok_per_s,
            "ttft_median_s": self.ttft_median_s,
            "output_tok_per_s": self.output_tok_per_s,
            "requests_ok": self.requests_ok,
            "requests_failed": self.requests_failed,
            "percent_of_ceiling": self.percent_of_ceiling,
            "percent_of_file_ceiling": self.percent_of_file_ceiling,
            "ceiling_tok_per_s": self.ceiling_tok_per_s,
            "bytes_per_token": self.bytes_per_token,
            "ceiling_suspect": self.ceiling_suspect,
            "ceiling_note": self.ceiling_note,
            "goodput_tok_per_s": self.goodput_tok_per_s,
            "tokens_per_pass": self.tokens_per_pass,
            "prompts": [p.to_json() for p in self.prompts],
            "ceiling": self.ceiling.to_json() if self.ceiling else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> TrialMetrics:
        d = d or {}
        return cls(
            output_speed_median_tok_per_s=_num(d.get("output_speed_median_tok_per_s")),
            output_speed_min_tok_per_s=_num(d.get("output_speed_min_tok_per_s")),
            output_speed_max_tok_per_s=_num(d.get("output_speed_max_tok_per_s")),
            ttft_median_s=_num(d.get("ttft_median_s")),
            output_tok_per_s=_num(d.get("output_tok_per_s")),
            requests_ok=int(d.get("requests_ok") or 0),
            requests_failed=int(d.get("requests_failed") or 0),
            percent_of_ceiling=_num(d.get("percent_of_ceiling")),
            percent_of_file_ceiling=_num(d.get("percent_of_file_ceiling")),
            ceiling_suspect=d.get("ceiling_suspect"),
            ceiling_note=d.get("ceiling_note"),
            goodput_tok_per_s=_num(d.get("goodput_tok_per_s")),
            tokens_per_pass=_num(d.get("tokens_per_pass")),
            prompts=tuple(PromptFigure.from_json(p) for p in d.get("prompts") or ()),
            ceiling=CeilingFigures.from_json(d.get("ceiling")),
        )


@dataclass(frozen=True)
class Machine:
    """Where a trial ran: host, process, and this machine's measured read bandwidth if known."""

    hostname: str | None = None
    pid: int | None = None
    read_bandwidth_bytes_per_s: float | None = None
    cpu: str | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"hostname": self.hostname, "pid": self.pid}
        if self.read_bandwidth_bytes_per_s is not None or self.cpu is not None:
            out.update(read_bandwidth_bytes_per_s=self.read_bandwidth_bytes_per_s, cpu=self.cpu)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Machine:
        """Also reads a study worker's label ({"host", "pid", "start"}): an interrupted trial's."""
        d = d or {}
        pid = d.get("pid")
        return cls(
            hostname=d.get("hostname") or d.get("host"),
            pid=pid if isinstance(pid, int) else None,
            read_bandwidth_bytes_per_s=_num(d.get("read_bandwidth_bytes_per_s")),
            cpu=None if d.get("cpu") is None else str(d.get("cpu")),
        )


@dataclass(frozen=True)
class SweepPoint:
    """The objective at one knob value: the trial that ran it, its repetitions' range and spread."""

    value: Any
    objective: float | None
    min: float | None = None
    max: float | None = None
    spread: float | None = None
    status: TrialStatus = TrialStatus.OK  # the trial's
    trial: int | None = None

    def to_json(self) -> dict:
        return {
            "value": self.value,
            "objective": self.objective,
            "min": self.min,
            "max": self.max,
            "spread": self.spread,
            "status": self.status,
            "trial": self.trial,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SweepPoint:
        return cls(
            value=d.get("value"),
            objective=_num(d.get("objective")),
            min=_num(d.get("min")),
            max=_num(d.get("max")),
            spread=_num(d.get("spread")),
            status=TrialStatus(d.get("status") or TrialStatus.OK),
            trial=d.get("trial"),
        )


@dataclass(frozen=True)
class StepStart:
    """The best configuration when a ladder step started."""

    trial: int | None
    objective: float | None
    spread: float | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "trial": self.trial,
            "objective": self.objective,
            "spread": self.spread,
            "config": dict(self.config),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> StepStart | None:
        if not d:
            return None
        return cls(
            d.get("trial"),
            _num(d.get("objective")),
            _num(d.get("spread")),
            dict(d.get("config") or {}),
        )


@dataclass(frozen=True)
class LadderStep:
    """One rung of the ladder: the knob, the values tried, the best, whether it was kept.

    gain = best - before in the objective's direction (None unless kept); spread = the larger of the
    two configurations' spreads, what the gain had to beat."""

    round: int
    knob: str
    before: StepStart | None
    tried: tuple[SweepPoint, ...] = ()
    best_value: Any = None
    best_objective: float | None = None
    kept: bool = False
    gain: float | None = None
    spread: float | None = None
    after: float | None = None  # the objective the next step starts from
    note: str = ""
    paired: PairedRatio | None = None  # the best value against the incumbent, measured together
    remeasured: int | None = None  # the trial that measured the incumbent again, if one did

    @property
    def gain_pct(self) -> float | None:
        """The kept value's gain in percent: from the paired ratio where the step measured it
        next to the incumbent (the same minutes), else over the step's start."""
        if self.gain is not None and self.paired is not None:
            return 100.0 * (self.paired.ratio - 1.0)
        b = self.before.objective if self.before else None
        return 100.0 * self.gain / b if self.gain is not None and b else None

    def best_point(self) -> SweepPoint | None:
        """The tried point behind the best value."""
        return next(
            (
                p
                for p in self.tried
                if p.value == self.best_value and p.objective == self.best_objective
            ),
            None,
        )

    def to_json(self) -> dict:
        return {
            "round": self.round,
            "knob": self.knob,
            "before": self.before.to_json() if self.before else None,
            "tried": [p.to_json() for p in self.tried],
            "best_value": self.best_value,
            "best_objective": self.best_objective,
            "kept": self.kept,
            "gain": self.gain,
            "gain_pct": self.gain_pct,
            "spread": self.spread,
            "after": self.after,
            "note": self.note,
            "paired": self.paired.to_json() if self.paired else None,
            "remeasured": self.remeasured,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LadderStep:
        return cls(
            round=int(d.get("round") or 0),
            knob=str(d.get("knob") or "?"),
            before=StepStart.from_json(d.get("before")),
            tried=tuple(SweepPoint.from_json(p) for p in d.get("tried") or ()),
            best_value=d.get("best_value"),
            best_objective=_num(d.get("best_objective")),
            kept=bool(d.get("kept")),
            gain=_num(d.get("gain")),
            spread=_num(d.get("spread")),
            after=_num(d.get("after")),
            note=str(d.get("note") or ""),
            paired=PairedRatio.from_json(d.get("paired")),
            remeasured=None if d.get("remeasured") is None else int(d["remeasured"]),
        )


@dataclass(frozen=True)
class StudyInfo:
    """The study: its name, its storage (password hidden), its trials by Optuna state."""

    name: str | None = None
    storage: str = ""
    trials: Mapping[str, int] = field(default_factory=dict)

    @property
    def waiting(self) -> int:
        """Planned trials not run yet."""
        return int(self.trials.get("waiting") or 0)

    def to_json(self) -> dict:
        return {"name": self.name, "storage": self.storage, "trials": dict(self.trials)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> StudyInfo:
        d = d or {}
        return cls(d.get("name"), str(d.get("storage") or ""), dict(d.get("trials") or {}))
