"""What every trial of a study shares: the engine, the model, the objective and its workload."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from roofline.bench.workloads import Prompt
from roofline.tune.objectives import Objective, ObjectiveSettings

REPEAT_POLICIES = ("fresh", "repeat")  # tune's subset of bench's --repeat-policy


@dataclass(frozen=True)
class TrialSettings:
    """What every trial of a study shares."""

    launcher: Any  # roofline.bench.engines.Launcher
    model: str | None
    objective: Objective
    objective_settings: ObjectiveSettings
    prompts: Sequence[Prompt]
    reps: int = 2
    max_tokens: int = 128
    hardware: str | None = None  # for the ceiling: "local", a catalogue name or a bandwidth
    # model for the ceiling when the server does not report its bytes
    ceiling_model: str | None = None
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = 300.0
    request_timeout_s: float = 300.0
    stop_grace_s: float = 10.0  # SIGTERM -> SIGKILL when the engine ignores it
    usage: str = "auto"  # bench's token accounting; "per-chunk" skips the negotiation request
    # fresh: with a server that remembers across requests, the objective counts first-time prompts
    # only (tune.engine_runs); repeat: every request counts
    repeat_policy: str = "fresh"
    # False: a trial whose greedy outputs differ from the baseline's can never be best, so its
    # speed is measured on one repetition only (shown, not decided on)
    allow_inexact: bool = False
    # the bandwidth probe's buffer (hardware.window.ProbeBuffer), written once for the whole study
    # (None: each trial writes its own)
    probe_buffer: Any = None
