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
    [knobs.dtype]
    choices = ["fp32", "stored", "int8"]
    inexact = ["int8"]            # changes the output's bits: tried with --allow-inexact only

Knobs are tuned in the order written (the ladder's), a configuration built knob by knob (Optuna's
define-by-run), all checked against the launcher's knobs before any launch (UserError).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.bench.engines.base import NUMERIC, KnobKind
from roofline.errors import UserError
from roofline.tune.space_records import Condition, Dimension, DimensionKind, Space

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
    "inexact",
}


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
        dim = Dimension(name, DimensionKind.CHOICE, choices=tuple(choices), points=points)
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
    inexact = spec.get("inexact", [])
    if not isinstance(inexact, list) or any(v not in dim.choices for v in inexact):
        raise UserError(f"{where}: inexact must list some of its choices (got {inexact!r})")
    if default is not None and default in inexact:
        raise UserError(f"{where}: the default {default!r} cannot be inexact")
    from dataclasses import replace

    return replace(
        dim, default=default, conditions=conditions, required=required, inexact=tuple(inexact)
    )


def _range(where: str, knob: Any, spec: Mapping, points: int | None) -> Dimension:
    if knob.kind not in NUMERIC:
        raise UserError(f"{where} is a {knob.kind} knob: give choices = [...], not a range")
    if "low" not in spec or "high" not in spec:
        raise UserError(f"{where}: a range needs both low and high")
    lo, hi, step, log = spec["low"], spec["high"], spec.get("step"), spec.get("log", False)
    for label, v in (("low", lo), ("high", hi), ("step", step)):
        if v is None:
            continue
        if knob.kind == KnobKind.INT and (not isinstance(v, int) or isinstance(v, bool)):
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
    kind = DimensionKind(knob.kind)  # int or float, checked above
    return Dimension(knob.name, kind, low=lo, high=hi, step=step, log=log, points=points)


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
