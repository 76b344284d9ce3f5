"""One matplotlib figure as a `Chart`: SVG for the page, PNG for export, and its numbers.

The SVG keeps text as text, embeds no fonts and links nothing."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

# One palette for every chart: the weight-read floor red, everything else grey (the B200 study's
# colours).
FLOOR = "#c0392b"
OTHER = "#9aa0a6"
MEASURED = "#1f6fb2"
MODEL = "#e08a00"
ROOF = "#333333"
SERIES = ("#1f6fb2", "#e08a00", "#2e8b57", "#8e44ad", "#c0392b", "#17becf", "#7f7f7f", "#bcbd22")


@dataclass(frozen=True)
class Chart:
    key: str  # file stem: RUN/report/<key>.svg and .png
    title: str
    caption: str
    svg: str
    png: bytes
    data: Any  # the typed series the chart was drawn from (tests read the numbers here)


def pyplot():
    """matplotlib's pyplot on the Agg backend, SVG text as <text> (no glyph paths, no web fonts)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "roofline",
            "font.family": "sans-serif",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "figure.dpi": 100,
        }
    )
    return plt


_XML_HEAD = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def render(fig: Any, key: str, title: str, caption: str, data: Any) -> Chart:
    """The figure as a Chart; the figure is closed."""
    plt = pyplot()
    svg_buf, png_buf = io.StringIO(), io.BytesIO()
    try:
        fig.savefig(svg_buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        fig.savefig(png_buf, format="png", bbox_inches="tight", dpi=110)
    finally:
        plt.close(fig)
    svg = _METADATA.sub("", _XML_HEAD.sub("", svg_buf.getvalue(), count=1))
    return Chart(key=key, title=title, caption=caption, svg=svg, png=png_buf.getvalue(), data=data)
