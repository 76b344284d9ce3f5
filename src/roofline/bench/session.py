"""A benchmark session: optionally start a local engine, discover the server, resolve the ceiling,
run the plan, and always stop what was started."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roofline.bench.against import resolve_ceiling
from roofline.bench.engines import Launcher, start_engine
from roofline.bench.plan import BenchPlan
from roofline.bench.runner import Outcome, Progress, discover, run_bench
from roofline.errors import UserError


@dataclass(frozen=True)
class EngineSpec:
    """An engine to start for the session: a launcher from `bench.engines.LAUNCHERS` and what it gets."""

    launcher: Launcher | None = None  # None: measure the URL in the plan, start nothing
    config: Mapping[str, Any] = field(default_factory=dict)  # the launcher's knobs
    args: tuple[str, ...] = ()  # passed to the engine as they are, after the knobs
    template: str | None = None  # the command launcher's {port} {host} {python} {model} template
    model: str | None = None  # what the engine serves (its own --model)
    ready_timeout_s: float = 300.0
    host: str = "127.0.0.1"

    @property
    def wanted(self) -> bool:
        return self.launcher is not None


def run_session(plan: BenchPlan, run_dir: Path, progress: Progress, engine: EngineSpec | None = None) -> Outcome:
    """Run the plan (against a started engine when asked); the engine is stopped in every case.

    The embedded engine runs on this machine and reports its bytes per token, so it is held against
    this machine's read bandwidth measured right before the run (the profile is measured first if it is
    missing), unless --hardware says otherwise."""
    if engine is None or not engine.wanted:
        return _measure(plan, run_dir, progress, default_local=False)
    launcher = engine.launcher
    embedded = launcher.name == "embedded"
    if embedded and plan.hardware in (None, "local"):
        ensure_local_profile(progress)
    with start_engine(launcher, model=engine.model, config=engine.config, log_path=run_dir / "server.log",
                      extra_args=engine.args, template=engine.template, host=engine.host,
                      ready_timeout_s=engine.ready_timeout_s,
                      on_start=lambda s: progress.note(f"starting {' '.join(s.argv)}")) as server:
        progress.note(f"server ready at {server.url}")
        started = {"name": launcher.name, "version": launcher.version(), "config": dict(engine.config),
                   "argv": server.argv, "log": str(server.log_path)}
        plan = replace(plan, url=server.url, provenance_extra={**plan.provenance_extra, "engine": started})
        if embedded and plan.hardware in (None, "local"):
            # hold the run against the bandwidth of these minutes, not the profile's: a shared host drifts
            from roofline.hardware.probe import read_bandwidth_now_bytes_per_s

            plan = replace(plan, hardware=f"{read_bandwidth_now_bytes_per_s() / 1e9:.3f}GB/s")
            progress.note(f"read bandwidth now: {plan.hardware} (the ceiling of this run)")
        return _measure(plan, run_dir, progress, default_local=embedded)


def _measure(plan: BenchPlan, run_dir: Path, progress: Progress, *, default_local: bool) -> Outcome:
    info = asyncio.run(discover(plan))
    hardware = plan.hardware or ("local" if default_local else None)
    try:
        ceiling, note = resolve_ceiling(model=plan.model, hardware=hardware, served=info.get("served"),
                                        server_info=info.get("roofline"), gpus=plan.gpus)
    except UserError as e:
        if plan.hardware:  # asked for explicitly: the user must fix it before anything is measured
            raise
        ceiling, note = None, f"no ceiling: {e}"
    if note:
        progress.note(note)
    if ceiling is not None and plan.hardware is None:
        plan = replace(plan, hardware=hardware)
    if info.get("error"):
        progress.note(f"discovery: {info['error']}")
    return run_bench(plan, run_dir, progress, ceiling=ceiling, info=info, ceiling_note=note)


def ensure_local_profile(progress: Progress) -> None:
    """The embedded engine is held against this machine's measured bandwidth: measure it once if
    `roofline probe` never ran here (before the server starts, so nothing else competes for memory)."""
    from roofline.hardware.probe import measure_profile
    from roofline.hardware.profile import load_local_profile, save_profile

    if load_local_profile() is not None:
        return
    progress.note("no measured profile of this machine yet: running `roofline probe` first (about 20 s)")
    path = save_profile(measure_profile())
    progress.note(f"profile saved to {path}")
