"""The engine a study's trials run on: one server kept across consecutive trials that can share it.

    body = launcher.live_body(config)       None: this configuration needs a server of its own
    restart = config less the live knobs    what the server is started with
    same restart knobs as the running one   the trial runs on it, its requests carry `body`
    otherwise                               the running one stops, a new one starts

So a trial that changes only live knobs (the embedded engine's proposer and its options) costs its
requests, not a launch, a model load and a warm-up; a configuration the server ran before (the
incumbent measured again in the next step) is `warm`. Every server started is stopped: after a trial
that cannot share it, on any error in a trial, and at the end (`close`, also on Ctrl-C).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Served:
    """Where one trial runs: the server's URL, its command line and log, the fields every request
    of the trial carries, and whether the trial started it."""

    url: str
    argv: tuple[str, ...]  # what the server was started with
    log_path: Path
    body: Mapping[str, Any] = field(default_factory=dict)
    launched: bool = True
    # the command line that starts the trial's whole configuration, live knobs as flags: what a
    # user runs to get this trial again (argv when the trial carries no live knobs)
    command: tuple[str, ...] = ()
    # the server ran requests of this same configuration before (an earlier trial): warmed up
    warm: bool = False


@dataclass
class _Running:
    server: Any  # bench.launch.LocalServer
    stack: contextlib.ExitStack
    argv: tuple[str, ...]
    restart: dict[str, Any]
    log_path: Path
    shared: bool  # later trials with the same restart knobs may run on it
    ran: set[str] = field(default_factory=set)  # the live bodies its trials carried (as JSON)


class Servers:
    """Starts, keeps and stops the trials' engine (one at a time). A context manager."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings  # tune.settings.TrialSettings
        self.launches = 0
        self._running: _Running | None = None

    def serve(
        self, config: Mapping[str, Any], log_path: Path, on_start: Callable[[Any], None]
    ) -> Served:
        """The server for `config`: the running one when it can take it, else a new one (its log
        at log_path; on_start(LocalServer) just before its process starts)."""
        from roofline.bench.engines import start_engine

        launcher = self.settings.launcher
        body = launcher.live_body(config)
        live = launcher.live_knobs if body is not None else frozenset()
        restart = {k: v for k, v in config.items() if k not in live}
        r = self._running
        if (
            r is not None
            and body is not None
            and r.shared
            and r.restart == restart
            and r.server.proc.poll() is None
        ):
            command = self._command(config, r.server)
            warm = _key(body) in r.ran
            r.ran.add(_key(body))
            return Served(r.server.url, r.argv, r.log_path, body, False, command, warm)
        self.close()
        stack = contextlib.ExitStack()
        server = stack.enter_context(
            start_engine(
                launcher,
                model=self.settings.model,
                config=restart,
                log_path=log_path,
                extra_args=self.settings.extra_args,
                ready_timeout_s=self.settings.ready_timeout_s,
                stop_grace_s=self.settings.stop_grace_s,
                on_start=on_start,
            )
        )
        self.launches += 1
        argv = tuple(server.argv)
        self._running = _Running(server, stack, argv, restart, log_path, body is not None)
        self._running.ran.add(_key(body or {}))
        command = self._command(config, server) if body else argv
        return Served(server.url, argv, log_path, body or {}, True, command)

    def _command(self, config: Mapping[str, Any], server: Any) -> tuple[str, ...]:
        """The launcher's command line for the whole `config` on `server`'s address."""
        return tuple(
            self.settings.launcher.argv(
                model=self.settings.model,
                port=server.port,
                host=server.host,
                config=dict(config),
                extra_args=self.settings.extra_args,
            )
        )

    def done(self) -> None:
        """After a trial that went well: stop a server no later trial may share."""
        if self._running is not None and not self._running.shared:
            self.close()

    def failed(self, error: BaseException) -> None:
        """After a trial that raised `error`: stop the server, raising bench.launch.ServerDied in
        place of `error` when the server had died."""
        r, self._running = self._running, None
        if r is not None:
            r.stack.__exit__(type(error), error, error.__traceback__)

    def close(self) -> None:
        """Stop the running server, if any (waits for it to be gone). A server that died after its
        last trial ended is not that trial's failure: not raised."""
        from roofline.bench.launch import ServerDied

        r, self._running = self._running, None
        if r is not None:
            with contextlib.suppress(ServerDied):  # stopped all the same; its trials are recorded
                r.stack.close()

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _key(body: Mapping[str, Any]) -> str:
    """A live body as the set of bodies a server ran holds it."""
    return json.dumps(body, sort_keys=True)
