"""A tuning result for people: the ceiling, the baseline, the ladder, every trial, the best command
line (rich tables, or Markdown), and the live progress display (rich, on stderr)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from roofline.tune.result import TuneResult
from roofline.tune.trial import TrialResult
from roofline.tune.tuner import Display

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


def status_note(r: TrialResult, full: bool = False) -> str:
    """Why a trial is not ok, in a few words (full: with the diverging pieces)."""
    if r.status == "inexact" and r.exactness:
        e = r.exactness
        unit = "token" if e.get("basis") == "token_ids" else "char"
        short = f"differs at prompt {e.get('first_prompt')!r} {unit} {e.get('first_position')}"
        return short + (
            f": {e.get('baseline_piece')!r} vs {e.get('candidate_piece')!r}" if full else ""
        )
    if r.status in ("failed", "skipped") and r.error:
        first = printable(r.error.splitlines()[0])
        return first if full else first[:80]
    return ""


def printable(text: str) -> str:
    """Text safe for a terminal: control and undecodable characters shown as '?'."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def percent(r: TrialResult | None) -> str:
    """% of ceiling; above 100% with the suspect figure beside it (its reason is in the notes)."""
    from roofline.bench.against import percent_text

    m = r.metrics if r else {}
    return percent_text(
        {"percent_of_ceiling": m.get("percent_of_ceiling"), "suspect": m.get("ceiling_suspect")}
    )


def percent_file(r: TrialResult | None) -> str:
    """% of the file's ceiling (the bytes the model's file stores), "-" when not known."""
    pct = r.percent_of_file_ceiling if r else None
    return "-" if pct is None else f"{pct:.1f}%"


def ceiling_figures(t: TuneResult) -> Any:
    """The tune result's ceiling as bench's type (bench.summary.CeilingFigures), or None."""
    from roofline.bench.summary import CeilingFigures

    try:
        return CeilingFigures.from_json(t.ceiling)
    except (KeyError, TypeError, ValueError):
        return None


def header_notes(t: TuneResult) -> list[str]:
    unit = t.objective["unit"]
    notes = [
        (
            f"engine {t.engine}, model {t.model or 'default'}; objective: {t.objective['label']} "
            f"({t.objective['direction']}); strategy {t.strategy}; study {t.study.get('name')!r}"
        )
    ]
    machines = sorted(
        {
            (r.machine.get("hostname"), r.machine.get("read_bandwidth_bytes_per_s"))
            for r in t.trials
            if r.machine.get("hostname")
        },
        key=str,
    )
    for host, bw in machines:
        notes.append(
            f"machine {host}" + (f": measured read bandwidth {bw / 1e9:.1f} GB/s" if bw else "")
        )
    c = t.ceiling
    if c:
        notes.append(
            f"ceiling: {c['tok_per_s']:.1f} tok/s = {c['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s / "
            f"{c['bytes_per_token'] / 1e6:.1f} MB per token ({c.get('hardware') or 'hardware'}, batch 1; "
            "each trial's % of ceiling uses its own bytes per token)"
        )
        figures = ceiling_figures(t)
        if figures is not None:
            from roofline.bench.tables import file_ceiling_notes

            notes += file_ceiling_notes(figures)
    else:
        notes.append(
            "no ceiling: give --model and --hardware (the embedded engine reports its own bytes per token)"
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
        if (
            line and line not in notes
        ):  # the engine reads more (or fewer) bytes than the file stores
            notes.append(line)
    for r in t.trials:  # above 100%: which figure is suspect, and why
        if (r.metrics.get("percent_of_ceiling") or 0) > 100:
            notes.append(
                f"trial {r.number}: {r.metrics.get('ceiling_note') or 'above 100% of the ceiling'}"
            )
    return notes


def ratio_line(r: TrialResult | None) -> str | None:
    """ "the engine reads 538.1 MB per token, 5.57x the file's 96.6 MB: measured against the file,
    15% of ceiling" for a trial whose engine reads more (or fewer) bytes than the file stores; else
    None."""
    from roofline.bench.against import read_ratio_line

    if r is None or not r.file_bytes_per_token or not r.read_ratio:
        return None
    line = read_ratio_line(
        r.read_ratio * r.file_bytes_per_token, r.file_bytes_per_token, r.percent_of_file_ceiling
    )
    return f"trial {r.number}: {line}" if line else None


def step_best(t: TuneResult, step: Mapping[str, Any]) -> TrialResult | None:
    """The trial behind a ladder step's best value."""
    numbers = [
        p.get("trial")
        for p in step.get("tried") or ()
        if p.get("value") == step.get("best_value")
        and p.get("objective") == step.get("best_objective")
    ]
    return next((r for r in t.trials if numbers and r.number == numbers[0]), None)


def ladder_table(t: TuneResult) -> Table | None:
    if not t.ladder:
        return None
    unit = t.objective["unit"]
    headers = [
        "step",
        "setting",
        unit,
        "gain",
        "spread",
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
                fmt(b.spread),
                "-",
                percent(b),
                percent_file(b),
                "",
            ]
        )
    for step, s in enumerate(t.ladder, 1):
        tried = ", ".join(
            f"{p['value']}: {fmt(p['objective'])}"
            + ("" if p["status"] == "ok" else f" ({p['status']})")
            for p in s["tried"]
        )
        gain = "-"
        if s["best_objective"] is not None and s["before"] and s["before"]["objective"]:
            g = s["best_objective"] - s["before"]["objective"]
            if t.objective["direction"] == "minimize":
                g = -g
            gain = f"{g:+.1f} ({100 * g / s['before']['objective']:+.0f}%)"
        best = step_best(t, s)
        rows.append(
            [
                str(step),
                f"{s['knob']}={s['best_value']}" if s["best_value"] is not None else s["knob"],
                fmt(s["best_objective"]),
                gain,
                fmt(s["spread"]),
                "yes" if s["kept"] else "no",
                percent(best) if best else "-",
                percent_file(best),
                tried,
            ]
        )
    notes = [
        "a value is kept only when its gain beats the spread across repetitions (the larger of the two "
        "configurations'); inexact values are never kept"
        + (" (here allowed: --allow-inexact)" if t.allow_inexact else "")
    ]
    return ("ladder (each step tries one knob on top of the best so far)", headers, rows, notes)


def trials_table(t: TuneResult) -> Table:
    unit = t.objective["unit"]
    base = t.baseline.config if t.baseline else {}
    headers = ["#", "configuration", "status", unit, "spread", "% ceil", "% file", "note"]
    rows = []
    for r in t.trials:
        if r.status != "skipped":
            rows.append(
                [
                    str(r.number),
                    config_text(r.config, base),
                    r.status,
                    fmt(r.value),
                    fmt(r.spread),
                    percent(r),
                    percent_file(r),
                    status_note(r),
                ]
            )
    counts: dict[str, int] = {}
    for r in t.trials:
        counts[r.status] = counts.get(r.status, 0) + 1
    notes = [
        ", ".join(f"{n} {s}" for s, n in counts.items()),
        "% ceil: against the ceiling of the bytes the engine reads per token; % file: against the bytes the "
        "model's file stores (what the model needs)",
    ]
    skipped = [f"{r.slot.knob}={r.slot.value}" for r in t.trials if r.status == "skipped"]
    if skipped:
        notes.append(
            f"skipped (their condition does not hold on the best configuration): {', '.join(skipped)}"
        )
    notes += [
        f"trial {r.number}: {status_note(r, full=True)}" for r in t.trials if r.status == "inexact"
    ]
    waiting = t.study.get("trials", {}).get("waiting")
    if waiting:
        notes.append(
            f"{waiting} planned trial(s) not run yet (budget reached or interrupted): --resume continues"
        )
    return ("trials", headers, rows, notes)


def failures(t: TuneResult, lines: int = 8) -> list[str]:
    out = []
    for r in t.trials:
        if r.status == "failed":
            tail = printable("\n".join((r.log_tail or "").splitlines()[-lines:]))
            out.append(
                f"trial {r.number} ({config_text(r.config)}) failed: {printable(r.error or '')}"
                + (f"\n{tail}" if tail else "")
            )
    return out


def best_lines(t: TuneResult) -> list[str]:
    unit = t.objective["unit"]
    b = t.best
    if b is None:
        return ["no configuration gave an exact result"]
    what = "exact" if b.status == "ok" else "INEXACT (allowed by --allow-inexact)"
    gain = f", {t.gain:.2f}x the baseline" if t.gain else ""
    base = t.baseline.config if t.baseline else {}
    lines = [
        f"best {what}: trial {b.number}, {config_text(b.config, base)}: {fmt(b.value, unit)}{gain}, "
        f"{percent(b)} of ceiling"
        + (f" ({percent_file(b)} of the file's)" if b.percent_of_file_ceiling is not None else "")
    ]
    f = t.fastest
    if f is not None and f.number != b.number:
        lines.append(
            f"fastest measured: trial {f.number}, {config_text(f.config, base)}: {fmt(f.value, unit)}, "
            "within the spread of the ladder's steps (not a proven gain: more --reps, or a quieter machine, "
            "would tell)"
        )
    return [*lines, f"command: {shlex.join(t.serve_command)}"]


def tables(t: TuneResult) -> list[Table]:
    return [x for x in (ladder_table(t), trials_table(t)) if x]


def print_rich(t: TuneResult) -> None:
    from roofline.cli.output import console, print_wrapped, rich_table

    c = console()
    for n in header_notes(t):
        print_wrapped(c, n)
    for title, headers, rows, notes in tables(t):
        c.print(rich_table(title, headers, rows), crop=False)
        for n in notes:
            print_wrapped(c, n, indent="  ")
    for f in failures(t):
        c.print(f, highlight=False, markup=False, soft_wrap=True)  # as the server wrote it
    for line in best_lines(t):
        c.print(line, highlight=False, markup=False, soft_wrap=True)


def markdown(t: TuneResult) -> str:
    from roofline.cli.output import markdown_table

    out = ["# roofline tune", ""] + [f"- {n}" for n in header_notes(t)] + [""]
    for title, headers, rows, notes in tables(t):
        out += (
            [f"## {title}", "", markdown_table(headers, rows), ""]
            + [f"- {n}" for n in notes]
            + [""]
        )
    fails = failures(t)
    if fails:
        out += ["## failures", ""] + [f"```\n{f}\n```" for f in fails] + [""]
    b = best_lines(t)
    out += ["## best", ""] + [f"- {line}" for line in b if not line.startswith("command: ")] + [""]
    out += [f"```\n{shlex.join(t.serve_command)}\n```", ""] if t.best else []
    return "\n".join(out)


class _BenchProgress:
    """bench's Progress interface, drawn as the display's request counter (its stop() is not
    ours)."""

    def __init__(self, display: RichDisplay) -> None:
        self.d = display

    def start(self, name: str, total: int | None, duration_s: float | None) -> None:
        self.d.p.update(
            self.d.requests,
            description=f"  requests ({name})",
            total=total,
            completed=0,
            visible=True,
        )

    def advance(self, ok: bool) -> None:
        self.d.p.advance(self.d.requests)

    def note(self, text: str) -> None:
        pass  # bench's own notes (ceiling, discovery) are in each trial's bench folder

    def stop(self) -> None:
        pass


class RichDisplay(Display):
    """Live on stderr: the trial running, its configuration, the best so far; a line per finished
    trial."""

    def __init__(
        self, total: int | None, unit: str, baseline: Mapping[str, Any] | None = None
    ) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        from roofline.cli.progress import live_progress

        self.unit = unit
        self.baseline = dict(baseline or {})
        # a live bar on a terminal, plain lines in a pipe or a file
        self.p = live_progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[best]}"),
            console=Console(stderr=True),
            refresh_per_second=4,
        )
        self.trials = self.p.add_task("trials", total=total, best="")
        self.requests = self.p.add_task("  requests", total=None, visible=False, best="")
        self.p.start()

    def bench_progress(self) -> Any:
        return _BenchProgress(self)

    def trial_started(self, number: int, slot: Any, config: Mapping[str, Any]) -> None:
        self.p.update(
            self.trials,
            description=f"trial {number} ({slot.kind}): {config_text(config, self.baseline)}",
        )

    def trial_ended(self, result: TrialResult, best: TrialResult | None) -> None:
        if result.slot.kind == "baseline" and result.status == "ok":
            self.baseline = dict(result.config)
        line = f"trial {result.number} {result.status}: {config_text(result.config, self.baseline)}"
        if result.value is not None:
            line += (
                f" -> {fmt(result.value, self.unit)} (spread {fmt(result.spread)}, {percent(result)} of ceiling"
                + (
                    f", {percent_file(result)} of the file's"
                    if result.percent_of_file_ceiling is not None
                    else ""
                )
                + ")"
            )
        note = status_note(result)
        self.note(line + (f"; {note}" if note else ""))
        best_text = f"best: {fmt(best.value, self.unit)} (trial {best.number})" if best else ""
        self.p.update(self.trials, advance=1, best=best_text)
        self.p.update(self.requests, visible=False)

    def note(self, text: str) -> None:
        from roofline.cli.output import print_wrapped

        print_wrapped(self.p.console, text)

    def stop(self) -> None:
        self.p.update(
            self.trials, description="trials"
        )  # the counter's last line names it, not the last trial
        self.p.stop()


def planned_total(plan: Sequence[Any], budget: int | None, open_ended: bool) -> int | None:
    """Trials the progress bar counts to: the plan (an upper bound: the ladder skips some), or the
    budget."""
    if open_ended or (budget is not None and budget < len(plan)):
        return budget
    return len(plan)
