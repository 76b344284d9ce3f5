"""Where this machine's measured profile lives, and how it is written and read back.

One JSON file, `<cache dir>/hardware/local.json`, written by `roofline probe`, read by `--hardware
local`. Rates in bytes/s and FLOP/s; times iso8601:

    {"name": "local", "measured_at", "roofline_version", "cpu", "threads", "memory_bytes",
     "bandwidth_bytes_per_s": {"read" | "copy" | "triad" | "matvec_fp32": STATS},
     "flops": {"matvec_fp32" | "matmul_fp32" | "matmul_bf16" (torch only): STATS},
     "backends": {"kernels": {kernel: library}, "versions": {library: version}}, "settings",
     "cuda": {"device", "bandwidth_bytes_per_s", "flops", ...} (a CUDA device only),
     "best_read": {"bytes_per_s", "measured_at", "by", "kernel"}}
    STATS = {"median", "min", "max", "runs": [...]}

`read` adds `"best"` (the fastest pass, what `--hardware local` uses), `"kernel"` and `"kernels"`
({name: STATS}). `best_read` is the best read any probe or run window (`window.short_probe`) has
shown and only rises (a new probe keeps a higher old one, same CPU), so a slow minute never lowers
the ceiling. Older profiles read as the probe's own best.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from roofline.errors import UserError

CACHE_DIR_ENV = "ROOFLINE_CACHE_DIR"
BEST_READ = "best_read"
PROBE = "roofline probe"


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
    """Write the profile atomically (a temporary file in the same folder, then a rename), so a
    reader sees the old profile or the new one, never half a file. `d`'s `best_read` is first set
    in place to the higher of its own and the saved profile's (`kept_best_read`).
    """
    path = profile_path()
    best = kept_best_read(d, _previous(path))
    if best is not None:
        d[BEST_READ] = best
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".local.", suffix=".json.tmp")
    except OSError as e:
        raise UserError(
            f"cannot write the profile in {path.parent} ({e.strerror}); "
            f"set {CACHE_DIR_ENV} to a writable folder or pass --no-save"
        ) from None
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


def _previous(path: Path) -> dict[str, Any] | None:
    """The saved profile as it is, or None when there is none or it cannot be read (it is being
    replaced)."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _rate(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def probe_best_read(d: dict[str, Any]) -> dict[str, Any] | None:
    """The probe's own read figure as a `best_read` record: its best pass (the median in profiles
    older than the best), measured at the profile's time by `roofline probe`; None when it has
    none."""
    bw = d.get("bandwidth_bytes_per_s")
    read = bw.get("read") if isinstance(bw, dict) else None
    if not isinstance(read, dict):
        return None
    rate = _rate(read.get("best")) or positive_median(read)
    if rate is None:
        return None
    return {
        "bytes_per_s": rate,
        "measured_at": str(d.get("measured_at") or "?"),
        "by": PROBE,
        "kernel": str(read.get("kernel") or ""),
    }


def best_read(d: dict[str, Any]) -> dict[str, Any] | None:
    """The best read rate this profile records: its `best_read`, or the probe's own when that is
    higher (or when the profile predates `best_read`)."""
    kept = d.get(BEST_READ)
    kept = kept if isinstance(kept, dict) and _rate(kept.get("bytes_per_s")) else None
    probe = probe_best_read(d)
    candidates = [c for c in (kept, probe) if c is not None]
    return max(candidates, key=lambda c: float(c["bytes_per_s"])) if candidates else None


def kept_best_read(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `best_read` a profile about to be saved carries: the higher of its own and the old
    profile's, the old one only when it was measured on the same CPU."""
    candidates = [best_read(new)]
    if old is not None and old.get("cpu") == new.get("cpu"):
        candidates.append(best_read(old))
    candidates = [c for c in candidates if c is not None]
    return max(candidates, key=lambda c: float(c["bytes_per_s"])) if candidates else None


def note_read_rate(
    bytes_per_s: float, *, by: str, kernel: str = "", measured_at: str | None = None
) -> bool:
    """Raise the saved profile's `best_read` to `bytes_per_s` when that is higher than any rate it
    records; True when it did. Nothing happens without a saved profile (there is no bound to raise),
    and a profile that cannot be read or written is left as it is: a run never fails over this."""
    rate = _rate(bytes_per_s)
    if rate is None:
        return False
    try:
        d = load_local_profile()
    except UserError:
        return False
    if d is None:
        return False
    have = best_read(d)
    if have is not None and rate <= float(have["bytes_per_s"]):
        return False
    d[BEST_READ] = {
        "bytes_per_s": rate,
        "measured_at": measured_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "by": by,
        "kernel": kernel,
    }
    try:
        save_profile(d)
    except (UserError, OSError):
        return False
    return True


def load_local_profile() -> dict[str, Any] | None:
    """The saved profile, or None when `roofline probe` has not been run; a damaged file is a
    UserError."""
    path = profile_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(
            f"cannot read the hardware profile {path} ({e.strerror}); re-run `roofline probe`"
        ) from None
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(
            f"the hardware profile {path} is not valid JSON; re-run `roofline probe`"
        ) from None
    problem = profile_problem(d)
    if problem:
        raise UserError(
            f"the hardware profile {path} is unusable ({problem}); re-run `roofline probe`"
        )
    return d


def profile_problem(d: Any) -> str | None:
    """What makes `d` unusable as a profile (a short phrase), or None when it has what readers
    need."""
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
