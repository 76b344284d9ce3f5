"""numba's cache of the engine's kernels, checked against every source a kernel may inline.

numba keeps a cached kernel while its own file is unchanged (its index holds a hash of that file).
The engine's kernels inline code from other files (`simd`, `matrices`, `block_simd`, ...), so an
edit there alone would leave the old machine code running in an editable install. The locators
below claim the functions of `engine/kernels/` and stamp them with the hash of all kernel sources
as well: any edit to one of them compiles the kernels again. Every other function (the bandwidth
probe's, other libraries') keeps numba's own locators.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from numba.core import caching

KERNELS_DIR = Path(__file__).resolve().parent
ENGINE_DIR = KERNELS_DIR.parent
PACKAGE_DIR = ENGINE_DIR.parent


def kernel_sources() -> list[Path]:
    """The files a kernel may take code or constants from: the kernels' own modules, the shared
    SIMD emitters (`roofline/simd*.py`) and the loading modules whose constants the kernels compile
    in (the stored formats' block sizes and codes, the model config's fields)."""
    loading = [ENGINE_DIR / "loading" / f for f in ("block_formats.py", "config.py")]
    return sorted(KERNELS_DIR.glob("*.py")) + sorted(PACKAGE_DIR.glob("simd*.py")) + loading


def sources_digest(paths: list[Path]) -> str:
    """sha256 over the files' names and contents, in the order given."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _kernel_digest() -> str:
    # once a process: numba reads a stamp when a kernel is decorated, and a running process keeps
    # the code it imported whatever happens to the files later
    return sources_digest(kernel_sources())


class _KernelSources:
    """Mixed into a numba locator: the kernels' functions only, stamped with all kernel sources."""

    def get_source_stamp(self):
        return (super().get_source_stamp(), _kernel_digest())

    @classmethod
    def from_function(cls, py_func, py_file):
        if not Path(py_file).resolve().is_relative_to(KERNELS_DIR):
            return None
        return super().from_function(py_func, py_file)


def _numba_class(name: str):
    """numba 0.68 dropped the underscore of its cache classes' names; earlier ones have it."""
    return getattr(caching, name, None) or getattr(caching, "_" + name)


# numba's own order: a user's NUMBA_CACHE_DIR, beside the source, the user-wide cache folder
LOCATORS = tuple(
    type(f"Kernel{name}", (_KernelSources, _numba_class(name)), {})
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
)


def install() -> None:
    """Put the locators ahead of numba's (once; before the first kernel is decorated)."""
    classes = _numba_class("CacheImpl")._locator_classes
    if LOCATORS[0] not in classes:
        classes[:0] = LOCATORS
