"""A weight matrix as the decode kernels see it: rows W (out, n_in), one value per row beside them.

    float32, bf16 bits (uint16), int8   the value is the row's float32 scale (1 unless int8)
    stored rows (uint8)                 W (out, stride): each row's bytes as the file stores them
                                        (block_formats); beside them a `block_simd.StoredCodes`:
                                        each row's format code and the model's FormatSet; n_in
                                        is the activations' width

Stacks over layers add a leading axis to both. numba specialises on the dtypes: `matvec` has one
body per kind; stored rows go through `block_simd` (widened in registers, then the float32 order).
Whole rows as float32 (embeddings, the prefill's operands) are `widened_rows`'.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from roofline import simd, simd_memory
from roofline.engine.kernels import block_simd, kernel_cache
from roofline.engine.kernels.simd_blocks import dot_block_into

kernel_cache.install()  # before any kernel is decorated (the others import JIT_OPTIONS from here)

# The fast-math flags that change no value (no NaN or infinity reaches a kernel; the sign of a zero
# is never read): LLVM may assume them, but not fuse a product into a sum (`contract`), reorder sums
# (`reassoc`), divide by a reciprocal (`arcp`) or approximate (`afn`). With those choices left to
# LLVM, AVX2 kernels compiled after Gemma 3's gave other bits than the same source compiled alone
# (docs/measured.md). Reductions take their order from `simd`, fused products `simd.fma32`.
# error_model="numpy": float division without Python's zero check, which would block vectorisation.
FASTMATH = {"nnan", "ninf", "nsz"}  # a set: numba takes no frozenset
JIT_OPTIONS = dict(fastmath=FASTMATH, cache=True, nogil=True, error_model="numpy")
OVERLOAD_OPTIONS = dict(fastmath=FASTMATH, nogil=True, error_model="numpy")  # for overloads


def is_stored_rows(w) -> bool:
    return isinstance(w, types.Array) and w.dtype == types.uint8


@intrinsic
def _f32_from_bf16_bits(typingctx, bits):
    """bf16 bits (uint16) -> float32: zero-extend, shift into the high half, reinterpret."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.zext(args[0], ir.IntType(32))
        return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

    return types.float32(types.uint16), codegen


def widen(w):
    """A weight element as float32 (a stub; the jitted versions are the overloads below)."""
    raise NotImplementedError


@overload(widen, inline="always")
def _widen_overload(w):
    if w == types.uint16:  # bf16 bits
        return lambda w: _f32_from_bf16_bits(w)
    if w == types.float32:
        return lambda w: w
    if w == types.int8:
        return lambda w: np.float32(w)
    return None


@njit(**JIT_OPTIONS)
def _store(out, r, o, d, s, accumulate):
    """out[r, o] = d s, or out[r, o] + d s rounded once (`simd_blocks` stores the same): the
    product and the sum in one place, so that every caller (1 to 4 rows) computes them alike."""
    if accumulate:
        out[r, o] = simd.fma32(d, s, out[r, o])
    else:
        out[r, o] = d * s


def store_sums(out, r, o, d, scale, b_rows, accumulate):
    """`_store` of every sum of a block d (a tuple, a_rows x b_rows, literal b_rows): out[r + j,
    o + i] from d[i b_rows + j], times scale[o + i] (scale None: times 1)."""
    raise NotImplementedError


@overload(store_sums, prefer_literal=True, inline="always", jit_options=OVERLOAD_OPTIONS)
def _store_sums_overload(out, r, o, d, scale, b_rows, accumulate):
    if not isinstance(b_rows, types.IntegerLiteral):
        return None
    nb = b_rows.literal_value
    # written out, one line per sum: a loop indexes the tuple at run time, which compiles to a
    # jump table whose mispredicted jumps held most of a k-row loop's samples (docs/measured.md)
    lines = ["def impl(out, r, o, d, scale, b_rows, accumulate):"]
    for q in range(d.count):
        i, j = divmod(q, nb)
        times = "one" if scale is types.none else f"scale[o + {i}]"
        lines.append(f"    _store(out, r + {j}, o + {i}, d[{q}], {times}, accumulate)")
    space = {"_store": _store, "one": np.float32(1.0)}
    exec("\n".join(lines), space)
    return space["impl"]


def matvec(w, scale, x, out, o0, o1, accumulate, kernels):
    """out[r, o] (+)= scale[o] sum_i w[o, i] x[r, i], rows o in [o0, o1) (overloads below);
    kernels: the pass's `kernel_shapes.KernelShape` (how far ahead to hint, how big a tile)."""
    raise NotImplementedError


# Weight rows are read KernelShape.ahead_bytes ahead with software prefetches: the hardware
# prefetchers left one-row passes waiting on memory, most of all over stored blocks, whose widening
# is several instructions per 16 weights, so a core asks for its next bytes slowly (a profile put a
# third of a pass on the instruction after the block load; docs/measured.md).
# (The helpers below are inlined: a unit of work is 16 KiB of weights, a few microseconds, and two
# more calls per unit made one-row passes over stored rows 10-15% slower.)
# Past four x rows the weights go in tiles of about KernelShape.tile_bytes: all x rows pass over a
# tile (in groups of four) while it sits in L1 beside one group of x rows, and the tile hints the
# next one's bytes as it goes.
# Stored rows of a block format hint a block's lines at once, into L1, before computing it (the
# widening is compute-bound: spread into L2, as float rows are, Q4_1 decoded slower in every
# alternating pair).
# Rows of floats (F32, F16, BF16) read a line or more a 16-weight step: at once, a pass over short
# rows waited on the core's few miss buffers, so `block_simd.stored_dot_block` spreads theirs over
# its loop (one thread, 49152 x 576 F32 rows: 6.0-6.4 GB/s against float32 rows' 8.6-9.5; spread
# 9.2-9.6; docs/measured.md).


@njit(inline="always", **JIT_OPTIONS)
def _hint_span(w, lo, hi):
    """Read hints for the lines of bytes [lo, hi) of w (clipped to w), at once."""
    for b in range(lo & ~63, min(hi, w.size * w.itemsize), 64):
        simd_memory.prefetch(w, b)


@overload(matvec, jit_options=OVERLOAD_OPTIONS)
def _matvec_overload(w, scale, x, out, o0, o1, accumulate, kernels):
    if is_stored_rows(w):

        def stored(w, scale, x, out, o0, o1, accumulate, kernels):  # scale: StoredCodes
            k, ahead = x.shape[0], kernels.ahead_bytes
            if k <= 4:
                _stored_group(w, scale, x, out, o0, o1, 0, k, accumulate, ahead)
                return
            rows = max(1, kernels.tile_bytes // w.shape[1])
            for t0 in range(o0, o1, rows):
                _stored_tile(w, scale, x, out, t0, min(t0 + rows, o1), accumulate, ahead)

        return stored

    def plain(w, scale, x, out, o0, o1, accumulate, kernels):
        if x.shape[0] <= 4:
            _plain_rows(w, scale, x, out, o0, o1, accumulate, kernels.ahead_bytes)
            return
        rows = _tile_rows(w.shape[1] * w.itemsize, 16 * x.shape[1], kernels.tile_bytes)
        for t0 in range(o0, o1, rows):
            _plain_tile(w, scale, x, out, t0, min(t0 + rows, o1), accumulate)

    return plain


# A block's sums are 16 lanes each (`simd`'s matrix order): one register with AVX-512, two with
# AVX2, which has 16 vector registers to AVX-512's 32. Two weight rows x 8 x rows (16 sums) fill
# half of AVX-512's registers; on AVX2 they needed 32 and the loop spent 234 of its 532
# instructions spilling them to the stack (a profile of a 128-row pass, Zen 3). There a block is
# one weight row x 4 x rows (8 registers of sums): 8-row passes over the shipped Q4_1 file took
# 21.7 ms against 41.2 (one row: 7 ms), 128-row passes 372 against 631 (docs/measured.md).
_WIDE_REGISTERS = simd.target_has("avx512f")
_STORED_X_GROUP = 8 if _WIDE_REGISTERS else 4  # x rows a block of stored weight rows serves


def stored_into(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):
    """out[r + j, o] (+)= sum_t w[o, t] x[r + j, t] for stored rows o in [o0, o1) and j < m (a
    literal 1..8), fmt: their StoredCodes: two weight rows at a time where they share a format
    (`block_simd.stored_dot_block`) whose pair fits the registers (`block_simd.PAIRED_ROWS`),
    else one (always one beside several x rows without AVX-512's registers: `_STORED_X_GROUP`).
    ahead >= 0: the first pass over these rows, which hints each row's bytes `ahead` bytes ahead
    (a later group of x rows: -1, no hints)."""
    raise NotImplementedError


@overload(stored_into, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _stored_into_overload(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):
    if not isinstance(m, types.IntegerLiteral):
        return None
    rows = m.literal_value
    # The matrix order has one sum per product, a chain of FMAs: one weight row with up to four x
    # rows left the two FMA units waiting on their chains; two weight rows double the chains
    # (2 to 4 x rows measured 10-20% faster a pass with AVX-512, docs/measured.md). Without
    # AVX-512's registers, pairs serve one x row only (`_STORED_X_GROUP`)
    pairs = rows == 1 or _WIDE_REGISTERS
    # whether the model has rows of floats (its FormatSet, known when compiling): without them the
    # rows are hinted as they always were, and no lookup of a row's format is compiled in
    floats = any(block_simd.FLOAT_ROWS[c] for c in fmt.types[1].codes)

    def impl(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):
        s, row, a, first = x.shape[1], w.shape[1], ahead, ahead >= 0
        codes, formats, paired = fmt.codes, fmt.formats, block_simd.PAIRED_ROWS
        o = o0
        while o < o1:
            if pairs and o + 1 < o1 and codes[o] == codes[o + 1] and paired[codes[o]]:
                lo, lines = _stored_ahead(w, first, o * row + a, 2 * row, codes[o], floats)
                d = block_simd.stored_dot_block(
                    w, o * row, codes[o], formats, x, r * s, s, s, 2, rows, lo, lines
                )
                store_sums(out, r, o, d, None, rows, accumulate)
                o += 2
                continue
            if not pairs:  # one weight row beside the x rows
                lo, lines = _stored_ahead(w, first, o * row + a, row, codes[o], floats)
                d = block_simd.stored_dot_block(
                    w, o * row, codes[o], formats, x, r * s, s, s, 1, rows, lo, lines
                )
                store_sums(out, r, o, d, None, rows, accumulate)
            else:
                if first:
                    _hint_span(w, o * row + a, (o + 1) * row + a)
                _stored_alone(w, fmt, x, out, o, r, m, accumulate)
            o += 1

    return impl


@njit(inline="always", **JIT_OPTIONS)
def _stored_ahead(w, first, start, n_bytes, code, floats):
    """The first pass over stored rows hints the bytes [start, start + n_bytes) of w: a row of
    floats (when the model has such rows: `floats`) as it goes, (first byte, lines) returned for
    `block_simd.stored_dot_block`; a block format's at once, here. (0, 0) when hinted here or
    not at all."""
    if not first:
        return 0, 0
    if floats and block_simd.FLOAT_ROWS[code]:
        return _ahead(start, n_bytes, w.size * w.itemsize)
    _hint_span(w, start, start + n_bytes)
    return 0, 0


@njit(**JIT_OPTIONS)
def _stored_alone(w, fmt, x, out, o, r, m, accumulate):
    # a row without a partner of its format (the end of a range, a format's last row): one x row
    # at a time, in a function of its own, so that it is compiled once, not once per row count
    s = x.shape[1]
    for j in range(m):
        d1 = block_simd.stored_dot_block(
            w, o * w.shape[1], fmt.codes[o], fmt.formats, x, (r + j) * s, s, s, 1, 1, 0, 0
        )
        _store(out, r + j, o, d1[0], np.float32(1.0), accumulate)


def _stored_group(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):
    """`stored_into` with m (x rows, 1.._STORED_X_GROUP) known only at run time."""
    raise NotImplementedError


@overload(_stored_group, jit_options=OVERLOAD_OPTIONS)
def _stored_group_overload(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):
    # one branch per literal row count, written out as `store_sums` writes its lines; up to
    # _STORED_X_GROUP, the most a group holds (`_stored_tile`): without AVX-512, branches of five
    # to eight rows would never run, and each is a kernel per format to compile
    lines = ["def impl(w, fmt, x, out, o0, o1, r, m, accumulate, ahead):"]
    for rows in range(_STORED_X_GROUP, 1, -1):
        lines.append(f"    if m == {rows}:")
        lines.append(f"        stored_into(w, fmt, x, out, o0, o1, r, {rows}, accumulate, ahead)")
        lines.append("        return")
    lines.append("    stored_into(w, fmt, x, out, o0, o1, r, 1, accumulate, ahead)")
    space = {"stored_into": stored_into}
    exec("\n".join(lines), space)
    return space["impl"]


@njit(**JIT_OPTIONS)
def _stored_tile(w, fmt, x, out, o0, o1, accumulate, ahead):
    # x rows in groups of up to _STORED_X_GROUP outside, the tile's weight rows inside (two at a
    # time with AVX-512): widening a stored block costs several instructions per 16 weights, so
    # each widened vector serves 8 x rows with AVX-512 (16 made no difference and took longer to
    # compile), 4 with AVX2 (what its registers hold); the tile stays in L1 for the next
    # group. Five to seven rows go as one group: as four and the rest, each block was widened
    # twice (5 rows cost 2.3x one row against 1.6x; the three more kernels take 50 s more to
    # compile from a cold cache, docs/measured.md)
    k, r = x.shape[0], 0
    while r < k:
        m = min(_STORED_X_GROUP, k - r)
        _stored_group(w, fmt, x, out, o0, o1, r, m, accumulate, ahead if r == 0 else -1)
        r += m


def block_into(w, scale, x, out, o, r, a_rows, b_rows, accumulate, hint, lines, per_step):
    """out[r + j, o + i] (+)= scale[o + i] sum_t w[o + i, t] x[r + j, t] for i < a_rows, j < b_rows
    (literals: `simd.dot_block`), hinting `lines` lines of w from byte `hint` on as it goes,
    per_step (a literal) in each 16-lane step."""
    raise NotImplementedError


@overload(block_into, prefer_literal=True, inline="always", jit_options=OVERLOAD_OPTIONS)
def _block_into_overload(w, scale, x, out, o, r, a_rows, b_rows, accumulate, hint, lines, per_step):
    literal = all(isinstance(t, types.IntegerLiteral) for t in (a_rows, b_rows, per_step))
    if not literal:
        return None
    na, nb, per = a_rows.literal_value, b_rows.literal_value, per_step.literal_value
    # literal zero lines: pass literals on, so that no hint code enters the loop (as a runtime 0 the
    # check stayed in every step and cost one-row passes 3%)
    hinted = not (isinstance(lines, types.IntegerLiteral) and lines.literal_value == 0)

    def impl(w, scale, x, out, o, r, a_rows, b_rows, accumulate, hint, lines, per_step):
        n, s = w.shape[1], x.shape[1]
        if hinted:
            d = simd.dot_block(w, o * n, n, x, r * s, s, n, na, nb, hint, lines, per)
        else:
            d = simd.dot_block(w, o * n, n, x, r * s, s, n, na, nb, 0, 0, 1)
        store_sums(out, r, o, d, scale, nb, accumulate)

    if na != 4:
        return impl

    # four weight rows (always hinted by their callers): each x row's four sums stored as one
    # piece (`simd_blocks`)
    def four(w, scale, x, out, o, r, a_rows, b_rows, accumulate, hint, lines, per_step):
        n, s, m = w.shape[1], x.shape[1], out.shape[1]
        dot_block_into(
            w, o * n, n, x, r * s, s, n, 4, nb, hint, lines, per, out, r * m + o, m, scale, o,
            accumulate,
        )  # fmt: skip

    return four


def _block_of(w, scale, x, out, o, r, a_rows, m, accumulate, hint, lines):
    """`block_into` with a_rows a literal and m (x rows, 1..4) known only at run time."""
    raise NotImplementedError


@overload(_block_of, prefer_literal=True, inline="always", jit_options=OVERLOAD_OPTIONS)
def _block_of_overload(w, scale, x, out, o, r, a_rows, m, accumulate, hint, lines):
    if not isinstance(a_rows, types.IntegerLiteral):
        return None
    na = a_rows.literal_value

    def impl(w, scale, x, out, o, r, a_rows, m, accumulate, hint, lines):
        if m == 4:
            block_into(w, scale, x, out, o, r, na, 4, accumulate, hint, lines, 2)
        elif m == 3:
            block_into(w, scale, x, out, o, r, na, 3, accumulate, hint, lines, 2)
        elif m == 2:
            block_into(w, scale, x, out, o, r, na, 2, accumulate, hint, lines, 2)
        else:
            block_into(w, scale, x, out, o, r, na, 1, accumulate, hint, lines, 2)

    return impl


@njit(inline="always", **JIT_OPTIONS)
def _plain_block(w, scale, x, out, o, r, m, rows, accumulate, hint, lines):
    """x rows r..r+m (m 1..4) against weight rows o..o+rows (rows 4, or 1)."""
    if rows == 4:
        _block_of(w, scale, x, out, o, r, 4, m, accumulate, hint, lines)
    else:
        _block_of(w, scale, x, out, o, r, 1, m, accumulate, hint, lines)


@njit(inline="always", **JIT_OPTIONS)
def _ahead(first, n_bytes, size):
    """(first byte, lines) of the lines from byte `first` on covering n_bytes, clipped to size."""
    lo = first & ~63
    return lo, max(0, (min(lo + n_bytes, size) - lo + 63) // 64)


@njit(inline="always", **JIT_OPTIONS)
def _plain_rows(w, scale, x, out, o0, o1, accumulate, ahead):
    # up to four x rows: two to four in blocks of four weight rows (4 x 4: 8 loads per 16
    # FMAs; the last rows one at a time), one a weight row at a time (blocks of four: no
    # faster). Memory sets the pace, so each block hints a block's span of bytes `ahead`
    # ahead, into L2, spread over its loop (all at once into L1, the hints held the core's few
    # L1 miss buffers while the block computed: one thread's 1- to 4-row passes 5-12% slower,
    # docs/measured.md). A block of four reads its rows side by side, so it hints past the next
    # block (from its own start, the hints fell inside its own rows: 4-row passes 1.23x one row,
    # against 1.10x; 2 rows a weight row at a time 1.05x, in blocks 1.01x). One loop per row
    # count: a branch on it inside the loop cost 10%
    k, row_bytes, a = x.shape[0], w.shape[1] * w.itemsize, ahead
    size, line_bytes = w.size * w.itemsize, row_bytes // 64 * 64
    o = o0
    if k == 4:
        while o + 4 <= o1:
            lo, lines = _ahead((o + 4) * row_bytes + a, 4 * line_bytes, size)
            block_into(w, scale, x, out, o, 0, 4, 4, accumulate, lo, lines, 4)
            o += 4
    elif k == 3:
        while o + 4 <= o1:
            lo, lines = _ahead((o + 4) * row_bytes + a, 4 * line_bytes, size)
            block_into(w, scale, x, out, o, 0, 4, 3, accumulate, lo, lines, 4)
            o += 4
    elif k == 2:
        while o + 4 <= o1:
            lo, lines = _ahead((o + 4) * row_bytes + a, 4 * line_bytes, size)
            block_into(w, scale, x, out, o, 0, 4, 2, accumulate, lo, lines, 4)
            o += 4
    else:
        while o < o1:
            lo, lines = _ahead(o * row_bytes + a, line_bytes, size)
            block_into(w, scale, x, out, o, 0, 1, 1, accumulate, lo, lines, 1)
            o += 1
    for q in range(o, o1):
        _block_of(w, scale, x, out, q, 0, 1, k, accumulate, 0, 0)


@njit(inline="always", **JIT_OPTIONS)
def _tile_rows(row_bytes, group_bytes, tile_bytes):
    """Weight rows per tile: what fits tile_bytes beside a group of four x rows (group_bytes), in
    whole 4-row blocks, at least one. (With long rows, one row fitted: the FFN's down matrix ran
    in 1 x 4 blocks, every x row coming from L2 again for each weight row; docs/measured.md.)"""
    return max(4, (tile_bytes - group_bytes) // row_bytes // 4 * 4)


@njit(inline="always", **JIT_OPTIONS)
def _tile_share(ahead, tile_bytes, steps, step, size):
    """(first byte, lines): block `step` of `steps`'s equal share of the next tile's bytes, which
    start at byte `ahead` (clipped to size bytes)."""
    lo = (ahead + step * tile_bytes // steps) & ~63
    hi = min(ahead + (step + 1) * tile_bytes // steps, size)
    return lo, max(0, (hi - lo + 63) // 64)


@njit(**JIT_OPTIONS)
def _plain_tile(w, scale, x, out, o0, o1, accumulate):
    # more than four x rows: groups of four outside, the tile's weight rows inside, four at a time
    # (`simd.dot_block`: 8 loads per 16 FMAs); a group's x rows and the tile's weights
    # (KernelShape.tile_bytes) stay in L1 for the next group. Each block hints an equal share of
    # the next tile's bytes, so memory streams at the pace the tile computes (the first group
    # hinting whole rows stalled on full miss buffers, then left memory idle while the others
    # computed).
    # Full groups run a loop of 4 x 4 blocks alone: one loop choosing among the eight block
    # shapes at run time ran the same blocks a third slower (docs/measured.md)
    k, row_bytes = x.shape[0], w.shape[1] * w.itemsize
    groups, blocks = (k + 3) // 4, (o1 - o0) // 4 + (o1 - o0) % 4
    ahead, tile_bytes, steps, step = o1 * row_bytes, (o1 - o0) * row_bytes, groups * blocks, 0
    size = w.size * w.itemsize
    # a block's share of the next tile is 4 / groups lines per 16-lane step: two slots a step
    # hint it in the block's first steps, and past three groups the hints bunched there stalled
    # on full miss buffers while the rest of the block left memory idle; one a step spreads them
    even = groups >= 4
    for g in range(k // 4):
        o = o0
        while o + 4 <= o1:
            lo, lines = _tile_share(ahead, tile_bytes, steps, step, size)
            if even:
                block_into(w, scale, x, out, o, 4 * g, 4, 4, accumulate, lo, lines, 1)
            else:
                block_into(w, scale, x, out, o, 4 * g, 4, 4, accumulate, lo, lines, 2)
            o += 4
            step += 1
        for q in range(o, o1):
            block_into(w, scale, x, out, q, 4 * g, 1, 4, accumulate, 0, 0, 1)
            step += 1
    r = k // 4 * 4
    if r < k:  # the last one to three x rows
        o = o0
        while o < o1:
            rows = 4 if o + 4 <= o1 else 1
            lo, lines = _tile_share(ahead, tile_bytes, steps, step, size)
            _plain_block(w, scale, x, out, o, r, k - r, rows, accumulate, lo, lines)
            o += rows
            step += 1
