"""Fitting a table to the width at hand without ever cutting a number.

rich shrinks a too-wide table by cutting cells (`344…`) or folding numbers. Here a numeric column
(every cell a number, maybe with a unit) is as wide as its widest cell and never wraps; a text
column wraps at spaces, no narrower than its longest word, and takes the room left. When even
that does not fit, each row prints as a block: its first cell, then `header: value` items on
indented lines. A word (a number, a path, a URL) is never split.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# one vertical border per column (plus the closing one) and one space of padding on either side
BORDER_AND_PADDING_PER_COLUMN = 3
# a number first (after a sign, currency, approximation or comparison mark), a few words at most:
# "3.35 TB/s", "+2.05%", "$1.20/M", "2026-11-29" (a longer cell such as "1,609/user, 12,874 total"
# wraps between its words)
_NUMERIC_CELL = re.compile(r"^[-+~≈<>=≤≥$(]*\s?\d")
_MAX_NUMERIC_WORDS = 2


def is_numeric_cell(cell: str) -> bool:
    return bool(_NUMERIC_CELL.match(cell)) and len(cell.split()) <= _MAX_NUMERIC_WORDS


def _is_placeholder(cell: str) -> bool:
    """An empty cell or a short mark with no digit in it ('-', 'n/a', '?'): no say in the column's
    kind."""
    return len(cell.strip()) <= 3 and not any(ch.isdigit() for ch in cell)


def numeric_columns(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, leading: bool = False
) -> list[bool]:
    """Whether each column holds numbers only (placeholders aside), never the first column (it names
    the row). leading=True: whether every cell starts with a number (such a column is right-aligned,
    even where it wraps)."""

    def fits(cell: str) -> bool:
        return bool(_NUMERIC_CELL.match(cell)) if leading else is_numeric_cell(cell)

    kinds = []
    for i in range(len(headers)):
        cells = [r[i] for r in rows if i < len(r) and not _is_placeholder(r[i])]
        kinds.append(i > 0 and bool(cells) and all(fits(c) for c in cells))
    return kinds


def _widest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _widest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def column_widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], total_width: int
) -> list[int] | None:
    """Content widths of the columns so that the table fits in total_width characters, or None when
    it cannot without cutting a number (or a word)."""
    numeric = numeric_columns(headers, rows)
    desired, floor = [], []
    for i, h in enumerate(headers):
        cells = [r[i] for r in rows if i < len(r)]
        widest_cell = max((_widest_line(c) for c in cells), default=0)
        widest_word = max((_widest_word(c) for c in cells), default=0)
        desired.append(max(widest_cell, _widest_line(h), 1))
        # a number column never wraps its cells, a text column wraps at spaces; headers wrap at
        # spaces in both
        floor.append(max(widest_cell if numeric[i] else widest_word, _widest_word(h), 1))
    room = total_width - BORDER_AND_PADDING_PER_COLUMN * len(headers) - 1
    if sum(desired) <= room:
        return desired
    if sum(floor) > room:
        return None
    widths = list(floor)
    spare = room - sum(widths)
    # whole columns first, the cheapest first (each one unwrapped is a column read at a glance),
    # then the rest of the room to the column furthest from its natural width, one character at a
    # time
    for gap, i in sorted((desired[i] - widths[i], i) for i in range(len(widths))):
        if 0 < gap <= spare:
            widths[i] += gap
            spare -= gap
    while spare > 0:
        gap, i = max((desired[i] - widths[i], i) for i in range(len(widths)))
        if gap <= 0:
            break
        widths[i] += 1
        spare -= 1
    return widths


def wrap_words(text: str, width: int, *, indent: str = "", hanging: str = "") -> list[str]:
    """Wrap at spaces only: a word longer than the line stays whole on a line of its own."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line, prefix = "", indent
        for word in paragraph.split():
            candidate = f"{line} {word}" if line else word
            if line and cell_len(prefix) + cell_len(candidate) > width:
                lines.append(prefix + line)
                line, prefix = word, hanging
            else:
                line = candidate
        lines.append(prefix + line)
    return lines


def pack_items(
    items: Sequence[str], width: int, *, indent: str, hanging: str, sep: str = "  "
) -> list[str]:
    """Items side by side on lines of at most `width` (an item never split across lines unless it
    alone is wider than a line; then it wraps at spaces)."""
    lines: list[str] = []
    line = ""
    for item in items:
        candidate = f"{line}{sep}{item}" if line else item
        if cell_len(indent) + cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(indent + line)
        if cell_len(indent) + cell_len(item) <= width:
            line = item
        else:
            lines += wrap_words(item, width, indent=indent, hanging=hanging)
            line = ""
    if line:
        lines.append(indent + line)
    return lines


class FitTable:
    """A table that picks its layout when printed, for the width of the console it is printed on."""

    def __init__(
        self, title: str | None, headers: Sequence[Any], rows: Iterable[Sequence[Any]]
    ) -> None:
        self.title = title
        self.headers = [str(h) for h in headers]
        self.rows = [["" if c is None else str(c) for c in r] for r in rows]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = column_widths(self.headers, self.rows, options.max_width)
        if self.title and widths is not None:
            # on a line of its own rather than as the table's title, which rich pads with spaces to
            # the table's width
            for line in wrap_words(self.title, options.max_width):
                yield Segment(line)
                yield Segment.line()
        if widths is None:
            yield from self.blocks(options.max_width)
        else:
            yield self.table(widths)

    def table(self, widths: Sequence[int]) -> Table:
        numeric = numeric_columns(self.headers, self.rows)
        right = numeric_columns(self.headers, self.rows, leading=True)
        t = Table()
        for h, w, num, r in zip(self.headers, widths, numeric, right, strict=True):
            # the header wraps at spaces even over a column that does not ('TTFT p50 ms' on three
            # lines)
            t.add_column(
                Text(h, no_wrap=False, overflow="fold"),
                justify="right" if r else "left",
                width=w,
                no_wrap=num,
                overflow="fold",
            )
        for r in self.rows:
            t.add_row(*(Text(c) for c in r))
        return t

    def block_lines(self, width: int) -> Iterator[str]:
        """One block per row: its first cell, then `header: value` items packed on indented
        lines."""
        # a heading: the title, or else the first column's header ('bytes per decoded token',
        # 'bound')
        yield from wrap_words(self.title or self.headers[0], width)
        for r in self.rows:
            if not r:
                continue
            # the row's name; a bare number ('0', a ladder step) says what it counts
            first = f"{self.headers[0]}: {r[0]}" if _NUMERIC_CELL.match(r[0]) else r[0] or "-"
            yield from wrap_words(first, width, hanging="  ")
            items = [f"{h}: {c}" for h, c in zip(self.headers[1:], r[1:]) if c.strip()]
            yield from pack_items(items, width, indent="  ", hanging="    ")

    def blocks(self, width: int) -> Iterator[Segment]:
        # segments, not Text: rich would fold a word longer than the line (a URL, a path) that
        # wrap_words kept whole; print with crop=False so that such a line is not cut at the edge
        # either
        for line in self.block_lines(width):
            yield Segment(line)
            yield Segment.line()
