"""`roofline serve --prepare`: compile the kernels a model and a dtype use, once per install.

numba compiles each kernel for the array types it meets on first use and caches the machine code
next to the source (`__pycache__`); a later start loads it in a fraction of a second. The first
start of each weight format pays the compilation (tens of seconds on 2 cores), so a tuner that
launches one format after another would time installation work as part of its trials. Preparing
runs the engine's warm-up for one (model, dtype) and leaves a stamp in the user cache; the stamp's
key holds everything that would make numba compile again (the engine's sources and where they
live, numba, Python, the CPU, the model file, the dtype), so a prepared pair costs a file check.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from roofline.kernel_modes import DEFAULT_KERNELS_MODE, KernelsMode

KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"
KERNEL_INDEX = "decode.decode_rows-*.nbi"  # numba's cache index of the decode pass
STAMPS = "kernels"  # the stamps' folder in the user cache


def stamp_path(model: str | os.PathLike, dtype: str) -> Path:
    """Where the stamp of a prepared (model, dtype) lives (its name: the key's hash)."""
    from roofline.engine.runtime.measured_cache import measured_path

    return measured_path(STAMPS, _key(Path(model), dtype))


def prepared(model: str | os.PathLike, dtype: str) -> bool:
    """Whether this (model, dtype) was prepared with these sources and numba's cache is there."""
    return stamp_path(model, dtype).is_file() and _cache_present()


def prepare(
    model: str | os.PathLike | None,
    dtype: str,
    threads: int | None = None,
    kernels: KernelsMode = DEFAULT_KERNELS_MODE,
) -> str:
    """Load the model at dtype and run the warm-up (compiling what is not cached) and, kernels
    "measured", time the kernel shapes (`kernel_choice`, kept in the user cache), then stamp it;
    nothing when it is prepared already. The line to print."""
    from roofline.modelspec.default_model import default_model_path

    path = Path(model) if model is not None else default_model_path()
    if prepared(path, dtype):
        return f"kernels for {path.name} at {dtype}: prepared already"
    from roofline.engine.runtime.measured_cache import measured_path, write_measured
    from roofline.engine.runtime.model_runner import load_runner

    t0 = time.monotonic()
    # its warm-up compiles the kernels
    runner = load_runner(str(path), dtype=dtype, threads=threads, kernels=kernels)
    seconds = time.monotonic() - t0
    stamp = {"model": str(path), "dtype": dtype, "seconds": round(seconds, 1)}
    key = _key(path, dtype)
    write_measured(measured_path(STAMPS, key), key, "stamp", stamp)
    return (
        f"kernels for {path.name} at {dtype}: ready in {seconds:.1f} s; {runner.kernels.describe()}"
    )


def _key(model: Path, dtype: str) -> dict[str, Any]:
    from roofline.engine.kernels.kernel_cache import kernel_sources
    from roofline.engine.runtime.kernel_choice import host_model_key

    # the sources where they live: numba's cache sits beside them
    sources = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in kernel_sources()]
    return {**host_model_key(model, dtype), "sources": sources}


def _cache_present() -> bool:
    """numba's cache index of the decode pass: in NUMBA_CACHE_DIR when set, else beside the
    source."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        return any(Path(root).rglob(KERNEL_INDEX))
    return any((KERNELS_DIR / "__pycache__").glob(KERNEL_INDEX))
