"""The kernels' operands start on cache lines (`simd_memory`): the packed weight matrices, the
decode pass's activation rows and its logits. Misaligned, every 16-lane load of a row spans two
lines; the values would be the same, so only these checks notice a regression."""

from __future__ import annotations

import numpy as np
import pytest
from runner_helpers import tiny_checkpoint

from roofline.engine.kernels import decode
from roofline.engine.runtime.model_runner import ModelRunner
from roofline.simd_memory import LINE_BYTES, aligned_empty, aligned_floats


def _line_start(a: np.ndarray) -> bool:
    return a.ctypes.data % LINE_BYTES == 0


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 577)])
@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.int8])
def test_aligned_empty_is_a_writable_contiguous_array_on_a_line(shape, dtype):
    a = aligned_empty(shape, dtype)
    assert (a.shape, a.dtype) == (shape, np.dtype(dtype))
    assert a.flags.c_contiguous and a.flags.writeable and _line_start(a)
    a[...] = 1
    assert int(a.sum()) == a.size


@pytest.mark.parametrize("n", [1, 15, 16, 1000])
def test_kernel_buffers_start_on_a_line(n):
    floats = aligned_floats(n)
    assert _line_start(floats) and floats.shape == (n,)
    rows = decode._rows(3, 64)
    assert rows.shape == (3, 64) and rows.flags.c_contiguous and _line_start(rows)


@pytest.mark.parametrize("dtype", ["fp32", "stored", "bf16", "int8"])
def test_packed_matrices_start_on_a_line(dtype):
    runner = ModelRunner(tiny_checkpoint(), dtype=dtype, threads=1)
    w = runner.weights
    for m in (w.wqkv, w.wo, w.wgu, w.wd, w.embed, w.lm_head):
        assert _line_start(m), m.shape
