"""Parameters per component: how many are stored, and how many one decoded token reads.

Per layer, with h = hidden, H = query heads, K = kv heads, d = head_dim:

    attention (GQA)   q h*H*d + k h*K*d + v h*K*d + o H*d*h
    attention (MLA)   q_a h*r_q + q_b r_q*H*(nope+rope)   (or q h*H*(nope+rope) without q_lora_rank)
                      + kv_a h*(r_kv+rope) + kv_b r_kv*H*(nope+v) + o H*v*h
    dense MLP         3*h*I (gate, up, down; 2*h*I without a gate)
    routed experts    E experts of 3*h*I_e each stored; top-k of them read
    shared experts    3*h*I_s, always read
    router            h*E (+ E bias)

plus the embedding table (one row read) and lm_head (read whole; the embeddings when tied).
Router, norms, biases, sinks and the embedding row are "small": listed, left out of the ceiling
unless asked (under 1% of every catalogue model's bytes; leaving bytes out keeps it a bound).
`ModelSpec.stored` (from a file) keeps these labels with the file's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.modelspec.model import ModelSpec


@dataclass(frozen=True)
class Component:
    key: str  # one of model.COMPONENT_KEYS: the name --weights overrides use
    label: str  # what the row says in the breakdown
    params_total: float  # parameters stored (resident in memory)
    params_active: float  # parameters read to decode one token at batch 1
    small: bool = False  # left out of the ceiling unless --all-tensors


def _attention_matrices(spec: ModelSpec) -> tuple[int, int]:
    """(matrix params per layer, norm params per layer) of the attention block."""
    h, H = spec.hidden_size, spec.num_heads
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * m.q_lora_rank + m.q_lora_rank * H * qk if m.q_lora_rank else h * H * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * H * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        o = H * m.v_head_dim * h
        return q + kv + o, (m.q_lora_rank or 0) + m.kv_lora_rank
    d, K = spec.head_dim, spec.num_kv_heads
    norms = 2 * d if spec.qk_norm else 0
    return h * H * d + 2 * h * K * d + H * d * h, norms


def _attention_bias(spec: ModelSpec) -> int:
    H, K, d, h = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.hidden_size
    if spec.mla is not None or not spec.attention_bias:
        return 0
    qkv = H * d + 2 * K * d
    return qkv + h if spec.attention_bias == "qkvo" else qkv


def _mlp_params(spec: ModelSpec, width: int) -> tuple[int, int]:
    """(matrix params, bias params) of one MLP of the given width."""
    h = spec.hidden_size
    if spec.gated_mlp:
        return 3 * h * width, (2 * width + h)
    return 2 * h * width, (width + h)


def components(spec: ModelSpec) -> list[Component]:
    """Every component of the model with its stored and per-token parameter counts."""
    if spec.explicit is not None:
        e = spec.explicit
        return [Component("weights", "weights (stated parameter counts)", e.total, e.active)]

    L, h, V = spec.num_layers, spec.hidden_size, spec.vocab_size
    moe = spec.moe if spec.is_moe else None
    n_moe = len(moe.moe_layers) if moe else 0
    n_dense = L - n_moe
    out: list[Component] = []
    small = 0.0  # norms, biases, sinks: stored == read
    small_stored = small_read = 0.0  # routed experts' biases: all stored, top-k read

    attn, attn_norms = _attention_matrices(spec)
    label = "attention (MLA)" if spec.mla else "attention (q,k,v,o)"
    out.append(Component("attention", label, L * attn, L * attn))
    small += L * (
        attn_norms + _attention_bias(spec) + (spec.num_heads if spec.attention_sinks else 0)
    )
    small += L * spec.norms_per_layer * h + h  # per-layer norms + the final norm

    if n_dense and spec.intermediate_size:
        mats, bias = _mlp_params(spec, spec.intermediate_size)
        out.append(
            Component("mlp", f"dense MLP ({n_dense} layers)", n_dense * mats, n_dense * mats)
        )
        small += n_dense * bias if spec.mlp_bias else 0
    if moe:
        mats, bias = _mlp_params(spec, moe.expert_intermediate)
        label = f"routed experts (top-{moe.top_k} of {moe.num_experts})"
        out.append(
            Component("experts", label, n_moe * moe.num_experts * mats, n_moe * moe.top_k * mats)
        )
        if moe.shared_intermediate:
            s_mats, _ = _mlp_params(spec, moe.shared_intermediate)
            s_mats += h if moe.shared_gate else 0
            out.append(
                Component("shared_experts", "shared experts", n_moe * s_mats, n_moe * s_mats)
            )
        router = n_moe * (h * moe.num_experts + (moe.num_experts if moe.router_bias else 0))
        out.append(Component("router", "router", router, router, small=True))
        if moe.expert_bias:
            small_stored = n_moe * moe.num_experts * bias
            small_read = n_moe * moe.top_k * bias

    head_label = "lm_head (tied to embeddings)" if spec.tie_word_embeddings else "lm_head"
    out.append(Component("lm_head", head_label, 0.0 if spec.tie_word_embeddings else V * h, V * h))
    out.append(Component("embeddings", "embedding row", V * h, h, small=True))
    out.append(
        Component(
            "norms", "norms/biases/sinks", small + small_stored, small + small_read, small=True
        )
    )
    return _as_stored(spec, out) if spec.stored else out


def _as_stored(spec: ModelSpec, computed: list[Component]) -> list[Component]:
    """The components a model file holds, with the parameters its tensors give (labels as
    computed)."""
    stored = {s.key: s for s in spec.stored}
    out = [
        Component(c.key, c.label, stored[c.key].params_stored, stored[c.key].params_read, c.small)
        for c in computed
        if c.key in stored
    ]
    named = {c.key for c in computed}
    out += [
        Component(
            s.key,
            "other tensors" if s.key == "weights" else s.key,
            s.params_stored,
            s.params_read,
            small=s.key in ("router", "embeddings", "norms"),
        )
        for s in spec.stored
        if s.key not in named
    ]
    return out


def total_params(spec: ModelSpec) -> float:
    return sum(c.params_total for c in components(spec))


def active_params(spec: ModelSpec) -> float:
    """Distinct parameters one token touches: everything read, including its embedding row (which is
    part of lm_head when the two are tied, so not counted twice)."""
    return sum(
        c.params_active
        for c in components(spec)
        if not (c.key == "embeddings" and spec.tie_word_embeddings)
    )


def matmul_params_per_token(spec: ModelSpec) -> float:
    """Parameters that take part in a matrix multiply for one token (the embedding lookup and norms
    do not)."""
    return sum(c.params_active for c in components(spec) if c.key not in ("embeddings", "norms"))
