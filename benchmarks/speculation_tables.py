"""The tables of `benchmarks/speculation.py`: per prompt set and configuration, tok/s against the
plain-decoding baseline of the same round, tokens per weight pass, acceptance, the targets of
issues 8 and 19, and whether every output stayed identical; the structured-set sweep; the cost of a
verify pass against its rows."""

from __future__ import annotations

import shutil
import statistics
from dataclasses import asdict

SETS = ("copy", "structured", "code-work", "prose")
NGRAM_FAMILY = ("ngram", "trie")
# (method family, set) -> (minimum ratio to baseline, minimum tokens per pass or None): issues 8 and
# 19, "Performance". Issue 19's copy-heavy target is held against the copy set, whose answers are
# the input again; the structured set's answers copy the input only in part (their copied share)
TARGETS = {
    ("ngram", "structured"): (2.5, None),
    ("ngram", "prose"): (0.95, None),
    ("draft", "prose"): (1.3, None),
    ("suffix", "copy"): (3.0, 6.0),
    ("suffix", "code-work"): (2.5, None),
    ("suffix", "prose"): (0.98, None),
}


def family(method: str) -> str:
    return "ngram" if method in NGRAM_FAMILY else method


def summarize(results, configs, s):
    """Rows of (config, stats dict) for prompt set s."""
    base = results[("baseline", s)].runs
    out = []
    for c in configs:
        if s not in c.sets:
            continue
        res = results[(c.label, s)]
        rates = [run.tok_per_s for run in res.runs]
        ratios = [run.tok_per_s / b.tok_per_s for run, b in zip(res.runs, base) if b.tok_per_s]
        tokens, passes = sum(x.tokens for x in res.runs), sum(x.passes for x in res.runs)
        drafted, accepted = sum(x.drafted for x in res.runs), sum(x.accepted for x in res.runs)
        draft_passes = sum(x.draft_passes for x in res.runs)
        target, min_per_pass = TARGETS.get((family(c.options.method), s), (None, None))
        ratio = statistics.median(ratios) if ratios else 0.0
        per_pass = tokens / passes if passes else 0.0
        out.append(
            (
                c,
                {
                    "tok_per_s": rates,
                    "tok_per_s_median": statistics.median(rates) if rates else 0.0,
                    "tokens_per_pass": per_pass,
                    "acceptance": accepted / drafted if drafted else None,
                    "drafted": drafted,
                    "draft_passes_per_token": draft_passes / tokens
                    if tokens and draft_passes
                    else None,
                    "accepted": accepted,
                    "ratio_median": ratio,
                    "ratios": ratios,
                    "identical": res.mismatch is None,
                    "mismatch": res.mismatch,
                    "target": target,
                    "target_tokens_per_pass": min_per_pass,
                    "target_met": None
                    if target is None or c.options.method == "none"
                    else ratio >= target and per_pass >= (min_per_pass or 0.0),
                },
            )
        )
    return out


def share(prompts: dict, outputs: dict) -> float:
    """Copied share of a set's answers, pooled over its prompts (token-weighted)."""
    from roofline.speculation import copied_share

    tokens = sum(len(outputs[n]) for n in prompts)
    return sum(copied_share(ids, outputs[n]) * len(outputs[n]) for n, ids in prompts.items()) / (
        tokens or 1
    )


def hindsight(prompts: dict, outputs: dict, max_draft: int) -> float:
    """Tokens per pass, pooled over a set's prompts, for the best drafts of seen text after a
    one-token match (`roofline.speculation.hindsight_tokens_per_pass`): no proposer drafting from
    the request's own text does better."""
    from roofline.speculation import hindsight_tokens_per_pass

    tokens = passes = 0.0
    for n, ids in prompts.items():
        if outputs[n]:
            tokens += len(outputs[n])
            passes += len(outputs[n]) / hindsight_tokens_per_pass(ids, outputs[n], max_draft)
    return tokens / passes if passes else 0.0


def fmt_acc(a) -> str:
    return "—" if a is None else f"{100 * a:.0f}%"


def emit(title, headers, rows, markdown, notes) -> None:
    """emit_table, but a wide console: these tables do not fit 80 columns when the output is a
    file."""
    from rich.console import Console

    from roofline.cli.output import emit_table, rich_table

    if markdown:
        emit_table(title, headers, rows, as_markdown=True, notes=notes)
        return
    c = Console(width=max(200, shutil.get_terminal_size((200, 24)).columns), soft_wrap=False)
    c.print(rich_table(title, headers, rows))
    for n in notes:
        c.print(f"  {n}", highlight=False)


def report(dtype, results, configs, sweep, costs, args, header_notes) -> dict:
    """Print the three tables and return the dtype's JSON; costs = (the verify-pass table, the
    same counts timed in generation)."""
    summary = {s: summarize(results, configs, s) for s in SETS}
    rows = []
    for s in SETS:
        for c, st in summary[s]:
            if "prose" not in c.sets:  # a sweep-only configuration
                continue
            r = st["tok_per_s"]
            tgt = (
                ""
                if st["target"] is None or c.options.method == "none"
                else f">= {st['target']}x"
                + (
                    f", >= {st['target_tokens_per_pass']:g} tok/pass"
                    if st["target_tokens_per_pass"]
                    else ""
                )
                + f" {'met' if st['target_met'] else 'NOT met'}"
            )
            dp = st["draft_passes_per_token"]
            rows.append(
                (
                    f"{s}: {c.label}",
                    f"{min(r):.1f} / {statistics.median(r):.1f} / {max(r):.1f}",
                    f"{st['tokens_per_pass']:.2f}",
                    fmt_acc(st["acceptance"]),
                    "—" if dp is None else f"{dp:.2f}",
                    f"{st['ratio_median']:.2f}x",
                    tgt,
                    "yes" if st["identical"] else f"NO: {st['mismatch']}",
                )
            )
    emit(
        f"speculation vs plain decoding, {dtype}",
        [
            "set: configuration",
            "tok/s min / median / max",
            "tokens/pass",
            "acceptance",
            "draft passes/token",
            "vs baseline",
            "target (issues 8, 19)",
            "identical",
        ],
        rows,
        args.markdown,
        header_notes,
    )
    print()
    by_options = {c.options: st for c, st in summary["structured"]}
    srows = []
    for label, opts in sweep:
        st = by_options[opts]
        srows.append(
            (
                label,
                f"{st['tok_per_s_median']:.1f}",
                f"{st['tokens_per_pass']:.2f}",
                fmt_acc(st["acceptance"]),
                f"{st['ratio_median']:.2f}x",
                "yes" if st["identical"] else f"NO: {st['mismatch']}",
            )
        )
    emit(
        f"sweep on the structured set, {dtype}",
        ["parameter", "tok/s (median)", "tokens/pass", "acceptance", "vs baseline", "identical"],
        srows,
        args.markdown,
        [
            (
                "trie: tree mode, min_bfs_breadth 1, max_trie_depth 18, num_draft_tokens 24; "
                "suffix: tree mode, depth 24, min prob 0.1, num_draft_tokens 24; "
                "ngram: prompt lookup 2-5, chain; adaptive draft budget on (the engine's default)"
            ),
            "vs baseline: median over rounds of (tok/s / baseline tok/s in the same round)",
        ],
    )
    print()
    table, in_gen = costs
    crows = []
    for k in sorted(set(table) | set(in_gen)):
        t, g = table.get(k), in_gen.get(k)
        crows.append(
            (
                f"k = {k}",
                "—" if t is None else f"{t['ms']:.2f}",
                "—" if t is None else f"{t['relative']:.2f}x",
                "—" if g is None else f"{g['ms']:.2f}",
                "—" if g is None else f"{g['relative']:.2f}x ({g['passes']})",
            )
        )
    emit(
        f"verify-pass cost, {dtype}",
        [
            "rows in the pass",
            "ms (median)",
            "vs 1 row",
            "in generation: ms (median)",
            "vs plain decoding's pass (passes)",
        ],
        crows,
        args.markdown,
        [
            (
                f"runner.step on one slot after a 100-token prefill, rolled back after each pass; "
                f"median of {args.cost_reps} reps, row counts interleaved"
            ),
            (
                "in generation: the speculative runs' passes of k rows, timed where they ran "
                "(after passes of other sizes), against the median one-row pass of plain decoding "
                "in the same runs; counts seen fewer than 5 times left out"
            ),
        ],
    )
    print()
    return {
        "dtype": dtype,
        "pass_cost": costs[0],
        "pass_cost_in_generation": costs[1],
        "sets": {
            s: [{"config": c.label, "options": asdict(c.options), **st} for c, st in summary[s]]
            for s in summary
        },
        "runs": {
            f"{label} | {s}": {
                "rounds": [asdict(x) for x in res.runs],
                "per_prompt": {n: [asdict(x) for x in v] for n, v in res.per_prompt.items()},
            }
            for (label, s), res in results.items()
        },
        "outputs": {
            f"{label} | {s}": res.outputs
            for (label, s), res in results.items()
            if label == "baseline"
        },
    }
