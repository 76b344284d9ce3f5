"""A mixture of experts' routing, and the work list of a k-row pass over it.

Per row r (h_r: the MLP's normed input; E experts, K of them used):

    p = softmax(router h_r)                    (E probabilities, float32)
    ids_r = the K experts of highest p, highest first; ties to the lowest expert index
    w_r = p[ids_r], / sum(p[ids_r]) when renormalised (Qwen3-MoE's norm_topk_prob; Mixtral's
          softmax over the top-K logits is the same weights)
    gpt-oss (`route_topk_softmax`): ids_r the K highest logits l (the same experts), w_r =
          softmax(l[ids_r]) over those K alone, as transformers' GptOssTopKRouter computes it
    x_r += sum_j w_rj SwiGLU_{ids_rj}(h_r)     (j = 0..K-1: rank order, fixed by the row alone)

A pass reads each expert its rows route to once for all of them: `expert_work` gives every routed
(row, rank) a slot, the slots of one expert contiguous and in row order, so that an expert's rows
are one compact block of rows (`gather_rows`) its matrices multiply at once. Every step is the
row's own arithmetic (the k-row products equal one-row ones, `matrices`), so a row's output is the
same bits alone or in any batch.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from roofline.engine.kernels.matrices import JIT_OPTIONS


@njit(**JIT_OPTIONS)
def _pick_top_k(scores, top_k, ids, r):
    """ids[r, :top_k] = the indices of the top_k highest scores, highest first; strictly greater
    wins, so of equal scores the lowest index comes first."""
    for j in range(top_k):
        best = -1
        for e in range(scores.shape[0]):
            taken = False
            for i in range(j):
                taken = taken or ids[r, i] == e
            if not taken and (best < 0 or scores[e] > scores[best]):
                best = e
        ids[r, j] = best


@njit(**JIT_OPTIONS)
def route(logits, top_k, norm_topk, ids, weights):
    """In place, per row of logits (k, E) (the router's): logits[r] becomes softmax(logits[r]);
    ids[r, :top_k] the experts of highest probability, highest first (ties: the lowest index),
    weights[r, :top_k] their probabilities, renormalised to sum 1 when norm_topk."""
    n_experts = logits.shape[1]
    for r in range(logits.shape[0]):
        p = logits[r]
        top = p[0]
        for e in range(1, n_experts):
            top = max(top, p[e])
        total = np.float32(0.0)
        for e in range(n_experts):  # p_e = exp(l_e - max) / sum
            p[e] = np.exp(p[e] - top)
            total += p[e]
        for e in range(n_experts):
            p[e] = p[e] / total
        _pick_top_k(p, top_k, ids, r)
        for j in range(top_k):
            weights[r, j] = p[ids[r, j]]
        if norm_topk:  # w: the top-k probabilities over their sum
            picked = np.float32(0.0)
            for j in range(top_k):
                picked += weights[r, j]
            for j in range(top_k):
                weights[r, j] = weights[r, j] / picked
    return 0


@njit(**JIT_OPTIONS)
def route_topk_softmax(logits, top_k, ids, weights):
    """Per row of logits (k, E): ids[r, :top_k] the experts of highest logit, highest first (ties:
    the lowest index), weights[r, :top_k] = softmax of their logits, exp(l_j - l_0) / sum (l_0,
    the first picked, is the largest). The logits are left as they are."""
    for r in range(logits.shape[0]):
        lr = logits[r]
        _pick_top_k(lr, top_k, ids, r)
        total = np.float32(0.0)
        for j in range(top_k):
            weights[r, j] = np.exp(lr[ids[r, j]] - lr[ids[r, 0]])
            total += weights[r, j]
        for j in range(top_k):
            weights[r, j] = weights[r, j] / total
    return 0


@njit(**JIT_OPTIONS)
def expert_work(ids, n_experts, n_rows, start, slot_of, chosen):
    """The work of a pass whose rows route to ids (k, top_k): n_rows[e] rows go to expert e, in
    slots start[e] .. start[e] + n_rows[e] (experts in index order, each one's rows in row order);
    slot_of[r, j] is the slot of row r's j-th expert; chosen[:n] the experts with rows, ascending
    (the union the pass reads). Returns n."""
    for e in range(n_experts):
        n_rows[e] = 0
    for r in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            n_rows[ids[r, j]] += 1
    n, at = 0, 0
    for e in range(n_experts):
        start[e] = at
        at += n_rows[e]
        if n_rows[e] > 0:
            chosen[n] = e
            n += 1
    # each expert's slots in row order (a row picks an expert once): n_rows counts them again
    for e in range(n_experts):
        n_rows[e] = 0
    for r in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            e = ids[r, j]
            slot_of[r, j] = start[e] + n_rows[e]
            n_rows[e] += 1
    return n


@njit(**JIT_OPTIONS)
def gather_rows(h, slot_of, out):
    """out[slot_of[r, j]] = h[r]: each expert's rows side by side."""
    for r in range(slot_of.shape[0]):
        for j in range(slot_of.shape[1]):
            out[slot_of[r, j]] = h[r]


@njit(**JIT_OPTIONS)
def combine_row(r, slot_of, weights, expert_out, x, acc):
    """x[r] += sum_j weights[r, j] expert_out[slot_of[r, j]], j in rank order (acc: a scratch row
    of x's width)."""
    for j in range(slot_of.shape[1]):
        w, s = weights[r, j], slot_of[r, j]
        for i in range(x.shape[1]):
            acc[i] = w * expert_out[s, i] if j == 0 else acc[i] + w * expert_out[s, i]
    for i in range(x.shape[1]):
        x[r, i] += acc[i]
