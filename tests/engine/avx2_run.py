"""The AVX2 exactness run (tests/engine/test_isa.py), started as soon as collection ends.

It is a pytest subprocess of its own that spends most of its minutes compiling kernels, one core's
work, while this session compiles and runs its own on the other: started when collection ends, it
is done, or nearly, by the time test_isa.py asks for its verdict, instead of adding its minutes to
the suite's. Nothing in either run times anything, so the overlap changes no result.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from roofline.hardware.machine import cpu_flags
from roofline.simd import avx2_target_env

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
# set in the subprocess: its own copy of test_isa.py has nothing to run, and starts no run
INSIDE = "ROOFLINE_TEST_ISA_RUN"
# the test that reads the run's verdict: the run starts only when it is selected
VERDICT_TEST = "engine/test_isa.py::test_the_exactness_tests_pass_on_avx2_code"
TIMEOUT_S = 3600


def avx2_env(cache_dir: Path) -> dict[str, str]:
    """This process' environment with the AVX2 targets set, and numba's kernel cache in cache_dir
    (the host's cached kernels are its own ISA's code)."""
    return {**os.environ, **avx2_target_env(), "NUMBA_CACHE_DIR": str(cache_dir), INSIDE: "1"}


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


@dataclass
class Avx2Run:
    """The subprocess: its kernel cache, and its output in a file (a pipe nobody reads while the
    session runs would fill and stall it)."""

    folder: Path
    process: subprocess.Popen
    log: object

    @property
    def cache_dir(self) -> Path:
        return self.folder / "numba"

    def verdict(self) -> tuple[int, str]:
        """Wait for the run; its exit status and output."""
        code = self.process.wait(timeout=TIMEOUT_S)
        self.log.flush()
        return code, (self.folder / "output.txt").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Avx2Run:
    """Start `pytest -m exactness` on tests/engine with the kernels compiled for AVX2."""
    folder = Path(tempfile.mkdtemp(prefix="roofline-avx2-"))
    (folder / "numba").mkdir()
    log = open(folder / "output.txt", "w")  # noqa: SIM115 - closed by stop()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "exactness", "-p", "no:cacheprovider"]
    process = subprocess.Popen(
        [*cmd, str(HERE)],
        cwd=TESTS.parent,
        env=avx2_env(folder / "numba"),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Avx2Run(folder, process, log)
