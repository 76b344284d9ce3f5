"""numba's cache of the engine's kernels, checked against every source a kernel may inline.

numba keeps a cached kernel while its own file is unchanged (its index holds a hash of that file).
The engine's kernels inline code from other files (`simd`, `matrices`, `block_simd`, ...), so an
edit there alone would leave the old machine code running in an editable install. The locators
below claim the functions of `engine/kernels/` and stamp them with the hash of all kernel sources
as well: any edit to one of them compiles the kernels again. Every other function (the bandwidth
probe's, other libraries') keeps numba's own locators.
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def file_lock(path: str):
    """An exclusive lock on the file `path` (created) while the block runs; none where the OS has
    no fcntl (then no two processes may compile at once)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def one_writer_at_a_time(save):
    """numba's index save, under a lock on the index: it reads the index, names a new data file
    after the entries it saw, writes the data, then the index. Two processes compiling kernels at
    once (`roofline tune` prepares its weight formats side by side) could otherwise both take the
    same name for different kernels, and the index left last would point one kernel's key at the
    other's machine code."""

    @functools.wraps(save)
    def locked_save(self, key, data):
        with file_lock(f"{self._index_path}.lock"):
            return save(self, key, data)

    locked_save.one_writer = True
    return locked_save


def install() -> None:
    """Put the locators ahead of numba's and lock its index saves (once; before the first kernel is
    decorated)."""
    classes = _numba_class("CacheImpl")._locator_classes
    if LOCATORS[0] not in classes:
        classes[:0] = LOCATORS
    files = _numba_class("IndexDataCacheFile")
    if not getattr(files.save, "one_writer", False):
        files.save = one_writer_at_a_time(files.save)
