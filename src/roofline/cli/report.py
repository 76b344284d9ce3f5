"""`roofline report`: charts and one self-contained HTML page from bench and tune run folders.

Only typer and the standard library at module level; matplotlib is imported when a report is built.
"""

from __future__ import annotations

from pathlib import Path

import typer

HELP = (
    "Draw a run: the roofline (the hardware's bandwidth slope and compute roof, the model's "
    "decode and prefill points, the measured runs), time per token (the weight-read floor "
    "against everything else), the ladder and sweeps of a tune run, the per-prompt spread, "
    "latency distributions and load sweeps of a bench run, with the ceiling and provenance "
    "tables.\n\n"
    "Writes RUN_DIR/report.html (self-contained: opens from disk, loads nothing), report.md (for "
    "an issue or pull request) and each chart as report/*.svg and report/*.png, and prints the "
    "path. Two or more run folders: side by side (B - A and B / A for two), written to "
    "compare-<A>-vs-<B> beside the first run (or --out)."
)


def _echo_written(written, *, err: bool) -> None:
    for w in written.warnings:
        typer.secho(f"warning: {w}", err=True, fg="yellow")
    typer.echo(str(written.html), err=err)


def write_report_after_run(run_dir: Path) -> None:
    """At the end of `roofline bench` and `roofline tune`: write the report and print its path
    (stderr). A report that cannot be drawn is a warning: the run's own results are already
    written."""
    try:
        from roofline.report.build import write_report

        written = write_report([run_dir])
    except Exception as e:
        typer.secho(
            f"warning: no report ({e.__class__.__name__}: {e}); try `roofline report {run_dir}`",
            err=True,
            fg="yellow",
        )
        return
    for w in written.warnings:
        typer.secho(f"warning: {w}", err=True, fg="yellow")
    typer.echo(f"report: {written.html}", err=True)


def register(app: typer.Typer) -> None:
    @app.command("report", help=HELP)
    def report(
        runs: list[Path] = typer.Argument(
            ...,
            metavar="RUN_DIR...",
            help="Run folders written by `roofline bench` or `roofline tune`.",
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            help="Where the report goes (default: the run folder; for several runs "
            "compare-<A>-vs-<B> beside the first).",
        ),
    ) -> None:
        from roofline.report.build import write_report

        _echo_written(write_report(runs, out), err=False)
