"""Speculative decoding in roofline's embedded engine: speed-up over plain decoding, same engine,
same run.

What it measures (batch 1, greedy, `generate` with and without a proposer, EOS ends an answer):
  1. baseline (no speculation) vs n-gram prompt lookup, the suffix trie and suffix decoding (tree
     and chain mode) and the int8 self-draft, on a copy-heavy set (the input asked back verbatim:
     src/roofline/data/prompts/copy_heavy.jsonl), a structured set (code edits, JSON/list
     transforms, a quote: answers that reuse the input in part), the code-work set (agent-style
     edits of a 40-80 line file answered with the whole file: .../prompts/code_work.jsonl) and
     an open-prose set. Per set, the copied share of the baseline's answers (tokens inside a run of
     8 already seen: `roofline.speculation.copied_share`) shows how much of them a proposer
     drafting from seen text can copy, and the hindsight bound on tokens per pass (the best
     drafts of seen text, chosen knowing the answer) how many a pass it could accept at best.
     Per configuration and set: decode tok/s
     (tokens after the first over the decode time, summed over the set's prompts) min / median / max
     over rounds; tokens per weight pass; acceptance (accepted / drafted nodes); the ratio to the
     baseline (median of per-round ratios) against the targets of issues 8 and 19 (suffix in
     per-request scope: every prompt is a first-time prompt); and whether every greedy output
     equals the baseline's token for token (speculation must never change the text -- a
     divergence is an engine bug and is named precisely).
  2. a sweep on the structured set: trie max_bfs_breadth (num_draft_tokens 24), suffix
     spec_max_factor (num_draft_tokens 24) and n-gram draft length k.
  3. the cost of a verify pass: a k-row pass of one slot (after a ~100-token prefill) relative to a
     1-row pass, k = 1..16. A kernel that reads each weight once for all rows keeps this near 1 for
     small k; one that re-reads weights per row makes it grow like k, and speculation cannot pay.
     Beside it, the speculative runs' own k-row passes against plain decoding's one-row passes,
     as they ran (`speculation_passes`): what the ratios in table 1 actually paid.

Why interleaved: the machine is shared and its bandwidth drifts by tens of percent within minutes.
Each round runs every configuration on every prompt, the configuration order rotated from prompt to
prompt and round to round, so drift hits all configurations alike; ratios are taken within a round.
Absolute tok/s from different runs are not comparable; the ratios are the result.

Usage: python benchmarks/speculation.py [--dtype fp32|bf16|int8|all] [--rounds 3] [--max-tokens 128]
                                        [--threads N] [--quick] [--markdown] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from importlib import resources

# sibling modules: run as a script
from speculation_passes import TimedSteps, in_generation_costs, pass_costs
from speculation_tables import SETS, hindsight, report, share

# greedy answers (SmolLM2-135M-Instruct) reuse the prompt in part: the quote is explained, the
# JSON rewritten (the set's copied share is printed)
STRUCTURED = {
    "code-edit": (
        'Change every <li> in this HTML to use the class "item" and show the full HTML:\n<ul>\n'
        "  <li>Home</li>\n  <li>About us</li>\n  <li>Products</li>\n  <li>Services</li>\n"
        "  <li>Blog</li>\n  <li>Careers</li>\n  <li>Contact</li>\n</ul>"
    ),
    "json": (
        'Add the field "active": true to every object in this JSON array '
        "and print the resulting JSON:\n"
        '[{"id": 1, "name": "Alice", "city": "Paris"}, {"id": 2, "name": "Bob", "city": "Berlin"}, '
        '{"id": 3, "name": "Carol", "city": "Madrid"}]'
    ),
    "list": (
        "Convert this comma-separated list into a numbered list, one item per line, "
        "keeping the order: apples, bananas, cherries, dates, elderberries, figs, grapes, "
        "honeydew melons, kiwis, lemons, mangoes, nectarines, oranges, papayas, quinces"
    ),
    "quote": (
        'Repeat this sentence exactly, then explain what it means: "The quick brown fox jumps '
        'over the lazy dog because the dog was too tired to chase the fox across the field."'
    ),
}
PROSE = {
    "story": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "sky": "Explain why the sky is blue to a ten-year-old.",
    "language": "What are the benefits of learning a second language?",
}


def prompt_file(name: str) -> dict[str, str]:
    """A built-in prompt set of roofline's package data (code_work.jsonl, copy_heavy.jsonl): id ->
    prompt."""
    from roofline.bench.workloads import parse_prompts_jsonl

    text = resources.files("roofline").joinpath("data/prompts", name).read_text(encoding="utf-8")
    return {p.id: p.prompt for p in parse_prompts_jsonl(text, name)}


def prompt_texts() -> dict[str, dict[str, str]]:
    """The benchmark's prompt sets: set -> prompt id -> prompt."""
    return {
        "copy": prompt_file("copy_heavy.jsonl"),
        "structured": STRUCTURED,
        "code-work": prompt_file("code_work.jsonl"),
        "prose": PROSE,
    }


BREADTHS, BREADTHS_QUICK = (2, 4, 8, 10, 16, 24, 32, 48), (2, 24)
KS, KS_QUICK = (1, 2, 4, 8, 12, 16), (1, 8)
FACTORS, FACTORS_QUICK = (0.5, 1.0, 2.0, 4.0), (1.0, 4.0)


@dataclass
class Config:
    label: str
    options: object  # SpecOptions
    sets: tuple[str, ...]  # prompt sets it runs on
    make: object = None  # speculation maker (None = baseline)


@dataclass
class Run:  # one generation, or a configuration's sum over one prompt set in one round
    tokens: int = 0
    seconds: float = 0.0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_passes: int = 0  # a draft model's own weight passes

    def add(self, other: Run) -> None:
        for name in ("tokens", "seconds", "passes", "drafted", "accepted", "draft_passes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class Result:
    runs: list[Run] = field(default_factory=list)  # one per round
    outputs: dict = field(default_factory=dict)  # prompt -> ids of the last round
    per_prompt: dict = field(default_factory=dict)  # prompt -> [Run per round]
    mismatch: str | None = None  # first prompt/position differing from the baseline, any round


def read_bandwidth() -> str:
    """Read bandwidth measured now (numpy sum over 1 GiB, median of 5: shows how busy the host is),
    and the `roofline probe` profile's figure when there is one."""
    import numpy as np

    a = np.ones(2**28, dtype=np.float32)
    rates = []
    for _ in range(5):
        t = time.perf_counter()
        a.sum()
        rates.append(a.nbytes / (time.perf_counter() - t))
    text = (
        f"read bandwidth now {statistics.median(rates) / 1e9:.1f} GB/s "
        "(numpy sum, 1 GiB, median of 5)"
    )
    try:
        from roofline.hardware.profile import load_local_profile

        profile = load_local_profile()
        if profile:
            probed = profile["bandwidth_bytes_per_s"]["read"]["median"]
            text += f"; probe profile {probed / 1e9:.1f} GB/s"
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
    ) as e:  # a damaged profile should not stop the benchmark
        text += f"; probe profile unusable ({e})"
    return text


def chat_ids(tok, text: str) -> list[int]:
    return tok.encode(
        tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False
    )


def build_configs(quick: bool) -> tuple[list[Config], list[tuple[str, object]]]:
    """The table's configurations (both sets) + the sweep's (structured set; a point equal to a
    table row reuses its measurements), and the sweep as (parameter label, options)."""
    from roofline.engine.runtime.speculate.base import SpecOptions as O

    def ngram(k):
        return O(method="ngram", k=k, prompt_lookup_min=2, prompt_lookup_max=5)

    table = [
        ("baseline", O()),
        ("ngram k4 (lookup 2-5)", ngram(4)),
        ("ngram k8 (lookup 2-5)", ngram(8)),
        ("trie tree (breadth 10, 12 nodes)", O(method="trie")),
        ("trie chain (12 nodes)", O(method="trie", tree=False)),
        ("suffix tree (factor 1, 12 nodes)", O(method="suffix")),
        ("suffix chain (factor 1, 12 nodes)", O(method="suffix", tree=False)),
        (
            "suffix tree (factor 4, 24 nodes)",
            O(method="suffix", spec_max_factor=4.0, num_draft_tokens=24),
        ),
        ("draft: int8 self-draft k4", O(method="draft", k=4, draft_dtype="int8")),
    ]
    configs = [Config(label, opts, SETS) for label, opts in table]
    sweep = [
        (f"max_bfs_breadth = {b}", O(method="trie", max_bfs_breadth=b, num_draft_tokens=24))
        for b in (BREADTHS_QUICK if quick else BREADTHS)
    ]
    sweep += [
        (
            f"suffix spec_max_factor = {f:g}",
            O(method="suffix", spec_max_factor=f, num_draft_tokens=24),
        )
        for f in (FACTORS_QUICK if quick else FACTORS)
    ]
    sweep += [(f"ngram k = {k}", ngram(k)) for k in (KS_QUICK if quick else KS)]
    known = {c.options for c in configs}
    for label, opts in sweep:
        if opts not in known:
            known.add(opts)
            configs.append(Config(label, opts, ("structured",)))
    return configs, sweep


def run_one(runner, ids, max_tokens, make):
    from roofline.engine import SamplingParams, generate

    spec = make() if make else None
    g = generate(
        runner, ids, SamplingParams(max_tokens=max_tokens, temperature=0), speculation=spec
    )
    out = list(g)
    t = g.timings
    stats = spec.stats if spec else None
    return out, Run(
        t.decode_tokens,
        t.decode_seconds,
        t.passes - 1,
        stats.drafted if stats else 0,
        stats.accepted if stats else 0,
        getattr(spec.proposer, "passes", 0) if spec else 0,
    )


def first_divergence(out, ref) -> int | None:
    for i, (a, b) in enumerate(zip(out, ref)):
        if a != b:
            return i
    return None if len(out) == len(ref) else min(len(out), len(ref))


def measure_speed(runner: TimedSteps, configs, prompt_sets, rounds, max_tokens) -> dict:
    """results[(label, set)]; each round: per prompt, every configuration once, order rotated.
    runner times its passes, plain decoding's apart from speculation's."""
    results = {(c.label, s): Result() for c in configs for s in c.sets}
    jobs = [(s, name, ids) for s, prompts in prompt_sets.items() for name, ids in prompts.items()]
    reference: dict[str, list[int]] = {}
    for r in range(rounds):
        t_round = time.perf_counter()
        for res in results.values():
            res.runs.append(Run())
        for j, (s, name, ids) in enumerate(jobs):
            here = [c for c in configs if s in c.sets]
            shift = (r * len(jobs) + j) % len(here)
            for c in here[shift:] + here[:shift]:
                runner.loop = "plain" if c.make is None else "spec"
                out, run = run_one(runner, ids, max_tokens, c.make)
                res = results[(c.label, s)]
                res.runs[-1].add(run)
                res.per_prompt.setdefault(name, []).append(run)
                res.outputs[name] = out
                if c.make is None:
                    # the baseline's round-1 output; later rounds are checked too
                    reference.setdefault(name, out)
            print(f"  round {r + 1} {s}/{name}: {len(here)} configurations done", file=sys.stderr)
        for c in configs:  # the baseline of this round is complete now: compare
            for s in c.sets:
                res = results[(c.label, s)]
                for name, out in res.outputs.items():
                    if res.mismatch is None and name in reference and out != reference[name]:
                        res.mismatch = (
                            f"{name} @{first_divergence(out, reference[name])} (round {r + 1})"
                        )
        print(f"round {r + 1}/{rounds}: {time.perf_counter() - t_round:.0f} s", file=sys.stderr)
    return results


def bench_dtype(dtype, args, header_notes) -> dict:
    from roofline.engine import load_runner
    from roofline.engine.runtime.speculate.step import speculation_factory

    print(f"loading {dtype} ...", file=sys.stderr)
    # code-work prompts are ~500 tokens and their answers repeat them
    runner = load_runner(None, dtype=dtype, threads=args.threads, max_seq_len=2048)
    tok = runner.tokenizer
    texts = prompt_texts()
    prompt_sets = {s: {n: chat_ids(tok, p) for n, p in t.items()} for s, t in texts.items()}
    configs, sweep = build_configs(args.quick)
    for c in configs:  # once per configuration: measures pass costs, loads the draft runner
        c.make = speculation_factory(c.options, runner)
    ks = (1, 2, 4, 8, 16) if args.quick else tuple(range(1, 17))
    costs = pass_costs(runner, ks, args.cost_reps, prompt_sets["structured"]["code-edit"])
    timed = TimedSteps(runner)
    results = measure_speed(timed, configs, prompt_sets, args.rounds, args.max_tokens)
    copied = {s: share(prompt_sets[s], results[("baseline", s)].outputs) for s in prompt_sets}
    bound = {
        s: {m: hindsight(prompt_sets[s], results[("baseline", s)].outputs, m) for m in (12, 24)}
        for s in prompt_sets
    }
    notes = [
        *header_notes,
        (
            f"{dtype} target; "
            + ", ".join(f"{len(t)} {s} ({', '.join(t)})" for s, t in texts.items())
            + f"; greedy, batch 1, up to {args.max_tokens} new tokens (EOS ends an answer), "
            f"{args.rounds} round(s), {runner.threads} threads"
        ),
        "copied share of the baseline's answers (tokens in a run of 8 seen before, in prompt or "
        "answer: what a proposer drafting from seen text can copy): "
        + ", ".join(f"{s} {100 * v:.0f}%" for s, v in copied.items()),
        "hindsight bound on tokens/pass (each pass drafts, knowing the answer, the best "
        "continuation of text seen in prompt or answer after a 1-token match; at most 12 / 24 "
        "drafted tokens accepted a pass): "
        + ", ".join(f"{s} {b[12]:.2f} / {b[24]:.2f}" for s, b in bound.items()),
        (
            "tok/s: decode tokens / decode seconds summed over the set's prompts, per round; "
            "min / median / max over rounds"
        ),
        (
            "tokens/pass: decode tokens per decode weight pass; "
            "acceptance: accepted / drafted draft nodes"
        ),
        (
            "vs baseline: median over rounds of (tok/s / baseline tok/s in the same round); "
            "targets from issue 8 (n-gram family = ngram and trie) and issue 19 (suffix)"
        ),
        (
            "identical: greedy ids equal to the baseline's for every prompt in every round "
            "(else prompt @ first position)"
        ),
    ]
    if dtype == "int8":
        notes.append(
            "int8 target: the int8 self-draft is the target itself "
            "(acceptance ~100%, no cheaper pass)"
        )
    out = report(dtype, results, configs, sweep, (costs, in_generation_costs(timed)), args, notes)
    out["copied_share"] = copied
    out["hindsight_tokens_per_pass"] = bound
    for c in configs:
        c.make = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "stored", "bf16", "int8", "all"])
    ap.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 128 (64 with --quick)")
    ap.add_argument("--threads", type=int, default=None, help="default: the cores available")
    ap.add_argument(
        "--quick", action="store_true", help="1 round, 64 tokens, fewer sweep points (~3 min)"
    )
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument("--json", metavar="FILE", help="write all measurements to FILE")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.max_tokens = args.max_tokens or (64 if args.quick else 128)
    args.cost_reps = 3 if args.quick else 7

    from engine_vs_peers import cpu_info  # a sibling script: the same CPU line everywhere
    from roofline.engine.runtime.model_runner import available_cores

    info = cpu_info()
    flags = ", ".join(f for f, on in info["flags"].items() if on) or "none of avx2/avx512"
    cpu = f"{info['model']} (flags: {flags})"
    machine = (
        f"machine: {cpu}, {available_cores()} cores available, "
        f"threads {args.threads or available_cores()}; {read_bandwidth()}; "
        f"load average {os.getloadavg()[0]:.1f}; a shared host: compare ratios, not tok/s"
    )
    print(machine, file=sys.stderr)
    dtypes = ["fp32", "stored", "bf16", "int8"] if args.dtype == "all" else [args.dtype]
    t0 = time.perf_counter()
    reports = [bench_dtype(d, args, [machine]) for d in dtypes]
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": machine, "args": vars(args), "reports": reports},
                f,
                indent=1,
                default=str,
            )


if __name__ == "__main__":
    main()
