"""`roofline` with the fake engine registered: `python fake_tune.py tune --engine fake ...` (the
tests run the real CLI in a subprocess, to kill it or to run two workers)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from tune_helpers import FAKE

from roofline.bench import engines
from roofline.cli.main import run

engines.LAUNCHERS["fake"] = FAKE
run()
