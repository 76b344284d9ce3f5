"""The AVX2 exactness run (tests/engine/test_isa.py), started as soon as collection ends.

It is a pytest subprocess of its own that spends most of its minutes compiling kernels, while the
session compiles and runs its own: started when collection ends, it is done, or nearly, by the
time test_isa.py asks for its verdict, instead of adding its minutes to the suite's. Nothing in
either run times anything, so the overlap changes no result.

One process owns it: the session's own when the tests run in one process, the xdist controller
when they run in workers (tests/conftest.py). Its folder then reaches every worker
(`FOLDER_KEY`), and whichever worker runs test_isa.py reads the verdict from the folder: the
output in `output.txt`, the exit status in `rc`, written when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from roofline.hardware.machine import cpu_flags
from roofline.simd import avx2_target_env

TESTS = Path(__file__).resolve().parent
# set in the subprocess: its own copy of test_isa.py has nothing to run, and starts no run
INSIDE = "ROOFLINE_TEST_ISA_RUN"
# the test that reads the run's verdict: the run starts only when it is selected
VERDICT_TEST = "engine/test_isa.py::test_the_exactness_tests_pass_on_avx2_code"
# the run's folder, in an xdist worker's `workerinput`
FOLDER_KEY = "roofline_avx2_run"
TIMEOUT_S = 3600


def avx2_env(cache_dir: Path, python_path: Path | None = None) -> dict[str, str]:
    """This process' environment with the AVX2 targets set, and numba's kernel cache in cache_dir
    (the host's cached kernels are its own ISA's code); python_path first on PYTHONPATH, for a
    script whose imports are found in a folder above its own."""
    env = {**os.environ, **avx2_target_env(), "NUMBA_CACHE_DIR": str(cache_dir), INSIDE: "1"}
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), env.get("PYTHONPATH")]))
    return env


def why_not_run() -> str | None:
    """Why this host runs no separate AVX2 run, or None when it should."""
    if os.environ.get(INSIDE):
        return "this is the AVX2 run itself"
    flags = set(cpu_flags().split())
    if not {"avx2", "fma"} <= flags:
        return "this CPU runs no AVX2 code"
    if "avx512f" not in flags:
        return "this host has no AVX-512: the suite's own run is the AVX2 run"
    return None


def wanted(node_ids: list[str]) -> bool:
    """Whether the collected tests include the verdict test, on a host that needs the run."""
    return any(i.endswith(VERDICT_TEST) for i in node_ids) and why_not_run() is None


@dataclass
class Avx2Run:
    """The run's folder: its kernel cache, its output and, once it has ended, its exit status."""

    folder: Path

    @property
    def cache_dir(self) -> Path:
        return self.folder / "numba"

    def started(self) -> bool:
        return (self.folder / "output.txt").exists()

    def verdict(self) -> tuple[int, str]:
        """Wait for the run to end; its exit status and output."""
        rc = self.folder / "rc"
        deadline = time.monotonic() + TIMEOUT_S
        while not rc.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the AVX2 run did not end in {TIMEOUT_S} s")
            time.sleep(1)
        return int(rc.read_text()), (self.folder / "output.txt").read_text(errors="replace")


def new_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="roofline-avx2-"))


@dataclass
class Avx2Process:
    """The owner's handle: the subprocess, stopped and its folder removed when the session ends."""

    run: Avx2Run
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.run.folder, ignore_errors=True)


def start(folder: Path) -> Avx2Process:
    """Start `pytest -m exactness` on tests/engine with the kernels compiled for AVX2; a thread
    writes its exit status to the folder when it ends."""
    (folder / "numba").mkdir(parents=True, exist_ok=True)
    log = open(folder / "output.txt", "w")  # noqa: SIM115 - closed by the waiting thread
    # one process (-n 0): its minutes are compiles, and the session's workers have the cores
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "exactness"]
    process = subprocess.Popen(
        [*cmd, "-p", "no:cacheprovider", str(TESTS / "engine")],
        cwd=TESTS.parent,
        env=avx2_env(folder / "numba"),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def wait() -> None:
        code = process.wait()
        log.close()
        with contextlib.suppress(OSError):  # stopped: the folder is gone
            (folder / "rc.part").write_text(str(code))
            os.replace(folder / "rc.part", folder / "rc")  # whole or absent to a reader

    threading.Thread(target=wait, daemon=True).start()
    return Avx2Process(Avx2Run(folder), process)


# the owner's process (the session's, or the xdist controller's) and the folder the workers get
OWNED = pytest.StashKey[Avx2Process]()
FOLDER = pytest.StashKey[Path]()


def owner_folder(config: pytest.Config) -> Path:
    """The run's folder, made once by the process that owns the run."""
    if FOLDER not in config.stash:
        config.stash[FOLDER] = new_folder()
    return config.stash[FOLDER]


def start_if_wanted(config: pytest.Config, node_ids: list[str]) -> None:
    """In the owner, once collection has ended: start the run if the verdict test is selected."""
    if OWNED not in config.stash and wanted(node_ids):
        config.stash[OWNED] = start(owner_folder(config))


def end(config: pytest.Config) -> None:
    """In the owner, when the session ends: stop the run and remove its folder."""
    if OWNED in config.stash:
        config.stash[OWNED].stop()
    if FOLDER in config.stash:
        shutil.rmtree(config.stash[FOLDER], ignore_errors=True)


def session_run(config: pytest.Config) -> Avx2Run | None:
    """The run this session started, seen from the process a test runs in; None if none."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run = Avx2Run(Path(workerinput[FOLDER_KEY]))
    elif OWNED in config.stash:
        run = config.stash[OWNED].run
    else:
        return None
    return run if run.started() else None
