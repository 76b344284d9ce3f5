"""Start a local server for the benchmark, wait until it answers, and always stop it.

`--engine embedded` runs `python -m roofline serve --port P --host 127.0.0.1 [engine args]`;
`--engine-cmd` runs any command, with {port}, {host} and {python} filled in. The server gets its own
process group (so Ctrl-C in the terminal reaches only roofline, which then stops the whole group)
and, on Linux, a parent-death signal, so even a killed `roofline bench` leaves no server behind.
"""

from __future__ import annotations

import ctypes
import http.client
import os
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
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; elsewhere a no-op)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def embedded_command(port: int, host: str, engine_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "roofline", "serve", "--port", str(port), "--host", host, *engine_args]


def command_from_template(template: str, port: int, host: str) -> list[str]:
    try:
        return shlex.split(template.format(port=port, host=host, python=shlex.quote(sys.executable)))
    except (KeyError, IndexError, ValueError) as e:
        raise UserError(f"cannot read --engine-cmd {template!r} ({e}); use the placeholders {{port}}, {{host}}, {{python}}") from None


class ServerDied(UserError):
    """The server exited before it was ready; `tail` holds the end of its log."""

    def __init__(self, message: str, tail: str) -> None:
        super().__init__(message)
        self.tail = tail


class LocalServer:
    """A server process: `with LocalServer(argv, ...) as s:` starts it, waits for health, stops it."""

    def __init__(self, argv: list[str], *, host: str, port: int, log_path: Path, ready_timeout_s: float = 300.0,
                 health_path: str = "/health") -> None:
        self.argv = argv
        self.host = host
        self.port = port
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.health_path = health_path
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
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=die_with_parent)
        except OSError as e:
            raise UserError(f"cannot start the server {self.argv[0]!r} ({e.strerror})") from None
        finally:
            log.close()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerDied(f"the server exited with code {code} before {self.health_path} answered; "
                                 f"its log is {self.log_path}", self.tail())
            if self._healthy():
                return
            if time.monotonic() > deadline:
                raise ServerDied(f"the server did not answer {self.health_path} within {self.ready_timeout_s:g}s; "
                                 f"its log is {self.log_path}", self.tail())
            time.sleep(0.1)

    def _healthy(self) -> bool:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
        try:
            conn.request("GET", self.health_path)
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_bytes()[-8192:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after grace_s; waits for the exit."""
        p = self.proc
        if p is None or p.returncode is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # children the server left in its group
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
