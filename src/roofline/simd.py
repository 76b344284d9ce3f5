"""Explicit-order float reductions and the hot inner loops of the decode kernels, as LLVM IR.

With fastmath, LLVM picks how `acc += a[i] * b[i]` is split into SIMD lanes, and that choice can
differ between two compilations of one source (a kernel's softmax sum changed order when loaded
from numba's cache). These reductions emit one fixed order instead:

    main    n64 = n - n % 64: four 16-lane partial sums, element i into sum (i // 16) % 4, lane
            i % 16; s = (a0 + a1) + (a2 + a3), folded in halves (v[:h] + v[h:]) 16 -> ... -> 1
    middle  if 8 or more remain: an 8-lane sum seeded [s, 0, ..., 0] over the 8-blocks, folded
    tail    the rest one by one: s = fma(w_i, x_i, s)

the order LLVM 22 (numba 0.68) gave fastmath loops on AVX-512 (width 16, interleave 4), so values
match the kernels this replaced bit for bit. Products are fused; float ops carry `afn`, which keeps
numba's fastmath pass from adding `reassoc`. The attention loops (`block_scores`,
`weighted_rows`) and the 16-lane SiLU (`silu_block`) are written out likewise, in `simd_loops`.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_F32 = ir.FloatType()
_I64 = ir.IntType(64)
# a flag that changes nothing, present so numba's fastmath pass leaves the op alone
_KEEP = ("afn",)
_WIDTH = 16  # lanes of the main sums (one AVX-512 register of float32)
_HALF = 8


def _vec(n: int, t=_F32) -> ir.VectorType:
    return ir.VectorType(t, n)


_ZERO16 = ir.Constant(_vec(_WIDTH), [0.0] * _WIDTH)


def _fma(builder, a, b, c):
    """a * b + c with one rounding (llvm.fma on a float32 scalar or vector)."""
    name = f"llvm.fma.v{a.type.count}f32" if isinstance(a.type, ir.VectorType) else "llvm.fma.f32"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def _fold(builder, v, lanes: int):
    """Sum of a vector's lanes by halving: v[:h] + v[h:] until one lane is left."""
    while lanes > 1:
        h = lanes // 2
        mask_type = _vec(h, ir.IntType(32))
        lo = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h))))
        hi = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h, 2 * h))))
        v = builder.fadd(lo, hi, flags=_KEEP)
        lanes = h
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


_ELEMENT = {types.float32: _F32, types.uint16: ir.IntType(16), types.int8: ir.IntType(8)}


def _loader(builder, dtype, base):
    """load(i, lanes) -> float32 vector (or scalar when lanes == 0) of elements base[i:i+lanes],
    widened: bf16 bits (uint16) shift into the high half of a float32; int8 converts exactly."""
    elem = _ELEMENT[dtype]

    def load(i, lanes):
        ptr = builder.gep(base, [i])
        if lanes:
            raw = builder.load(
                builder.bitcast(ptr, _vec(lanes, elem).as_pointer()), align=dtype.bitwidth // 8
            )
            target = _vec(lanes, ir.IntType(32))
            shift = ir.Constant(target, [16] * lanes)
        else:
            raw = builder.load(ptr)
            target, shift = ir.IntType(32), ir.Constant(ir.IntType(32), 16)
        if dtype == types.float32:
            return raw
        if dtype == types.uint16:
            return builder.bitcast(
                builder.shl(builder.zext(raw, target), shift), _vec(lanes) if lanes else _F32
            )
        return builder.sitofp(raw, _vec(lanes) if lanes else _F32)  # int8

    return load


def _emit_sums(builder, n, load_a, loads_b, split=False):
    """[sum_i a_i * b_i for each b in loads_b] (or [sum_i a_i] when loads_b is [None]) over i < n,
    in the module docstring's order. a is loaded once per step for all sums: independent chains
    keep the FMA units busy where one row would wait on its accumulators. split: load_a(i, off,
    lanes) loads element i + off, i a multiple of 64 and off a Python int, so block formats know
    their place in a block at compile time.
    """
    if not split:
        plain_a = load_a

        def load_a(i, off, lanes):
            return plain_a(i if off == 0 else builder.add(i, ir.Constant(_I64, off)), lanes)

    def step(acc, a, load_b, j, lanes):
        old = builder.load(acc)
        builder.store(
            builder.fadd(old, a, flags=_KEEP)
            if load_b is None
            else _fma(builder, a, load_b(j, lanes), old),
            acc,
        )

    accs = [[cgutils.alloca_once_value(builder, _ZERO16) for _ in range(4)] for _ in loads_b]
    n64 = builder.and_(n, ir.Constant(_I64, ~63))
    with cgutils.for_range_slice(builder, ir.Constant(_I64, 0), n64, ir.Constant(_I64, 64)) as (
        i,
        _,
    ):
        for c in range(4):
            j = builder.add(i, ir.Constant(_I64, c * _WIDTH))
            a = load_a(i, c * _WIDTH, _WIDTH)
            for acc, load_b in zip(accs, loads_b):
                step(acc[c], a, load_b, j, _WIDTH)
    totals = []
    for acc in accs:
        v = [builder.load(x) for x in acc]
        pair = builder.fadd(
            builder.fadd(v[0], v[1], flags=_KEEP),
            builder.fadd(v[2], v[3], flags=_KEEP),
            flags=_KEEP,
        )
        totals.append(cgutils.alloca_once_value(builder, _fold(builder, pair, _WIDTH)))
    n8 = builder.add(n64, builder.and_(builder.sub(n, n64), ir.Constant(_I64, ~7)))
    with builder.if_then(builder.icmp_signed(">", n8, n64)):
        zero8 = ir.Constant(_vec(_HALF), [0.0] * _HALF)
        acc8 = [cgutils.alloca_once_value(builder, zero8) for _ in loads_b]
        for acc, total in zip(acc8, totals):
            builder.store(
                builder.insert_element(zero8, builder.load(total), ir.Constant(ir.IntType(32), 0)),
                acc,
            )
        with cgutils.for_range_slice(builder, n64, n8, ir.Constant(_I64, _HALF)) as (i, _):
            a = load_a(i, 0, _HALF)
            for acc, load_b in zip(acc8, loads_b):
                step(acc, a, load_b, i, _HALF)
        for acc, total in zip(acc8, totals):
            builder.store(_fold(builder, builder.load(acc), _HALF), total)
    with cgutils.for_range_slice(builder, n8, n, ir.Constant(_I64, 1)) as (i, _):
        a = load_a(i, 0, 0)
        for total, load_b in zip(totals, loads_b):
            step(total, a, load_b, i, 0)
    return [builder.load(t) for t in totals]


def _flat_pointer(context, builder, aryty, ary, index_ty, index):
    """Pointer to the element at flat (C order) index `index` of a C-contiguous array."""
    arr = context.make_array(aryty)(context, builder, ary)
    return builder.gep(arr.data, [context.cast(builder, index, index_ty, types.intp)])


_WEIGHTS = (types.float32, types.uint16, types.int8)


def _contiguous(a, dtypes) -> bool:
    return isinstance(a, types.Array) and a.layout == "C" and a.dtype in dtypes


def _float32_arrays(*arrays) -> bool:
    return all(_contiguous(a, (types.float32,)) for a in arrays)


@intrinsic
def dot(typingctx, a, ia, b, ib, n):
    """sum_{i < n} a.flat[ia + i] * b.flat[ib + i] in float32, in the fixed order (products fused);
    a is C-contiguous float32, bf16 bits (uint16) or int8 (widened exactly), b C-contiguous float32.
    No bounds checks: the caller keeps both ranges inside their arrays."""
    ints = all(isinstance(t, types.Integer) for t in (ia, ib, n))
    if not (ints and _contiguous(a, _WEIGHTS) and _contiguous(b, (types.float32,))):
        return None

    def codegen(context, builder, sig, args):
        a_ty, ia_ty, b_ty, ib_ty, n_ty = sig.args
        load_a = _loader(
            builder, a_ty.dtype, _flat_pointer(context, builder, a_ty, args[0], ia_ty, args[1])
        )
        load_b = _loader(
            builder, types.float32, _flat_pointer(context, builder, b_ty, args[2], ib_ty, args[3])
        )
        return _emit_sums(
            builder, context.cast(builder, args[4], n_ty, types.intp), load_a, [load_b]
        )[0]

    return types.float32(a, ia, b, ib, n), codegen


@intrinsic
def vsum(typingctx, a, ia, n):
    """sum_{i < n} a.flat[ia + i] in float32, in the fixed order (plain adds); a C-contiguous
    float32."""
    if not (
        _contiguous(a, (types.float32,))
        and isinstance(ia, types.Integer)
        and isinstance(n, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        load = _loader(
            builder,
            types.float32,
            _flat_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1]),
        )
        return _emit_sums(
            builder, context.cast(builder, args[2], sig.args[2], types.intp), load, [None]
        )[0]

    return types.float32(a, ia, n), codegen


@intrinsic
def dot_rows(typingctx, a, ia, b, ib, b_stride, n, rows):
    """(sum_i a.flat[ia + i] * b.flat[ib + r b_stride + i] for r < rows), rows a literal 1..4: `dot`
    of one weight row with several activation rows at once, each in the same order as `dot` (so bit
    for bit equal to it)."""
    ints = all(isinstance(t, types.Integer) for t in (ia, ib, b_stride, n))
    if not (
        ints
        and isinstance(rows, types.IntegerLiteral)
        and 1 <= rows.literal_value <= 4
        and _contiguous(a, _WEIGHTS)
        and _contiguous(b, (types.float32,))
    ):
        return None
    m = rows.literal_value
    result = types.UniTuple(types.float32, m)

    def codegen(context, builder, sig, args):
        a_ty, ia_ty, b_ty, ib_ty, sb_ty, n_ty, _ = sig.args
        load_a = _loader(
            builder, a_ty.dtype, _flat_pointer(context, builder, a_ty, args[0], ia_ty, args[1])
        )
        ib = context.cast(builder, args[3], ib_ty, types.intp)
        sb = context.cast(builder, args[4], sb_ty, types.intp)
        loads = [
            _loader(
                builder,
                types.float32,
                _flat_pointer(
                    context,
                    builder,
                    b_ty,
                    args[2],
                    types.intp,
                    builder.add(ib, builder.mul(sb, ir.Constant(_I64, r))),
                ),
            )
            for r in range(m)
        ]
        sums = _emit_sums(builder, context.cast(builder, args[5], n_ty, types.intp), load_a, loads)
        return context.make_tuple(builder, result, sums)

    return result(a, ia, b, ib, b_stride, n, rows), codegen


@intrinsic
def prefetch(typingctx, a, byte):
    """A read hint (LLVM `prefetch`: into all cache levels) for the line holding byte `byte` of
    the C-contiguous array a. No arithmetic, so no bits change; an address past the array is never
    read (a hint does not fault), but callers keep inside it."""
    if not (isinstance(a, types.Array) and a.layout == "C" and isinstance(byte, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        ptr = builder.gep(
            builder.bitcast(data, i8p), [context.cast(builder, args[1], sig.args[1], types.intp)]
        )
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", [i8p], fnty=ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        )
        # read (0), keep in every level (3), data cache (1)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(a, byte), codegen


def _host_has(feature: str) -> bool:
    import llvmlite.binding as llvm

    return ("+" + feature) in llvm.get_host_cpu_features().flatten().split(",")
