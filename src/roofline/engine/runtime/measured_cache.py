"""What this host measured about a runner (or prepared for it), kept in the user cache: a JSON file
per key, named by the key's hash, holding the key itself and the value.

A key holds everything the measurement depends on (the CPU, the builds, the kernels' sources, the
model file, the dtype, the threads: `kernel_choice.choice_key`, and more where a measurement
needs it). A file whose key differs (another machine's, copied) or that does not parse is ignored
with a warning, and the caller measures again: a timing from elsewhere is never trusted, though
no timing could change an output. Writes are atomic (a temporary file, then a rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any


def key_digest(key: dict[str, Any]) -> str:
    """A key's name in the user cache: 32 hex digits of its sha256."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def measured_path(folder: str, key: dict[str, Any]) -> Path:
    """Where the measurement for this key lives: <user cache>/<folder>/<digest>.json."""
    from roofline.hardware.profile import profile_dir

    return profile_dir() / folder / f"{key_digest(key)}.json"


def read_measured(
    path: Path, key: dict[str, Any], field: str, what: str, parse: Callable[[Any], Any]
) -> Any | None:
    """parse(d[field]) of the file at `path` when it holds exactly this key; None when there is
    no file, and None with a warning naming `what` when the file is unusable (parse raises
    ValueError for a value it does not accept)."""
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(d, dict) or d.get("key") != json.loads(json.dumps(key)):
            raise ValueError("it was measured for another machine, model or build")
        return parse(d.get(field))
    except (OSError, ValueError) as e:  # json's errors are ValueErrors
        warnings.warn(f"ignoring the {what} {path} ({e}); measuring again", stacklevel=3)
        return None


def write_measured(path: Path, key: dict[str, Any], field: str, value: Any) -> None:
    """Store {"key": key, field: value} at `path` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, field: value}) + "\n", encoding="utf-8")
    tmp.replace(path)
