"""Build and write a report: `RUN/report.html` (self-contained), `RUN/report.md`, and each chart as
`RUN/report/<chart>.svg` and `.png`. Also the roofline page of `roofline ceiling --plot`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roofline.errors import UserError
from roofline.report.html import page_html
from roofline.report.markdown import page_markdown
from roofline.report.page import Page, Section
from roofline.report.run_folders import LoadedRun, RunKind, load_runs

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
CHARTS_DIR = "report"


@dataclass(frozen=True)
class Written:
    html: Path
    markdown: Path
    files: tuple[Path, ...]  # the charts' SVG and PNG files
    page: Page

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.page.warnings


def _provenance(run: LoadedRun) -> list[str]:
    if run.kind == RunKind.TUNE:
        from roofline.report.sections import tune_provenance

        return tune_provenance(run)
    from roofline.bench.tables import hardware_profile_line, provenance_lines

    line = hardware_profile_line(run.summary)
    return provenance_lines(run.summary) + ([line] if line else [])


def page_of_runs(runs: Sequence[LoadedRun], warnings: Sequence[str] = ()) -> Page:
    from roofline.report.sections import bench_sections, tune_sections

    sections: list[Section] = []
    many = len(runs) > 1
    if many:
        from roofline.report.compare import comparison_section

        sections.append(comparison_section(runs))
    prov: list[str] = []
    for i, run in enumerate(runs):
        key = f"{chr(97 + i)}_" if many else ""
        title = f"{chr(65 + i)} ({run.name}): " if many else ""
        sections += (bench_sections if run.kind == RunKind.BENCH else tune_sections)(
            run, key, title
        )
        prov += [f"{title}{p}" for p in _provenance(run)]
    if many:
        title = "roofline report: " + " vs ".join(r.name for r in runs)
    else:
        r = runs[0]
        title = f"roofline report: {'tune' if r.kind == RunKind.TUNE else 'bench'} run {r.name}"
    return Page(title, tuple(sections), tuple(warnings), tuple(prov))


def write_page(page: Page, out_dir: Path) -> Written:
    out_dir.mkdir(parents=True, exist_ok=True)
    charts_dir = out_dir / CHARTS_DIR
    files = []
    if page.charts:
        charts_dir.mkdir(exist_ok=True)
    for c in page.charts:
        svg, png = charts_dir / f"{c.key}.svg", charts_dir / f"{c.key}.png"
        svg.write_text(
            '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + c.svg, encoding="utf-8"
        )
        png.write_bytes(c.png)
        files += [svg, png]
    html, md = out_dir / REPORT_HTML, out_dir / REPORT_MD
    html.write_text(page_html(page), encoding="utf-8")
    md.write_text(page_markdown(page), encoding="utf-8")
    return Written(html, md, tuple(files), page)


def default_compare_dir(run_dirs: Sequence[str | Path]) -> Path:
    """Beside the first run: compare-<A>-vs-<B>."""
    first = Path(run_dirs[0]).resolve()
    return first.parent / ("compare-" + "-vs-".join(Path(d).resolve().name for d in run_dirs))[:150]


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path | None = None) -> Written:
    """The report of one run (written into its folder) or of several side by side (into out_dir, by
    default a compare-<A>-vs-<B> folder beside the first run)."""
    if not run_dirs:
        raise UserError("give one or more run folders")
    loaded = load_runs(list(run_dirs))
    if out_dir is None:
        out_dir = run_dirs[0] if len(run_dirs) == 1 else default_compare_dir(run_dirs)
    return write_page(page_of_runs(loaded.runs, loaded.warnings), Path(out_dir))


def ceiling_page(analysis) -> Page:
    """The roofline chart of a CeilingAnalysis with its breakdown and bounds tables."""
    from roofline.report.roofline_chart import draw_roofline, roofline_from_analysis
    from roofline.report.sections import breakdown_tables

    a = analysis
    chart = draw_roofline(roofline_from_analysis(a))
    breakdown, bounds = breakdown_tables(a)
    section = Section(
        "roofline", (chart,), (breakdown, bounds), tuple(f"assumption: {x}" for x in a.assumptions)
    )
    return Page(f"roofline: {a.model.name} on {a.hardware.label}", (section,))


def write_ceiling_plot(analysis, path: str | Path) -> Path:
    """`roofline ceiling --plot FILE`: .html (self-contained page), .svg or .png (the chart
    alone)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".html", ".htm", ".svg", ".png"):
        raise UserError(f"--plot writes .html, .svg or .png (got {str(path)!r})")
    page = ceiling_page(analysis)
    chart = page.charts[0]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".svg":
            path.write_text(
                '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + chart.svg,
                encoding="utf-8",
            )
        elif suffix == ".png":
            path.write_bytes(chart.png)
        else:
            path.write_text(page_html(page, exports=False), encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {str(path)!r} ({e.strerror})") from None
    return path
