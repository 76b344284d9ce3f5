"""A `Page` as report.md, for an issue or pull request (charts linked as report/*.svg)."""

from __future__ import annotations

from roofline.bench.tables import markdown_table
from roofline.report.page import Page


def page_markdown(page: Page) -> str:
    out = [f"# {page.title}", ""]
    if page.warnings:
        out += (
            ["> **Warning: this report is incomplete.**"]
            + [f"> - {w}" for w in page.warnings]
            + [""]
        )
    for s in page.sections:
        out += [f"## {s.title}", ""]
        for c in s.charts:
            out += [f"![{c.title}](report/{c.key}.svg)", "", f"*{c.caption}*", ""]
        for t in s.tables:
            if t.title:
                out += [f"### {t.title}", ""]
            out += [markdown_table(t.headers, t.rows), ""] + [f"- {n}" for n in t.notes]
            if t.notes:
                out.append("")
        out += [f"- {n}" for n in s.notes]
        if s.notes:
            out.append("")
    if page.provenance:
        out += ["## provenance", ""] + [f"- {p}" for p in page.provenance] + [""]
    return "\n".join(out)
