"""One way to print results: a rich table for people, --json and --markdown for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from roofline.cli.layout import FitTable, wrap_words


def listed(names: Sequence[str]) -> str:
    """'a, b or c': a registry's names in a help text, so that the text follows the registry."""
    names = list(names)
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"


def console() -> Console:
    return Console(soft_wrap=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def rich_table(
    title: str | None, headers: Sequence[str], rows: Iterable[Sequence[Any]]
) -> FitTable:
    """A table for people that never cuts a number, whatever the width (see FitTable)."""
    return FitTable(title, headers, rows)


def emit_table(
    title: str | None,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    as_markdown: bool,
    notes: Sequence[str] = (),
) -> None:
    """Print one table (rich or Markdown) followed by its notes (assumptions, sources)."""
    if as_markdown:
        if title:
            sys.stdout.write(f"### {title}\n\n")
        sys.stdout.write(markdown_table(headers, rows) + "\n")
        for n in notes:
            sys.stdout.write(f"\n- {n}")
        sys.stdout.write("\n" if notes else "")
        return
    c = console()
    c.print(rich_table(title, headers, rows), crop=False)
    for n in notes:
        print_wrapped(c, n, indent="  ")


def print_wrapped(c: Console, text: str, *, indent: str = "", hanging: str = "  ") -> None:
    """Print text wrapped at spaces to the console's width, never inside a word (a number, a path, a
    URL): a word longer than the line stands on a line of its own. Continuation lines are indented
    by `hanging`."""
    for line in wrap_words(text, c.width, indent=indent, hanging=indent + hanging):
        # wrapped already: rich must neither fold nor crop a long word
        c.print(Text(line), soft_wrap=True)


# Functions Python runs around os.fork (subprocess starts engines) whose exceptions it prints and
# ignores: a KeyboardInterrupt raised while one of them runs would be lost, so the signal is
# delivered again later.
_AT_FORK = {
    "_acquireLock",
    "_releaseLock",
    "_after_fork",
    "_at_fork_reinit",
    "_prepareFork",
    "_afterFork",
}


def _sigterm_as_interrupt(signum, frame):
    f = frame
    while f is not None:
        if f.f_code.co_name in _AT_FORK:
            import os
            import threading

            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        f = f.f_back
    raise KeyboardInterrupt


def run_until_signal(run, opts) -> None:
    """Run a long command with SIGTERM treated like Ctrl-C (stop what was started, keep what was
    measured), then exit with its code. Not typer.Exit: the app runs with standalone_mode=False,
    which swallows codes."""
    import signal

    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        code = run(opts)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code:
        sys.exit(code)
