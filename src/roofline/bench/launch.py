"""Start a local server, wait until it answers, and always stop it (`bench.engines` builds argv).

The server gets its own process group (Ctrl-C reaches only roofline, which stops the group) and, on
Linux, a parent-death signal, so even a killed `roofline bench` leaves no server. Its environment
carries a random token: a descendant that left the group still carries it, and `stop` ends every
process that does (Linux, through /proc).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from roofline.errors import UserError

_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
except (OSError, AttributeError):
    _prctl = None


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; elsewhere a
    no-op)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def command_from_template(
    template: str, port: int, host: str, model: str | None = None
) -> list[str]:
    """A command line written by the user, split like a shell would (never run by one), with
    {port}, {host}, {python} and {model} filled in."""
    if "{model}" in template and model is None:
        raise UserError(f"the engine command {template!r} uses {{model}}: give --model")
    try:
        return shlex.split(
            template.format(
                port=port,
                host=host,
                python=shlex.quote(sys.executable),
                model=shlex.quote(model or ""),
            )
        )
    except (KeyError, IndexError, ValueError) as e:
        raise UserError(
            f"cannot read --engine-cmd {template!r} ({e}); use the placeholders "
            "{port}, {host}, {python}, {model}"
        ) from None


TOKEN_VARIABLE = "ROOFLINE_SERVER_TOKEN"


def processes_with_token(token: str) -> list[int]:
    """Processes whose environment holds TOKEN_VARIABLE=token (Linux /proc; empty elsewhere)."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone meanwhile, or not ours
            pass
    return found


class ServerDied(UserError):
    """The server exited before it was ready; `tail` holds the end of its log."""

    def __init__(self, message: str, tail: str) -> None:
        super().__init__(message)
        self.tail = tail


class LocalServer:
    """A server process: `with LocalServer(argv, ...) as s:` starts it, waits for health, stops
    it."""

    def __init__(
        self,
        argv: list[str],
        *,
        host: str,
        port: int,
        log_path: Path,
        ready_timeout_s: float = 300.0,
        health_path: str = "/health",
        env: dict[str, str] | None = None,
        stop_grace_s: float = 10.0,
    ) -> None:
        self.argv = argv
        self.host = host
        self.port = port
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.health_path = health_path
        self.env = dict(env or {})  # on top of this process's environment
        self.stop_grace_s = stop_grace_s  # SIGTERM to SIGKILL
        self.token = secrets.token_hex(8)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> LocalServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, TOKEN_VARIABLE: self.token}
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            except OSError as e:
                raise UserError(
                    f"cannot start the server {self.argv[0]!r} ({e.strerror})"
                ) from None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerDied(
                    f"the server exited with code {code} before {self.health_path} answered; "
                    f"its log is {self.log_path}",
                    self.tail(),
                )
            if self._healthy(timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
                return
            if time.monotonic() > deadline:
                raise ServerDied(
                    f"the server did not answer {self.health_path} "
                    f"within {self.ready_timeout_s:g}s; "
                    f"its log is {self.log_path}",
                    self.tail(),
                )
            time.sleep(0.1)

    def _healthy(self, timeout_s: float = 2.0) -> bool:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            conn.request("GET", self.health_path)
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):  # not listening yet, or not speaking HTTP
            return False
        finally:
            conn.close()

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_bytes()[-8192:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM to the server's process group, SIGKILL after grace_s (default: stop_grace_s);
        waits for the exit. What the server left behind is killed even when the server itself
        already exited: the rest of its group, and every process carrying its token."""
        p = self.proc
        if p is None:
            return
        grace_s = self.stop_grace_s if grace_s is None else grace_s
        if p.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                self._signal_all(sig)
                try:
                    p.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._signal_all(signal.SIGKILL)

    def _signal_all(self, sig: int) -> None:
        """`sig` to the server's process group, and to every process outside it carrying its token
        (once each: a second SIGTERM can interrupt a server's own orderly shutdown)."""
        group = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
        for pid in processes_with_token(self.token):
            try:
                if os.getpgid(pid) != group:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
