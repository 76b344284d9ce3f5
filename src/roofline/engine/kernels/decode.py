"""One decode pass over all layers for k token rows, run by the worker threads in one region.

One parallel region per pass, not per small operation (each would pay a fork/join and idle threads
in the serial steps). The threads walk the same phases; a phase (units: row blocks of a matrix,
attention chunks) starts when all units of the one before are done:

    per layer:  qkv rows (+ private RMSNorm) | bias, RoPE, K/V to cache (one unit) | attention
                chunks | o rows, += x (+ bias) (+ private merge, with the sinks) | gate/up rows,
                SiLU (+ private RMSNorm) | down rows, += x
    post norms: o rows and down rows go to a buffer instead, and a phase of rows (a unit each)
                adds their RMSNorm to x (Gemma 2/3: `_post_norm_phase`)
    experts:    the MLP's phases are router rows (+ bias) | (+ private routing and work list,
                `experts`) gate/up rows of the routed experts (+ bias), SiLU or gpt-oss's clamped
                SwiGLU | their down rows (+ bias) | a row a unit, x += the row's experts' outputs
                weighted, in rank order (`_expert_phases`)
    then:       lm_head rows (+ private final RMSNorm of the logit rows)

Units are split evenly (equal weight bytes); a thread claims runs of its own share, then others'
unstarted units (`_claim`), so a slow thread cannot stall the pass. Every unit does the same
arithmetic whichever thread runs it: results equal a one-thread pass, bit for bit. "Private" steps
are computed by every thread into its own buffer (cheap; saves a phase each).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from roofline.engine.kernels import atomics
from roofline.engine.kernels.attention import (
    attend_work,
    attention_scratch,
    attention_units,
    attention_work,
    gather_scratch,
    merge_attention,
)
from roofline.engine.kernels.block_simd import FormatSet, with_formats
from roofline.engine.kernels.experts import (
    combine_row,
    expert_work,
    gather_rows,
    route,
    route_topk_softmax,
)
from roofline.engine.kernels.layer_kernels import (
    JIT_OPTIONS,
    matvec_rows,
    qkv_to_cache,
    rms_norm,
    silu_mul,
    swiglu_oai,
)
from roofline.engine.kernels.widened_rows import embed_into
from roofline.engine.loading.config import Activation, Routing
from roofline.simd_memory import aligned_floats

PHASES_PER_LAYER = 6
POST_NORM_PHASES = 2  # per layer, with post norms
EXPERT_PHASES = 2  # per layer, with experts: the router and the combine
LINE = 8  # int64 counters per cache line: each counter gets a line of its own
# spins (`pause`) before napping: tens of microseconds, while phases end within a few of each other
SPINS_BEFORE_NAP = 2000
NAP_MICROSECONDS = 20


class Rows(NamedTuple):
    """The k rows of one pass (int64 arrays): row r is token tokens[r] of slot slots[r] at
    positions[r], its K/V written at cache_positions[r]; tree_base/tree_path give its context
    (`attention._row_scores`); logits are wanted for rows logit_rows."""

    tokens: np.ndarray
    slots: np.ndarray
    positions: np.ndarray
    cache_positions: np.ndarray
    tree_base: np.ndarray
    tree_path: np.ndarray
    logit_rows: np.ndarray


class LayerWeights(NamedTuple):
    """Stacked over layers (weights.DecodeWeights): matrices with per-output-row scales, norms and
    biases."""

    attn_norm: np.ndarray
    wqkv: np.ndarray
    qkv_scale: np.ndarray
    bqkv: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray
    wo: np.ndarray
    o_scale: np.ndarray
    bo: np.ndarray
    sinks: np.ndarray
    mlp_norm: np.ndarray
    attn_post_norm: np.ndarray
    mlp_post_norm: np.ndarray
    wgu: np.ndarray
    gu_scale: np.ndarray
    wd: np.ndarray
    d_scale: np.ndarray


class Experts(NamedTuple):
    """A mixture of experts' arrays (weights.ExpertWeights): the float32 router (L, E, hidden) with
    unit scales (L, E), and each expert's [Wg; Wu] (L, E, 2 ffn, hidden) and Wd (L, E, hidden,
    ffn) with per-output-row scales (L, E, rows); the float32 biases of the router's logits and
    of each expert's [g | u] and output (zeros where the model has none). A pass's argument of its
    own beside LayerWeights (whose wgu and wd then have no rows): the prange hands its threads the
    arrays of a tuple, not of a tuple in a tuple."""

    router: np.ndarray
    router_scale: np.ndarray
    wgu: np.ndarray
    gu_scale: np.ndarray
    wd: np.ndarray
    d_scale: np.ndarray
    router_bias: np.ndarray
    gu_bias: np.ndarray
    d_bias: np.ndarray


class HeadWeights(NamedTuple):
    """The embedding and the output head (lm_head is embed when tied)."""

    embed: np.ndarray
    embed_scale: np.ndarray
    final_norm: np.ndarray
    lm_head: np.ndarray
    lm_scale: np.ndarray


class Cache(NamedTuple):
    """RoPE tables (tables, positions, head_dim / 2): each layer's is Shape.layer_rope's; and the
    KV cache (kv_cache.KVCache's k and v)."""

    cos: np.ndarray
    sin: np.ndarray
    k: np.ndarray
    v: np.ndarray


class Shape(NamedTuple):
    """The config scalars the kernels need, and what a block departs from Llama's by (per layer:
    its sliding window, 0 for none, and its RoPE table)."""

    n_heads: int
    eps: np.float32
    use_qk_norm: bool
    gelu: bool  # GELU (tanh) instead of SiLU
    post_norms: bool  # RMSNorm of the attention and MLP outputs before the residual add
    attn_scale: np.float32  # what q.k is multiplied by
    embed_scale: np.float32  # what embedding rows are multiplied by
    windows: np.ndarray  # (L,) int64
    layer_rope: np.ndarray  # (L,) int64
    n_experts: int = 0  # experts of a layer (0: a dense MLP)
    top_k: int = 0  # experts a row is routed to
    expert_ffn: int = 0  # an expert's rows of Wg (of Wu)
    norm_topk: bool = True  # their router probabilities renormalised to sum 1
    formats: FormatSet | None = None  # stored rows: the formats of their codes
    # gpt-oss (ModelConfig's fields of the same names): the o rows' bias, the attention sinks,
    # the router's and experts' biases, its routing (Routing.TOPK_SOFTMAX) and clamped SwiGLU
    o_bias: bool = False
    sinks: bool = False
    expert_bias: bool = False
    topk_softmax: bool = False
    swiglu_oai: bool = False
    swiglu_limit: np.float32 = np.float32(0.0)
    swiglu_alpha: np.float32 = np.float32(0.0)


def kernel_weights(w) -> tuple[LayerWeights, HeadWeights]:
    """The arrays of a weights.DecodeWeights, packed by field name."""
    layers = LayerWeights(*(getattr(w, name) for name in LayerWeights._fields))
    return layers, HeadWeights(*(getattr(w, name) for name in HeadWeights._fields))


def kernel_experts(w) -> Experts | None:
    """The expert arrays of a weights.DecodeWeights (None for a dense model)."""
    x = w.experts
    return None if x is None else Experts(*(getattr(x, name) for name in Experts._fields))


def kernel_shape(config, w) -> Shape:
    """The config scalars, and for stored rows the formats their codes use: the kernels are
    compiled for those only (`block_simd`)."""
    formats = None
    if w.wqkv.dtype == np.uint8:
        x = w.experts
        formats = FormatSet.of(
            *(
                getattr(w, f)
                for f in LayerWeights._fields + HeadWeights._fields
                if f.endswith("_scale")
            ),
            *([] if x is None else [x.gu_scale, x.d_scale]),
        )
    return Shape(
        n_heads=config.n_heads,
        eps=np.float32(config.rms_eps),
        use_qk_norm=config.qk_norm,
        gelu=config.activation == Activation.GELU_TANH,
        post_norms=config.post_norms,
        attn_scale=np.float32(config.attention_scale),
        embed_scale=np.float32(config.embed_scale),
        windows=np.array(config.windows, dtype=np.int64),
        layer_rope=np.array(config.layer_rope_tables, dtype=np.int64),
        n_experts=config.n_experts,
        top_k=config.n_experts_used,
        expert_ffn=config.ffn if config.moe else 0,
        norm_topk=config.norm_topk,
        formats=formats,
        o_bias=config.o_bias,
        sinks=config.sinks,
        expert_bias=config.expert_bias,
        topk_softmax=config.routing == Routing.TOPK_SOFTMAX,
        swiglu_oai=config.activation == Activation.SWIGLU_OAI,
        swiglu_limit=np.float32(config.swiglu_limit),
        swiglu_alpha=np.float32(config.swiglu_alpha),
    )


@njit(**JIT_OPTIONS)
def _rows(n, width):
    """float32 (n, width), uninitialised, starting on a cache line: the matrices' x rows, each on a
    line of its own when width is a multiple of 16 (`simd_memory`)."""
    return aligned_floats(n * width).reshape((n, width))


@njit(**JIT_OPTIONS)
def _claim(counters, phase, tid, n_threads, n_units):
    """Next run of units of the phase for thread tid, as (first, count): from its own share first,
    then from other threads' unstarted ones; count 0 when none is left. A run is a quarter of what
    is left of that share (at least one unit): few atomics while there is much to do, single units
    near the end, so that the threads finish together."""
    base = phase * (n_threads + 1)
    for k in range(n_threads):
        owner = (tid + k) % n_threads
        lo, hi = owner * n_units // n_threads, (owner + 1) * n_units // n_threads
        slot = (base + owner) * LINE
        left = hi - lo - atomics.load_acquire(counters, slot)
        if left <= 0:
            continue
        step = max(1, left // 4)
        first = lo + atomics.fetch_add(counters, slot, step)
        if first < hi:
            return first, min(step, hi - first)
    return 0, 0


@njit(**JIT_OPTIONS)
def _finish(counters, phase, n_threads, n_units, done):
    """Count this thread's `done` units of the phase, then wait until all n_units are done: spin
    (`pause`), then nap, so that on a busy machine it gives its core to the thread it waits for."""
    slot = (phase * (n_threads + 1) + n_threads) * LINE
    if done > 0:
        atomics.fetch_add(counters, slot, done)
    spins = 0
    while atomics.load_acquire(counters, slot) < n_units:
        if spins < SPINS_BEFORE_NAP:
            atomics.spin_pause()
            spins += 1
        else:
            atomics.nap(NAP_MICROSECONDS)


@njit(**JIT_OPTIONS)
def _rows_per_unit(w, kernels):
    """About kernels.unit_bytes of w's rows, in whole 4-row blocks: a unit's odd rows would run
    through the k-row kernels one weight row at a time (`matrices`)."""
    return max(4, (kernels.unit_bytes // (w.shape[1] * w.itemsize) + 2) // 4 * 4)


@njit(**JIT_OPTIONS)
def _add_bias(out, bias, o0, o1):
    """out[r, o] += bias[o] for every row r and o in [o0, o1), after the unit's products: one
    more rounding. Where the products were added to x (o rows) this is (x + Wa) + b, where
    transformers rounds x + (Wa + b): a last-bit difference greedy ids do not see (the tests hold
    ids and logits within tolerance to transformers, bits only to this engine's other paths)."""
    for r in range(out.shape[0]):
        for o in range(o0, o1):
            out[r, o] += bias[o]


@njit(**JIT_OPTIONS)
def _matvec_phase(
    counters, phase, tid, n_threads, w, scale, x, out, accumulate, kernels, bias, use_bias
):
    """out (+)= x W^T row-scaled (+ bias, when use_bias), this thread's part of it."""
    per = _rows_per_unit(w, kernels)
    n_units = (w.shape[0] + per - 1) // per
    done = 0
    while True:
        u, count = _claim(counters, phase, tid, n_threads, n_units)
        if count == 0:
            break
        o0, o1 = u * per, min((u + count) * per, w.shape[0])
        matvec_rows(w, scale, x, out, o0, o1, accumulate, kernels)
        if use_bias:
            _add_bias(out, bias, o0, o1)
        done += count
    _finish(counters, phase, n_threads, n_units, done)


@njit(**JIT_OPTIONS)
def _post_norm_phase(counters, phase, tid, n_threads, out, weight, eps, x, scratch):
    """x[r] += RMSNorm(out[r]) * weight, a row a unit (scratch: a thread's (k, hidden) rows)."""
    n_units = out.shape[0]
    done = 0
    while True:
        u, count = _claim(counters, phase, tid, n_threads, n_units)
        if count == 0:
            break
        for r in range(u, u + count):
            rms_norm(out[r : r + 1], weight, eps, scratch[r : r + 1])
            for i in range(x.shape[1]):
                x[r, i] += scratch[r, i]
        done += count
    _finish(counters, phase, n_threads, n_units, done)


@njit(**JIT_OPTIONS)
def _gate_up_phase(counters, phase, tid, n_threads, w, scale, x, gu, act, scratch, kernels, gelu):
    """[g | u] = W x for a block of gate rows and the same block of up rows, then act = SiLU(g) * u
    (or GELU(g) * u) on it."""
    ffn = act.shape[1]
    per = max(16, _rows_per_unit(w, kernels) // 16 * 16)  # whole 16-column SiLU blocks
    n_units = (ffn + per - 1) // per
    done = 0
    while True:
        u, count = _claim(counters, phase, tid, n_threads, n_units)
        if count == 0:
            break
        # gate and up rows of one unit, then its SiLU: act stays in L1
        for v in range(u, u + count):
            j0, j1 = v * per, min((v + 1) * per, ffn)
            matvec_rows(w, scale, x, gu, j0, j1, False, kernels)
            matvec_rows(w, scale, x, gu, ffn + j0, ffn + j1, False, kernels)
            silu_mul(gu, act, j0, j1, scratch, gelu)
        done += count
    _finish(counters, phase, n_threads, n_units, done)


@njit(**JIT_OPTIONS)
def _expert_gate_up_phase(
    counters, phase, tid, n_threads, wgu, gu_scale, gu_bias, shape, work, xg, egu, eact, scratch,
    kernels,
):  # fmt: skip
    """`_gate_up_phase` over the routed experts: a unit is a block of one expert's gate rows and
    the same block of its up rows for all its rows at once (xg: the gathered rows; egu, eact:
    their [g | u] and act, by slot), with the expert's biases (shape.expert_bias) and its
    activation (SiLU, GELU or gpt-oss's clamped SwiGLU). work: (n_chosen, chosen, start, n_rows)
    of `expert_work`."""
    formats = shape.formats
    n_chosen, chosen, start, n_rows = work
    ffn = eact.shape[1]
    per = max(16, _rows_per_unit(wgu[0], kernels) // 16 * 16)  # whole 16-column SiLU blocks
    blocks = (ffn + per - 1) // per
    n_units = n_chosen * blocks
    done = 0
    while True:
        u, count = _claim(counters, phase, tid, n_threads, n_units)
        if count == 0:
            break
        for v in range(u, u + count):
            e = chosen[v // blocks]
            j0, j1 = v % blocks * per, min((v % blocks + 1) * per, ffn)
            s0, s1 = start[e], start[e] + n_rows[e]
            scale = with_formats(gu_scale[e], formats)
            matvec_rows(wgu[e], scale, xg[s0:s1], egu[s0:s1], j0, j1, False, kernels)
            matvec_rows(wgu[e], scale, xg[s0:s1], egu[s0:s1], ffn + j0, ffn + j1, False,
                        kernels)  # fmt: skip
            if shape.expert_bias:
                _add_bias(egu[s0:s1], gu_bias[e], j0, j1)
                _add_bias(egu[s0:s1], gu_bias[e], ffn + j0, ffn + j1)
            if shape.swiglu_oai:
                swiglu_oai(egu[s0:s1], eact[s0:s1], j0, j1, shape.swiglu_limit, shape.swiglu_alpha)
            else:
                silu_mul(egu[s0:s1], eact[s0:s1], j0, j1, scratch, shape.gelu)
        done += count
    _finish(counters, phase, n_threads, n_units, done)


@njit(**JIT_OPTIONS)
def _expert_down_phase(
    counters, phase, tid, n_threads, wd, d_scale, d_bias, shape, work, eact, eout, kernels
):
    """eout[slots of e] = Wd_e act (+ bd_e) for the routed experts e, a block of one expert's
    rows a unit."""
    formats = shape.formats
    n_chosen, chosen, start, n_rows = work
    per = _rows_per_unit(wd[0], kernels)
    blocks = (eout.shape[1] + per - 1) // per
    n_units = n_chosen * blocks
    done = 0
    while True:
        u, count = _claim(counters, phase, tid, n_threads, n_units)
        if count == 0:
            break
        for v in range(u, u + count):
            e = chosen[v // blocks]
            o0, o1 = v % blocks * per, min((v % blocks + 1) * per, eout.shape[1])
            s0, s1 = start[e], start[e] + n_rows[e]
            matvec_rows(wd[e], with_formats(d_scale[e], formats), eact[s0:s1], eout[s0:s1], o0,
                        o1, False, kernels)  # fmt: skip
            if shape.expert_bias:
                _add_bias(eout[s0:s1], d_bias[e], o0, o1)
        done += count
    _finish(counters, phase, n_threads, n_units, done)


@njit(**JIT_OPTIONS)
def _expert_phases(
    counters, phase, tid, n_threads, layer, experts, moe, shape, h, x, scratch, kernels
):
    """A mixture of experts' MLP on h (this thread's normed rows), added to x: the router's rows
    as a phase, the routing and work list privately (every thread the same), then three phases
    (module doc)."""
    logits, ids, weights, slot_of, n_rows, start, chosen, xg, acc, egu, eact, eout, r_all = moe[:13]
    # this layer's router logits, a slice no later layer writes: every thread routes from them,
    # however late it comes (a thread descheduled past the router's phase can find the others a
    # layer further on; from a shared buffer it would read that layer's logits, and its work
    # list, whose size sets the phases' unit counts, would not be the layer's)
    r_out = r_all[layer]
    logits, ids, weights, slot_of = logits[tid], ids[tid], weights[tid], slot_of[tid]
    n_rows, start, chosen, xg, acc = n_rows[tid], start[tid], chosen[tid], xg[tid], acc[tid]
    n_experts = experts.router.shape[1]
    # the router's logits once, its rows split between the threads like any matrix's (computed by
    # every thread, it would be E x hidden multiply-adds a row for each), then each thread routes
    # its own copy
    _matvec_phase(counters, phase, tid, n_threads, experts.router[layer],
                  experts.router_scale[layer], h, r_out, False, kernels,
                  experts.router_bias[layer], shape.expert_bias)  # fmt: skip
    phase += 1
    logits[:] = r_out
    if shape.topk_softmax:
        route_topk_softmax(logits, shape.top_k, ids, weights)
    else:
        route(logits, shape.top_k, shape.norm_topk, ids, weights)
    n_chosen = expert_work(ids, n_experts, n_rows, start, slot_of, chosen)
    gather_rows(h, slot_of, xg)
    work = (n_chosen, chosen, start, n_rows)
    _expert_gate_up_phase(counters, phase, tid, n_threads, experts.wgu[layer],
                          experts.gu_scale[layer], experts.gu_bias[layer], shape, work, xg, egu,
                          eact, scratch, kernels)  # fmt: skip
    _expert_down_phase(counters, phase + 1, tid, n_threads, experts.wd[layer],
                       experts.d_scale[layer], experts.d_bias[layer], shape, work, eact, eout,
                       kernels)  # fmt: skip
    k = x.shape[0]
    done = 0
    while True:
        u, count = _claim(counters, phase + 2, tid, n_threads, k)
        if count == 0:
            break
        for r in range(u, u + count):
            if r == 0:  # one writer: the experts this layer read, the union of its rows'
                moe[13][layer] = n_chosen
            combine_row(r, slot_of, weights, eout, x, acc)
        done += count
    _finish(counters, phase + 2, n_threads, k, done)


@njit(**JIT_OPTIONS)
def _mlp_phases(
    counters, phase, tid, n_threads, layer, experts, moe, shape, w, h, gu, act, out, accumulate,
    x, scratch, kernels,
):  # fmt: skip
    """The MLP's phases from `phase` on (h: this thread's normed rows); returns the next phase.
    Dense: gate/up rows, SiLU | down rows, into out; with experts (not None: numba compiles
    each kind apart, a dense model's pass has no expert code), `_expert_phases`."""
    if experts is None:
        _gate_up_phase(counters, phase, tid, n_threads, w.wgu[layer],
                       with_formats(w.gu_scale[layer], shape.formats), h, gu, act, scratch,
                       kernels, shape.gelu)  # fmt: skip
        _matvec_phase(counters, phase + 1, tid, n_threads, w.wd[layer],
                      with_formats(w.d_scale[layer], shape.formats), act, out, accumulate,
                      kernels, w.bo[layer], False)  # fmt: skip
        return phase + 2
    else:
        _expert_phases(counters, phase, tid, n_threads, layer, experts, moe, shape, h, x, scratch,
                       kernels)  # fmt: skip
        return phase + 2 + EXPERT_PHASES


@njit(**JIT_OPTIONS)
def _worker(
    tid, n_threads, counters, rows, shape, w, experts, head, cache, buffers, attn, moe, kernels
):
    """Thread tid's walk through the phases (module docstring). rows: Rows, shape: Shape, w:
    LayerWeights, experts: Experts or None, head: HeadWeights, cache: Cache; buffers, attn and
    moe: scratch (see decode_rows)."""
    slots, positions, cache_positions = rows.slots, rows.positions, rows.cache_positions
    tree_base, tree_path, logit_rows = rows.tree_base, rows.tree_path, rows.logit_rows
    n_heads, eps, use_qk_norm, formats = shape.n_heads, shape.eps, shape.use_qk_norm, shape.formats
    post_norms, windows, layer_rope = shape.post_norms, shape.windows, shape.layer_rope
    attn_norm, wqkv, qkv_scale, bqkv = w.attn_norm, w.wqkv, w.qkv_scale, w.bqkv
    q_norm, k_norm, wo, o_scale, mlp_norm = w.q_norm, w.k_norm, w.wo, w.o_scale, w.mlp_norm
    final_norm, lm_head = head.final_norm, head.lm_head
    lm_scale = with_formats(head.lm_scale, formats)
    cos, sin, k_cache, v_cache = cache.cos, cache.sin, cache.k, cache.v
    x, h_all, att_all, picked_all, qkv, gu, act, logits, proj = buffers
    # the o and down rows' output: x itself (accumulated), or a buffer the post norms read
    out, accumulate = (proj, False) if post_norms else (x, True)
    first_unit, n_chunks, work, scores, part_out, part_max, part_sum = attn[:7]
    gather_k, gather_v, gather_s, offsets = attn[7:]
    h, att, picked = h_all[tid], att_all[tid], picked_all[tid]
    g_k, g_v, g_s, offs = gather_k[tid], gather_v[tid], gather_s[tid], offsets[tid]
    silu_scratch = np.empty((4, 16), dtype=np.float32)
    n_items_attn = work.shape[0]
    phase = 0
    for layer in range(wqkv.shape[0]):
        rms_norm(x, attn_norm[layer], eps, h)
        _matvec_phase(
            counters,
            phase,
            tid,
            n_threads,
            wqkv[layer],
            with_formats(qkv_scale[layer], formats),
            h,
            qkv,
            False,
            kernels,
            bqkv[layer],
            False,  # q/k/v's bias goes with RoPE (qkv_to_cache)
        )
        phase += 1
        # one unit: the thread that claims it does it
        mine = _claim(counters, phase, tid, n_threads, 1)[1]
        if mine:
            qkv_to_cache(
                qkv,
                bqkv[layer],
                q_norm[layer],
                k_norm[layer],
                use_qk_norm,
                eps,
                n_heads,
                cos[layer_rope[layer]],
                sin[layer_rope[layer]],
                slots,
                positions,
                cache_positions,
                layer,
                k_cache,
                v_cache,
            )
        _finish(counters, phase, n_threads, 1, mine)
        phase += 1
        done = 0
        while True:
            u, count = _claim(counters, phase, tid, n_threads, n_items_attn)
            if count == 0:
                break
            for v in range(u, u + count):
                attend_work(
                    v,
                    work,
                    first_unit,
                    n_chunks,
                    qkv,
                    n_heads,
                    shape.attn_scale,
                    windows[layer],
                    slots,
                    positions,
                    tree_base,
                    tree_path,
                    layer,
                    k_cache,
                    v_cache,
                    scores,
                    part_out,
                    part_max,
                    part_sum,
                    g_k,
                    g_v,
                    g_s,
                    offs,
                )
            done += count
        _finish(counters, phase, n_threads, n_items_attn, done)
        phase += 1
        merge_attention(first_unit, n_chunks, part_out, part_max, part_sum, att, w.sinks[layer],
                        shape.sinks)  # fmt: skip
        _matvec_phase(
            counters,
            phase,
            tid,
            n_threads,
            wo[layer],
            with_formats(o_scale[layer], formats),
            att,
            out,
            accumulate,
            kernels,
            w.bo[layer],
            shape.o_bias,
        )
        phase += 1
        if post_norms:
            _post_norm_phase(counters, phase, tid, n_threads, proj, w.attn_post_norm[layer], eps,
                             x, h)  # fmt: skip
            phase += 1
        rms_norm(x, mlp_norm[layer], eps, h)
        phase = _mlp_phases(counters, phase, tid, n_threads, layer, experts, moe, shape, w, h,
                            gu, act, out, accumulate, x, silu_scratch, kernels)  # fmt: skip
        if post_norms:
            _post_norm_phase(counters, phase, tid, n_threads, proj, w.mlp_post_norm[layer], eps,
                             x, h)  # fmt: skip
            phase += 1
    if logit_rows.shape[0] == 0:  # a prefill pass before the prompt's last
        return
    for j in range(logit_rows.shape[0]):
        picked[j] = x[logit_rows[j]]
    rms_norm(picked, final_norm, eps, h[: picked.shape[0]])
    _matvec_phase(
        counters,
        phase,
        tid,
        n_threads,
        lm_head,
        lm_scale,
        h[: picked.shape[0]],
        logits,
        False,
        kernels,
        final_norm,
        False,
    )


@njit(**JIT_OPTIONS)
def _expert_scratch(k, n_threads, hidden, n_experts, top_k, ffn, n_layers):
    """`_expert_phases`' buffers for k rows (of no size for a dense model, top_k 0): each thread's
    router probabilities, routing, work list, gathered rows and combine row; the slots' [g | u],
    act and outputs; the router's logits, layer by layer; and the experts each layer read
    (`decode_rows`' result).
    Always arrays, never None: the prange's threads take a tuple of arrays."""
    slots = k * top_k
    return (
        _rows(n_threads * k, n_experts).reshape((n_threads, k, n_experts)),
        np.empty((n_threads, k, top_k), dtype=np.int64),
        np.empty((n_threads, k, top_k), dtype=np.float32),
        np.empty((n_threads, k, top_k), dtype=np.int64),
        np.empty((n_threads, n_experts), dtype=np.int64),
        np.empty((n_threads, n_experts), dtype=np.int64),
        np.empty((n_threads, n_experts), dtype=np.int64),
        _rows(n_threads * slots, hidden).reshape((n_threads, slots, hidden)),
        np.empty((n_threads, hidden), dtype=np.float32),
        _rows(slots, 2 * ffn),
        _rows(slots, ffn),
        _rows(slots, hidden),
        _rows(n_layers * k if top_k > 0 else 0, n_experts).reshape(
            (n_layers if top_k > 0 else 0, k, n_experts)
        ),
        np.zeros(n_layers if top_k > 0 else 0, dtype=np.int64),
    )


# The pass's threads come from its own prange: a prange in a function of its own cost that
# function's compile (all the kernels it reaches, optimized and emitted once more: about 9 s of a
# cold decode pass's compile, docs/measured.md). Only the prange is parallel: numba's other
# rewrites would run the scratch allocations below as parallel loops of their own.
@njit(
    parallel={
        "prange": True,
        "comprehension": False,
        "reduction": False,
        "inplace_binop": False,
        "setitem": False,
        "numpy": False,
        "stencil": False,
        "fusion": False,
    },
    **JIT_OPTIONS,
)
def decode_rows(rows, shape, layers, head, cache, logits, n_threads, kernels, experts=None):
    """Run all layers for the k rows of `rows` (Rows): write each row's K/V into `cache` (Cache) at
    its cache position, and the float32 logits of row rows.logit_rows[j] into logits[j] (a prefill
    needs only its last row's, and none before its last pass). layers (LayerWeights) stack over
    layers: wqkv (L, q+2kv, hidden), wo (L, hidden, q), wgu (L, 2 ffn, hidden), wd (L, hidden,
    ffn), each with per-output-row scales (L, rows); head: HeadWeights; shape: Shape. Named tuples,
    so two same-shaped arrays cannot trade places unnoticed. n_threads: workers to start;
    kernels: the KernelShape of its matrices (`kernel_shapes`); experts: a mixture of experts'
    Experts (None: dense).
    Returns the experts each layer read (L,): the union of the k rows' routes (empty: dense)."""
    tokens, positions, tree_path, logit_rows = (
        rows.tokens,
        rows.positions,
        rows.tree_path,
        rows.logit_rows,
    )
    k = tokens.shape[0]
    # stored rows are bytes: the sizes come from the float32 arrays
    n_layers, qkv_dim = layers.bqkv.shape
    hidden, ffn = layers.attn_norm.shape[1], layers.gu_scale.shape[1] // 2
    n_kv, head_dim = cache.v.shape[2], cache.v.shape[4]
    n_heads = shape.n_heads
    q_dim = n_heads * head_dim
    x = _rows(k, hidden)  # the residual stream
    for r in range(k):
        embed_into(head.embed, with_formats(head.embed_scale, shape.formats), tokens[r], x, r)
        if shape.embed_scale != np.float32(1.0):  # Gemma: times float32 sqrt(hidden)
            for i in range(hidden):
                x[r, i] *= shape.embed_scale
    first_unit, n_chunks = attention_units(positions, n_kv)
    work = attention_work(rows.slots, n_chunks, n_kv, n_threads)
    scores, part_out, part_max, part_sum = attention_scratch(
        first_unit[-1], n_heads // n_kv, head_dim
    )
    gathers = (
        *gather_scratch(n_threads, tree_path.shape[1], head_dim),
        np.empty((n_threads, 3, k * (n_heads // n_kv)), dtype=np.int64),  # query offsets
    )
    per_layer = PHASES_PER_LAYER + (POST_NORM_PHASES if shape.post_norms else 0)
    per_layer += EXPERT_PHASES if shape.top_k > 0 else 0
    n_phases = n_layers * per_layer + 1
    counters = np.zeros(n_phases * (n_threads + 1) * LINE, dtype=np.int64)
    buffers = (
        x,
        _rows(n_threads * k, hidden).reshape((n_threads, k, hidden)),
        _rows(n_threads * k, q_dim).reshape((n_threads, k, q_dim)),
        _rows(n_threads * logit_rows.shape[0], hidden).reshape(
            (n_threads, logit_rows.shape[0], hidden)
        ),
        _rows(k, qkv_dim),
        _rows(k, 2 * ffn),
        _rows(k, ffn),
        logits,
        _rows(k, hidden),
    )
    attn = (first_unit, n_chunks, work, scores, part_out, part_max, part_sum, *gathers)
    moe = _expert_scratch(
        k, n_threads, hidden, shape.n_experts, shape.top_k, shape.expert_ffn, n_layers
    )
    # the loop index is unsigned inside the parallel region: one signature
    for tid in prange(n_threads):
        _worker(
            np.int64(tid),
            n_threads,
            counters,
            rows,
            shape,
            layers,
            experts,
            head,
            cache,
            buffers,
            attn,
            moe,
            kernels,
        )
    return moe[-1]
