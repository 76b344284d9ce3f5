"""numba's cache of the engine's kernels follows every source a kernel inlines, not only its own."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import roofline
from roofline.engine.kernels import kernel_cache, layer_kernels

# a small kernel of layer_kernels.py that inlines simd.dot (roofline/simd.py); prints whether it
# came from the cache (hits) or was compiled (misses), and what it computed
_RUN = """
import numpy as np
from roofline.engine.kernels import layer_kernels as lk
v = np.arange(1, 9, dtype=np.float32)
lk._head_rms_norm(v, 0, 8, np.ones(8, np.float32), 1e-6)
s = lk._head_rms_norm.stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()), float(v.sum()))
"""


def _run(package_root: Path, cache: Path) -> tuple[int, int, float]:
    env = {**os.environ, "PYTHONPATH": str(package_root), "NUMBA_CACHE_DIR": str(cache)}
    p = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    hits, misses, total = p.stdout.split()
    return int(hits), int(misses), float(total)


def test_an_edit_to_an_inlined_file_compiles_the_kernel_again(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(
        Path(roofline.__file__).parent,
        root / "roofline",
        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"),
    )
    cache = tmp_path / "numba"
    hits, misses, first = _run(root, cache)
    assert (hits, misses) == (0, 1)  # compiled
    assert _run(root, cache)[:2] == (1, 0)  # from the cache
    # layer_kernels.py is untouched; simd.py, whose code _head_rms_norm inlined, is not
    with open(root / "roofline" / "simd.py", "a", encoding="utf-8") as f:
        f.write("\n# an edit\n")
    hits, misses, again = _run(root, cache)
    assert (hits, misses) == (0, 1) and again == first
    assert _run(root, cache)[:2] == (1, 0)


def test_the_engines_kernels_take_the_stamped_locators_and_nothing_else_does():
    locator = layer_kernels.rms_norm._cache._impl.locator
    assert isinstance(locator, kernel_cache.LOCATORS)
    assert locator.get_source_stamp()[1] == kernel_cache.sources_digest(
        kernel_cache.kernel_sources()
    )
    import numba

    @numba.njit(cache=True)
    def outside(x):  # a function of the tests' own files
        return x + 1

    assert outside(1) == 2
    assert not isinstance(outside._cache._impl.locator, kernel_cache.LOCATORS)


def test_the_digest_changes_with_any_file_and_the_sources_hold_the_kernels(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    before = kernel_cache.sources_digest([a, b])
    assert kernel_cache.sources_digest([a, b]) == before
    b.write_text("y = 3\n")
    assert kernel_cache.sources_digest([a, b]) != before
    names = {p.name for p in kernel_cache.kernel_sources()}
    assert {"matrices.py", "decode.py", "layer_kernels.py", "simd.py", "simd_blocks.py"} <= names


def test_a_cache_index_takes_one_writer_at_a_time(tmp_path):
    """numba names a new data file after the index entries it read: two processes saving at once
    could give two kernels one name. The save waits for the index's lock."""
    import threading

    from numba.core import caching

    from roofline.engine.kernels import kernel_cache

    kernel_cache.install()
    files = getattr(caching, "IndexDataCacheFile", None) or caching._IndexDataCacheFile
    assert files.save.one_writer
    index = tmp_path / "f.nbi"
    saved = threading.Event()

    class Index:
        _index_path = str(index)

    def save_under_the_lock():
        kernel_cache.one_writer_at_a_time(lambda self, key, data: saved.set())(Index(), 1, 2)

    with kernel_cache.file_lock(f"{index}.lock"):
        writer = threading.Thread(target=save_under_the_lock)
        writer.start()
        assert not saved.wait(0.3)  # held off while another writer holds the index
    writer.join(30)
    assert saved.is_set()
