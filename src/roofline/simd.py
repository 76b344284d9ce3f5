"""Explicit-order float reductions and the hot inner loops of the decode kernels, as LLVM IR.

With fastmath, LLVM picks how `acc += a[i] * b[i]` is split into SIMD lanes, and that choice can
differ between two compilations of one source (a kernel's softmax sum changed order when loaded
from numba's cache). These reductions emit one fixed order instead:

    main    n64 = n - n % 64: four 16-lane partial sums, element i into sum (i // 16) % 4, lane
            i % 16; s = (a0 + a1) + (a2 + a3), folded in halves (v[:h] + v[h:]) 16 -> ... -> 1
    middle  if 8 or more remain: an 8-lane sum seeded [s, 0, ..., 0] over the 8-blocks, folded
    tail    the rest one by one: s = fma(w_i, x_i, s)

the order LLVM 22 (numba 0.68) gave fastmath loops on AVX-512 (width 16, interleave 4), so values
match the kernels this replaced bit for bit. Weight matrices (`dot_block`, and the stored formats
in `block_simd`) sum in the matrix order: the same, but one 16-lane sum per product takes the four
lane blocks of each 64-step in turn, s = fold(sum), so that a block of 4 weight rows x 4 x rows
keeps its 16 sums in registers (the order above would need 64). Products are fused; float ops
carry `afn`, which keeps numba's fastmath pass from adding flags of its own. The kernels' flags
(`matrices.FASTMATH`) change no value: LLVM neither reorders a sum nor fuses a product into one
unless written here (`fma32` names a fused one), so the same source gives the same bits whatever
the target and whatever was compiled before it. The attention loops
(`block_scores`, `weighted_rows`) and the 16-lane SiLU (`silu_block`) are written out likewise, in
`simd_loops`.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from roofline.simd_memory import emit_hints

F32 = ir.FloatType()
I64 = ir.IntType(64)
# a flag that changes nothing, present so numba's fastmath pass leaves the op alone
KEEP_FLAGS = ("afn",)
LANES = 16  # lanes of the main sums (one AVX-512 register of float32)
_HALF = 8


def vec_type(n: int, t=F32) -> ir.VectorType:
    return ir.VectorType(t, n)


ZERO16 = ir.Constant(vec_type(LANES), [0.0] * LANES)


def fma(builder, a, b, c):
    """a * b + c with one rounding (llvm.fma on a float32 scalar or vector)."""
    name = f"llvm.fma.v{a.type.count}f32" if isinstance(a.type, ir.VectorType) else "llvm.fma.f32"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def fold(builder, v, lanes: int, join=None):
    """Sum of a vector's lanes by halving: v[:h] + v[h:] until one lane is left (join(lo, hi):
    another way to combine the halves, a maximum say)."""
    while lanes > 1:
        h = lanes // 2
        mask_type = vec_type(h, ir.IntType(32))
        lo = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h))))
        hi = builder.shuffle_vector(v, v, ir.Constant(mask_type, list(range(h, 2 * h))))
        v = builder.fadd(lo, hi, flags=KEEP_FLAGS) if join is None else join(lo, hi)
        lanes = h
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


def _fold_many(builder, vectors):
    """[`fold`(v, 16) for v in vectors], the same adds on the same lanes, several vectors per
    instruction: each level halves every sum's lanes, two vectors' halves packed into one (a
    vector of g groups of l lanes, g l = 16, becomes two vectors' 2g groups of l/2 lanes)."""
    out = {}
    for v, groups in fold_packed(builder, vectors):
        for lane, k in enumerate(groups):
            out.setdefault(k, builder.extract_element(v, ir.Constant(ir.IntType(32), lane)))
    return [out[k] for k in range(len(vectors))]


def fold_packed(builder, vectors):
    """`_fold_many`'s sums left packed: [(vector, [which sum each lane holds])]; sixteen vectors
    end as one, lane k holding the sum of vectors[k]."""
    i32 = ir.IntType(32)
    level = [(v, [k]) for k, v in enumerate(vectors)]  # (vector, which sum each group holds)
    lanes = LANES
    while lanes > 1:
        h, nxt = lanes // 2, []
        for p in range(0, len(level), 2):
            (x, gx), (y, gy) = level[p], level[min(p + 1, len(level) - 1)]
            lo = [
                b + g * lanes + i
                for b, gs in ((0, gx), (LANES, gy))
                for g in range(len(gs))
                for i in range(h)
            ]
            hi = [i + h for i in lo]
            pick = [
                builder.shuffle_vector(x, y, ir.Constant(vec_type(LANES, i32), m)) for m in (lo, hi)
            ]
            nxt.append((builder.fadd(pick[0], pick[1], flags=KEEP_FLAGS), gx + gy))
        level, lanes = nxt, h
    return level


_ELEMENT = {types.float32: F32, types.uint16: ir.IntType(16), types.int8: ir.IntType(8)}


def element_loader(builder, dtype, base):
    """load(i, lanes) -> float32 vector (or scalar when lanes == 0) of elements base[i:i+lanes],
    widened: bf16 bits (uint16) shift into the high half of a float32; int8 converts exactly."""
    elem = _ELEMENT[dtype]

    def load(i, lanes):
        ptr = builder.gep(base, [i])
        if lanes:
            raw = builder.load(
                builder.bitcast(ptr, vec_type(lanes, elem).as_pointer()), align=dtype.bitwidth // 8
            )
            target = vec_type(lanes, ir.IntType(32))
            shift = ir.Constant(target, [16] * lanes)
        else:
            raw = builder.load(ptr)
            target, shift = ir.IntType(32), ir.Constant(ir.IntType(32), 16)
        if dtype == types.float32:
            return raw
        if dtype == types.uint16:
            return builder.bitcast(
                builder.shl(builder.zext(raw, target), shift), vec_type(lanes) if lanes else F32
            )
        return builder.sitofp(raw, vec_type(lanes) if lanes else F32)  # int8

    return load


def _emit_sums(builder, n, load_a, loads_b, split=False, partials=4):
    """[sum_i a_i * b_i for each b in loads_b] (or [sum_i a_i] when loads_b is [None]) over i < n,
    in the module docstring's order (partials 4) or the matrix order (partials 1). a is loaded
    once per step for all sums: independent chains keep the FMA units busy where one row would
    wait on its accumulators. split: load_a(i, off, lanes) loads element i + off, i a multiple of
    64 and off a Python int, so block formats know their place in a block at compile time.
    """
    return emit_block(builder, n, [load_a], loads_b, split, partials=partials)[0]


def emit_block(builder, n, loads_a, loads_b, split=False, hints=None, partials=4, span=64):
    """[[sum_i a_i * b_i for b in loads_b] for a in loads_a]: `_emit_sums` for several a at once,
    each sum in the same order. Each step's b is loaded once for every a: with 4 a and 4 b, a
    step's 16 FMAs need 8 loads where one a needed 20, so the FMA units set the pace, not the
    loads. partials 4: four 16-lane partial sums per product (one a and one b: 4 vectors);
    partials 1 (the matrix order): one 16-lane sum per product takes the four lane blocks of a
    step in turn, so a 4 x 4 block holds its 16 sums in registers. hints: (i8* base, lines),
    runtime values: each 16-lane block of the main loop hints lines base, base + 64, ... (up to
    `lines` of them, a given number per block: `simd_memory.emit_hints`), so that memory streams
    while the block computes. span 256: the main loop steps 256 weights (off up to 255), for
    formats of 256-weight blocks, whose rows hold whole blocks: with n % 256 == 0 the sums are the
    same as with steps of 64 (each sum takes the same 16-lane blocks in the same turn)."""
    joined, n64, loads_a, step = emit_main(
        builder, n, loads_a, loads_b, split, hints, partials, span
    )
    return emit_finish(builder, n, n64, joined, loads_a, loads_b, step)


def emit_finish(builder, n, n64, joined, loads_a, loads_b, step):
    """`emit_block`'s sums from `emit_main`'s: folded, then each a's middle and tail."""
    # one a: each sum folded alone, in narrowing halves (cheaper than full-width packing, which
    # made one-row passes 3-10% slower)
    folded = (
        _fold_many(builder, joined)
        if len(loads_a) > 1
        else [fold(builder, v, LANES) for v in joined]
    )
    x = len(loads_b)
    return [
        _emit_rest(builder, n, n64, folded[w * x : (w + 1) * x], load_a, loads_b, step)
        for w, load_a in enumerate(loads_a)
    ]


def emit_main(builder, n, loads_a, loads_b, split, hints, partials, span=64):
    """`emit_block`'s main loop over i < n - n % span (span 64 or 256): (each sum's 16-lane
    vector, a by a then b by b; that bound; the a loaders as (i, off, lanes); the accumulating
    step)."""
    if not split:
        plains = loads_a

        def wrap(plain_a):
            return lambda i, off, lanes: plain_a(
                i if off == 0 else builder.add(i, ir.Constant(I64, off)), lanes
            )

        loads_a = [wrap(p) for p in plains]

    def step(acc, a, b):
        old = builder.load(acc)
        builder.store(
            builder.fadd(old, a, flags=KEEP_FLAGS) if b is None else fma(builder, a, b, old), acc
        )

    accs = [
        [[cgutils.alloca_once_value(builder, ZERO16) for _ in range(partials)] for _ in loads_b]
        for _ in loads_a
    ]
    n64 = builder.and_(n, ir.Constant(I64, -span))
    with cgutils.for_range_slice(builder, ir.Constant(I64, 0), n64, ir.Constant(I64, span)) as (
        i,
        _,
    ):
        for c in range(span // LANES):  # the step's 16-lane blocks in turn
            if hints is not None:  # hints[2] hints per 16-lane block
                at = builder.add(builder.lshr(i, ir.Constant(I64, 4)), ir.Constant(I64, c))
                emit_hints(builder, hints, at)
            j = builder.add(i, ir.Constant(I64, c * LANES))
            a = [load_a(i, c * LANES, LANES) for load_a in loads_a]
            for x, load_b in enumerate(loads_b):
                b = None if load_b is None else load_b(j, LANES)
                for w in range(len(loads_a)):
                    step(accs[w][x][c % partials], a[w], b)
    joined = []  # per sum: its one sum, or its four partial sums as (a0 + a1) + (a2 + a3)
    for per_a in accs:
        for acc in per_a:
            v = [builder.load(x) for x in acc]
            if partials == 1:
                joined.append(v[0])
                continue
            joined.append(
                builder.fadd(
                    builder.fadd(v[0], v[1], flags=KEEP_FLAGS),
                    builder.fadd(v[2], v[3], flags=KEEP_FLAGS),
                    flags=KEEP_FLAGS,
                )
            )
    return joined, n64, loads_a, step


def _emit_rest(builder, n, n64, folded, load_a, loads_b, step):
    """The sums of one a, from its folded main sums: the 8-lane middle and the one-by-one tail
    (the module docstring's order)."""
    totals = [cgutils.alloca_once_value(builder, f) for f in folded]

    def b_at(load_b, i, lanes):
        return None if load_b is None else load_b(i, lanes)

    n8 = builder.add(n64, builder.and_(builder.sub(n, n64), ir.Constant(I64, ~7)))
    with builder.if_then(builder.icmp_signed(">", n8, n64)):
        zero8 = ir.Constant(vec_type(_HALF), [0.0] * _HALF)
        acc8 = [cgutils.alloca_once_value(builder, zero8) for _ in loads_b]
        for acc, total in zip(acc8, totals):
            builder.store(
                builder.insert_element(zero8, builder.load(total), ir.Constant(ir.IntType(32), 0)),
                acc,
            )
        with cgutils.for_range_slice(builder, n64, n8, ir.Constant(I64, _HALF)) as (i, _):
            a = load_a(i, 0, _HALF)
            for acc, load_b in zip(acc8, loads_b):
                step(acc, a, b_at(load_b, i, _HALF))
        for acc, total in zip(acc8, totals):
            builder.store(fold(builder, builder.load(acc), _HALF), total)
    with cgutils.for_range_slice(builder, n8, n, ir.Constant(I64, 1)) as (i, _):
        a = load_a(i, 0, 0)
        for total, load_b in zip(totals, loads_b):
            step(total, a, b_at(load_b, i, 0))
    return [builder.load(t) for t in totals]


def flat_pointer(context, builder, aryty, ary, index_ty, index):
    """Pointer to the element at flat (C order) index `index` of a C-contiguous array."""
    arr = context.make_array(aryty)(context, builder, ary)
    return builder.gep(arr.data, [context.cast(builder, index, index_ty, types.intp)])


WEIGHT_DTYPES = (types.float32, types.uint16, types.int8)


def is_contiguous(a, dtypes) -> bool:
    return isinstance(a, types.Array) and a.layout == "C" and a.dtype in dtypes


def are_float32_arrays(*arrays) -> bool:
    return all(is_contiguous(a, (types.float32,)) for a in arrays)


@intrinsic
def fma32(typingctx, a, b, c):
    """a * b + c in float32 rounded once, on every target: the kernels' fast-math flags never fuse
    a product into a sum (`matrices.FASTMATH`), so a fused one is asked for by name."""
    if not all(t == types.float32 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        return fma(builder, *args)

    return types.float32(a, b, c), codegen


@intrinsic
def dot(typingctx, a, ia, b, ib, n):
    """sum_{i < n} a.flat[ia + i] * b.flat[ib + i] in float32, in the fixed order (products fused);
    a is C-contiguous float32, bf16 bits (uint16) or int8 (widened exactly), b C-contiguous float32.
    No bounds checks: the caller keeps both ranges inside their arrays."""
    ints = all(isinstance(t, types.Integer) for t in (ia, ib, n))
    if not (ints and is_contiguous(a, WEIGHT_DTYPES) and is_contiguous(b, (types.float32,))):
        return None

    def codegen(context, builder, sig, args):
        a_ty, ia_ty, b_ty, ib_ty, n_ty = sig.args
        load_a = element_loader(
            builder, a_ty.dtype, flat_pointer(context, builder, a_ty, args[0], ia_ty, args[1])
        )
        load_b = element_loader(
            builder, types.float32, flat_pointer(context, builder, b_ty, args[2], ib_ty, args[3])
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
        is_contiguous(a, (types.float32,))
        and isinstance(ia, types.Integer)
        and isinstance(n, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        load = element_loader(
            builder,
            types.float32,
            flat_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1]),
        )
        return _emit_sums(
            builder, context.cast(builder, args[2], sig.args[2], types.intp), load, [None]
        )[0]

    return types.float32(a, ia, n), codegen


@intrinsic
def dot_block(typingctx, a, ia, a_stride, b, ib, b_stride, n, a_rows, b_rows, hint, lines, per):
    """(sum_i a.flat[ia + w a_stride + i] * b.flat[ib + r b_stride + i] for w, r), w < a_rows and
    r < b_rows (literals 1..4), flat index w * b_rows + r: several weight rows with several
    activation rows, each sum in the matrix order whatever the block's shape. hint, lines: read
    hints for `lines` 64-byte lines of a from byte `hint` on (0: none), `per` (a literal) in each
    16-lane step of the main loop, so that memory streams while the block computes."""
    ints = all(isinstance(t, types.Integer) for t in (ia, a_stride, ib, b_stride, n, hint, lines))
    literal = all(
        isinstance(t, types.IntegerLiteral) and 1 <= t.literal_value <= 4
        for t in (a_rows, b_rows, per)
    )
    if not (
        ints and literal and is_contiguous(a, WEIGHT_DTYPES) and is_contiguous(b, (types.float32,))
    ):
        return None
    m_a, m_b = a_rows.literal_value, b_rows.literal_value
    result = types.UniTuple(types.float32, m_a * m_b)

    def codegen(context, builder, sig, args):
        loads_a, loads_b, hints, n_v = block_operands(context, builder, sig, args, m_a, m_b)
        sums = emit_block(builder, n_v, loads_a, loads_b, hints=hints, partials=1)
        return context.make_tuple(builder, result, [v for per_a in sums for v in per_a])

    return result(a, ia, a_stride, b, ib, b_stride, n, a_rows, b_rows, hint, lines, per), codegen


def target_has(feature: str) -> bool:
    """Whether the code numba compiles may use this LLVM CPU feature: numba's rule, the features in
    NUMBA_CPU_FEATURES when set, else the host's (NUMBA_CPU_NAME alone keeps the host's features:
    "haswell" on an AVX-512 host still compiles AVX-512 code)."""
    import llvmlite.binding as llvm
    from numba.core import config

    features = config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    return ("+" + feature) in features.split(",")


# The vector extensions a kernel's code may use that tell an instruction set apart (LLVM feature
# names; neon: aarch64), in the order `kernel_isa` names them.
ISA_FEATURES = ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c", "neon")


def kernel_isa() -> str:
    """What numba compiles the kernels for: its CPU name and the features of ISA_FEATURES its
    code may use, e.g. "haswell: avx2+fma+f16c"."""
    import llvmlite.binding as llvm
    from numba.core import config

    name = config.CPU_NAME or llvm.get_host_cpu_name()
    features = [f for f in ISA_FEATURES if target_has(f)]
    return f"{name}: {'+'.join(features) or 'no vector extension'}"


# LLVM's names of the extensions past AVX2 (AVX-512's many, AMX's, the VEX-coded VNNI and IFMA)
PAST_AVX2 = ("avx512", "amx", "avxvnni", "avxifma", "avxneconvert", "avx10", "evex512")


def avx2_target_env() -> dict[str, str]:
    """The environment that makes numba compile AVX2 code on an x86 host of any width (the host's
    LLVM features with every extension past AVX2 turned off; NUMBA_CPU_NAME alone keeps them) and
    torch's MKL take its AVX2 kernels."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten().split(",")
    off = ",".join("-" + f[1:] if f[1:].startswith(PAST_AVX2) else f for f in features)
    return {
        "NUMBA_CPU_NAME": "haswell",
        "NUMBA_CPU_FEATURES": off,
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }


def block_operands(context, builder, sig, args, m_a, m_b):
    """`dot_block`'s operands from its first twelve arguments: (a row loaders, b row loaders,
    hints or None, n as intp)."""
    a_ty, ia_ty, sa_ty, b_ty, ib_ty, sb_ty, n_ty, _, _, hint_ty, lines_ty, per_ty = sig.args[:12]

    def rows(ty, ary, start, start_ty, stride, stride_ty, count, dtype):
        start = context.cast(builder, start, start_ty, types.intp)
        stride = context.cast(builder, stride, stride_ty, types.intp)
        return [
            element_loader(
                builder,
                dtype,
                flat_pointer(
                    context,
                    builder,
                    ty,
                    ary,
                    types.intp,
                    builder.add(start, builder.mul(stride, ir.Constant(I64, r))),
                ),
            )
            for r in range(count)
        ]

    loads_a = rows(a_ty, args[0], args[1], ia_ty, args[2], sa_ty, m_a, a_ty.dtype)
    loads_b = rows(b_ty, args[3], args[4], ib_ty, args[5], sb_ty, m_b, types.float32)
    data = context.make_array(a_ty)(context, builder, args[0]).data
    first = context.cast(builder, args[9], hint_ty, types.intp)
    hints = (
        builder.gep(builder.bitcast(data, ir.IntType(8).as_pointer()), [first]),
        context.cast(builder, args[10], lines_ty, types.intp),
        per_ty.literal_value,
    )
    if isinstance(lines_ty, types.IntegerLiteral) and lines_ty.literal_value == 0:
        hints = None  # none asked for: no hint code in the loop
    return loads_a, loads_b, hints, context.cast(builder, args[6], n_ty, types.intp)
