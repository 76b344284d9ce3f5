"""What every engine launcher is: a name, the knobs it understands, and how it turns a configuration
into an argument list, an environment, a version and greedy outputs.

A knob is a setting a user (or a tuner's search space) may change: `threads`, `max_num_seqs`,
`speculative_ngram_max_bfs_breadth`. It is named in snake_case, the same way in spaces, in
`--engine-arg name=value` and in results. Every launcher refuses what it does not know before
anything starts, naming the knob: an engine that takes two minutes to load should not be the one
that says a flag is misspelt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from roofline.errors import UserError

if TYPE_CHECKING:
    from roofline.bench.engines.greedy import GreedyOutput
    from roofline.bench.workloads import Prompt

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_KNOB_ARG = re.compile(r"([a-z][a-z0-9_]*)=(.*)", re.DOTALL)


class KnobKind(StrEnum):
    """The type of a knob's values."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    CHOICE = "choice"  # one of the knob's `choices`
    STR = "str"


NUMERIC = (KnobKind.INT, KnobKind.FLOAT)


@dataclass(frozen=True)
class Knob:
    # as written in spaces and --engine-arg form, snake_case, e.g. "spec_k", "max_num_seqs"
    name: str
    kind: KnobKind  # given as its value ("int") too
    choices: tuple = ()  # for a choice
    help: str = ""
    minimum: float | None = None  # the smallest value an int or float knob takes

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", KnobKind(self.kind))  # ValueError for an unknown kind

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this knob's value (None when it can)."""
        if self.kind == KnobKind.BOOL:
            ok, want = isinstance(value, bool), "true or false"
        elif self.kind == KnobKind.INT:
            ok, want = isinstance(value, int) and not isinstance(value, bool), "a whole number"
        elif self.kind == KnobKind.FLOAT:
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            )
            want = "a number"
        elif self.kind == KnobKind.CHOICE:
            ok, want = value in self.choices, f"one of {', '.join(map(str, self.choices))}"
        else:
            ok, want = isinstance(value, str) and value != "", "a non-empty string"
        if not ok:
            return f"must be {want} (got {value!r})"
        if self.minimum is not None and self.kind in NUMERIC and value < self.minimum:
            return f"must be at least {self.minimum:g} (got {value!r})"
        return None

    def parse(self, text: str) -> Any:
        """The value of `--engine-arg name=TEXT`, in this knob's type (checked later by
        check_config)."""
        try:
            if self.kind == KnobKind.INT:
                return int(text)
            if self.kind == KnobKind.FLOAT:
                return float(text)
        except ValueError:
            raise UserError(
                f"knob {self.name!r} must be "
                f"{'a whole number' if self.kind == KnobKind.INT else 'a number'} (got {text!r})"
            ) from None
        if self.kind == KnobKind.BOOL:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise UserError(f"knob {self.name!r} must be true or false (got {text!r})")
        return text


def knob_table(*knobs: Knob) -> Mapping[str, Knob]:
    """A read-only name -> Knob mapping, in the order given (which is also the order of the
    flags)."""
    return MappingProxyType({k.name: k for k in knobs})


def flag(name: str) -> str:
    """The usual command-line spelling of a snake_case knob: max_num_seqs -> --max-num-seqs."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Launcher:
    """One engine roofline can start. Subclasses fill in argv (and, where the engine has them, env,
    version, availability and a better way to read greedy token ids)."""

    name: str  # its key in LAUNCHERS and the value of --engine
    knobs: Mapping[str, Knob] = field(default_factory=knob_table, compare=False)
    health_path: str = "/health"  # what LocalServer polls until it answers 200
    help: str = ""
    # traits: what bench and tune need to know of an engine, asked here and never by its name
    reports_bytes_per_token: bool = False  # its responses carry the bytes read per token, so the
    # ceiling comes from the server and needs no --model
    usage_per_chunk: bool = False  # it counts usage in every streamed chunk (no need to ask)
    default_hardware: str | None = None  # the ceiling's hardware without --hardware ("local":
    # the engine runs on this machine and is held against its measured bandwidth)
    takes_template: bool = False  # started from a --engine-cmd template, not a known command
    # knobs a running server takes per request (`live_body`): a configuration that differs from the
    # server's only in these runs on it, without a restart
    live_knobs: frozenset[str] = frozenset()
    # its stream carries each chunk's token ids, and the prompt's in the first chunk, when a request
    # asks `"return_token_ids": true`: a single-stream bench run is also a greedy pass
    stream_token_ids: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.live_knobs) - set(self.knobs)
        if unknown:
            raise ValueError(f"launcher {self.name}: live knobs {sorted(unknown)} are not knobs")

    def default_model(self) -> str | None:
        """What the engine serves without --model (resolved only when asked: it may look for a
        file); None when it needs --model. A UserError when the default is missing."""
        return None

    def argv(
        self,
        *,
        model: str | None,
        port: int,
        host: str,
        config: Mapping[str, Any],
        extra_args: Sequence[str] = (),
        template: str | None = None,
    ) -> list[str]:
        """The server's argument list (never a shell string): knobs in the table's order, then
        extra_args."""
        raise NotImplementedError

    def learns_speed(self, config: Mapping[str, Any]) -> bool:
        """Whether requests of this configuration teach the server what makes later ones faster
        (the embedded engine's draft acceptance statistics): its timed runs need a warm-up pass
        first, or the first would time the learning. Default: assume so."""
        return True

    def prepare_commands(
        self, model: str | None, values: Mapping[str, Sequence[Any]]
    ) -> list[list[str]]:
        """Commands that do once per install what the engine's first starts would otherwise do
        inside a timed study (the embedded engine compiles its kernels for each weight format),
        given every value each knob may take; each quick when run before. Default: none."""
        return []

    def env(self, config: Mapping[str, Any]) -> dict[str, str]:
        """Extra environment for the server (on top of this process's)."""
        return {}

    def version(self) -> str | None:
        """The engine's version, found without starting a server; None when it is not installed."""
        return None

    def unavailable(self) -> str | None:
        """Why the engine cannot start on this machine (not installed: what to install), else
        None."""
        return None

    def check(self, config: Mapping[str, Any]) -> None:
        """Rules between knobs (each knob's own value is already checked): UserError naming the
        knob."""

    def live_body(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        """The request-body fields that give a server started without the live knobs this
        configuration's live knob values (sent with every request); None when the configuration
        needs a server of its own. Default: no knob is live."""
        return None

    async def greedy_outputs(
        self,
        url: str,
        model_id: str | None,
        prompts: Sequence[Prompt],
        max_tokens: int,
        *,
        extra_body: Mapping[str, Any] | None = None,
    ) -> list[GreedyOutput]:
        """Temperature 0, one request at a time: token ids where the engine gives them, text
        otherwise. extra_body: fields added to every request (`live_body`)."""
        from roofline.bench.engines.greedy import openai_greedy

        return await openai_greedy(url, model_id, prompts, max_tokens, extra_body=extra_body)

    # -- helpers for subclasses --------------------------------------------------------------------
    def settings(self, config: Mapping[str, Any]) -> list[tuple[Knob, Any]]:
        """(knob, value) for every knob set in config, in the table's order; None means "not
        set"."""
        return [(k, config[name]) for name, k in self.knobs.items() if config.get(name) is not None]

    def needs(
        self, config: Mapping[str, Any], knobs: Sequence[str], condition: bool, what: str
    ) -> None:
        """Refuse the first of `knobs` set in config unless `condition` holds (`what` says what it
        needs)."""
        if condition:
            return
        for name in knobs:
            if config.get(name) is not None:
                raise UserError(f"knob {name!r} of engine {self.name} needs {what}")

    def ordered(self, config: Mapping[str, Any], low: str, high: str) -> None:
        """Refuse low > high when both are set."""
        a, b = config.get(low), config.get(high)
        if a is not None and b is not None and a > b:
            raise UserError(
                f"knob {low!r} of engine {self.name} must not exceed {high!r} (got {a} > {b})"
            )


def check_config(launcher: Launcher, config: Mapping[str, Any]) -> None:
    """UserError naming the first unknown knob or bad value; then the launcher's rules between
    knobs."""
    for name, value in config.items():
        knob = launcher.knobs.get(name)
        if knob is None:
            known = (
                ", ".join(launcher.knobs) or "none (pass its own flags with --engine-arg=--flag)"
            )
            raise UserError(f"engine {launcher.name} has no knob {name!r}; its knobs: {known}")
        if value is None:
            continue
        why = knob.problem(value)
        if why:
            raise UserError(f"knob {name!r} of engine {launcher.name} {why}")
    launcher.check(config)


def parse_engine_args(launcher: Launcher, args: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Split `--engine-arg` values into knobs (`name=value`, snake_case name) and arguments passed
    to the engine as they are (anything else, e.g. `--engine-arg=--threads --engine-arg=2`).

    An engine without knobs (`command`) takes every value as it is."""
    config: dict[str, Any] = {}
    extra: list[str] = []
    for arg in args:
        m = _KNOB_ARG.fullmatch(arg) if launcher.knobs else None
        if m is None:
            extra.append(arg)
            continue
        name, text = m.groups()
        knob = launcher.knobs.get(name)
        if knob is None:
            raise UserError(
                f"engine {launcher.name} has no knob {name!r} (from --engine-arg {arg!r}); its "
                f"knobs: {', '.join(launcher.knobs)}; pass the engine's own flags as "
                "--engine-arg=--flag"
            )
        config[name] = knob.parse(text)
    return config, extra
