"""A benchmark session: optionally start a local engine, discover the server, resolve the ceiling,
run the plan, and always stop what was started."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path

from roofline.bench.against import resolve_ceiling
from roofline.bench.launch import (
    LocalServer,
    command_from_template,
    embedded_command,
    free_port,
)
from roofline.bench.plan import BenchPlan
from roofline.bench.runner import Outcome, Progress, discover, run_bench
from roofline.errors import UserError


@dataclass(frozen=True)
class EngineSpec:
    kind: str | None = None  # "embedded" or None
    args: tuple[str, ...] = ()
    command: str | None = None  # a template with {port}, {host}, {python}
    ready_timeout_s: float = 300.0
    host: str = "127.0.0.1"

    @property
    def wanted(self) -> bool:
        return bool(self.kind or self.command)

    def argv(self, port: int) -> list[str]:
        if self.command:
            return command_from_template(self.command, port, self.host)
        return embedded_command(port, self.host, list(self.args))


def run_session(plan: BenchPlan, run_dir: Path, progress: Progress, engine: EngineSpec | None = None) -> Outcome:
    """Run the plan (against a started engine when asked); the engine is stopped in every case."""
    if engine is None or not engine.wanted:
        return _measure(plan, run_dir, progress, default_local=False)
    if engine.kind == "embedded" and plan.hardware in (None, "local"):
        ensure_local_profile(progress)
    port = free_port(engine.host)
    server = LocalServer(engine.argv(port), host=engine.host, port=port, log_path=run_dir / "server.log",
                         ready_timeout_s=engine.ready_timeout_s)
    progress.note(f"starting {' '.join(server.argv)}")
    with server:
        progress.note(f"server ready at {server.url}")
        plan = replace(plan, url=server.url,
                       provenance_extra={**plan.provenance_extra, "engine": {"argv": server.argv, "log": str(server.log_path)}})
        return _measure(plan, run_dir, progress, default_local=engine.kind == "embedded")


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
