"""Output a person can read: no number ever cut, at any width, piped or not; help without an error
line; durations in the unit their size calls for; no empty lines from progress in a pipe."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from rich.console import Console
from typer.testing import CliRunner

from roofline.bounds.humanize import fmt_params, fmt_seconds
from roofline.cli.layout import (
    BORDER_AND_PADDING_PER_COLUMN,
    FitTable,
    column_widths,
    wrap_words,
)
from roofline.cli.main import app
from roofline.cli.progress import LineProgress, live_progress

WIDTHS = (40, 60, 80, 120)
WIDE = 1000  # wide enough that nothing wraps: the reference rendering
CUT = ("…", "...")


def _digit_words(text: str) -> Counter:
    """Every whitespace-separated word that holds a digit, with its count: a number cut at the edge
    of a cell ('344…', '3.3' + '5' on the next line) turns up as a different word, so the counts
    differ."""
    return Counter(w for w in text.split() if any(ch.isdigit() for ch in w))


def _render(renderable, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(renderable)
    return buf.getvalue()


def _assert_whole(narrow: str, wide: str, width: int) -> None:
    missing = _digit_words(wide) - _digit_words(narrow)
    assert not missing, (
        f"at {width} columns these lost their whole form: {sorted(missing)}\n{narrow}"
    )
    assert not any(c in narrow for c in CUT if c not in wide), narrow


ROWS = [
    [
        "deepseek-ai/DeepSeek-V3",
        "deepseek_v3",
        "671,026,419,712",
        "36.63 B",
        "2026-11-29",
        "a long note that may wrap",
        "23.4",
    ],
    [
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "llama",
        "134,515,008",
        "134.5 M",
        "2026-11-29",
        "",
        "1,204.5",
    ],
    [
        "guide/1t-moe",
        "roofline_shape",
        "1,000,000,000,000",
        "32.00 B",
        "2026-11-29",
        "1,609/user, 12,874 total",
        "-",
    ],
]
# headers wrap, whole words
HEADERS = ["id", "architecture", "params", "active", "read", "notes", "TTFT p50 ms"]


@pytest.mark.parametrize("width", WIDTHS)
def test_table_never_cuts_a_number(width: int) -> None:
    table = FitTable("models", HEADERS, ROWS)
    narrow, wide = _render(table, width), _render(table, WIDE)
    _assert_whole(narrow, wide, width)
    for line in narrow.splitlines():
        assert len(line) <= width, line
    # every figure of the data, as it was given
    for row in ROWS:
        for cell in row:
            for word in cell.split():
                if any(ch.isdigit() for ch in word):
                    assert word in narrow.split(), (word, narrow)


def test_table_layouts_by_width() -> None:
    table = FitTable("models", HEADERS, ROWS)
    assert "┃" not in _render(table, 40)  # one block per row: too narrow for the columns' floors
    assert "models\ndeepseek-ai/DeepSeek-V3\n  architecture: deepseek_v3" in _render(table, 60)
    assert "  params: 671,026,419,712" in _render(table, 40)
    assert "┃" in _render(table, 140)  # a table, text wrapped, numbers whole
    assert "┃" in _render(table, WIDE) and all(
        len(line) < 200 for line in _render(table, WIDE).splitlines()
    )


def test_column_widths() -> None:
    headers, rows = (
        ["name", "bandwidth", "what"],
        [["h100", "3.35 TB/s", "NVIDIA H100 SXM (80 GB)"]],
    )
    overhead = BORDER_AND_PADDING_PER_COLUMN * 3 + 1
    assert column_widths(headers, rows, 200) == [4, 9, 23]  # natural widths when they fit
    # text wraps, numbers do not
    assert column_widths(headers, rows, overhead + 4 + 9 + 10) == [4, 9, 10]
    # down to its longest word, 'NVIDIA'
    assert column_widths(headers, rows, overhead + 4 + 9 + 6) == [4, 9, 6]
    # no text column below its longest word
    assert column_widths(headers, rows, overhead + 4 + 9 + 5) is None
    # nor a number column below its widest cell: '3.35 TB/s' is never wrapped into '3.35' and 'TB/s'
    assert (
        column_widths(
            headers[:2], [r[:2] for r in rows], BORDER_AND_PADDING_PER_COLUMN * 2 + 1 + 4 + 8
        )
        is None
    )


def test_wrap_words_keeps_words_whole() -> None:
    text = (
        "speculative row: c = 0.05 (--draft-cost) "
        "https://www.example.com/a/very/long/path/1234567 end"
    )
    lines = wrap_words(text, 20, indent="  ", hanging="    ")
    assert " ".join(" ".join(lines).split()) == text
    # longer than a line: alone, whole
    assert "    https://www.example.com/a/very/long/path/1234567" in lines
    assert all(len(line) <= 20 for line in lines if "https" not in line)


def _cli(args: list[str], width: int) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


CLI_CASES = {
    "models": ["models", "list"],
    "hardware": ["hardware", "list"],
    "ceiling": [
        "ceiling",
        "openai/gpt-oss-120b",
        "--hardware",
        "b200",
        "--gpus",
        "8",
        "--context",
        "8192",
        "--batch",
        "1,8,32",
        "--prompt-tokens",
        "100000",
        "--alpha",
        "0.8",
        "--price-per-hour",
        "20",
        "--tp",
        "8",
        "--allreduce-us",
        "5",
    ],
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_tables_never_cut_a_number(name: str) -> None:
    wide = _cli(CLI_CASES[name], WIDE)
    for width in WIDTHS:
        _assert_whole(_cli(CLI_CASES[name], width), wide, width)


def test_models_list_numbers_are_the_catalogue_s() -> None:
    entries = json.loads(_cli(["models", "list", "--json"], 80))
    for width in WIDTHS:
        words = _cli(["models", "list"], width).split()
        for e in entries:
            assert e["id"] in words and e["retrieved"] in words
            for n in fmt_params(e["params_total"]).split():
                assert n in words, (e["id"], n)


def test_hardware_list_shows_source_and_date_of_each_entry() -> None:
    entries = json.loads(_cli(["hardware", "list", "--json"], 80))
    out = _cli(["hardware", "list"], 120)
    flat = " ".join(out.split())
    for h in entries:
        assert h["source"] and h["read"]
        assert " ".join(f"{h['key']}: {h['source']}".split()) in flat, h["key"]
        assert h["read"] in out


def test_ceiling_explains_the_speculative_row_and_humanizes_the_prefill() -> None:
    out = " ".join(_cli(CLI_CASES["ceiling"], 120).split())
    assert "c=0.05" in out and "c = what one draft pass costs" in out and "--draft-cost" in out
    # a dense 1T model's 100,000-token prefill takes minutes: shown in minutes, not as '221,867 ms'
    args = ["ceiling", "guide-1t-dense", "--hardware", "b200", "--prompt-tokens", "100000"]
    ttft_s = json.loads(_cli([*args, "--json"], 120))["prefill"]["ttft_seconds"]
    assert 60 < ttft_s < 3600
    assert re.search(rf">= {re.escape(fmt_seconds(ttft_s))}", _cli(args, 120)) and fmt_seconds(
        ttft_s
    ).endswith(" min")


@pytest.mark.parametrize(
    "seconds, text",
    [
        (1e-5, "10.0 µs"),
        (0.000622, "0.622 ms"),
        (0.0828, "82.8 ms"),
        (2.587, "2.59 s"),
        (42.0, "42.0 s"),
        (184.124, "3.1 min"),
        (7200, "2.0 h"),
        (3.6e6, "1,000.0 h"),
    ],
)
def test_fmt_seconds(seconds: float, text: str) -> None:
    assert fmt_seconds(seconds) == text


def test_no_arguments_prints_help_without_an_error_line() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "roofline"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert p.returncode in (0, 2)
    assert "Usage" in p.stdout + p.stderr and "ceiling" in p.stdout + p.stderr
    assert "error" not in p.stderr.lower(), p.stderr


def test_line_progress_writes_one_line_per_finished_task_and_no_empty_ones() -> None:
    buf = io.StringIO()
    p = live_progress(console=Console(file=buf, width=80, force_terminal=False))
    assert isinstance(p, LineProgress)  # not a terminal
    p.start()
    a = p.add_task("concurrency=1", total=3, failed=0)
    for _ in range(3):
        p.update(a, advance=1, failed=1)
    # a duration: no total, a line when the next one starts
    b = p.add_task("rate=2 (60s)", total=None, failed=0)
    p.advance(b)
    d = p.add_task("rate=4 (60s)", total=None, failed=0)  # or at the end
    p.update(d, advance=2, failed=1)
    p.stop()
    p = live_progress(console=Console(file=buf, width=80, force_terminal=False))
    c = p.add_task("  requests", total=2, best="")
    p.update(c, completed=2, best="best: 41 tok/s (trial 1)")
    p.update(c, completed=0)  # the next trial's requests
    p.update(c, completed=2)
    p.console.print("a note")
    p.stop()
    lines = buf.getvalue().splitlines()
    assert all(line.strip() for line in lines), lines
    assert lines[0].startswith("concurrency=1: 3/3, failed 1 (")
    assert lines[1].startswith("rate=2 (60s): 1, failed 0 (")
    assert lines[2].startswith("rate=4 (60s): 2, failed 1 (")
    assert lines[3].startswith("  requests: 2/2, best: 41 tok/s (trial 1) (")
    assert lines[4].startswith("  requests: 2/2") and lines[5] == "a note" and len(lines) == 6


def test_terminal_gets_the_live_bar_and_a_dumb_one_lines(monkeypatch) -> None:
    from rich.progress import Progress

    # rich reads TERM when a console is made: the test's own, whatever the host's (CI may set dumb)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert isinstance(
        live_progress(console=Console(file=io.StringIO(), force_terminal=True)), Progress
    )
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(
        live_progress(console=Console(file=io.StringIO(), force_terminal=True)), LineProgress
    )


def test_hardware_list_shows_this_machine_once_probed(monkeypatch, tmp_path) -> None:
    from roofline.hardware import profile as profile_mod

    monkeypatch.setenv(profile_mod.CACHE_DIR_ENV, str(tmp_path))  # no profile saved here
    assert "once `roofline probe` has measured it" in " ".join(
        _cli(["hardware", "list"], 200).split()
    )
    profile = {
        "measured_at": "2026-11-29T10:00:00Z",
        "cpu": "Test CPU",
        "threads": 2,
        "memory_bytes": 25e9,
        "bandwidth_bytes_per_s": {
            "read": {"median": 3.1e10, "min": 2.9e10, "max": 3.2e10, "runs": [1, 2, 3]}
        },
        "flops": {"matmul_fp32": {"median": 1.85e11}, "matmul_bf16": {"median": 4.18e11}},
    }
    monkeypatch.setattr(profile_mod, "load_local_profile", lambda: profile)
    for width in WIDTHS:
        words = _cli(["hardware", "list"], width).split()
        # its date and bandwidth
        assert "local" in words and "2026-11-29" in words and "31.00" in words, width


def test_bench_tables_and_progress_through_a_pipe(tmp_path) -> None:
    """A real run against the null server: its tables never lose a number at any width, and its
    progress on a pipe is one line per scenario with no empty lines."""
    from roofline.bench.summary import RunSummary
    from roofline.bench.tables import tables

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "roofline.bench.nullserver",
            "--port",
            "0",
            "--ttft",
            "5ms",
            "--gap",
            "1ms",
            "--tokens",
            "8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split()[-1]
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "roofline",
                "bench",
                url,
                "--reps",
                "1",
                "--warmup",
                "0",
                "--concurrency",
                "1,2",
                "--model",
                "openai/gpt-oss-120b",
                "--hardware",
                "b200",
                "--slo",
                "ttft=450ms,tpot=40ms",
                "--no-report",
                "--out",
                str(tmp_path / "run"),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "60"},
        )
    finally:
        proc.terminate()
        proc.wait(10)
    assert p.returncode == 0, p.stderr
    err_lines = p.stderr.splitlines()
    assert err_lines and all(line.strip() for line in err_lines), p.stderr  # no empty lines
    # one line per scenario
    assert sum(line.startswith("concurrency=") for line in err_lines) == 2, p.stderr
    assert not any(c in p.stdout for c in CUT), p.stdout
    summary = RunSummary.from_json(json.loads((tmp_path / "run" / "summary.json").read_text()))
    for title, headers, rows, _notes in tables(summary):
        wide = _render(FitTable(title, headers, rows), WIDE)
        for width in WIDTHS:
            _assert_whole(_render(FitTable(title, headers, rows), width), wide, width)


def test_line_progress_reset_starts_a_tasks_clock_again(monkeypatch) -> None:
    """`roofline tune` resets its trial counter after the probe and the kernels' preparation: the
    time on the last line is the study's."""
    import roofline.cli.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    buf = io.StringIO()
    p = LineProgress(Console(file=buf, width=80, force_terminal=False))
    t = p.add_task("trials", total=1)
    now[0] = 190.0  # 90 s of preparation
    p.reset(t)
    now[0] = 200.0
    p.update(t, advance=1)
    p.stop()
    assert buf.getvalue().startswith("trials: 1/1 (10.0 s)"), buf.getvalue()


def test_a_trials_request_counter_times_its_own_requests(monkeypatch, capsys) -> None:
    """The first trial's request line once said 105.5 s for 5 s of requests: the counter's clock
    ran from the display's start, through the probe and the kernels' preparation."""
    import roofline.cli.progress as progress
    from roofline.cli.tune_output import RichDisplay

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    display = RichDisplay(3, "tok/s")
    now[0] = 200.0  # 100 s of probe and preparation
    bench = display.bench_progress()
    bench.start("sequential", 2, None)
    now[0] = 205.0
    bench.advance(True)
    bench.advance(True)
    display.stop()
    err = capsys.readouterr().err
    assert "requests (sequential): 2/2 (5.0 s)" in err, err
