"""A `Page` as one self-contained HTML file that opens from disk anywhere.

Inline CSS, charts as inline SVG, no script, and no link outside the file (fonts, images or
stylesheets)."""

from __future__ import annotations

import re
from html import escape

from roofline.report.page import Page, Section, Table

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1100px; padding: 0 1rem; color: #222; line-height: 1.4; }
h1 { font-size: 1.5rem; }
h2 { font-size: 1.2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2rem; }
h3 { font-size: 1rem; }
.warnings { background: #fff4e5; border: 2px solid #e08a00; padding: .6rem 1rem;
            border-radius: 4px; }
.warnings strong { color: #a05a00; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: .85rem; color: #555; }
table { border-collapse: collapse; font-size: .85rem; margin: .5rem 0; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
ul.notes { font-size: .85rem; color: #444; }
.exports { font-size: .8rem; color: #666; }
code { background: #f4f4f4; padding: 0 .2rem; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in t.rows)
    out = [
        f"<h3>{escape(t.title)}</h3>" if t.title else "",
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    ]
    if t.notes:
        out.append(
            "<ul class='notes'>" + "".join(f"<li>{escape(n)}</li>" for n in t.notes) + "</ul>"
        )
    return "\n".join(out)


_ID = re.compile(r'(\bid=")([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def scoped_svg(svg: str, key: str) -> str:
    """The chart's element ids prefixed with its key: several SVGs share one page, and ids must not
    clash."""
    return _REF.sub(
        lambda m: f"{m.group(1)}{key}-{m.group(2)}",
        _ID.sub(lambda m: f'{m.group(1)}{key}-{m.group(2)}"', svg),
    )


def _section(s: Section, exports: bool) -> str:
    out = [f"<section><h2>{escape(s.title)}</h2>"]
    for c in s.charts:
        files = (
            f"<div class='exports'>files: report/{escape(c.key)}.svg, "
            f"report/{escape(c.key)}.png</div>"
            if exports
            else ""
        )
        out.append(
            f"<figure id='chart-{escape(c.key)}'>{scoped_svg(c.svg, c.key)}"
            f"<figcaption><strong>{escape(c.title)}.</strong> {escape(c.caption)}</figcaption>"
            f"{files}</figure>"
        )
    out += [_table(t) for t in s.tables]
    if s.notes:
        out.append(
            "<ul class='notes'>" + "".join(f"<li>{escape(n)}</li>" for n in s.notes) + "</ul>"
        )
    out.append("</section>")
    return "\n".join(out)


def page_html(page: Page, *, exports: bool = True) -> str:
    warn = ""
    if page.warnings:
        items = "".join(f"<li>{escape(w)}</li>" for w in page.warnings)
        warn = (
            "<div class='warnings' id='warnings'><strong>Warning: this report is "
            f"incomplete.</strong><ul>{items}</ul></div>"
        )
    prov = ""
    if page.provenance:
        prov = (
            "<section><h2>provenance</h2><ul class='notes'>"
            + "".join(f"<li>{escape(p)}</li>" for p in page.provenance)
            + "</ul></section>"
        )
    body = "\n".join(_section(s, exports) for s in page.sections)
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(page.title)}</title><style>{_CSS}</style></head>\n"
        f"<body><h1>{escape(page.title)}</h1>\n{warn}\n{body}\n{prov}\n</body></html>\n"
    )
