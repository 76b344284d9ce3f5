"""Where the measured profile of this machine lives, and how it is written and read back.

The profile is one JSON file, `<cache dir>/hardware/local.json`, written by `roofline probe` and read
by `--hardware local`. Its shape (rates in bytes/s and FLOP/s, each with its spread):

    {"name": "local", "measured_at": iso8601, "roofline_version": str, "cpu": str, "threads": int,
     "memory_bytes": int,
     "bandwidth_bytes_per_s": {"read": STATS, "copy": STATS, "triad": STATS, "matvec_fp32": STATS},
     "flops": {"matvec_fp32": STATS, "matmul_fp32": STATS, "matmul_bf16": STATS},
     "backends": {"kernels": {kernel: library}, "versions": {library: version}},
     "settings": {...},
     "cuda": {"device": str, "bandwidth_bytes_per_s": {...}, "flops": {...}, ...}}   # only with a GPU

    STATS = {"median": float, "min": float, "max": float, "runs": [float, ...]}

`bandwidth_bytes_per_s.read` is the best read kernel's STATS plus `"best"` (its fastest pass: the figure
`--hardware local` uses), `"kernel"` (its name) and `"kernels"` ({name: STATS} for every read kernel).

`flops.matmul_bf16` is present only when torch is installed (numpy has no bf16), `cuda` only when
torch sees a CUDA device.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from roofline.errors import UserError

CACHE_DIR_ENV = "ROOFLINE_CACHE_DIR"


def profile_dir() -> Path:
    """`$ROOFLINE_CACHE_DIR` when set, else the platform's user cache directory for roofline."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("roofline"))


def profile_path() -> Path:
    return profile_dir() / "hardware" / "local.json"


def save_profile(d: dict[str, Any]) -> Path:
    """Write the profile atomically: a temporary file in the same folder, then a rename over the old one.

    A reader therefore sees either the previous profile or the new one, never half a file.
    """
    path = profile_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".local.", suffix=".json.tmp")
    except OSError as e:
        raise UserError(f"cannot write the profile in {path.parent} ({e.strerror}); "
                        f"set {CACHE_DIR_ENV} to a writable folder or pass --no-save") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def load_local_profile() -> dict[str, Any] | None:
    """The saved profile, or None when `roofline probe` has not been run; a damaged file is a UserError."""
    path = profile_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"cannot read the hardware profile {path} ({e.strerror}); re-run `roofline probe`") from None
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"the hardware profile {path} is not valid JSON; re-run `roofline probe`") from None
    problem = profile_problem(d)
    if problem:
        raise UserError(f"the hardware profile {path} is unusable ({problem}); re-run `roofline probe`")
    return d


def profile_problem(d: Any) -> str | None:
    """What makes `d` unusable as a profile (a short phrase), or None when it has what readers need."""
    if not isinstance(d, dict):
        return "not a JSON object"
    for section in ("bandwidth_bytes_per_s", "flops"):
        if not isinstance(d.get(section), dict):
            return f"missing {section!r}"
    for kernel in ("read", "copy", "triad"):
        if positive_median(d["bandwidth_bytes_per_s"].get(kernel)) is None:
            return f"no positive median for bandwidth {kernel!r}"
    return None


def positive_median(stats: Any) -> float | None:
    """The median of one kernel's STATS when it is a positive number, else None."""
    v = stats.get("median") if isinstance(stats, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None
