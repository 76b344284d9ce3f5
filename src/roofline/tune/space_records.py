"""A search space as typed records: a knob's condition on earlier knobs (`Condition`), one knob's
values (`Dimension`) and the whole space (`Space`), with their JSON form; `space` reads them
from TOML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

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


class DimensionKind(StrEnum):
    """How a dimension's values are given."""

    CHOICE = "choice"  # listed (any values, bools included)
    INT = "int"  # a range of whole numbers
    FLOAT = "float"  # a range of numbers


@dataclass(frozen=True)
class Dimension:
    """One knob of a space: its choices, or a numeric range."""

    name: str
    kind: DimensionKind  # given as its value ("choice") too
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    points: int | None = None
    default: Any = None  # the engine's own value when the knob is not set
    conditions: tuple[Condition, ...] = ()
    required: bool = False  # set explicitly (to its default) whenever active
    # choices that change the output's bits (a lossy weight format): the exactness gate refuses
    # them, so a run tries them only when it allows inexact results (`Space.exact_only`)
    inexact: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DimensionKind(self.kind))  # ValueError for another

    def active(self, config: Mapping[str, Any]) -> bool:
        return all(c.holds(config) for c in self.conditions)

    def values(self) -> tuple:
        """The values a ladder or grid tries, in order (ranges are made discrete here)."""
        if self.kind == DimensionKind.CHOICE:
            return self.choices
        lo, hi = self.low, self.high
        if self.step is not None:
            n = math.floor((hi - lo) / self.step + 1e-9) + 1
            vals = [lo + i * self.step for i in range(n)]
        elif (
            self.kind == DimensionKind.INT
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
        if self.kind == DimensionKind.INT:
            vals = [round(v) for v in vals]
        else:
            vals = [round(float(v), 12) for v in vals]
        return tuple(dict.fromkeys(vals))  # rounding may repeat a value

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind}
        if self.kind == DimensionKind.CHOICE:
            d["choices"] = list(self.choices)
        else:
            d.update(low=self.low, high=self.high, step=self.step, log=self.log, points=self.points)
        d.update(
            default=self.default,
            conditions=[c.to_json() for c in self.conditions],
            required=self.required,
        )
        if self.inexact:
            d["inexact"] = list(self.inexact)
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
            inexact=tuple(d.get("inexact") or ()),
        )

    def left_out(self) -> tuple:
        """The inexact choices this dimension no longer offers (`Space.exact_only`)."""
        return tuple(v for v in self.inexact if v not in self.choices)

    def describe(self) -> str:
        if self.kind == DimensionKind.CHOICE:
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

    def exact_only(self) -> Space:
        """The space without the choices that change the output's bits: a run that refuses inexact
        results would compile, launch and measure them only to refuse them."""
        from dataclasses import replace

        return replace(
            self,
            dimensions=tuple(
                replace(d, choices=tuple(c for c in d.choices if c not in d.inexact))
                for d in self.dimensions
            ),
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
