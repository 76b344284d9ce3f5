"""Search spaces: which knobs of an engine a tuner may turn, over which values, and when.

A TOML file (presets: `roofline/data/spaces/`); top-level source, date, engine, description:

    [baseline]                    # optional: the starting configuration (empty: engine defaults)
    dtype = "fp32"
    [knobs.spec]                  # choices; default: the engine's own (the baseline runs it)
    choices = ["none", "ngram"]
    [knobs.spec_k]                # a range: low, high, optional step or `log = true`, and
    low = 2                       # points: how many values are tried without a step
    high = 8
    unless = { spec = ["none"] }  # or `when = {knob = [values]}`, on an earlier knob only
    required = true               # set whenever active: turning it on sets its default

Knobs are tuned in the order written (the ladder's), a configuration built knob by knob (Optuna's
define-by-run), all checked against the launcher's knobs before any launch (UserError).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.errors import UserError

_TOP_KEYS = {"source", "date", "engine", "description", "baseline", "knobs"}
_KNOB_KEYS = {
    "choices",
    "low",
    "high",
    "step",
    "log",
    "points",
    "default",
    "when",
    "unless",
    "required",
    "help",
}
_DEFAULT_POINTS = 5  # values a ladder or grid tries on a range with no step
_ALL_INTS_UP_TO = 8  # an int range this short (and no step) is tried value by value


@dataclass(frozen=True)
class Condition:
    """Active when config[knob] is one of `values` (or, with negate, is not)."""

    knob: str
    values: tuple
    negate: bool = False

    def holds(self, config: Mapping[str, Any]) -> bool:
        inside = config.get(self.knob) in self.values
        return not inside if self.negate else inside

    def to_json(self) -> dict:
        return {"knob": self.knob, "values": list(self.values), "negate": self.negate}

    @classmethod
    def from_json(cls, d: Mapping) -> Condition:
        return cls(d["knob"], tuple(d["values"]), bool(d.get("negate", False)))

    def describe(self) -> str:
        vals = "|".join(map(str, self.values))
        return f"{self.knob} {'not in' if self.negate else 'in'} {vals}"


@dataclass(frozen=True)
class Dimension:
    """One knob of a space: its choices, or a numeric range (kind "int" or "float")."""

    name: str
    kind: str  # "choice" (any listed values, bools included) | "int" | "float"
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    points: int | None = None
    default: Any = None  # the engine's own value when the knob is not set
    conditions: tuple[Condition, ...] = ()
    required: bool = False  # set explicitly (to its default) whenever active

    def active(self, config: Mapping[str, Any]) -> bool:
        return all(c.holds(config) for c in self.conditions)

    def values(self) -> tuple:
        """The values a ladder or grid tries, in order (ranges are made discrete here)."""
        if self.kind == "choice":
            return self.choices
        lo, hi = self.low, self.high
        if self.step is not None:
            n = math.floor((hi - lo) / self.step + 1e-9) + 1
            vals = [lo + i * self.step for i in range(n)]
        elif (
            self.kind == "int"
            and not self.log
            and hi - lo + 1 <= max(self.points or 0, _ALL_INTS_UP_TO)
        ):
            vals = list(range(int(lo), int(hi) + 1))
        else:
            n = self.points or _DEFAULT_POINTS
            if self.log:
                vals = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
            else:
                vals = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        if self.kind == "int":
            vals = [round(v) for v in vals]
        else:
            vals = [round(float(v), 12) for v in vals]
        return tuple(dict.fromkeys(vals))  # rounding may repeat a value

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind}
        if self.kind == "choice":
            d["choices"] = list(self.choices)
        else:
            d.update(low=self.low, high=self.high, step=self.step, log=self.log, points=self.points)
        d.update(
            default=self.default,
            conditions=[c.to_json() for c in self.conditions],
            required=self.required,
        )
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> Dimension:
        return cls(
            name=d["name"],
            kind=d["kind"],
            choices=tuple(d.get("choices") or ()),
            low=d.get("low"),
            high=d.get("high"),
            step=d.get("step"),
            log=bool(d.get("log", False)),
            points=d.get("points"),
            default=d.get("default"),
            conditions=tuple(Condition.from_json(c) for c in d.get("conditions", ())),
            required=bool(d.get("required", False)),
        )

    def describe(self) -> str:
        if self.kind == "choice":
            what = "{" + ", ".join(map(str, self.choices)) + "}"
        else:
            what = (
                f"{self.low:g}..{self.high:g}"
                + (f" step {self.step:g}" if self.step else "")
                + (" log" if self.log else "")
            )
        when = (
            f" when {' and '.join(c.describe() for c in self.conditions)}"
            if self.conditions
            else ""
        )
        return f"{self.name} {what}{when}"


@dataclass(frozen=True)
class Space:
    name: str
    engine: str | None
    source: str
    date: str
    description: str = ""
    baseline: Mapping[str, Any] = field(default_factory=dict)
    dimensions: tuple[Dimension, ...] = ()

    def dimension(self, name: str) -> Dimension:
        for d in self.dimensions:
            if d.name == name:
                return d
        raise KeyError(name)

    def effective(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration with each unset knob at its declared engine default: two configurations
        that run the same engine settings compare equal this way."""
        out = dict(config)
        for d in self.dimensions:
            if out.get(d.name) is None and d.default is not None:
                out[d.name] = d.default
        return out

    def resolve(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Drop the knobs whose conditions do not hold and set the required ones that became active,
        in order (a dropped knob disables its dependants)."""
        out = dict(config)
        for d in self.dimensions:
            if not d.active(self.effective(out)):
                out.pop(d.name, None)
            elif d.required and out.get(d.name) is None:
                out[d.name] = d.default
        return out

    def with_baseline(self, overrides: Mapping[str, Any]) -> Space:
        """The space with these knobs fixed: set in the baseline (so in every trial) and no longer
        searched."""
        from dataclasses import replace

        return replace(
            self,
            baseline={**self.baseline, **overrides},
            dimensions=tuple(d for d in self.dimensions if d.name not in overrides),
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "engine": self.engine,
            "source": self.source,
            "date": self.date,
            "description": self.description,
            "baseline": dict(self.baseline),
            "dimensions": [d.to_json() for d in self.dimensions],
        }

    @classmethod
    def from_json(cls, d: Mapping) -> Space:
        return cls(
            name=d["name"],
            engine=d.get("engine"),
            source=d.get("source", ""),
            date=d.get("date", ""),
            description=d.get("description", ""),
            baseline=dict(d.get("baseline") or {}),
            dimensions=tuple(Dimension.from_json(x) for x in d.get("dimensions", ())),
        )


def preset_names() -> list[str]:
    folder = resources.files("roofline").joinpath("data/spaces")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def default_preset(engine: str) -> str:
    """The built-in preset written for this engine (its `engine = ...` line); UserError when there
    is none."""
    folder = resources.files("roofline").joinpath("data/spaces")
    for name in preset_names():
        doc = tomllib.loads(folder.joinpath(f"{name}.toml").read_text(encoding="utf-8"))
        if doc.get("engine") == engine:
            return name
    raise UserError(
        f"no built-in space for engine {engine!r}: pass --space FILE (a TOML search space)"
    )


def load_preset(name: str, launcher: Any) -> Space:
    names = preset_names()
    if name not in names:
        raise UserError(f"unknown preset {name!r}; the built-in ones: {', '.join(names)}")
    text = (
        resources.files("roofline").joinpath(f"data/spaces/{name}.toml").read_text(encoding="utf-8")
    )
    return parse_space(text, launcher, name=name)


def load_space_file(path: str | Path, launcher: Any) -> Space:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot read the space file {str(p)!r} ({e.strerror})") from None
    return parse_space(text, launcher, name=p.stem)


def parse_space(text: str, launcher: Any, *, name: str = "space") -> Space:
    """Read and check a space against the launcher's knobs (a UserError names the first bad
    knob)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"space {name}: not valid TOML ({e})") from None
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise UserError(
            f"space {name}: unknown key(s) {', '.join(sorted(unknown))}; allowed: "
            f"{', '.join(sorted(_TOP_KEYS))}"
        )
    engine = doc.get("engine")
    if engine is not None and engine != launcher.name:
        raise UserError(
            f"space {name} is for engine {engine!r}, not {launcher.name!r}; pass --engine {engine}"
        )
    knobs = doc.get("knobs")
    if not isinstance(knobs, dict) or not knobs:
        raise UserError(f"space {name}: needs at least one [knobs.NAME] table")
    dims: list[Dimension] = []
    for knob_name, spec in knobs.items():
        dims.append(_dimension(name, knob_name, spec, launcher, dims))
    baseline = doc.get("baseline") or {}
    if not isinstance(baseline, dict):
        raise UserError(f"space {name}: [baseline] must be a table of knob = value")
    for key, value in baseline.items():
        _check_value(name, launcher, key, value, what="baseline")
    _check_config(name, launcher, baseline, what="[baseline]")
    return Space(
        name=name,
        engine=launcher.name,
        source=str(doc.get("source", "")),
        date=str(doc.get("date", "")),
        description=str(doc.get("description", "")),
        baseline=baseline,
        dimensions=tuple(dims),
    )


def _knob(space: str, launcher: Any, name: str) -> Any:
    knob = launcher.knobs.get(name)
    if knob is None:
        known = ", ".join(launcher.knobs) or "none"
        raise UserError(
            f"space {space}: engine {launcher.name} has no knob {name!r}; its knobs: {known}"
        )
    return knob


def _check_value(space: str, launcher: Any, name: str, value: Any, *, what: str) -> None:
    why = _knob(space, launcher, name).problem(value)
    if why:
        raise UserError(f"space {space}: knob {name!r} {what} {why}")


def _check_config(space: str, launcher: Any, config: Mapping[str, Any], *, what: str) -> None:
    from roofline.bench.engines import check_config

    try:
        check_config(launcher, config)
    except UserError as e:
        raise UserError(f"space {space} {what}: {e}") from None


def _dimension(
    space: str, name: str, spec: Any, launcher: Any, earlier: Sequence[Dimension]
) -> Dimension:
    knob = _knob(space, launcher, name)
    where = f"space {space}: knob {name!r}"
    if not isinstance(spec, dict):
        raise UserError(
            f"{where} must be a table ([knobs.{name}] with choices = [...] or low/high)"
        )
    bad = set(spec) - _KNOB_KEYS
    if bad:
        raise UserError(
            f"{where}: unknown key(s) {', '.join(sorted(bad))}; allowed: "
            f"{', '.join(sorted(_KNOB_KEYS))}"
        )
    has_choices, has_range = "choices" in spec, ("low" in spec or "high" in spec)
    if has_choices == has_range:
        raise UserError(
            f"{where} needs either choices = [...] or low and high (not both, not neither)"
        )
    points = spec.get("points")
    if points is not None and (
        not isinstance(points, int) or isinstance(points, bool) or points < 2
    ):
        raise UserError(f"{where}: points must be a whole number >= 2 (got {points!r})")
    if has_choices:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise UserError(f"{where}: choices must be a non-empty list")
        if len(set(map(repr, choices))) != len(choices):
            raise UserError(f"{where}: choices repeat a value")
        for v in choices:
            _check_value(space, launcher, name, v, what="choice")
        dim = Dimension(name, "choice", choices=tuple(choices), points=points)
    else:
        dim = _range(where, knob, spec, points)
    default = spec.get("default")
    if default is not None:
        _check_value(space, launcher, name, default, what="default")
    required = spec.get("required", False)
    if not isinstance(required, bool) or (required and default is None):
        raise UserError(
            f"{where}: required = true needs a default (the value set when the knob turns on)"
        )
    conditions = _conditions(space, name, spec, launcher, earlier)
    from dataclasses import replace

    return replace(dim, default=default, conditions=conditions, required=required)


def _range(where: str, knob: Any, spec: Mapping, points: int | None) -> Dimension:
    if knob.kind not in ("int", "float"):
        raise UserError(f"{where} is a {knob.kind} knob: give choices = [...], not a range")
    if "low" not in spec or "high" not in spec:
        raise UserError(f"{where}: a range needs both low and high")
    lo, hi, step, log = spec["low"], spec["high"], spec.get("step"), spec.get("log", False)
    for label, v in (("low", lo), ("high", hi), ("step", step)):
        if v is None:
            continue
        if knob.kind == "int" and (not isinstance(v, int) or isinstance(v, bool)):
            raise UserError(f"{where}: {label} must be a whole number for an int knob (got {v!r})")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise UserError(f"{where}: {label} must be a number (got {v!r})")
    if not isinstance(log, bool):
        raise UserError(f"{where}: log must be true or false")
    if not lo < hi:
        raise UserError(f"{where}: low must be below high (got {lo} .. {hi})")
    if step is not None and not step > 0:
        raise UserError(f"{where}: step must be positive (got {step})")
    if step is not None and log:
        raise UserError(f"{where}: give step or log = true, not both")
    if log and not lo > 0:
        raise UserError(f"{where}: a log range needs low > 0 (got {lo})")
    minimum = getattr(knob, "minimum", None)
    if minimum is not None and lo < minimum:
        raise UserError(f"{where}: low must be at least {minimum:g} (got {lo})")
    return Dimension(knob.name, knob.kind, low=lo, high=hi, step=step, log=log, points=points)


def _conditions(
    space: str, name: str, spec: Mapping, launcher: Any, earlier: Sequence[Dimension]
) -> tuple[Condition, ...]:
    out = []
    by_name = {d.name: d for d in earlier}
    for key, negate in (("when", False), ("unless", True)):
        table = spec.get(key)
        if table is None:
            continue
        if not isinstance(table, dict) or not table:
            raise UserError(
                f'space {space}: knob {name!r}: {key} must be a table like {{spec = ["ngram"]}}'
            )
        for other, values in table.items():
            if other == name:
                raise UserError(
                    f"space {space}: knob {name!r}: a condition cannot refer to the knob itself"
                )
            if other not in by_name:
                later = other in launcher.knobs
                hint = "write it above this knob" if later else "it is not a knob of the space"
                raise UserError(
                    f"space {space}: knob {name!r}: condition on {other!r}, which is not an "
                    f"earlier knob ({hint})"
                )
            values = values if isinstance(values, list) else [values]
            if not values:
                raise UserError(
                    f"space {space}: knob {name!r}: condition on {other!r} lists no values"
                )
            for v in values:
                _check_value(
                    space, launcher, other, v, what=f"condition value (in {name!r}'s {key})"
                )
            out.append(Condition(other, tuple(values), negate))
    return tuple(out)
