"""Run `roofline ceiling ARGS --json` in fresh interpreters: the heavy modules it must not import,
and how long each run took (import, parse, arithmetic, print; the interpreter's own start
excluded)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "numba", "aiohttp", "numpy")


def ceiling_run_seconds(*args: str, runs: int = 3) -> list[float]:
    """Seconds of each of `runs` runs; fails when a run errs or imports one of HEAVY."""
    code = (
        "import sys, time, io, contextlib\n"
        "t = time.perf_counter()\n"
        "from roofline.cli.main import run\n"
        f"sys.argv = ['roofline', 'ceiling', *{list(args)!r}, '--json']\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        run()\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        "elapsed = time.perf_counter() - t\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(elapsed, ','.join(heavy))\n"
    )
    seconds = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        elapsed, heavy = p.stdout.split(" ")
        assert heavy.strip() == "", f"imported: {heavy}"
        seconds.append(float(elapsed))
    return seconds
