"""Progress on stderr: a live rich bar on a terminal; plain lines in a pipe, a file or a CI log.

rich's Progress leaves an empty line in a file at each refresh and stop. Off a terminal,
`live_progress` returns a `LineProgress` with the part of Progress's interface the commands use
(add_task, update, advance, start, stop, console, `with`): one line per finished task (at the end,
also for a task short of its total), nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Self

from rich.console import Console
from rich.progress import Progress
from rich.text import Text


def live_progress(
    *columns: Any, console: Console | None = None, label: str = "", **kwargs: Any
) -> Progress | LineProgress:
    """A rich Progress when `console` (default: stderr) is an interactive terminal, else a
    LineProgress whose lines start with `label`."""
    c = console if console is not None else Console(stderr=True)
    if c.is_terminal and not c.is_dumb_terminal:
        return Progress(*columns, console=c, **kwargs)
    return LineProgress(c, label=label)


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0
    visible: bool = True
    fields: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)  # the last update: a finished task's time
    reported: bool = False


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


class LineProgress:
    """One line per finished task, no bar, no redraws, no empty lines."""

    def __init__(self, console: Console, *, label: str = "") -> None:
        self.console = console
        self.label = label
        self._tasks: dict[int, _Task] = {}

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        for task in self._tasks.values():
            if task.visible and not task.reported and (task.completed or task.total is None):
                self._report(task)

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: float | None = 100.0,
        completed: float = 0,
        visible: bool = True,
        **fields: Any,
    ) -> int:
        # a task without a total (a scenario run for a duration) ends when the next one starts
        for task in self._tasks.values():
            if task.total is None and task.visible and not task.reported and task.completed:
                self._report(task)
        task_id = len(self._tasks)
        self._tasks[task_id] = _Task(description, total, completed, visible, dict(fields))
        return task_id

    def reset(self, task_id: int) -> None:
        """Start the task's clock and count again (as rich's Progress.reset)."""
        task = self._tasks[task_id]
        task.started = task.last = time.monotonic()
        task.completed, task.reported = 0, False

    def update(
        self,
        task_id: int,
        *,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        visible: bool | None = None,
        refresh: bool = False,
        **fields: Any,
    ) -> None:
        task = self._tasks[task_id]
        task.last = time.monotonic()
        if completed is not None and completed < task.completed:
            # the task starts over (the next trial's requests)
            task.reported, task.started = False, task.last
        if description is not None:
            task.description = description
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if visible is not None:
            task.visible = visible
        task.fields.update(fields)
        if (
            task.visible
            and not task.reported
            and task.total is not None
            and task.completed >= task.total > 0
        ):
            self._report(task)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _report(self, task: _Task) -> None:
        task.reported = True
        done = _count(task.completed) + (f"/{_count(task.total)}" if task.total is not None else "")
        extra = []
        for key, value in task.fields.items():
            if value in (None, ""):
                continue
            text = str(value)
            extra.append(text if text.startswith(key) else f"{key} {text}")
        elapsed = task.last - task.started
        line = (
            f"{self.label}{task.description.rstrip(': ')}: {', '.join([done, *extra])} "
            f"({elapsed:.1f} s)"
        )
        self.console.print(Text(line, no_wrap=True, overflow="ignore"))


class ScenarioProgress:
    """A rich progress bar on stderr, one task per scenario."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        # a live bar on a terminal, one plain line per scenario in a pipe or a file
        self.p = live_progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            refresh_per_second=4,
            transient=False,
        )
        self.task = None
        self.failed = 0
        self.p.start()

    def start(self, name: str, total: int | None, duration_s: float | None) -> None:
        self.failed = 0
        label = f"{name} ({duration_s:g}s)" if duration_s else name
        self.task = self.p.add_task(label, total=total, failed=0)

    def advance(self, ok: bool) -> None:
        if not ok:
            self.failed += 1
        self.p.update(self.task, advance=1, failed=self.failed)

    def note(self, text: str) -> None:
        from roofline.cli.output import print_wrapped

        print_wrapped(self.p.console, text)  # a command line or a URL is never split

    def stop(self) -> None:
        self.p.stop()
