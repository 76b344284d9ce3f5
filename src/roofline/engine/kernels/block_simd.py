"""Dot products and row widening over weights as the file stores them (`block_formats`), in LLVM IR.

Weights are widened to float32 in registers, 16 (or 8) at a time, into the same fixed-order sums as
float32 weights (`simd`'s matrix order). Widening is exact (see block_formats), so a row dot here
equals `simd.dot_block` over the dequantized row bit for bit, whatever the format.

Each kernel widens only the formats of a `FormatSet` it is given: numba compiles one body per
format it may meet, and a cold compile of the decode pass grew by ~15 s per format (all eleven:
241 s; the shipped file's three: 81 s, docs/measured.md).

Widening each format's blocks (and their byte layouts): block_widen.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import (
    NativeValue,
    intrinsic,
    models,
    overload,
    register_model,
    typeof_impl,
    unbox,
)

from roofline.engine.kernels.block_widen import format_loader, ir_int, pairs_fit, steps_of
from roofline.engine.kernels.block_widen import half_to_f32 as half_to_f32  # tests widen with it
from roofline.engine.loading.block_formats import BY_CODE
from roofline.simd import (
    F32,
    LANES,
    element_loader,
    emit_block,
    flat_pointer,
    is_contiguous,
    vec_type,
)
from roofline.simd_memory import LINE_BYTES


@dataclass(frozen=True)
class FormatSet:
    """The block formats (codes) a kernel is compiled for; numba types each set apart."""

    codes: tuple[int, ...]

    @classmethod
    def of(cls, *code_arrays: np.ndarray) -> FormatSet:
        """The formats these arrays of row codes use."""
        return cls(tuple(sorted({int(c) for a in code_arrays for c in np.unique(a)})))


ALL_FORMATS = FormatSet(tuple(sorted(BY_CODE)))
# code -> whether its rows are plain floats (a block of one weight): `stored_dot_block` hints
# those itself, spread over its loop
FLOAT_ROWS = np.array([c in BY_CODE and BY_CODE[c].block == 1 for c in range(256)], np.bool_)
# code -> whether two weight rows of it share a `stored_dot_block` beside one x row (`pairs_fit`)
PAIRED_ROWS = np.array([c in BY_CODE and pairs_fit(BY_CODE[c].name) for c in range(256)], np.bool_)


class FormatSetType(types.Type):
    def __init__(self, codes: tuple[int, ...]):
        self.codes = codes
        super().__init__(name=f"FormatSet{codes}")


@typeof_impl.register(FormatSet)
def _typeof_format_set(val, c):
    return FormatSetType(val.codes)


@register_model(FormatSetType)
class _FormatSetModel(models.StructModel):  # no data: the set lives in the type
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, [])


@unbox(FormatSetType)
def _unbox_format_set(typ, obj, c):
    return NativeValue(c.context.get_constant_undef(typ))


class StoredCodes(NamedTuple):
    """A stored matrix's per-row format codes (uint8, block_formats) and the set they come from:
    what `matrices` takes beside stored rows where float32 rows take their scales."""

    codes: np.ndarray
    formats: FormatSet


def with_formats(scale, formats):
    """The array beside a matrix as the kernels take it: scales as they are (formats None),
    a stored matrix's format codes as StoredCodes with their FormatSet."""
    raise NotImplementedError


@overload(with_formats, inline="always")
def _with_formats_overload(scale, formats):
    if isinstance(formats, FormatSetType):
        return lambda scale, formats: StoredCodes(scale, formats)
    return lambda scale, formats: scale


def _switch(builder, fmt, codes, results, emit):
    """Run emit(code) -> [float32 values] for the row's format, one of `codes` (a FormatSetType's);
    its values are stored into `results` (allocas). A code outside them leaves NaN."""
    merge = builder.append_basic_block("fmt.merge")
    default = builder.append_basic_block("fmt.unknown")
    sw = builder.switch(fmt, default)
    for code in codes:
        bb = builder.append_basic_block(f"fmt.{code}")
        sw.add_case(ir.Constant(fmt.type, code), bb)
        builder.position_at_end(bb)
        for slot, value in zip(results, emit(code)):
            builder.store(value, slot)
        builder.branch(merge)
    builder.position_at_end(default)
    for slot in results:
        builder.store(ir.Constant(F32, float("nan")), slot)
    builder.branch(merge)
    builder.position_at_end(merge)


@intrinsic
def stored_dot_block(
    typingctx, w, off, fmt, formats, x, ix, x_stride, n, w_rows, x_rows, hint, lines
):
    """(sum_i w_q,i x.flat[ix + r x_stride + i] for q < w_rows for r < x_rows), flat index
    q * x_rows + r: w_rows (a literal 1 or 2: 2 for the formats of `PAIRED_ROWS` only) weight rows
    of one format `fmt` (block_formats code, one of the FormatSet `formats`),
    the first of n weights stored from byte `off` of the uint8 array w, the next from off +
    w.shape[1], with x_rows (a literal, w_rows * x_rows <= 16) float32 rows, each sum in `simd`'s
    matrix order (so equal to `simd.dot_block` over the widened rows). The order has one sum per
    product, a chain of FMAs: two weight rows double the chains that one weight row with up to
    four x rows leaves the core's two FMA units waiting on. hint, lines: for rows of floats
    (F32, F16, BF16: `FLOAT_ROWS`), read hints into L2 for `lines` 64-byte lines of w from byte
    `hint` on, spread over the loop's 16-weight steps, as many a step as the rows read
    (`simd_memory.emit_hints`); a literal 0 lines: no hint code. Block formats take none here:
    their callers hint a block's few lines at once (`matrices`)."""
    ints = all(isinstance(t, types.Integer) for t in (off, fmt, ix, x_stride, n, hint, lines))
    literal = all(isinstance(t, types.IntegerLiteral) for t in (w_rows, x_rows))
    if not (
        ints
        and literal
        and w_rows.literal_value in (1, 2)
        and 1 <= w_rows.literal_value * x_rows.literal_value <= 16
        and is_contiguous(w, (types.uint8,))
        and is_contiguous(x, (types.float32,))
        and isinstance(formats, FormatSetType)
    ):
        return None
    m_w, m_x = w_rows.literal_value, x_rows.literal_value
    result = types.UniTuple(types.float32, m_w * m_x)

    hinted = not (isinstance(lines, types.IntegerLiteral) and lines.literal_value == 0)

    def codegen(context, builder, sig, args):
        w_ty, off_ty, fmt_ty, _, x_ty, ix_ty, sx_ty, n_ty, _, _, hint_ty, lines_ty = sig.args
        row_bytes = builder.extract_value(
            context.make_array(w_ty)(context, builder, args[0]).strides, 0
        )
        off = context.cast(builder, args[1], off_ty, types.intp)
        rows = [
            flat_pointer(
                context,
                builder,
                w_ty,
                args[0],
                types.intp,
                builder.add(off, builder.mul(row_bytes, ir_int(q))),
            )
            for q in range(m_w)
        ]
        ix = context.cast(builder, args[5], ix_ty, types.intp)
        sx = context.cast(builder, args[6], sx_ty, types.intp)
        loads_x = [  # row r of x
            element_loader(
                builder,
                types.float32,
                flat_pointer(
                    context,
                    builder,
                    x_ty,
                    args[4],
                    types.intp,
                    builder.add(ix, builder.mul(sx, ir_int(r))),
                ),
            )
            for r in range(m_x)
        ]
        n_v = context.cast(builder, args[7], n_ty, types.intp)
        code = context.cast(builder, args[2], fmt_ty, types.int32)
        results = [cgutils.alloca_once(builder, F32) for _ in range(m_w * m_x)]

        base = None
        if hinted:
            data = context.make_array(w_ty)(context, builder, args[0]).data
            first = context.cast(builder, args[10], hint_ty, types.intp)
            base = builder.gep(builder.bitcast(data, ir.IntType(8).as_pointer()), [first])
            n_lines = context.cast(builder, args[11], lines_ty, types.intp)

        def emit(c):
            span = steps_of(c)
            loads = [format_loader(builder, c, row) for row in rows]
            hints = None
            if hinted and FLOAT_ROWS[c]:  # rows of floats: as many a step as it reads
                step_bytes = m_w * BY_CODE[c].block_bytes * LANES
                hints = (base, n_lines, -(-step_bytes // LINE_BYTES))
            sums = emit_block(
                builder, n_v, loads, loads_x, split=True, hints=hints, partials=1, span=span
            )
            return [v for per_w in sums for v in per_w]

        # pairs only of the formats that pair (`PAIRED_ROWS`; `matrices` calls no other): the
        # rest's two-row code is never compiled
        paired = [c for c in formats.codes if m_w == 1 or PAIRED_ROWS[c]]
        _switch(builder, code, paired, results, emit)
        return context.make_tuple(builder, result, [builder.load(s) for s in results])

    sig = result(w, off, fmt, formats, x, ix, x_stride, n, w_rows, x_rows, hint, lines)
    return sig, codegen


@intrinsic
def stored_row(typingctx, w, off, fmt, formats, n, out, io):
    """out.flat[io + i] = w_i for i < n: the row stored from byte `off` of w in format `fmt` (of
    the FormatSet `formats`), widened to float32."""
    ints = all(isinstance(t, types.Integer) for t in (off, fmt, n, io))
    if not (
        ints
        and is_contiguous(w, (types.uint8,))
        and is_contiguous(out, (types.float32,))
        and isinstance(formats, FormatSetType)
    ):
        return None

    def codegen(context, builder, sig, args):
        w_ty, off_ty, fmt_ty, _, n_ty, out_ty, io_ty = sig.args
        row = flat_pointer(context, builder, w_ty, args[0], off_ty, args[1])
        n_v = context.cast(builder, args[4], n_ty, types.intp)
        dst = flat_pointer(context, builder, out_ty, args[5], io_ty, args[6])
        code = context.cast(builder, args[2], fmt_ty, types.int32)

        def emit(c):  # the loads of `emit_block`: 16 lanes in steps of span, then 8 lanes, then one
            span = steps_of(c)
            load = format_loader(builder, c, row)

            def put(i, value, lanes):
                ptr = builder.gep(dst, [i])
                builder.store(
                    value,
                    builder.bitcast(ptr, vec_type(lanes).as_pointer()) if lanes else ptr,
                    align=4,
                )

            n64 = builder.and_(n_v, ir_int(-span))
            n8 = builder.and_(n_v, ir_int(~7))
            with cgutils.for_range_slice(builder, ir_int(0), n64, ir_int(span)) as (i, _):
                for part in range(span // LANES):
                    put(builder.add(i, ir_int(16 * part)), load(i, 16 * part, 16), 16)
            with cgutils.for_range_slice(builder, n64, n8, ir_int(8)) as (i, _):
                put(i, load(i, 0, 8), 8)
            with cgutils.for_range_slice(builder, n8, n_v, ir_int(1)) as (i, _):
                put(i, load(i, 0, 0), 0)
            return []

        _switch(builder, code, formats.codes, [], emit)
        return context.get_dummy_value()

    return types.none(w, off, fmt, formats, n, out, io), codegen
