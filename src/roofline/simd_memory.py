"""Where the kernels' bytes are: read hints (prefetches, as LLVM IR) that bring lines in ahead of
the loops that read them, and arrays that start on a cache line. Nothing here does arithmetic, so
no result changes.

Why lines: the kernels load 16 float32 lanes (64 bytes) at a time. numpy starts a large array 16
bytes past a line, so every such load of a row spanned two lines: two of the core's two L1 reads
a cycle for one load. A 4 x 4 block of a k-row pass loads 8 vectors per 16 FMAs, so split loads
alone filled the load ports (line-aligned rows: docs/measured.md, 2026-12-06).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LINE_BYTES = 64


def aligned_empty(shape, dtype) -> np.ndarray:
    """np.empty(shape, dtype) whose first byte starts a cache line (numpy's own allocation under
    it, so large arrays still get numpy's huge pages). Rows whose bytes are a multiple of
    LINE_BYTES then all start on a line."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + LINE_BYTES, np.uint8)
    start = -raw.ctypes.data % LINE_BYTES
    return raw[start : start + nbytes].view(dtype).reshape(shape)


@njit(cache=True, nogil=True)
def aligned_floats(n):
    """A float32 vector of n uninitialised values starting on a cache line (inside kernels)."""
    raw = np.empty(n + LINE_BYTES // 4, np.float32)
    start = (-raw.ctypes.data % LINE_BYTES) // 4
    return raw[start : start + n]


_I64 = ir.IntType(64)

# LLVM prefetch locality: 3 keeps the line in every level (prefetcht0: into L1), 1 in the outer
# levels (prefetcht2: into L2). A k-row tile's hints of the next tile go to L2: into L1 they held
# the core's few L1 miss buffers while the block computed (docs/measured.md)
TO_L1, TO_L2 = 3, 1


def hint(builder, ptr, level=TO_L1):
    """A read hint (LLVM `prefetch`: read, data) for the line holding the byte at ptr, kept from
    `level` out. A hint never faults."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = builder.module.declare_intrinsic(
        "llvm.prefetch", [i8p], fnty=ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    )
    # read (0), locality, data cache (1)
    builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, level), ir.Constant(i32, 1)])


def emit_hints(builder, hints, step):
    """Hint lines step * per + h (h < per) of hints = (i8* base, lines, per), those below `lines`,
    into L2 (per: a Python int)."""
    base, lines, per = hints
    for h in range(per):
        line = builder.add(builder.mul(step, ir.Constant(_I64, per)), ir.Constant(_I64, h))
        with builder.if_then(builder.icmp_signed("<", line, lines)):
            at = builder.gep(base, [builder.shl(line, ir.Constant(_I64, 6))])
            hint(builder, at, TO_L2)


@intrinsic
def prefetch(typingctx, a, byte):
    """A read hint (`hint`) for the line holding byte `byte` of the C-contiguous array a. No
    arithmetic, so no bits change; an address past the array is never read (a hint does not
    fault), but callers keep inside it."""
    if not (isinstance(a, types.Array) and a.layout == "C" and isinstance(byte, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        i8p = ir.IntType(8).as_pointer()
        offset = context.cast(builder, args[1], sig.args[1], types.intp)
        hint(builder, builder.gep(builder.bitcast(data, i8p), [offset]))
        return context.get_dummy_value()

    return types.none(a, byte), codegen
