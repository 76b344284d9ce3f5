"""A tuning result for people on the terminal (rich tables, or Markdown) and the live progress
display (rich, on stderr); the text itself is `roofline.report.tune_text`'s."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from roofline.report.tune_text import (
    best_lines,
    config_text,
    failures,
    fmt,
    header_notes,
    percent,
    percent_file,
    predicted_table,
    status_note,
    tables,
    trial_text,
)
from roofline.tune.result import TuneResult
from roofline.tune.slots import SlotKind, TrialStatus
from roofline.tune.trial_result import TrialResult
from roofline.tune.tuner import Display


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


def print_predicted(ladder: Any, baseline: Mapping[str, Any] | None) -> None:
    """`roofline tune --predict`'s table (a tune.predict_run.PredictedLadder)."""
    from roofline.cli.output import console, print_wrapped, rich_table

    c = console()
    title, headers, rows, notes = predicted_table(ladder, baseline)
    c.print(rich_table(title, headers, rows), crop=False)
    for n in notes:
        print_wrapped(c, n, indent="  ")


def predicted_markdown(ladder: Any, baseline: Mapping[str, Any] | None) -> str:
    """The same as Markdown."""
    from roofline.cli.output import markdown_table

    title, headers, rows, notes = predicted_table(ladder, baseline)
    return (
        "\n".join(
            [f"## {title}", "", markdown_table(headers, rows), ""] + [f"- {n}" for n in notes]
        )
        + "\n"
    )


def show_predicted(
    ladder: Any, baseline: Mapping[str, Any] | None, *, as_json: bool, as_markdown: bool
) -> None:
    """`roofline tune --predict`'s output: predicted.json's content, Markdown, or the table."""
    import sys

    from roofline.cli import output

    if as_json:
        output.print_json(ladder.to_json())
    elif as_markdown:
        sys.stdout.write(predicted_markdown(ladder, baseline))
    else:
        print_predicted(ladder, baseline)


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
        self.d.p.reset(self.d.requests)  # its clock: these requests', not the display's
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

    def clock_from_now(self) -> None:
        """The trials' elapsed time counts from here: the study's, not the preparation's (the
        bandwidth probe, the engine's once-per-install kernels)."""
        self.p.reset(self.trials)

    def trial_started(self, number: int, slot: Any, config: Mapping[str, Any]) -> None:
        self.p.update(
            self.trials,
            description=f"trial {number} ({slot.kind}): {config_text(config, self.baseline)}",
        )

    def trial_ended(self, result: TrialResult, best: TrialResult | None) -> None:
        if result.slot.kind == SlotKind.BASELINE and result.status == TrialStatus.OK:
            self.baseline = dict(result.config)
        line = f"trial {result.number} {result.status}: {trial_text(result, self.baseline)}"
        if result.value is not None:
            line += (
                f" -> {fmt(result.value, self.unit)} (spread {fmt(result.spread)}, "
                f"{percent(result)} of ceiling"
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
        # the counter's last line names it, not the last trial
        self.p.update(self.trials, description="trials")
        self.p.stop()


def planned_total(plan: Sequence[Any], budget: int | None, open_ended: bool) -> int | None:
    """Trials the progress bar counts to: the plan (an upper bound: the ladder skips some), or the
    budget."""
    if open_ended or (budget is not None and budget < len(plan)):
        return budget
    return len(plan)


def display_for(options):
    """The live display of a tune run: its planned trial count and objective unit."""
    from roofline.tune.objectives import OBJECTIVES
    from roofline.tune.search import get_strategy
    from roofline.tune.space_records import Space
    from roofline.tune.tuner import budget

    strategy = get_strategy(options.strategy)
    plan = strategy.plan(Space.from_json(options.space))
    return RichDisplay(
        planned_total(plan, budget(options), strategy.open_ended),
        OBJECTIVES[options.objective].unit,
    )


def print_result(result, *, as_json: bool, as_markdown: bool) -> None:
    """The result as JSON, markdown or the terminal's tables."""
    from roofline.cli import output

    if as_json:
        output.print_json(result.to_json())
    elif as_markdown:
        sys.stdout.write(markdown(result))
    else:
        print_rich(result)
