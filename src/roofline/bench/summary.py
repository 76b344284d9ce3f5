"""A bench run's summary as types: `RunSummary` of `ScenarioSummary`s, with one
`to_json`/`from_json`.

`summarize.py` builds them from the request records; `to_json` is what `summary.json` holds and
`from_json` reads it back (the Markdown and terminal tables, `roofline report`). Field names are the
JSON keys. Keys a type does not know (older or newer run folders, figures added later) are kept in
`extra` and written back by `to_json`, so a run folder written by another version still loads and
round-trips.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from roofline.bench.loadgen import ScenarioKind
from roofline.bench.metrics import Goodput
from roofline.bench.repeats import RepeatGroups
from roofline.bench.scrape import PrefixCache
from roofline.bench.verify import Verify
from roofline.response_stats import ServerStats


def _split(cls: type, d: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    names = {f.name for f in fields(cls)} - {"extra"}
    d = dict(d or {})
    return {k: v for k, v in d.items() if k in names}, {
        k: v for k, v in d.items() if k not in names
    }


def _plain(obj: Any) -> dict[str, Any]:
    """A typed part back to its JSON: its fields (nested parts too), then its extra keys."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        if f.name == "extra":
            continue
        out[f.name] = _value(getattr(obj, f.name))
    out.update(getattr(obj, "extra", {}) or {})
    return out


def _value(v: Any) -> Any:
    if hasattr(v, "to_json"):  # a record with its own JSON (bench.verify.Verify)
        return v.to_json()
    if hasattr(v, "__dataclass_fields__"):
        return _plain(v)
    if isinstance(v, Mapping):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    return v


@dataclass(frozen=True)
class Distribution:
    n: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float
    std: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Distribution | None:
        if not d:
            return None
        known, _ = _split(cls, d)
        return cls(**known)


@dataclass(frozen=True)
class Failure:
    count: int
    example: str = ""


@dataclass(frozen=True)
class RequestCounts:
    measured: int = 0
    ok: int = 0
    failed: int = 0
    warmup: int = 0
    failures: Mapping[str, Failure] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> RequestCounts:
        known, _ = _split(cls, d)
        fails = {
            k: Failure(int(v.get("count", 0)), str(v.get("example") or ""))
            for k, v in (known.pop("failures", None) or {}).items()
        }
        return cls(failures=fails, **known)


@dataclass(frozen=True)
class ScenarioInfo:
    """What the scenario was asked to do (bench.load.Scenario.to_dict)."""

    name: str
    kind: ScenarioKind | str = ScenarioKind.SEQUENTIAL  # text: a kind this version does not know
    num_requests: int | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None
    arrivals: str | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def streams(self) -> int:
        """Requests kept in flight at once (1 for sequential; the concurrency of a closed loop)."""
        return int(self.concurrency or 1) if self.kind == ScenarioKind.CONCURRENCY else 1

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> ScenarioInfo:
        known, extra = _split(cls, d)
        known.setdefault("name", "?")
        kind = known.get("kind", ScenarioKind.SEQUENTIAL)
        if kind in ScenarioKind.__members__.values():
            known["kind"] = ScenarioKind(kind)
        return cls(extra=extra, **known)


@dataclass(frozen=True)
class PromptSpread:
    prompt: str
    reps: int
    output_speed_median_tok_per_s: float | None
    output_speed_min_tok_per_s: float | None
    output_speed_max_tok_per_s: float | None
    spread_pct: float | None
    ttft_median_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Passes:
    requests: int
    tokens_per_pass: float | None
    passes_per_s: float | None


@dataclass(frozen=True)
class VsCeiling:
    """The median per-request decode rate held against the batch-1 ceiling (see
    summarize.vs_ceiling)."""

    ceiling_tok_per_s: float | None = None
    bytes_per_token: float | None = None
    bandwidth_bytes_per_s: float | None = None
    basis: str = "tokens"  # tokens, or passes (speculation: several tokens per weight pass)
    measured_tok_per_s: float | None = None
    percent_of_ceiling: float | None = None
    effective_bandwidth_bytes_per_s: float | None = None
    passes_per_s: float | None = None
    tokens_per_pass: float | None = None
    tokens_percent_of_one_token_ceiling: float | None = None
    # above 100%: the figure that must be wrong (bench.against.above_ceiling)
    suspect: str | None = None
    note: str | None = None  # above 100%: why, printed beside the percentage
    # the weights as the model's file stores them (None: unknown)
    file_bytes_per_token: float | None = None
    file_ceiling_tok_per_s: float | None = None  # bandwidth / file_bytes_per_token
    # the same rate (tokens or passes) against the file's ceiling
    percent_of_file_ceiling: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> VsCeiling | None:
        return _typed(cls, d)

    def to_json(self) -> dict[str, Any]:
        """The figures it has: one not computed for this run (None) writes no key."""
        return {k: v for k, v in _plain(self).items() if v is not None}


def _typed(cls: type, d: Mapping[str, Any] | None) -> Any:
    if not d:
        return None
    known, extra = _split(cls, d)
    return cls(extra=extra, **known) if "extra" in {f.name for f in fields(cls)} else cls(**known)


@dataclass(frozen=True)
class ScenarioSummary:
    scenario: ScenarioInfo
    requests: RequestCounts
    window_s: float = 0.0
    output_tokens: int = 0
    requests_per_s: float | None = None
    output_tok_per_s: float | None = None
    metrics: Mapping[str, Distribution | None] = field(default_factory=dict)
    token_sources: Mapping[str, int] = field(default_factory=dict)
    prompts: tuple[PromptSpread, ...] = ()
    goodput: Goodput | None = None
    slo_percentiles_met: Mapping[str, bool | None] | None = None
    passes: Passes | None = None
    vs_ceiling: VsCeiling | None = None
    client_cpu_s: float | None = None
    client_cpu_us_per_token: float | None = None
    # first-time and repeated prompts apart (--repeat-policy fresh or split; bench.repeats)
    repeats: RepeatGroups | None = None
    prefix_cache: PrefixCache | None = None  # the server's cache figures (bench.scrape)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.scenario.name

    def metric(self, key: str) -> Distribution | None:
        return self.metrics.get(key)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScenarioSummary:
        known, extra = _split(cls, d)
        return cls(
            scenario=ScenarioInfo.from_json(known.pop("scenario", None)),
            requests=RequestCounts.from_json(known.pop("requests", None)),
            metrics={
                k: Distribution.from_json(v) for k, v in (known.pop("metrics", None) or {}).items()
            },
            token_sources=dict(known.pop("token_sources", None) or {}),
            prompts=tuple(_typed(PromptSpread, p) for p in known.pop("prompts", None) or ()),
            goodput=_typed(Goodput, known.pop("goodput", None)),
            passes=_typed(Passes, known.pop("passes", None)),
            vs_ceiling=VsCeiling.from_json(known.pop("vs_ceiling", None)),
            repeats=RepeatGroups.from_json(known.pop("repeats", None)),
            prefix_cache=PrefixCache.from_json(known.pop("prefix_cache", None)),
            extra=extra,
            **known,
        )

    def to_json(self) -> dict[str, Any]:
        out = _plain(self)
        # a run without them writes no such key (no --slo, no ceiling, no client CPU figure, no
        # repeat groups, no cache figures)
        for key in (
            "goodput",
            "slo_percentiles_met",
            "vs_ceiling",
            "repeats",
            "prefix_cache",
        ):
            if out[key] is None:
                del out[key]
        if out["client_cpu_s"] is None and out["client_cpu_us_per_token"] is None:
            del out["client_cpu_s"], out["client_cpu_us_per_token"]
        return out


@dataclass(frozen=True)
class CeilingFigures:
    """The batch-1 ceiling the run was held against (bounds.ceiling.Ceiling.to_dict)."""

    bytes_per_token: float
    bandwidth_bytes_per_s: float
    tok_per_s: float
    seconds_per_token: float | None = None
    model: str = ""
    hardware: str = ""
    assumptions: tuple[str, ...] = ()
    # the weights as the model's file stores them (None: unknown)
    file_bytes_per_token: float | None = None
    file_tok_per_s: float | None = None  # the file's ceiling: bandwidth / file_bytes_per_token
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def read_ratio(self) -> float | None:
        """Bytes the engine reads per token over the file's (None when the file's are unknown)."""
        return (
            self.bytes_per_token / self.file_bytes_per_token if self.file_bytes_per_token else None
        )

    @property
    def bytes_from_engine(self) -> bool:
        """The bytes per token are the engine's own count (its server reported them), not
        roofline's."""
        from roofline.bench.against import SERVER_BYTES_NOTE

        return any(a.startswith(SERVER_BYTES_NOTE) for a in self.assumptions)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> CeilingFigures | None:
        if not d:
            return None
        known, extra = _split(cls, d)
        known["assumptions"] = tuple(known.get("assumptions") or ())
        return cls(extra=extra, **known)

    def to_json(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class RunSummary:
    provenance: Mapping[str, Any]  # provenance.json as written (see bench.runner.provenance)
    scenarios: tuple[ScenarioSummary, ...] = ()
    ceiling: CeilingFigures | None = None
    slo_s: Mapping[str, float] | None = None
    unreadable_lines: int = 0
    verify: Verify | None = None  # --verify: greedy outputs under load against each prompt alone
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def requests_ok(self) -> int:
        return sum(s.requests.ok for s in self.scenarios)

    @property
    def model(self) -> str | None:
        """--model as the run was given it."""
        return self.provenance.get("model") or None

    @property
    def served_model(self) -> str | None:
        return self.provenance.get("served_model") or None

    @property
    def hardware(self) -> str | None:
        """--hardware (or the default the run was held against)."""
        return self.provenance.get("hardware") or None

    @property
    def interrupted(self) -> bool:
        return bool(self.provenance.get("interrupted"))

    @property
    def server_stats(self) -> ServerStats | None:
        """The figures the server's /v1/models entry reported (None: it reported none)."""
        return server_stats_of(self.provenance)

    @property
    def hardware_profile(self) -> Mapping[str, Any]:
        """The measured profile of this machine the run used ({} when none)."""
        return self.provenance.get("hardware_profile") or {}

    @property
    def workload(self) -> tuple:
        """What was asked (prompt ids, reps, max tokens, scenarios): equal for comparable runs."""
        p = self.provenance
        return (
            tuple((x or {}).get("id") for x in p.get("prompts") or ()),
            p.get("reps"),
            p.get("max_tokens"),
            tuple(s.name for s in self.scenarios),
        )

    @property
    def model_label(self) -> str | None:
        """The model as far as it is known: served name, else --model, else the ceiling's; None if
        none."""
        p = self.provenance
        return (
            p.get("served_model")
            or p.get("model")
            or (self.ceiling.model if self.ceiling else None)
            or None
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunSummary:
        known, extra = _split(cls, d)
        return cls(
            provenance=dict(known.get("provenance") or {}),
            scenarios=tuple(ScenarioSummary.from_json(s) for s in known.get("scenarios") or ()),
            ceiling=CeilingFigures.from_json(known.get("ceiling")),
            slo_s=known.get("slo_s"),
            unreadable_lines=int(known.get("unreadable_lines") or 0),
            verify=Verify.from_json(known.get("verify")),
            extra=extra,
        )

    def to_json(self) -> dict[str, Any]:
        out = _plain(self)
        if self.verify is None:  # a run without --verify writes no "verify" key
            del out["verify"]
        return out


def server_stats_of(provenance: Mapping[str, Any]) -> ServerStats | None:
    """The server's `roofline` figures as provenance.json keeps them (bench.driver.provenance)."""
    server = provenance.get("server")
    return ServerStats.from_json(server.get("roofline") if isinstance(server, Mapping) else None)
