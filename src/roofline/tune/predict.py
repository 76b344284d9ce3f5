"""Predicted ladders: what every model-free proposer setting of a space would give, computed from
one baseline run by replay, without the engine.

Under greedy decoding the output does not depend on speculation, so replaying a proposer over the
baseline's prompt + output ids gives the engine's own steps (the same drafts, the same accepted
paths). A stream of output o[0..T-1]: o[0] comes from the prefill pass; then, with n tokens out,

    draft    = proposer.propose(prompt + o[:n], room)      room = max_tokens - n - 1, and
                                                           max_seq_len - len(prompt) - n
    draft    = budget.cut(draft)                           the adaptive budget, as the engine's
    accepted = the longest root path of the draft equal to o[n], o[n+1], ...
    one weight pass over 1 + len(draft) rows yields accepted + 1 tokens

Against the baseline (one token per one-row pass), over the decode passes of each prompt:

    ratio_p = decode tokens_p / sum(pass_cost(rows) / pass_cost(1))
    ratio = geometric mean of ratio_p over the prompts
    predicted tok/s = baseline tok/s * ratio

The geometric mean is how the ladder's paired ratio aggregates the measured requests, so the two
compare like with like: one ratio of sums over all prompts weighs the slow prompts' time and read
11-20% below the paired measurement (a copy-heavy prompt at 2.8x next to prose at 1.0x).

The budget replays on the measured costs as the engine read them; the ratio takes their running
maximum (a measured dip below a smaller pass is noise, and would promise speed from nothing).

With the seconds of a one-row pass t1 (the engine measures it with the costs) the ratio is held to
the time the baseline spends outside weight passes too. A baseline token takes T = 1 / tok/s, of
which w = T - t1 is work outside the pass (sampling, scheduling, streaming), counted per token (an
upper bound: part of it is per step, and speculation saves that part); the proposer's own time p
is what the replay spent in it (the same code):

    ratio_p = decode tokens_p * T / (sum(t1 * pass_cost(rows)) + decode tokens_p * w + p_p)

Not modelled: the prefill (unchanged by speculation). A proposer is
model-free when its PROPOSERS traits load no draft model; a new one is picked up from the registry.
The run folder's side (streams, verify costs, predicted.json): `predict_run`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from roofline import speculation
from roofline.tune.predict_records import PassCosts, Prediction, ReplayStats, Stream
from roofline.tune.space_records import Space

METHOD_KNOB = speculation.options()["method"].knob  # "spec"
# launcher knob (spec_k) -> SpecOptions field (k)
FIELD_OF = {opt.knob: name for name, opt in speculation.options().items()}


def _accepted_path(tree: Any, truth: Sequence[int]) -> int:
    """Nodes of the tree's longest root path equal to truth[0], truth[1], ... (greedy verify)."""
    children: dict[int, dict[int, int]] = {}
    for i, (parent, token) in enumerate(zip(tree.parents, tree.tokens)):
        children.setdefault(parent, {}).setdefault(token, i)
    node, n = -1, 0
    while n < len(truth):
        nxt = children.get(node, {}).get(int(truth[n]))
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n


def replay(
    proposer_maker: Callable[[], Any],
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    *,
    budget: Callable[[], Any] | None = None,
    max_tokens: int | None = None,
    max_seq_len: int | None = None,
) -> ReplayStats:
    """The engine's speculative steps of one greedy request, replayed (module docstring). budget:
    a maker of the request's adaptive budget (`DraftBudget`; None: drafts are not cut); max_tokens:
    the request's limit (default: the output's length); max_seq_len: the engine's context (rows
    past it are not drafted; None: no limit)."""
    from roofline.engine.runtime.speculate.tree import DraftTree

    out = [int(t) for t in output_ids]
    if not out:
        return ReplayStats()
    limit = len(out) if max_tokens is None else max_tokens
    proposer, cut = proposer_maker(), budget() if budget is not None else None
    context = [int(t) for t in prompt_ids] + out[:1]
    n, passes, drafted, accepted = 1, 1, 0, 0
    rows: dict[int, int] = {}
    spent = 0.0
    while n < len(out):
        room = limit - n - 1
        if max_seq_len is not None:  # every row of the pass must fit the context
            room = min(room, max_seq_len - len(context))
        t0 = time.perf_counter()
        tree = proposer.propose(context, room) if room > 0 else DraftTree.empty()
        spent += time.perf_counter() - t0
        if cut is not None:
            tree = cut.cut(tree)
        took = _accepted_path(tree, out[n:])
        new = out[n : n + took + 1]
        context = context + new  # a new list each step, as the scheduler passes
        n += len(new)
        passes += 1
        drafted += len(tree)
        accepted += took
        rows[1 + len(tree)] = rows.get(1 + len(tree), 0) + 1
        if cut is not None:
            cut.record(tree, took)
        t0 = time.perf_counter()
        proposer.accepted(context)
        spent += time.perf_counter() - t0
    close = getattr(proposer, "close", None)
    if close is not None:
        close()
    return ReplayStats(passes, len(out), drafted, accepted, tuple(sorted(rows.items())), spent)


def spec_options(config: Mapping[str, Any]) -> Any:
    """The SpecOptions a configuration's speculation knobs make (others ignored)."""
    return speculation.SpecOptions(**{FIELD_OF[k]: v for k, v in config.items() if k in FIELD_OF})


def model_free(method: Any) -> bool:
    """A proposer of the registry that loads no draft model (replay needs no engine)."""
    traits = speculation.PROPOSERS.get(method) if isinstance(method, str) else None
    return traits is not None and not traits.draft_model


def model_free_methods() -> list[str]:
    return [m for m in speculation.PROPOSERS if model_free(m)]


def settings(space: Space) -> list[dict[str, Any]]:
    """Every model-free proposer setting of the space: its method knob's model-free values, each
    with every combination of the knobs that proposer reads (their values and defaults; other
    knobs at the baseline's), as {knob: value} over the speculation knobs set."""
    base = {k: v for k, v in space.baseline.items() if k in FIELD_OF}
    methods = [base.get(METHOD_KNOB)]
    dims = {d.name: d for d in space.dimensions}
    if METHOD_KNOB in dims:
        methods = list(dims[METHOD_KNOB].values())
    out: list[dict[str, Any]] = []
    for method in dict.fromkeys(m for m in methods if model_free(m)):
        fields = (*speculation.PROPOSERS[method].reads, "adaptive")  # every proposer's budget
        reads = {speculation.options()[f].knob for f in fields}
        start = {**base, METHOD_KNOB: method}
        swept = [
            d
            for d in space.dimensions
            if d.name in reads and d.name not in base and d.active(space.effective(start))
        ]
        # each knob's values and its default: what a trial that leaves it unset runs
        grid = [dict.fromkeys((*d.values(), *_given(d.default))) for d in swept]
        for values in itertools.product(*grid):
            config = space.resolve({**start, **{d.name: v for d, v in zip(swept, values)}})
            config = {k: v for k, v in config.items() if k in FIELD_OF}
            try:
                spec_options(config)
            except ValueError:  # e.g. prompt_lookup_min above prompt_lookup_max
                continue
            if config not in out:
                out.append(config)
    return out


def _given(value: Any) -> tuple:
    return () if value is None else (value,)


def predict_one(
    config: Mapping[str, Any],
    streams: Sequence[Stream],
    pass_cost: PassCosts,
    baseline_tok_s: float | None,
    max_tokens: int | None = None,
    max_seq_len: int | None = None,
) -> Prediction:
    """Replay one setting over the streams, in order, with one proposer maker (a trie shared
    across requests stays shared) and the engine's adaptive budget on `pass_cost`."""
    from roofline.engine.runtime.speculate import proposer_factory
    from roofline.engine.runtime.speculate.adaptive import DraftBudget

    options = spec_options(config)
    maker = proposer_factory(options, None)
    if maker is None:
        return Prediction(dict(config), ReplayStats(), 1.0, baseline_tok_s)
    prompts: dict[str, ReplayStats] = {}
    for s in streams:
        stats = replay(
            maker,
            s.prompt_ids,
            s.output_ids,
            budget=lambda: DraftBudget(pass_cost, adaptive=options.adaptive),
            max_tokens=max_tokens,
            max_seq_len=max_seq_len,
        )
        prompts[s.prompt_id] = prompts.get(s.prompt_id, ReplayStats()).add(stats)
    total = ReplayStats()
    for p in prompts.values():
        total = total.add(p)
    monotone = pass_cost.monotone()
    ratios = [
        stats_ratio(p, monotone, pass_cost.one_row_s, baseline_tok_s) for p in prompts.values()
    ]
    found = [r for r in ratios if r]
    ratio = math.exp(sum(math.log(r) for r in found) / len(found)) if found else None
    tok_s = baseline_tok_s * ratio if baseline_tok_s and ratio else None
    return Prediction(dict(config), total, ratio, tok_s, prompts)


def stats_ratio(
    stats: ReplayStats,
    pass_cost: Callable[[int], float],
    one_row_s: float | None,
    baseline_tok_s: float | None,
) -> float | None:
    """The speed-up of one prompt's replayed decode passes against one token per one-row pass,
    held to the time outside the passes when the one-row pass time is known (module docstring)."""
    decode_tokens = stats.tokens - (stats.passes - sum(n for _, n in stats.rows))
    cost = stats.cost(pass_cost)
    ratio = decode_tokens / cost if cost else None
    t1 = one_row_s
    # a one-row pass longer than a baseline token is another engine's (another format's), and
    # says nothing of this one
    if ratio and t1 and baseline_tok_s and t1 < 1.0 / baseline_tok_s:
        per_token_s = 1.0 / baseline_tok_s
        other_s = max(0.0, per_token_s - t1)
        spent = t1 * cost + decode_tokens * other_s + stats.proposer_s
        ratio = decode_tokens * per_token_s / spent
    return ratio


def predict_ladder(
    space: Space,
    streams: Sequence[Stream],
    pass_cost_curve: PassCosts,
    baseline_tok_s: float | None,
    max_tokens: int | None = None,
    max_seq_len: int | None = None,
) -> list[Prediction]:
    """The predicted figures of every model-free proposer setting of the space, best first."""
    found = [
        predict_one(c, streams, pass_cost_curve, baseline_tok_s, max_tokens, max_seq_len)
        for c in settings(space)
    ]
    return sorted(found, key=lambda p: -(p.ratio or 0.0))


def matching(predictions: Sequence[Prediction], config: Mapping[str, Any]) -> Prediction | None:
    """The prediction for a trial's configuration: the same SpecOptions (a knob left unset and one
    set to its default compare equal); None when it speculates with no prediction."""
    try:
        want = spec_options(config)
    except (ValueError, TypeError):
        return None
    for p in predictions:
        if spec_options(p.setting) == want:
            return p
    return None


def with_baseline(p: Prediction, baseline_tok_s: float | None) -> Prediction:
    """The prediction against another baseline rate (tok/s = rate * ratio)."""
    tok_s = baseline_tok_s * p.ratio if baseline_tok_s and p.ratio else None
    return replace(p, tok_per_s=tok_s)
