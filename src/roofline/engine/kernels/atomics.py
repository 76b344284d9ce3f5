"""Atomic counters and waiting, for the decode worker threads' phase counters (decode.py), as LLVM
IR.

numba has no atomics or memory-ordering primitives in nopython code; these are thin intrinsics over
LLVM's: fetch_add (a sequentially consistent `atomicrmw add`), load_acquire (an acquire `load
atomic`), the x86 `pause` spin hint and a short sleep.
"""

from __future__ import annotations

import os
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_POSIX = os.name == "posix"


def _element_pointer(context, builder, aryty, ary, index_ty, index):
    arr = context.make_array(aryty)(context, builder, ary)
    i = context.cast(builder, index, index_ty, types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, arr, [i])


def _pause(builder) -> None:
    fn = builder.module.declare_intrinsic(
        "llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), [])
    )
    builder.call(fn, [])


def _is_counter_array(a) -> bool:
    return isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.int64


@intrinsic
def fetch_add(typingctx, counters, i, value):
    """Atomically counters[i] += value; returns the value before (sequentially consistent)."""
    if not (
        _is_counter_array(counters)
        and isinstance(i, types.Integer)
        and isinstance(value, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        val = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, val, "seq_cst")

    return types.int64(counters, i, value), codegen


@intrinsic
def load_acquire(typingctx, counters, i):
    """counters[i], read atomically with acquire ordering (later reads see what was written before
    the fetch_add that stored it)."""
    if not (_is_counter_array(counters) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(counters, i), codegen


@intrinsic
def spin_pause(typingctx):
    """The x86 `pause` hint for spin-wait loops (a plain no-op elsewhere)."""

    def codegen(context, builder, sig, args):
        if _X86:
            _pause(builder)
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def nap(typingctx, microseconds):
    """Sleep for about this many microseconds (POSIX usleep; a pause elsewhere). A thread that has
    waited a while for another one sleeps instead of spinning, so that its core goes idle and the
    scheduler can run the thread it waits for there (a busy machine may have taken that thread's own
    core)."""
    if not isinstance(microseconds, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        if _POSIX:
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [i32]), "usleep"
            )
            builder.call(
                fn, [builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), i32)]
            )
        elif _X86:
            _pause(builder)
        return context.get_dummy_value()

    return types.none(microseconds), codegen
