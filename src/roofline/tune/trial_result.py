"""A trial's result: what ran, what it measured, whether it was exact (`TrialResult`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from roofline.bench.engines.greedy import Exactness
from roofline.tune.objectives import DEFAULT_OBJECTIVE
from roofline.tune.records import Machine, TrialMetrics
from roofline.tune.slots import Slot, TrialStatus


@dataclass(frozen=True)
class TrialResult:
    number: int
    slot: Slot
    config: Mapping[str, Any]
    status: TrialStatus
    objective: str = DEFAULT_OBJECTIVE
    value: float | None = None
    spread: float | None = None  # max - min of the per-repetition values
    rep_values: tuple[float, ...] = ()
    units: Mapping[str, float] = field(default_factory=dict)  # the objective per pairing unit
    metrics: TrialMetrics = field(default_factory=TrialMetrics)
    exactness: Exactness | None = None
    machine: Machine = field(default_factory=Machine)
    engine: str = ""
    engine_version: str | None = None
    # the command line that runs this configuration (a live trial's knobs as its flags: `live`
    # says they went per request to a server started without them)
    argv: tuple[str, ...] = ()
    error: str | None = None
    log_tail: str | None = None
    folder: str | None = None  # the trial's folder, relative to the run folder
    started_utc: str | None = None
    seconds: float | None = None
    # fields every request carried (live knobs: the trial ran on a server it did not start)
    live: Mapping[str, Any] = field(default_factory=dict)
    launched: bool = True  # the trial started its server (False: an earlier trial's, live knobs)
    # pruned (TPE): the repetitions it ran before it was stopped as clearly losing (0: all ran)
    pruned_after: int = 0
    # its speed-up over the same configuration without a proposer, replayed on its own engine's
    # verify costs (tune.predict_step); None: no model-free proposer, or nothing to replay
    predicted: float | None = None

    # the model's file beside the engine's own format (None: not known, or a run folder written
    # before these were kept)
    @property
    def file_bytes_per_token(self) -> float | None:
        """The weights as the file stores them, per decoded token."""
        c = self.metrics.ceiling
        return c.file_bytes_per_token if c and c.file_bytes_per_token else None

    @property
    def file_ceiling_tok_per_s(self) -> float | None:
        """bandwidth / file_bytes_per_token."""
        return self.metrics.ceiling.file_tok_per_s if self.file_bytes_per_token else None

    @property
    def percent_of_file_ceiling(self) -> float | None:
        """The measured rate against the file's ceiling."""
        return self.metrics.percent_of_file_ceiling if self.file_bytes_per_token else None

    @property
    def read_ratio(self) -> float | None:
        """Bytes the engine reads per token / the file's."""
        return self.metrics.ceiling.read_ratio if self.file_bytes_per_token else None

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "slot": self.slot.to_json(),
            "config": dict(self.config),
            "status": self.status,
            "objective": self.objective,
            "value": self.value,
            "spread": self.spread,
            "rep_values": list(self.rep_values),
            "units": dict(self.units),
            "metrics": self.metrics.to_json(),
            "exactness": None if self.exactness is None else self.exactness.to_json(),
            "machine": self.machine.to_json(),
            "engine": self.engine,
            "engine_version": self.engine_version,
            "argv": list(self.argv),
            "error": self.error,
            "log_tail": self.log_tail,
            "folder": self.folder,
            "started_utc": self.started_utc,
            "seconds": self.seconds,
            "live": dict(self.live),
            "launched": self.launched,
            "pruned_after": self.pruned_after,
            "predicted": self.predicted,
            "file_bytes_per_token": self.file_bytes_per_token,
            "file_ceiling_tok_per_s": self.file_ceiling_tok_per_s,
            "percent_of_file_ceiling": self.percent_of_file_ceiling,
            "read_ratio": self.read_ratio,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrialResult:
        metrics = TrialMetrics.from_json(d.get("metrics"))
        if metrics.percent_of_file_ceiling is None and d.get("percent_of_file_ceiling") is not None:
            # written before the metrics kept it
            metrics = replace(metrics, percent_of_file_ceiling=d["percent_of_file_ceiling"])
        return cls(
            number=int(d["number"]),
            slot=Slot.from_json(d.get("slot")),
            config=dict(d.get("config") or {}),
            status=TrialStatus(d["status"]),
            objective=d.get("objective", DEFAULT_OBJECTIVE),
            value=d.get("value"),
            spread=d.get("spread"),
            rep_values=tuple(d.get("rep_values") or ()),
            units={str(k): float(v) for k, v in (d.get("units") or {}).items()},
            metrics=metrics,
            exactness=Exactness.from_json(d["exactness"]) if d.get("exactness") else None,
            machine=Machine.from_json(d.get("machine")),
            engine=d.get("engine", ""),
            engine_version=d.get("engine_version"),
            argv=tuple(d.get("argv") or ()),
            error=d.get("error"),
            log_tail=d.get("log_tail"),
            folder=d.get("folder"),
            started_utc=d.get("started_utc"),
            seconds=d.get("seconds"),
            live=dict(d.get("live") or {}),
            launched=bool(d.get("launched", True)),
            pruned_after=int(d.get("pruned_after") or 0),
            predicted=d.get("predicted"),
        )
