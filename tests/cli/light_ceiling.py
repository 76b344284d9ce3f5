"""Run `roofline ceiling ARGS --json` in a fresh interpreter: what it imports. A command starts
slowly by what it loads (numpy ~0.1 s, torch seconds), so the check is on the modules, which this
host's load cannot change, not on the seconds, which it can."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "numba", "aiohttp", "numpy", "matplotlib", "optuna")
# roofline's own packages the command never needs: the decoder and the charts
NOT_NEEDED = ("roofline.engine", "roofline.report")


def ceiling_run_imports(*args: str) -> list[str]:
    """The modules of HEAVY and NOT_NEEDED one run imported (none for a light run); fails when
    the run errs."""
    code = (
        "import sys, io, contextlib\n"
        "from roofline.cli.main import run\n"
        f"sys.argv = ['roofline', 'ceiling', *{list(args)!r}, '--json']\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        run()\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        f"names = {(*HEAVY, *NOT_NEEDED)!r}\n"
        "print(','.join(sorted(n for n in names if n in sys.modules)))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [m for m in p.stdout.strip().split(",") if m]
