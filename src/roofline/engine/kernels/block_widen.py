"""IR that widens weights as the file stores them (`block_formats`) to float32, one format each:
`format_loader(builder, code, row)` gives the loads of `simd.emit_block` for block_simd's
intrinsics. Widening is exact (see block_formats).

Layouts (byte offsets in a block; p = position of a weight in its block):
    Q8_0  d@0, int8 q[32]@2                                 q = q[p]
    Q4_0  d@0, qs[16]@2        nibble: low of qs[p] for p < 16, high of qs[p - 16] after
    Q4_1  d@0, m@2, qs[16]@4
    Q5_0  d@0, qh(u32)@2, qs@6  q = nibble | bit p of qh << 4
    Q5_1  d@0, m@2, qh@4, qs@8
    Q4_K  d@0, dmin@2, scales[12]@4, qs[128]@16   sub-block s = p // 32 (scale, min: 6 bits each),
          chunk c = p // 64: qs[32 c + p % 32], low nibble for even s, high for odd
    Q5_K  as Q4_K with qh[32]@16, qs@48: bit s of qh[p % 32] << 4
    Q6_K  ql[128]@0, qh[64]@128, int8 scales[16]@192, d@208: half h = p // 128, group g = p // 32,
          ql[64 h + 32 (g % 2) + p % 32] (high nibble when g // 2 is odd), 2 bits of
          qh[32 h + p % 32] at 2 (g % 4), scale p // 16; q - 32
    MXFP4 e(u8)@0, qs[16]@1     nibbles as Q4_0's (llama.cpp's block_mxfp4); w = k[q] d with
          d = 2^(e - 128) (ggml's GGML_E8M0_TO_FP32_HALF) and k the doubled E2M1 values
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

from roofline.engine.loading.block_formats import BY_CODE
from roofline.simd import F32, I64, KEEP_FLAGS, element_loader, fma, target_has, vec_type

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_F16C = target_has("f16c")  # vcvtph2ps; without it fp16 is widened with integer operations


# AVX-512's vpermps looks up 16 lanes in a 16-lane table. A 4-bit weight's float32 value is a
# function of its nibble q within a block, w = f(q), q in 0..15, so each block builds the table
# f(0..15) once (both halves share it) and each 16 weights take one lookup in place of a convert
# and an fma or multiply: the same values, fewer uops on the two ports that run 512-bit vector
# ops, where stored passes spend their time. The lookup reads only an index's low 4 bits, so low
# nibbles need no mask. Other hosts convert each nibble.
_PERMUTE = target_has("avx512f")
# Without AVX-512, MXFP4 looks its values up in bytes: pshufb maps 16 nibbles to 16 int8 values
# of a 16-byte table at once (E2M1 doubled: integers), and each 8 weights are then widened as
# Q8_0's are (sign-extend, convert, scale). Its arithmetic decoding took 13 operations a lane
# group; in a one-thread 18 MB matvec on AVX2 code this ran at 2.9x its speed (docs/measured.md).
_SHUFFLE_BYTES = not _PERMUTE and target_has("ssse3")
# Without AVX-512, 16 weights' bytes load as two 8-byte halves, each zero-extended to i32 lanes
# from memory (vpmovzxbd mem): from one 16-byte load LLVM masked the low nibbles as bytes, then
# split and widened them (9 ops a block where the halves take 6), and a one-row pass over the
# shipped Q4_1 file ran 13-24% slower (AVX2 Zen 3, docs/measured.md). Signed bytes (Q8_0) stay one
# load: halves were 8% slower there.
_BYTES_IN_HALVES = not _PERMUTE
# Without AVX-512, a block's one fp16 scale is broadcast as 16 bits, then converted in every lane
# (vpbroadcastw, vcvtph2ps): the scalar load merged into a register (vpinsrw), converted and
# broadcast, sat on the widening's path; Q8_0 and Q4_0 passes ran 7-27% faster by it (same
# measurement). AVX-512 hosts were not measured with it and keep the scalar convert.
_SPLAT_HALF_BITS = _F16C and not _PERMUTE
# Without AVX-512, a 5th or 6th bit's share of q - bias is looked up as a float: vpermilps picks
# lane by lane from a 4-float table by an index's low 2 bits, so (bits >> s) needs no mask, and
# the share is added to the converted nibble (small integers: exact, the value `to_f32(q)` gave):
# two ops where the bit's integer and/shift/or/subtract took four (Q5_0, Q5_1, Q5_K, Q6_K).
_BIT_TABLE = not _PERMUTE and target_has("avx")
# Without AVX-512, a K-quant block's 8 sub-block scales and mins are unpacked in vector lanes at
# once and broadcast from the stack (`_k_block_scales`). AVX-512 hosts were not measured with it.
_K_SCALES_IN_LANES = not _PERMUTE and target_has("avx2")
_IOTA16 = ir.Constant(ir.VectorType(F32, 16), [float(j) for j in range(16)])
_IOTA16_MINUS8 = ir.Constant(ir.VectorType(F32, 16), [float(j - 8) for j in range(16)])
# E2M1 (sign, 2-bit exponent, 1-bit mantissa) doubled, by nibble: ggml's kvalues_mxfp4
E2M1_DOUBLED = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
_E2M1_TABLE = ir.Constant(ir.VectorType(F32, 16), [float(k) for k in E2M1_DOUBLED])
_E2M1_BYTES = ir.Constant(ir.VectorType(_I8, 16), list(E2M1_DOUBLED))


def _tabled(lanes, p):
    """Whether 16 weights at position p (an int: known at compile time) go by table lookup."""
    return _PERMUTE and lanes == 16 and isinstance(p, int)


def _by_nibble(r, raw, high, table):
    """table[q] lane by lane for the nibbles q of the i32 lanes raw (the high ones where `high`, a
    bool): one vpermps."""
    idx = r.b.lshr(raw, r.ints(4, 16)) if high else raw
    ty = ir.FunctionType(vec_type(16), [vec_type(16), vec_type(16, _I32)])
    fn = r.b.module.declare_intrinsic("llvm.x86.avx512.permvar.sf.512", fnty=ty)
    return r.b.call(fn, [table, idx])


def ir_int(v, t=I64):
    return v if isinstance(v, ir.Value) else ir.Constant(t, v)


class _Row:
    """IR helpers bound to a builder and a row's first byte (i8*)."""

    def __init__(self, builder, row):
        self.b, self.row = builder, row
        # values made once per block of a loop step (`once`), keyed by the step's index value and
        # the block's place in the step: `load_block` sets `step` before each 16-lane load
        self.memo, self.step = {}, None

    def once(self, name, make):
        """make()'s values, made once per block of a loop step and reused by its other loads
        (the scales, a block's table and its nibble bytes), else made each time."""
        if self.step is None:
            return make()
        key = (name, *self.step)
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def at(self, *offsets):
        """i8* at the sum of byte offsets (IR values or ints) from the row's start, or from the
        first argument when it is a pointer (a block's first byte)."""
        ptr = self.row
        if (
            offsets
            and isinstance(offsets[0], ir.Value)
            and isinstance(offsets[0].type, ir.PointerType)
        ):
            ptr, offsets = offsets[0], offsets[1:]
        for off in offsets:
            if not (isinstance(off, int) and off == 0):
                ptr = self.b.gep(ptr, [ir_int(off)])
        return ptr

    def load(self, ptr, t):
        return self.b.load(self.b.bitcast(ptr, t.as_pointer()), align=1)

    def bytes_i32(self, ptr, lanes, signed=False):
        """lanes bytes at ptr as i32 lanes (zero- or sign-extended)."""
        extend = self.b.sext if signed else self.b.zext
        if _BYTES_IN_HALVES and lanes == 16 and not signed:
            halves = [
                extend(self.load(self.at(ptr, 8 * h), vec_type(8, _I8)), vec_type(8, _I32))
                for h in (0, 1)
            ]
            return self.b.shuffle_vector(*halves, ir.Constant(vec_type(16, _I32), list(range(16))))
        return extend(self.load(ptr, vec_type(lanes, _I8)), vec_type(lanes, _I32))

    def half_splat(self, ptr, lanes):
        """The fp16 at ptr as float32 in every one of `lanes` lanes (exact)."""
        if not _SPLAT_HALF_BITS:
            return self.splat(self.half(ptr), lanes)
        bits = self.splat(self.load(ptr, _I16), lanes, _I16)
        return self.b.fpext(self.b.bitcast(bits, vec_type(lanes, ir.HalfType())), vec_type(lanes))

    def half(self, ptr):
        """The fp16 at ptr as a float32 scalar (exact)."""
        return half_to_f32(self.b, self.load(ptr, _I16), 0)

    def halves(self, ptr, count, lanes):
        """The first `count` (1 or 2) fp16 at ptr, each as float32 in `lanes` lanes (exact); the
        block holds 8 bytes from ptr.

        With F16C: one vcvtph2ps of the 4 halves at ptr (the bytes after the scales are converted
        and unused), stored to the stack and each scale broadcast from there: a broadcast from
        memory is a load alone, where a scalar convert and a broadcast from a register took two
        uops of the ports the widening and the sums need (two per scale, per block; the slot:
        `stack_floats`). Q4_1 (two scales) was faster by it in 11 of 12
        back-to-back pairs of a one-thread 21 MB matvec, both ISAs; Q4_0 and Q8_0 (one scale,
        and an 8-byte load across a cache line more often at their 18- and 34-byte blocks) were
        not, and keep the scalar convert (docs/measured.md)."""
        if not _F16C:
            return [self.splat(self.half(self.at(ptr, 2 * k)), lanes) for k in range(count)]
        b = self.b
        four = b.fpext(
            b.bitcast(self.load(ptr, vec_type(4, _I16)), vec_type(4, ir.HalfType())), vec_type(4)
        )
        opaque = self.stack_floats(four)
        return [self.splat(b.load(b.gep(opaque, [ir_int(k)])), lanes) for k in range(count)]

    def stack_floats(self, v):
        """float* of a stack slot holding the float32 vector v. The slot's address passes through
        an empty asm statement, so that LLVM reads the slot (a broadcast from memory: a load
        alone) instead of shuffling the stored register."""
        b = self.b
        slot = cgutils.alloca_once(b, v.type)
        b.store(v, slot)
        i8p = ir.IntType(8).as_pointer()
        launder = ir.InlineAsm(ir.FunctionType(i8p, [i8p]), "", "=r,0")
        return b.bitcast(b.call(launder, [b.bitcast(slot, i8p)]), F32.as_pointer())

    def splat(self, x, lanes, t=F32):
        v = self.b.insert_element(
            ir.Constant(vec_type(lanes, t), ir.Undefined), x, ir.Constant(_I32, 0)
        )
        return self.b.shuffle_vector(v, v, ir.Constant(vec_type(lanes, _I32), [0] * lanes))

    def ints(self, value, lanes):
        return ir.Constant(vec_type(lanes, _I32), [value] * lanes)

    def nibbles(self, raw, high):
        """Low nibbles of i32 lanes, or high ones where `high` is set (a bool known at compile
        time, or an i1 at run time)."""
        lanes = raw.type.count
        hi, lo = self.b.lshr(raw, self.ints(4, lanes)), self.b.and_(raw, self.ints(15, lanes))
        return (hi if high else lo) if isinstance(high, bool) else self.b.select(high, hi, lo)

    def table4(self, values, idx):
        """values[idx & 3] as float32, lane by lane, for i32 lanes idx (8 or 16): a vpermilps
        for each 8 lanes."""
        b, lanes = self.b, idx.type.count
        table = ir.Constant(vec_type(8), [float(v) for v in values] * 2)
        ty = ir.FunctionType(vec_type(8), [vec_type(8), vec_type(8, _I32)])
        fn = b.module.declare_intrinsic("llvm.x86.avx.vpermilvar.ps.256", fnty=ty)
        if lanes == 8:
            return b.call(fn, [table, idx])
        halves = [
            b.call(fn, [table, b.shuffle_vector(idx, idx, _lanes(range(8 * h, 8 * h + 8)))])
            for h in (0, 1)
        ]
        return b.shuffle_vector(*halves, _lanes(range(16)))

    def to_f32(self, v, signed=True):
        return (self.b.sitofp if signed else self.b.uitofp)(v, vec_type(v.type.count))


def _lanes(indices):
    return ir.Constant(vec_type(len(indices), _I32), list(indices))


def half_to_f32(b, bits, lanes, f16c=_F16C):
    """fp16 bits (i16 or <lanes x i16>) -> float32, exact: vcvtph2ps where the CPU has it (f16c),
    else integer operations (normal: rebias the exponent; subnormal: m 2^-24; inf/nan: all-ones
    exponent)."""
    f32 = vec_type(lanes) if lanes else F32
    if f16c:
        return b.fpext(
            b.bitcast(bits, vec_type(lanes, ir.HalfType()) if lanes else ir.HalfType()), f32
        )
    i32 = vec_type(lanes, _I32) if lanes else _I32

    def c(v):
        return ir.Constant(i32, [v] * lanes) if lanes else ir.Constant(_I32, v)

    h = b.zext(bits, i32)
    sign = b.shl(b.and_(h, c(0x8000)), c(16))
    e, m = b.and_(b.lshr(h, c(10)), c(31)), b.and_(h, c(0x3FF))
    normal = b.or_(b.shl(b.add(e, c(112)), c(23)), b.shl(m, c(13)))
    special = b.or_(c(0x7F800000), b.shl(m, c(13)))
    # m 2^-24
    tiny = b.bitcast(b.fmul(b.uitofp(m, f32), b.bitcast(c(0x33800000), f32), flags=KEEP_FLAGS), i32)
    mag = b.select(
        b.icmp_unsigned("==", e, c(0)),
        tiny,
        b.select(b.icmp_unsigned("==", e, c(31)), special, normal),
    )
    return b.bitcast(b.or_(mag, sign), f32)


# --- one format each: the float32 weights at position p of the block at blk (an IR value or an int)


def _q8_0(r, blk, p, lanes):
    d = r.half_splat(blk, lanes)
    return r.b.fmul(r.to_f32(r.bytes_i32(r.at(blk, 2, p), lanes, signed=True)), d, flags=KEEP_FLAGS)


def _nibble_at(r, blk, qs, p, lanes):
    """Nibbles of a 32-block's 16 bytes at qs: byte p % 16, high nibble when p >= 16."""
    b = r.b
    if isinstance(p, int):
        return r.nibbles(r.bytes_i32(r.at(blk, qs + p % 16), lanes), p >= 16)
    raw = r.bytes_i32(r.at(blk, qs, b.and_(p, ir_int(15))), lanes)
    return r.nibbles(raw, b.icmp_unsigned(">=", p, ir_int(16)))


def _q5_shifted(r, qh_ptr, p, lanes):
    """The u32 qh at qh_ptr shifted right by p + lane: each lane's 5th bit at bit 0."""
    b = r.b
    qh = r.splat(r.load(qh_ptr, _I32), lanes, _I32)
    p32 = r.splat(b.trunc(ir_int(p), _I32), lanes, _I32)
    return b.lshr(qh, b.add(p32, ir.Constant(vec_type(lanes, _I32), list(range(lanes)))))


def _fifth_bit(r, nibbles, shifted, low, high):
    """float32 of nibble + (low, high)[bit 0 of `shifted`], exact: a small integer."""
    if _BIT_TABLE:
        return r.b.fadd(
            r.to_f32(nibbles), r.table4((low, high, low, high), shifted), flags=KEEP_FLAGS
        )
    bit = r.b.and_(shifted, r.ints(1, shifted.type.count))
    return r.to_f32(
        r.b.add(
            nibbles,
            r.b.add(r.b.mul(bit, r.ints(high - low, bit.type.count)), r.ints(low, bit.type.count)),
        )
    )


def _q4_0(r, blk, p, lanes):
    d = r.half_splat(blk, lanes)
    if _tabled(lanes, p):
        raw = r.bytes_i32(r.at(blk, 2 + p % 16), lanes)
        return _by_nibble(r, raw, p >= 16, r.b.fmul(d, _IOTA16_MINUS8, flags=KEEP_FLAGS))
    q = r.b.sub(_nibble_at(r, blk, 2, p, lanes), r.ints(8, lanes))
    return r.b.fmul(d, r.to_f32(q), flags=KEEP_FLAGS)


def _q4_1(r, blk, p, lanes):
    if _tabled(lanes, p):

        def block():
            d, m = r.halves(blk, 2, lanes)
            return fma(r.b, d, _IOTA16, m), r.bytes_i32(r.at(blk, 4), lanes)

        table, raw = r.once("q4_1", block)
        return _by_nibble(r, raw, p >= 16, table)
    d, m = r.once("d, m", lambda: r.halves(blk, 2, lanes))
    q = r.to_f32(_nibble_at(r, blk, 4, p, lanes), signed=False)
    return fma(r.b, d, q, m)


def _e8m0_half(r, blk):
    """The E8M0 byte e at blk as float32 2^(e - 128), exactly as ggml's GGML_E8M0_TO_FP32_HALF
    builds it: bits (e - 1) << 23 for e >= 2, the subnormal 0x00200000 << e for e < 2."""
    b = r.b
    e = b.zext(r.load(blk, _I8), _I32)
    normal = b.shl(b.sub(e, ir.Constant(_I32, 1)), ir.Constant(_I32, 23))
    tiny = b.shl(ir.Constant(_I32, 0x00200000), e)
    bits = b.select(b.icmp_unsigned("<", e, ir.Constant(_I32, 2)), tiny, normal)
    return b.bitcast(bits, F32)


def _e2m1_doubled(r, q):
    """The doubled E2M1 value of nibbles q (i32 lanes) as float32: m = q & 7 splits into exponent
    x = m >> 1 and mantissa bit t = m & 1; |k| = t for x = 0, else (2 + t) 2^(x - 1); bit 3 is
    the sign (E2M1_DOUBLED)."""
    b, lanes = r.b, q.type.count
    m = b.and_(q, r.ints(7, lanes))
    x, t = b.lshr(m, r.ints(1, lanes)), b.and_(m, r.ints(1, lanes))
    # (2 + t) << x is even for x >= 1: halving it is (2 + t) 2^(x - 1), never a negative shift
    big = b.lshr(b.shl(b.add(t, r.ints(2, lanes)), x), r.ints(1, lanes))
    mag = b.select(b.icmp_unsigned("==", x, r.ints(0, lanes)), t, big)
    negative = b.icmp_unsigned("!=", b.and_(q, r.ints(8, lanes)), r.ints(0, lanes))
    return r.to_f32(b.select(negative, b.sub(r.ints(0, lanes), mag), mag))


def _mxfp4(r, blk, p, lanes):
    if _SHUFFLE_BYTES and lanes == 16 and isinstance(p, int):

        def block():
            b = r.b
            raw = r.load(r.at(blk, 1), vec_type(16, _I8))
            shuffle = b.module.declare_intrinsic(
                "llvm.x86.ssse3.pshuf.b.128",
                fnty=ir.FunctionType(vec_type(16, _I8), [vec_type(16, _I8)] * 2),
            )
            lo = b.and_(raw, ir.Constant(vec_type(16, _I8), [15] * 16))
            hi = b.lshr(raw, ir.Constant(vec_type(16, _I8), [4] * 16))
            # the int8 values of the block's low nibbles (weights 0..15), then its high ones
            k = [b.call(shuffle, [_E2M1_BYTES, nib]) for nib in (lo, hi)]
            return r.splat(_e8m0_half(r, blk), lanes), k

        d, k = r.once("mxfp4", block)
        return r.b.fmul(d, r.b.sitofp(k[p >= 16], vec_type(lanes)), flags=KEEP_FLAGS)
    d = r.splat(_e8m0_half(r, blk), lanes)
    if _tabled(lanes, p):
        raw = r.bytes_i32(r.at(blk, 1 + p % 16), lanes)
        return _by_nibble(r, raw, p >= 16, r.b.fmul(d, _E2M1_TABLE, flags=KEEP_FLAGS))
    k = _e2m1_doubled(r, _nibble_at(r, blk, 1, p, lanes))
    return r.b.fmul(d, k, flags=KEEP_FLAGS)


def _q5_0(r, blk, p, lanes):
    q = _fifth_bit(
        r, _nibble_at(r, blk, 6, p, lanes), _q5_shifted(r, r.at(blk, 2), p, lanes), -16, 0
    )
    return r.b.fmul(r.half_splat(blk, lanes), q, flags=KEEP_FLAGS)


def _q5_1(r, blk, p, lanes):
    q = _fifth_bit(
        r, _nibble_at(r, blk, 8, p, lanes), _q5_shifted(r, r.at(blk, 4), p, lanes), 0, 16
    )
    return fma(r.b, r.half_splat(blk, lanes), q, r.half_splat(r.at(blk, 2), lanes))


def _k_scale_min(r, blk, sub):
    """(scale, min) of sub-block `sub` (an int, or an i64 IR value, 0..7) of a Q4_K / Q5_K block,
    as i32: sub < 4: b[sub] & 63, b[sub + 4] & 63;  else: b[sub + 4] & 15 | (b[sub - 4] >> 6) << 4,
    b[sub + 4] >> 4 | (b[sub] >> 6) << 4  (b: the 12 scale bytes at 4)."""
    b = r.b
    j = sub & 3 if isinstance(sub, int) else b.and_(sub, ir_int(3))
    lo, mid, hi = (b.zext(r.load(r.at(blk, 4 + 4 * t, j), _I8), _I32) for t in range(3))

    def c(v):
        return ir.Constant(_I32, v)

    def six(v):
        return b.shl(b.lshr(v, c(6)), c(4))

    def first():
        return b.and_(lo, c(63)), b.and_(mid, c(63))

    def second():
        return b.or_(b.and_(hi, c(15)), six(lo)), b.or_(b.lshr(hi, c(4)), six(mid))

    if isinstance(sub, int):  # known at compile time: no select
        return first() if sub < 4 else second()
    is_first = b.icmp_unsigned("<", sub, ir_int(4))
    (sc0, mn0), (sc1, mn1) = first(), second()
    return b.select(is_first, sc0, sc1), b.select(is_first, mn0, mn1)


def _small_int_floats(r, index, lanes, name, values):
    """values[index] (index an integer IR value) as float32 in every lane, broadcast from a
    constant table: a load alone, where a convert and a broadcast took three uops of the ports
    the sums need."""
    b = r.b
    table = b.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(F32, len(values))
        table = ir.GlobalVariable(b.module, ty, name=name)
        table.initializer = ir.Constant(ty, [float(v) for v in values])
        table.global_constant, table.linkage = True, "internal"
    return r.splat(b.load(b.gep(table, [ir.Constant(_I32, 0), index])), lanes)


def _six_bit_floats(r, value, lanes, sign):
    """sign x value (an i32, 0..63) in every lane (-0.0 for sign -1 and 0: the sign of
    -(x 0))."""
    name = f"roofline_six_bit_{'neg' if sign < 0 else 'pos'}"
    return _small_int_floats(r, value, lanes, name, [sign * float(v) for v in range(64)])


def _k_place(r, chunk, within):
    """(sub-block, is-high-nibble, byte in chunk) for position p = 64 chunk + within of a
    256-block: ints (and a bool) where chunk and within are ints (a block a step, `steps_of`),
    else i64 (and i1) IR values."""
    b = r.b
    if isinstance(chunk, int):
        return 2 * chunk + within // 32, within >= 32, within % 32
    half = b.lshr(within, ir_int(5))
    return (
        b.add(b.mul(chunk, ir_int(2)), half),
        b.icmp_unsigned("==", half, ir_int(1)),
        b.and_(within, ir_int(31)),
    )


def _k_block_scales(r, blk):
    """float* of a stack slot holding the 8 sub-blocks' d sc (floats 0..7) and dmin (-m) (8..15)
    of a Q4_K / Q5_K block, each the product a scalar multiply makes: the 12 scale bytes unpacked
    8 lanes at a time (`_k_scale_min`'s formulas lane by lane), converted, multiplied once, and
    broadcast from memory by each sub-block (a load alone). Scalar unpacking took ~10 operations
    and a broadcast per sub-block, a third of a one-row Q4_K step's instructions on AVX2."""
    b = r.b
    raw = r.load(r.at(blk, 4), vec_type(16, _I8))  # bytes 4..19: the 12 scale bytes, then qs

    def pick(idx):
        return b.zext(b.shuffle_vector(raw, raw, _lanes(idx)), vec_type(8, _I32))

    def per_half(first, second):  # lanes 0-3: first, 4-7: second
        return ir.Constant(vec_type(8, _I32), [first] * 4 + [second] * 4)

    top = per_half(0, 48)  # bits 4-5 from the top of another byte, in lanes 4-7 only
    hi = pick([0, 1, 2, 3, 8, 9, 10, 11])
    sc = b.or_(
        b.and_(hi, per_half(63, 15)),
        b.and_(b.shl(b.lshr(pick([0, 1, 2, 3] * 2), r.ints(6, 8)), r.ints(4, 8)), top),
    )
    mid = pick([4, 5, 6, 7, 8, 9, 10, 11])
    mn = b.or_(
        b.and_(b.lshr(mid, per_half(0, 4)), per_half(63, 15)),
        b.and_(b.shl(b.lshr(pick([4, 5, 6, 7] * 2), r.ints(6, 8)), r.ints(4, 8)), top),
    )
    d, dmin = r.halves(blk, 2, 8)
    dsc = b.fmul(d, r.to_f32(sc), flags=KEEP_FLAGS)
    # -(dmin m) as dmin (-m), -0.0 for m = 0 (`_six_bit_floats`' sign -1)
    neg_dm = b.fmul(dmin, b.fneg(r.to_f32(mn), flags=KEEP_FLAGS), flags=KEEP_FLAGS)
    return r.stack_floats(b.shuffle_vector(dsc, neg_dm, _lanes(range(16))))


def _q4_k(r, blk, chunk, within, lanes, qh_at=None, qs_at=16):
    b = r.b
    sub, high, byte = _k_place(r, chunk, within)

    def scales():
        """d sc and -(dmin m) of the sub-block in every lane (the products as scalars would
        round alike), made once for both halves of the sub-block (`_Row.once`)."""
        sc, mn = _k_scale_min(r, blk, sub)
        d, dmin = r.once("k d", lambda: r.halves(blk, 2, lanes))
        dsc = b.fmul(d, _six_bit_floats(r, sc, lanes, 1), flags=KEEP_FLAGS)
        # -(dmin m) as dmin (-m): a product's sign is its factors', its rounding symmetric
        return dsc, b.fmul(dmin, _six_bit_floats(r, mn, lanes, -1), flags=KEEP_FLAGS)

    def from_slot():
        slot = r.once("k scales", lambda: _k_block_scales(r, blk))
        return tuple(r.splat(b.load(b.gep(slot, [ir_int(k)])), lanes) for k in (sub, 8 + sub))

    # the sub-block's scales once per step where its place in the step is known
    if not isinstance(sub, int):
        dsc, neg_dm = scales()
    else:
        dsc, neg_dm = r.once(f"k sub {sub}", from_slot if _K_SCALES_IN_LANES else scales)
    raw = r.bytes_i32(r.at(blk, qs_at, _times(r, chunk, 32), byte), lanes)
    if qh_at is None and _tabled(lanes, within):
        return _by_nibble(r, raw, high, fma(b, dsc, _IOTA16, neg_dm))
    q = r.nibbles(raw, high)
    if qh_at is None:
        return fma(b, dsc, r.to_f32(q, signed=False), neg_dm)
    # Q5_K: bit `sub` of qh[byte]
    hb = r.bytes_i32(r.at(blk, qh_at, byte), lanes)
    q = _fifth_bit(r, q, b.lshr(hb, r.splat(b.trunc(ir_int(sub), _I32), lanes, _I32)), 0, 16)
    return fma(b, dsc, q, neg_dm)


def _q5_k(r, blk, chunk, within, lanes):
    return _q4_k(r, blk, chunk, within, lanes, qh_at=16, qs_at=48)


def _times(r, v, k):
    """v k for v an int or an i64 IR value."""
    return v * k if isinstance(v, int) else r.b.mul(v, ir_int(k))


def _q6_k(r, blk, chunk, within, lanes):
    b = r.b
    if isinstance(chunk, int):  # a block a step (`steps_of`): all known at compile time
        h, odd_chunk, sub, byte = chunk >> 1, chunk & 1 == 1, within // 32, within % 32
        scale_at, shift = 4 * chunk + within // 16, 2 * (2 * (chunk & 1) + within // 32)
        shifts = r.ints(shift, lanes)
    else:
        h = b.lshr(chunk, ir_int(1))
        odd_chunk = b.icmp_unsigned("==", b.and_(chunk, ir_int(1)), ir_int(1))  # high nibble
        sub, byte = b.lshr(within, ir_int(5)), b.and_(within, ir_int(31))
        scale_at = b.add(b.mul(chunk, ir_int(4)), b.lshr(within, ir_int(4)))
        shift = b.trunc(
            b.mul(b.add(b.mul(b.and_(chunk, ir_int(1)), ir_int(2)), sub), ir_int(2)), _I32
        )  # 2 (g % 4)
        shifts = r.splat(shift, lanes, _I32)
    ql = r.nibbles(
        r.bytes_i32(r.at(blk, _times(r, h, 64), _times(r, sub, 32), byte), lanes), odd_chunk
    )
    qh = r.bytes_i32(r.at(blk, 128, _times(r, h, 32), byte), lanes)
    if _BIT_TABLE:  # ql + 16 top - 32, top = (qh >> shift) & 3
        q = b.fadd(r.to_f32(ql), r.table4((-32, -16, 0, 16), b.lshr(qh, shifts)), flags=KEEP_FLAGS)
    else:
        top = b.and_(b.lshr(qh, shifts), r.ints(3, lanes))
        q = r.to_f32(b.sub(b.or_(ql, b.shl(top, r.ints(4, lanes))), r.ints(32, lanes)))
    if _K_SCALES_IN_LANES and isinstance(scale_at, int):
        # the block's 16 products d sc at once (`_q6_k_block_scales`), one broadcast from the slot
        slot = r.once("q6_k scales", lambda: _q6_k_block_scales(r, blk))
        ds = r.splat(b.load(b.gep(slot, [ir_int(scale_at)])), lanes)
        return b.fmul(ds, q, flags=KEEP_FLAGS)
    # the int8 scale as float32 from a table of the 256 values (byte b: b - 256 from 128 on)
    scale = b.zext(r.load(r.at(blk, 192, scale_at), _I8), _I32)
    signed = [v - 256 if v >= 128 else v for v in range(256)]
    sc = _small_int_floats(r, scale, lanes, "roofline_int8", signed)
    d = r.once("q6_k d", lambda: r.half_splat(r.at(blk, 208), lanes))
    ds = b.fmul(d, sc, flags=KEEP_FLAGS)  # the product a scalar multiply made, in every lane
    return b.fmul(ds, q, flags=KEEP_FLAGS)


def _q6_k_block_scales(r, blk):
    """float* of a stack slot holding a Q6_K block's 16 products d sc (int8 scales at 192, fp16 d
    at 208), each the product a scalar multiply makes: converted and multiplied 8 lanes at a
    time, where each 16 weights took a byte load, a table load and a multiply."""
    b = r.b
    d = r.half_splat(r.at(blk, 208), 16)
    sc = b.sext(r.load(r.at(blk, 192), vec_type(16, _I8)), vec_type(16, _I32))
    return r.stack_floats(b.fmul(d, r.to_f32(sc), flags=KEEP_FLAGS))


# each block format's widening, by its name in block_formats (the one table of formats and codes)
_BLOCK32 = {
    "Q8_0": _q8_0,
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "MXFP4": _mxfp4,
}
_BLOCK256 = {"Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}
# Formats whose 16 weights widen in few enough ops that two weight rows' widening and sums fit in
# AVX2's 16 vector registers. The others' pairs spilled: a two-row Q6_K loop made 121 stack
# accesses in 745 instructions a block, Q5_0's 26 in 168 (Q4_1's 4 in 108). One row at a time,
# their matvecs ran 1.15-2.1x as fast in one process, Q4_1's and Q8_0's 1.00-1.05x (kept in
# pairs); whole-model decode moved within the host's noise, and the pairs' code is no longer
# compiled (Zen 3, docs/measured.md). AVX-512's 32 registers hold both rows of any format.
_PAIRS_FIT_AVX2 = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "MXFP4"})


def pairs_fit(name: str) -> bool:
    """Whether two weight rows of this format are computed together beside one x row."""
    return _PERMUTE or name in _PAIRS_FIT_AVX2


def steps_of(code: int) -> int:
    """Weights a step of a stored row's main loop takes (`simd.emit_block`'s span): a whole block
    for 256-weight blocks (a row holds whole blocks, so n % 256 == 0 and the sums keep their
    order), where every place in the block is then known at compile time: a Q4_K or Q6_K matvec on
    AVX2 took its scales' and bits' places as run-time selects and shifts once per 64 weights;
    else 64."""
    return 256 if BY_CODE[code].block == 256 else 64


def format_loader(builder, code, row):
    """load(i, off, lanes) -> float32 weights i + off .. of the row (lanes 16 or 8; 0: one scalar),
    for `simd.emit_block(split=True, span=steps_of(code))`: with lanes 16, i is a multiple of the
    span and off an int below it."""
    r = _Row(builder, row)
    b = builder
    fmt = BY_CODE[code]
    if fmt.block == 1:
        dtype = {"F32": types.float32, "BF16": types.uint16}.get(fmt.name)

        def load_float(i, off, lanes):
            idx = i if off == 0 else b.add(i, ir_int(off))
            if dtype is not None:  # F32, BF16: the float32 kernels' own loader
                ptr = b.bitcast(
                    r.at(b.mul(idx, ir_int(fmt.block_bytes))),
                    {"F32": F32, "BF16": _I16}[fmt.name].as_pointer(),
                )
                return element_loader(b, dtype, ptr)(ir_int(0), lanes)
            bits = r.load(r.at(b.mul(idx, ir_int(2))), vec_type(lanes, _I16) if lanes else _I16)
            return half_to_f32(b, bits, lanes)

        return load_float

    shift = fmt.block.bit_length() - 1

    def place(i, off, lanes):
        """(block pointer, position in block: an int when known at compile time)."""
        if lanes == 16 and fmt.block == 32:
            blk = b.add(b.lshr(i, ir_int(shift)), ir_int(off >> shift))
            return r.at(b.mul(blk, ir_int(fmt.block_bytes))), off % 32
        idx = i if off == 0 else b.add(i, ir_int(off))
        blk = b.lshr(idx, ir_int(shift))
        return r.at(b.mul(blk, ir_int(fmt.block_bytes))), b.and_(idx, ir_int(fmt.block - 1))

    def load_block(i, off, lanes):
        # the scalar tail: never reached for whole blocks; lane i % 8 of an 8-lane load
        if lanes == 0:
            v = load_block(b.and_(i, ir_int(~7)), 0, 8)
            return b.extract_element(v, b.trunc(b.and_(i, ir_int(7)), _I32))
        if fmt.block == 32:
            blk, p = place(i, off, lanes)
            r.step = (i, off >> shift) if lanes == 16 else None
            return _BLOCK32[fmt.name](r, blk, p, lanes)
        if lanes == 16:  # i a multiple of 256 (`steps_of`): the block i / 256, `off` within it
            r.step = (i,)
            blk = r.at(b.mul(b.lshr(i, ir_int(8)), ir_int(fmt.block_bytes)))
            return _BLOCK256[fmt.name](r, blk, off >> 6, off & 63, lanes)
        blk, p = place(i, off, lanes)
        r.step = None
        return _BLOCK256[fmt.name](r, blk, b.lshr(p, ir_int(6)), b.and_(p, ir_int(63)), lanes)

    return load_block
