"""Replay speculation offline: the engine's own proposers and adaptive budget over the greedy
answers a `speculation.py --json` run recorded, each pass priced by that run's verify-pass costs. No
model runs, so a proposer idea is tried in seconds against the answers the model gives.

Why it can stand in for the model: with greedy decoding the answer is fixed; a verify pass accepts
the drafted path that follows it, and the speculative answer is the same text (the benchmark checks
that). What the replay cannot know is time: each pass costs `pass_cost(rows)` plain one-row passes,
from the run's round-robin table (`--costs table`) or from its passes as they ran in generation
(`--costs generation`, docs/measured.md), and the proposer's own Python time is left out.

Printed per set and configuration: tokens a pass and the predicted ratio to plain decoding
(tokens / summed pass costs) beside the ratio the run measured; and the hindsight oracle (each pass
drafts exactly the longest continuation of text seen before after a one-token match, at most 12 or
24 tokens): what a proposer copying from the context could reach.

Usage: python benchmarks/speculation_replay.py RUN.json [--dtype fp32] [--costs table|generation]
                                              [--sets copy,code-work] [--only suffix]
"""

from __future__ import annotations

import argparse
import json
import sys

from roofline.engine.runtime.pass_timing import PassCosts
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import speculation_factory
from roofline.engine.runtime.speculate.tree import DraftTree
from speculation import chat_ids, prompt_texts  # a sibling module: run as a script


class PricedRunner:
    """What `speculation_factory` reads of a runner for model-free proposers: `pass_cost`, here
    from a recorded table (the engine's own interpolation between counts, `PassCosts`)."""

    thread_chooser = None

    def __init__(self, costs: dict[int, float]) -> None:
        self.costs = PassCosts(dict(costs))

    def measure_pass_costs(self, *args, **kwargs) -> None:
        """Already known."""

    def pass_cost(self, rows: int) -> float:
        return self.costs.cost(rows)

    @property
    def pass_costs(self) -> dict[int, float]:
        return dict(self.costs.table or {})


def accepted_along(tree: DraftTree, truth: list[int]) -> int:
    """Draft nodes a greedy verify accepts when the target's answer goes on with `truth`: the path
    from the root whose tokens are truth[0], truth[1], ... (at most len(truth) - 1: the target's own
    token comes after them)."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(tree.parents):
        children.setdefault(parent, []).append(i)
    node, n = -1, 0
    while n < len(truth) - 1:
        node = next((c for c in children.get(node, ()) if tree.tokens[c] == truth[n]), None)
        if node is None:
            break
        n += 1
    return n


def replay(make, prompts: dict, answers: dict, pass_cost) -> tuple[float, float]:
    """(tokens a pass, predicted ratio to plain decoding) of one configuration over a set."""
    tokens = passes = 0
    cost = 0.0
    for name, ids in prompts.items():
        answer = answers[name]
        spec = make()
        context = [*ids, answer[0]]  # the first answer token comes from the prefill
        spec.proposer.accepted(context)
        done = 1
        while done < len(answer):
            truth = answer[done:]
            tree = spec.draft(context, len(truth) - 1)
            n = accepted_along(tree, truth)
            context += truth[: n + 1]
            done += n + 1
            spec.verified(context, tree, n)
            passes += 1
            cost += pass_cost(1 + len(tree))
        tokens += len(answer) - 1
    return tokens / passes, tokens / cost


def hindsight_oracle(prompts: dict, answers: dict, pass_cost, most: int) -> tuple[float, float]:
    """`replay`'s figures for a proposer that knows the answer: each pass drafts the longest
    continuation (at most `most` tokens) that followed an earlier occurrence of the last token."""
    tokens = passes = 0
    cost = 0.0
    for name, ids in prompts.items():
        answer = answers[name]
        context, done = [*ids, answer[0]], 1
        while done < len(answer):
            truth = answer[done:]
            limit = min(most, len(truth) - 1)
            best = 0
            for j in range(len(context) - 1):
                if context[j] == context[-1]:
                    n = 0
                    while n < limit and j + 1 + n < len(context) and context[j + 1 + n] == truth[n]:
                        n += 1
                    best = max(best, n)
            context += truth[: best + 1]
            done += best + 1
            passes += 1
            cost += pass_cost(1 + best)
        tokens += len(answer) - 1
    return tokens / passes, tokens / cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a speculation.py --json file")
    ap.add_argument("--dtype", default=None, help="the run's report to replay (default: the first)")
    ap.add_argument("--costs", default="table", choices=["table", "generation"])
    ap.add_argument("--sets", default=None, help="comma-separated (default: all the run's sets)")
    ap.add_argument("--only", default=None, help="configurations whose label contains this")
    args = ap.parse_args()

    try:
        with open(args.run) as f:
            reports = json.load(f)["reports"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{args.run}: not a speculation.py --json file ({e})")
    rep = next((r for r in reports if args.dtype in (None, r["dtype"])), None)
    if rep is None:
        sys.exit(f"no {args.dtype} report in {args.run}: {[r['dtype'] for r in reports]}")
    key = "pass_cost" if args.costs == "table" else "pass_cost_in_generation"
    if not rep.get(key):
        sys.exit(f"{args.run} has no {key} (a run before the in-generation timing?)")
    # never cheaper than a smaller count: counts seen a few times in generation are noisy, and a
    # dip at the end would extend to ever cheaper passes
    curve, most = {}, 0.0
    for k, v in sorted((int(k), v["relative"]) for k, v in rep[key].items()):
        curve[k] = most = max(most, v)
    priced = PricedRunner(curve)

    from roofline.engine.loading.gguf import gguf_metadata, open_gguf
    from roofline.engine.loading.gguf_tokenizer import tokenizer_from_gguf
    from roofline.modelspec.default_model import default_model_path

    path = default_model_path()  # the benchmark's model (its tokenizer only: no weights read)
    tok = tokenizer_from_gguf(gguf_metadata(open_gguf(path), path), path)
    texts = prompt_texts()
    sets = args.sets.split(",") if args.sets else list(rep["sets"])
    unknown = [s for s in sets if s not in rep["sets"] or s not in texts]
    if unknown:
        sys.exit(f"no set {', '.join(unknown)} in {args.run}; it has {', '.join(rep['sets'])}")
    print(
        f"{rep['dtype']} run, {args.costs} costs (rows: one-row passes; between the counts "
        "measured, interpolated; past the last, extended along the last two): "
        + ", ".join(f"{k}: {v:.2f}" for k, v in sorted(priced.pass_costs.items()))
    )
    print("predicted ratio to plain decoding / the run's measured ratio")
    for s in sets:
        prompts = {n: chat_ids(tok, p) for n, p in texts[s].items()}
        answers = rep["outputs"][f"baseline | {s}"]
        for entry in rep["sets"][s]:
            options = SpecOptions(**entry["options"])
            label = entry["config"]
            if options.method in ("none", "draft") or (args.only and args.only not in label):
                continue  # the baseline; a draft model's drafts need the model
            make = speculation_factory(options, priced)
            per_pass, ratio = replay(make, prompts, answers, priced.pass_cost)
            print(
                f"{s:10} {label:36} {per_pass:5.2f} tok/pass  {ratio:5.2f}x "
                f"/ {entry['ratio_median']:.2f}x"
            )
        for most in (12, 24):
            per_pass, ratio = hindsight_oracle(prompts, answers, priced.pass_cost, most)
            print(f"{s:10} {f'hindsight oracle, {most} tokens':36} {per_pass:5.2f} tok/pass  "
                  f"{ratio:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
