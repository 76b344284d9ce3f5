"""A benchmark session: optionally start a local engine, discover the server, resolve the ceiling,
run the plan, and always stop what was started."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roofline.bench.against import LOCAL, held_against_window, resolve_ceiling
from roofline.bench.driver import Outcome, Progress, discover, run_bench
from roofline.bench.engines import GreedyOutput, Launcher, start_engine
from roofline.bench.plan import BenchPlan
from roofline.bench.verify import Greedy
from roofline.errors import UserError
from roofline.hardware.window import BandwidthWindow, Measure, short_probe


@dataclass(frozen=True)
class EngineSpec:
    """An engine to start for the session: a launcher from `bench.engines.LAUNCHERS` and what it
    gets."""

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


def run_session(
    plan: BenchPlan,
    run_dir: Path,
    progress: Progress,
    engine: EngineSpec | None = None,
    *,
    measure_bandwidth: Measure | None = None,
    model_file: str | None = None,
    greedy: Greedy | None = None,
    reference: Sequence[GreedyOutput] | None = None,
) -> Outcome:
    """Run the plan (against a started engine when asked); the engine is stopped in every case.

    A run held against this machine (`--hardware local`, or a launcher whose default hardware is
    local unless --hardware says otherwise) uses the read bandwidth of its own window: the higher of
    a short probe right before and right after (`roofline.hardware.window`); measure_bandwidth() ->
    (bytes/s, kernel) replaces that probe. Such an engine's profile is measured first if none exists
    here. model_file: the model of an engine this session did not start, to count the file's bytes
    per token when the server does not report them (a started engine's model argument serves the
    same way). greedy: how --verify asks for greedy outputs (default: the started engine's
    launcher, else the OpenAI route); reference: each prompt's output alone, when the caller has
    it already (else --verify asks for it)."""
    if engine is None or not engine.wanted:
        return _measure(
            plan,
            run_dir,
            progress,
            default_hardware=None,
            measure=measure_bandwidth,
            model_file=model_file,
            greedy=greedy,
            reference=reference,
        )
    launcher = engine.launcher
    if launcher.default_hardware == LOCAL and plan.hardware in (None, LOCAL):
        ensure_local_profile(progress)  # an engine on this machine reads the profile as it starts
    with start_engine(
        launcher,
        model=engine.model,
        config=engine.config,
        log_path=run_dir / "server.log",
        extra_args=engine.args,
        template=engine.template,
        host=engine.host,
        ready_timeout_s=engine.ready_timeout_s,
        on_start=lambda s: progress.note(f"starting {' '.join(s.argv)}"),
    ) as server:
        progress.note(f"server ready at {server.url}")
        started = {
            "name": launcher.name,
            "version": launcher.version(),
            "config": dict(engine.config),
            "argv": server.argv,
            "log": str(server.log_path),
        }
        plan = replace(
            plan, url=server.url, provenance_extra={**plan.provenance_extra, "engine": started}
        )
        return _measure(
            plan,
            run_dir,
            progress,
            default_hardware=launcher.default_hardware,
            measure=measure_bandwidth,
            model_file=model_file or engine.model,
            greedy=greedy or launcher.greedy_outputs,  # ids by the engine's own route
            reference=reference,
        )


def _measure(
    plan: BenchPlan,
    run_dir: Path,
    progress: Progress,
    *,
    default_hardware: str | None,
    measure: Measure | None,
    model_file: str | None = None,
    greedy: Greedy | None = None,
    reference: Sequence[GreedyOutput] | None = None,
) -> Outcome:
    info = asyncio.run(discover(plan))
    hardware = plan.hardware or default_hardware
    measure = measure or (
        lambda: short_probe(by="the run window of `roofline bench` (or a tune trial)")
    )
    window = None
    # the bandwidth of these minutes, not a profile's: a shared machine drifts
    if hardware == LOCAL:
        before, kernel = measure()
        window = BandwidthWindow(before, before_kernel=kernel)
        progress.note(
            f"read bandwidth before the run: {before / 1e9:.1f} GB/s (best of the probe's read "
            f"kernels: {kernel})"
        )
    try:
        ceiling, note = resolve_ceiling(
            model=plan.model,
            hardware=hardware,
            served=info.get("served"),
            server_info=info.get("roofline"),
            gpus=plan.gpus,
            window=window,
            model_file=model_file or plan.model,
        )
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
    settle = None
    if window is not None and ceiling is not None:

        def settle(held: Any) -> tuple[Any, dict]:
            after, kernel = measure()
            closed = window.closed(after, kernel)
            progress.note(
                f"read bandwidth after the run: {after / 1e9:.1f} GB/s ({kernel}); the run is "
                f"held against {closed.bound_bytes_per_s / 1e9:.1f} GB/s, the higher"
                + (
                    f" (drift {100 * (closed.drift_fraction or 0):.0f}%: the machine was busy)"
                    if closed.drift_is_large()
                    else ""
                )
            )
            return held_against_window(held, closed), {"local_bandwidth": closed.to_json()}

    return run_bench(
        plan,
        run_dir,
        progress,
        ceiling=ceiling,
        info=info,
        ceiling_note=note,
        settle_ceiling=settle,
        greedy=greedy,
        reference=reference,
    )


def ensure_local_profile(progress: Progress) -> None:
    """The embedded engine is held against this machine's measured bandwidth: measure it once if
    `roofline probe` never ran here (before the server starts, so nothing else competes for
    memory)."""
    from roofline.hardware.probe import measure_profile
    from roofline.hardware.profile import load_local_profile, save_profile

    if load_local_profile() is not None:
        return
    progress.note(
        "no measured profile of this machine yet: running `roofline probe` first (about 10 s)"
    )
    path = save_profile(measure_profile())
    progress.note(f"profile saved to {path}")
