"""A tuning result as text: the header notes (ceiling, baseline, machines), the ladder and trial
tables, the failures and the best command line. `roofline tune` prints them (rich or Markdown), the
report puts them on its page."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from roofline.tune.paired import TIE_RATIO
from roofline.tune.predict_records import Prediction
from roofline.tune.predict_run import PredictedLadder, read_predicted, trial_predictions
from roofline.tune.records import LadderStep
from roofline.tune.result import TuneResult
from roofline.tune.slots import SlotKind, TrialStatus
from roofline.tune.trial_result import TrialResult

Table = tuple[str, list[str], list[list[str]], list[str]]


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.2f}" if unit.startswith("$") or abs(value) < 10 else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


def config_text(config: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> str:
    """The knobs that differ from the baseline, as k=v; "(baseline)" when none do."""
    base = baseline or {}
    diff = [f"{k}={v}" for k, v in config.items() if base.get(k) != v]
    gone = [f"{k}=default" for k in base if k not in config]
    return " ".join(diff + gone) or "(baseline)"


def trial_text(r: TrialResult, baseline: Mapping[str, Any] | None = None) -> str:
    """What a trial ran: its configuration; a skipped ladder value by its knob and value; for the
    ladder's incumbent slot, which step it measured the best so far for."""
    if r.slot.kind != SlotKind.INCUMBENT:
        if (
            r.status == TrialStatus.SKIPPED and r.slot.knob is not None
        ):  # a ladder value never configured
            return f"{r.slot.knob}={r.slot.value}"
        return config_text(r.config, baseline)
    what = f"the incumbent again, before the {r.slot.knob} step"
    return what if r.status == TrialStatus.SKIPPED else f"{what}: {config_text(r.config, baseline)}"


def status_note(r: TrialResult, full: bool = False) -> str:
    """Why a trial is not ok, in a few words (full: with the diverging pieces)."""
    if r.status == TrialStatus.INEXACT and r.exactness:
        e = r.exactness
        unit = "token" if e.basis == "token_ids" else "char"
        short = f"differs at prompt {e.first_prompt!r} {unit} {e.first_position}"
        if e.streams > 1:
            short += f" at {e.streams} streams (alone: the same as the baseline's)"
        return short + (f": {e.baseline_piece!r} vs {e.candidate_piece!r}" if full else "")
    if r.pruned_after:
        return f"stopped after {r.pruned_after} repetition(s) as clearly losing: never best"
    if r.status in (TrialStatus.FAILED, TrialStatus.SKIPPED) and r.error:
        first = printable(r.error.splitlines()[0])
        return first if full else first[:80]
    return ""


def printable(text: str) -> str:
    """Text safe for a terminal: control and undecodable characters shown as '?'."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def percent(r: TrialResult | None) -> str:
    """% of ceiling; above 100% with the suspect figure beside it (its reason is in the notes)."""
    from roofline.bench.against import percent_text
    from roofline.bench.summary import VsCeiling

    if r is None:
        return "-"
    m = r.metrics
    return percent_text(
        VsCeiling(percent_of_ceiling=m.percent_of_ceiling, suspect=m.ceiling_suspect)
    )


def percent_file(r: TrialResult | None) -> str:
    """% of the file's ceiling (the bytes the model's file stores), "-" when not known."""
    pct = r.percent_of_file_ceiling if r else None
    return "-" if pct is None else f"{pct:.1f}%"


def header_notes(t: TuneResult) -> list[str]:
    unit = t.objective.unit
    notes = [
        (
            f"engine {t.engine}, model {t.model or 'default'}; objective: {t.objective.label} "
            f"({t.objective.direction}); strategy {t.strategy}; study {t.study.name!r}"
        )
    ]
    machines = sorted(
        {
            (r.machine.hostname, r.machine.read_bandwidth_bytes_per_s)
            for r in t.trials
            if r.machine.hostname
        },
        key=str,
    )
    for host, bw in machines:
        notes.append(
            f"machine {host}" + (f": measured read bandwidth {bw / 1e9:.1f} GB/s" if bw else "")
        )
    c = t.ceiling
    if c:
        from roofline.bench.tables import file_ceiling_notes

        notes.append(
            f"ceiling: {c.tok_per_s:.1f} tok/s = {c.bandwidth_bytes_per_s / 1e9:.1f} GB/s / "
            f"{c.bytes_per_token / 1e6:.1f} MB per token ({c.hardware or 'hardware'}, batch 1; "
            "each trial's % of ceiling uses its own bytes per token)"
        )
        notes += file_ceiling_notes(c)
    else:
        notes.append(
            "no ceiling: give --model and --hardware (the embedded engine reports its own bytes "
            "per token)"
        )
    if t.baseline:
        b = t.baseline
        notes.append(
            f"baseline: {fmt(b.value, unit)} (spread {fmt(b.spread, unit)} across reps, "
            f"{percent(b)} of ceiling"
            + (
                f", {percent_file(b)} of the file's"
                if b.percent_of_file_ceiling is not None
                else ""
            )
            + ")"
        )
    for r in (t.baseline, t.best):
        line = ratio_line(r)
        # the engine reads more (or fewer) bytes than the file stores
        if line and line not in notes:
            notes.append(line)
    for r in t.trials:  # above 100%: which figure is suspect, and why
        if (r.metrics.percent_of_ceiling or 0) > 100:
            notes.append(
                f"trial {r.number}: {r.metrics.ceiling_note or 'above 100% of the ceiling'}"
            )
    return notes


def ratio_line(r: TrialResult | None) -> str | None:
    """`bench.against.read_ratio_line` for a trial whose engine reads more (or fewer) bytes per
    token than the file stores; else None."""
    from roofline.bench.against import read_ratio_line

    if r is None or not r.file_bytes_per_token or not r.read_ratio:
        return None
    line = read_ratio_line(
        r.read_ratio * r.file_bytes_per_token, r.file_bytes_per_token, r.percent_of_file_ceiling
    )
    return f"trial {r.number}: {line}" if line else None


def step_best(t: TuneResult, step: LadderStep) -> TrialResult | None:
    """The trial behind a ladder step's best value."""
    p = step.best_point()
    return None if p is None else t.trial(p.trial)


def _paired_cell(s: LadderStep) -> str:
    """The paired ratio and its interval, or the old rule's spread (run folders from before)."""
    if s.paired is None:
        return "-" if s.spread is None else f"spread {fmt(s.spread)}"
    p = s.paired
    return f"{p.ratio:.3f}x [{p.low:.3f}, {p.high:.3f}]"


def ladder_table(t: TuneResult) -> Table | None:
    if not t.ladder:
        return None
    unit = t.objective.unit
    headers = [
        "step",
        "setting",
        unit,
        "gain",
        "paired ratio [95%]",
        "kept",
        "% ceil",
        "% file",
        "values tried",
    ]
    rows = []
    if t.baseline:
        b = t.baseline
        rows.append(
            [
                "0",
                "baseline",
                fmt(b.value),
                "-",
                f"spread {fmt(b.spread)}",
                "-",
                percent(b),
                percent_file(b),
                "",
            ]
        )
    for step, s in enumerate(t.ladder, 1):
        tried = ", ".join(
            f"{p.value}: {fmt(p.objective)}"
            + ("" if p.status == TrialStatus.OK else f" ({p.status})")
            for p in s.tried
        )
        gain = "-"
        start = s.before.objective if s.before else None
        if s.paired is not None:  # against the incumbent of the same minutes, not the step's start
            gain = f"{s.paired.ratio - 1:+.0%} (paired)"
        elif s.best_objective is not None and start:
            g = t.objective.better_by(s.best_objective, start)
            gain = f"{g:+.1f} ({100 * g / start:+.0f}%)"
        best = step_best(t, s)
        rows.append(
            [
                str(step),
                f"{s.knob}={s.best_value}" if s.best_value is not None else s.knob,
                fmt(s.best_objective),
                gain,
                _paired_cell(s),
                "yes" if s.kept else ("tie" if s.paired and s.paired.verdict == "tie" else "no"),
                percent(best) if best else "-",
                percent_file(best),
                tried,
            ]
        )
    notes = [
        "gain: over the step's start, or (paired) the paired ratio's, where the step measured "
        "the incumbent again next to its values: tok/s from other minutes would mislead",
        "paired ratio: the step's best value against the incumbent measured next to it, per "
        "(prompt, repetition) pair, geometric mean and 95% bootstrap interval; a value is kept "
        f"only when the interval's low end clears {1 + TIE_RATIO:.2f}, else the simpler "
        "configuration stays (tie); inexact values are never kept"
        + (" (here allowed: --allow-inexact)" if t.allow_inexact else ""),
    ]
    notes += [
        f"step {i}: the incumbent measured again in trial {s.remeasured}"
        for i, s in enumerate(t.ladder, 1)
        if s.remeasured is not None
    ]
    return ("ladder (each step tries one knob on top of the best so far)", headers, rows, notes)


def predicted_text(p: Prediction | None) -> str:
    """A prediction in a table cell: tok/s, the speed-up, tokens per pass."""
    if p is None:
        return "-"
    tpp = p.stats.tokens_per_pass
    ratio = f"{p.ratio:.2f}x" if p.ratio else "-"
    return f"{fmt(p.tok_per_s)} ({ratio}, {tpp:.2f} tok/pass)" if tpp else ratio


def trials_table(t: TuneResult, predicted: Mapping[int, Prediction] | None = None) -> Table:
    """Every trial; with `predicted` (trial number -> its replayed prediction) a column beside the
    measured figure."""
    unit = t.objective.unit
    base = t.baseline.config if t.baseline else {}
    headers = ["#", "configuration", "status", unit, "spread", "% ceil", "% file", "note"]
    if predicted:
        headers.insert(4, "predicted")
    rows = []
    for r in t.trials:
        if r.status != TrialStatus.SKIPPED:
            row = [
                str(r.number),
                trial_text(r, base),
                r.status,
                fmt(r.value),
                fmt(r.spread),
                percent(r),
                percent_file(r),
                status_note(r),
            ]
            if predicted:
                row.insert(4, predicted_text(predicted.get(r.number)))
            rows.append(row)
    counts: dict[str, int] = {}
    for r in t.trials:
        counts[r.status] = counts.get(r.status, 0) + 1
    notes = [
        ", ".join(f"{n} {s}" for s, n in counts.items()),
        "% ceil: against the ceiling of the bytes the engine reads per token; % file: against the "
        "bytes the model's file stores (what the model needs)",
    ]
    skipped = [
        f"{r.slot.knob}={r.slot.value}"
        for r in t.trials
        if r.status == TrialStatus.SKIPPED and r.slot.kind != SlotKind.INCUMBENT
    ]
    if skipped:
        notes.append(
            "skipped (inactive on the best configuration, or predicted or bounded no faster "
            f"than it: each trial's note in trials.jsonl says which): {', '.join(skipped)}"
        )
    notes += [
        f"trial {r.number}: {status_note(r, full=True)}"
        for r in t.trials
        if r.status == TrialStatus.INEXACT
    ]
    if predicted:
        notes.append(
            "predicted: the proposer replayed over the baseline's greedy outputs (tok/s, speed-up "
            "over the same configuration without a proposer, tokens per weight pass); see "
            "predicted.json"
        )
    waiting = t.study.waiting
    if waiting:
        notes.append(
            f"{waiting} planned trial(s) not run yet (budget reached or interrupted): --resume "
            "continues"
        )
    return ("trials", headers, rows, notes)


def failures(t: TuneResult, lines: int = 8) -> list[str]:
    out = []
    for r in t.trials:
        if r.status == TrialStatus.FAILED:
            tail = printable("\n".join((r.log_tail or "").splitlines()[-lines:]))
            out.append(
                f"trial {r.number} ({config_text(r.config)}) failed: {printable(r.error or '')}"
                + (f"\n{tail}" if tail else "")
            )
    return out


def best_lines(t: TuneResult) -> list[str]:
    unit = t.objective.unit
    b = t.best
    if b is None:
        return ["no configuration gave an exact result"]
    what = "exact" if b.status == TrialStatus.OK else "INEXACT (allowed by --allow-inexact)"
    gain = f", {t.gain:.2f}x the baseline" if t.gain else ""
    base = t.baseline.config if t.baseline else {}
    lines = [
        f"best {what}: trial {b.number}, {config_text(b.config, base)}: "
        f"{fmt(b.value, unit)}{gain}, {percent(b)} of ceiling"
        + (f" ({percent_file(b)} of the file's)" if b.percent_of_file_ceiling is not None else "")
    ]
    f = t.fastest
    if f is not None and f.number != b.number:
        lines.append(
            f"fastest measured: trial {f.number}, {config_text(f.config, base)}: "
            f"{fmt(f.value, unit)}, within the spread of the ladder's steps (not a proven gain: "
            "more --reps, or a quieter machine, would tell)"
        )
    return [*lines, f"command: {shlex.join(t.serve_command)}"]


def predicted_table(ladder: PredictedLadder, baseline: Mapping[str, Any] | None = None) -> Table:
    """The predicted ladder: every model-free proposer setting, best first."""
    headers = ["setting", "tok/pass", "acceptance", "predicted tok/s", "x baseline"]
    rows = [
        [
            config_text({**(baseline or {}), **p.setting}, baseline),
            fmt(p.stats.tokens_per_pass),
            "-" if p.stats.acceptance is None else f"{100 * p.stats.acceptance:.0f}%",
            fmt(p.tok_per_s),
            "-" if p.ratio is None else f"{p.ratio:.2f}x",
        ]
        for p in ladder.predictions
    ]
    costs = ladder.pass_costs
    if costs.one_row_s:
        speed = (
            f"tok/s = baseline x the geometric mean over prompts of decode tokens x T / "
            f"(sum(t1 x pass cost(rows)) + decode tokens x (T - t1) + the proposer's time in the "
            f"replay), T = 1 / baseline tok/s, t1 = {1e3 * costs.one_row_s:.2f} ms (a one-row "
            f"pass)"
        )
    else:
        speed = (
            "tok/s = baseline x the geometric mean over prompts of decode tokens / "
            "sum(pass cost(rows) / pass cost(1))"
        )
    notes = [
        f"replayed over the {ladder.streams} greedy outputs of trial {ladder.baseline_trial} "
        f"(baseline {fmt(ladder.baseline_tok_per_s, 'tok/s')}); exact tokens per pass, the speed "
        f"from the verify costs: {speed}",
        f"verify costs {costs.source}: " + ", ".join(f"{r} rows {c:.2f}" for r, c in costs.points),
    ]
    if not costs.one_row_s:
        notes.append("not modelled: the proposer's own time and the work outside weight passes")
    return (
        "predicted ladder (model-free proposers, from the baseline alone)",
        headers,
        rows,
        notes,
    )


def tables(t: TuneResult, run_dir: Any = None) -> list[Table]:
    """The ladder and trials tables; the trials table has a predicted column when the run folder
    (default: t.run_dir) holds predicted.json."""
    ladder = read_predicted(run_dir or t.run_dir)
    predicted = trial_predictions(ladder, t.trials) if ladder else None
    return [x for x in (ladder_table(t), trials_table(t, predicted)) if x]
