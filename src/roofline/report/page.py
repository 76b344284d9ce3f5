"""What a report holds, before it is written as HTML or Markdown: sections of charts, tables and
notes, the warnings met while loading, and the provenance."""

from __future__ import annotations

from dataclasses import dataclass

from roofline.report.charts import Chart


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, t: tuple) -> Table:
        """From the (title, headers, rows, notes) tuples bench.report and tune.output build."""
        title, headers, rows, notes = t
        return cls(
            str(title),
            tuple(map(str, headers)),
            tuple(tuple(map(str, r)) for r in rows),
            tuple(notes),
        )


@dataclass(frozen=True)
class Section:
    title: str
    charts: tuple[Chart, ...] = ()
    tables: tuple[Table, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    title: str
    sections: tuple[Section, ...]
    warnings: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()

    @property
    def charts(self) -> list[Chart]:
        return [c for s in self.sections for c in s.charts]

    def chart(self, key: str) -> Chart | None:
        return next((c for c in self.charts if c.key == key), None)
