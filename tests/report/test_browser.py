"""report.html in a real headless Chromium (Debian's `chromium`): a screenshot that is not blank, no
console error, and no request to anything outside the file. Fails, never skips, when Chromium is
missing (`.ci/run` installs it). The checks are first shown to catch a page that does err and
fetch."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:")


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed (Debian: apt-get install chromium; .ci/run does it)"
    return path


@dataclass(frozen=True)
class Visit:
    screenshot: Path
    console: list[str]  # console messages of the page (errors, uncaught exceptions, failed loads)
    external: list[str]  # URLs the page asked for outside the file


def visit(page: Path, tmp: Path) -> Visit:
    profile, shot, netlog = tmp / "profile", tmp / "shot.png", tmp / "net.json"
    p = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            f"--log-net-log={netlog}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    console = [line for line in p.stderr.splitlines() if ":CONSOLE" in line]
    return Visit(shot, console, page_requests(netlog))


def page_requests(netlog: Path) -> list[str]:
    """URLs requested on behalf of a page opened from a file (the browser's own background requests
    have another network isolation key), except file and inline ones."""
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for e in log["events"]:
        params = e.get("params") or {}
        url = str(params.get("url") or "")
        if e["type"] != start or url.startswith(LOCAL_SCHEMES):
            continue
        if "file://" in str(params.get("network_isolation_key")) or "file://" in str(
            params.get("site_for_cookies")
        ):
            out.append(url)
    return out


def not_blank(png: Path) -> bool:
    """More than one colour over the picture, and plenty of non-white pixels."""
    from PIL import Image

    img = Image.open(png).convert("L")
    hist = img.histogram()
    non_white = sum(hist[:250])
    return (
        img.size[0] >= 1000
        and len([h for h in hist if h]) > 10
        and non_white > 0.01 * img.size[0] * img.size[1]
    )


def test_the_checks_catch_a_page_that_errs_and_fetches(tmp_path):
    page = tmp_path / "bad.html"
    # the image is asked of a loopback port nothing listens on: the request is seen, nothing leaves
    # the machine
    page.write_text(
        "<!DOCTYPE html><html><body><p>x</p><img src='http://127.0.0.1:9/pixel.png'>"
        "<script>console.error('boom'); missingFunction();</script></body></html>"
    )
    v = visit(page, tmp_path)
    assert any("boom" in line for line in v.console) and any(
        "missingFunction" in line for line in v.console
    )
    assert v.external == ["http://127.0.0.1:9/pixel.png"]


@pytest.mark.parametrize("which", ["bench", "tune"])
def test_report_renders_without_errors_or_external_loads(which, bench_run, tune_run, tmp_path):
    folder = (bench_run if which == "bench" else tune_run)[0]
    v = visit(folder / "report.html", tmp_path)
    assert v.console == []
    assert v.external == []
    assert v.screenshot.exists() and not_blank(v.screenshot)
