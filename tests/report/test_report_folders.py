"""Damaged and old run folders still give a report of what is there, with a visible warning; two
runs side by side; `roofline ceiling --plot`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from roofline.bench.summary import RunSummary
from roofline.errors import UserError
from roofline.report.build import write_report
from roofline.report.run_folders import load_run


def roofline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roofline", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def copy_run(src, tmp_path, name="run"):
    dst = tmp_path / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report", "report.html", "report.md"))
    return dst


def test_interrupted_run_without_summary_and_a_cut_last_line(bench_run, tmp_path):
    folder = copy_run(bench_run[0], tmp_path)
    (folder / "summary.json").unlink()
    lines = (folder / "requests.jsonl").read_text().splitlines()
    # killed mid-write
    (folder / "requests.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])
    p = roofline("report", str(folder))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(folder / "report.html")
    assert (
        "warning: summary.json is missing" in p.stderr
        and "1 line(s) of requests.jsonl could not be read" in p.stderr
    )
    html = (folder / "report.html").read_text()
    assert "Warning: this report is incomplete" in html and "could not be read" in html
    written = write_report([folder])
    ok = [json.loads(x) for x in lines[:-1]]
    ok = [ln for ln in ok if ln["ok"] and ln["phase"] == "measured"]
    # every request that was written whole
    assert len(written.page.chart("prompt_spread").data) == len(ok)
    # summarized again without the ceiling, and it says so
    assert written.page.chart("roofline") is None
    assert "no ceiling recorded" in html


def test_missing_provenance_and_requests(bench_run, tmp_path):
    folder = copy_run(bench_run[0], tmp_path)
    (folder / "provenance.json").unlink()
    (folder / "requests.jsonl").unlink()
    written = write_report([folder])
    assert any("provenance.json is missing" in w for w in written.warnings)
    assert any("requests.jsonl is missing" in w for w in written.warnings)
    assert (
        written.page.chart("roofline") is not None and written.page.chart("prompt_spread") is None
    )


def test_an_old_summary_still_loads_and_round_trips(bench_run, tmp_path):
    folder = copy_run(bench_run[0], tmp_path)
    data = json.loads((folder / "summary.json").read_text())
    for s in data["scenarios"]:  # as written before passes, CPU time and client figures existed
        for key in ("passes", "client_cpu_s", "client_cpu_us_per_token"):
            s.pop(key, None)
        s["vs_ceiling"]["bandwidth_before_bytes_per_s"] = (
            9e10  # a figure this version does not know
        )
    (folder / "summary.json").write_text(json.dumps(data))
    run = load_run(folder)
    assert run.warnings == ()
    s = run.summary.scenarios[0]
    assert s.passes is None and s.vs_ceiling.extra == {"bandwidth_before_bytes_per_s": 9e10}
    assert RunSummary.from_json(run.summary.to_json()) == run.summary
    assert write_report([folder]).page.chart("time_per_token") is not None


def test_a_cut_request_line_keeps_the_summarys_verify_result(bench_run, tmp_path):
    # the summary's fields past the count of unreadable lines once moved one place along
    folder = copy_run(bench_run[0], tmp_path)
    data = json.loads((folder / "summary.json").read_text())
    data["verify"] = {"checked": 3, "identical": 3, "streams": 2, "basis": "token_ids"}
    (folder / "summary.json").write_text(json.dumps(data))
    with (folder / "requests.jsonl").open("a") as f:
        f.write('{"cut": ')
    run = load_run(folder)
    assert run.summary.unreadable_lines == 1
    assert run.summary.verify is not None and run.summary.verify.checked == 3
    assert run.summary.verify.streams == 2


def test_tune_folder_with_only_trials(tune_run, tmp_path):
    folder = copy_run(tune_run[0], tmp_path)
    (folder / "tune.json").unlink()
    written = write_report([folder])
    assert any("tune.json is missing" in w for w in written.warnings)
    assert (
        len(written.page.chart("time_per_token").data) == 3 and written.page.chart("ladder") is None
    )


def test_trials_only_folder_keeps_each_objective_direction_and_unit(tmp_path):
    """Rebuilt from trials.jsonl alone, a cost run still minimizes dollars per million tokens: the
    direction, unit and label come from the objectives registry, not a speed run's."""
    from roofline.tune.objectives import OBJECTIVES
    from roofline.tune.slots import Slot
    from roofline.tune.trial_result import TrialResult

    for name, objective in OBJECTIVES.items():
        folder = tmp_path / name
        folder.mkdir()
        trial = TrialResult(0, Slot("baseline"), {}, "ok", objective=name, value=12.5)
        (folder / "trials.jsonl").write_text(json.dumps(trial.to_json()) + "\n")
        info = load_run(folder).tune.objective
        assert (info.name, info.direction, info.unit, info.label) == (
            name,
            objective.direction,
            objective.unit,
            objective.label,
        )
    assert load_run(tmp_path / "cost").tune.objective.direction == "minimize"


def test_not_a_run_folder(tmp_path):
    with pytest.raises(UserError, match="holds no run"):
        load_run(tmp_path)
    p = roofline("report", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "is not a folder" in p.stderr


def test_two_runs_side_by_side(bench_run, slower_bench_run, tmp_path):
    a, b = bench_run[0], slower_bench_run
    assert not (b / "report.html").exists()  # --no-report
    p = roofline("report", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert p.returncode == 0, p.stderr
    written = write_report([a, b], tmp_path / "cmp")
    (table,) = [t for s in written.page.sections if s.title == "comparison" for t in s.tables]
    assert table.headers[-2:] == ("B - A", "B / A") and table.notes == ()  # same workload
    sa = json.loads((a / "summary.json").read_text())["scenarios"][0]
    sb = json.loads((b / "summary.json").read_text())["scenarios"][0]
    row = next(r for r in table.rows if r[0] == "concurrency=1: Output Speed p50 (tok/s)")
    va, vb = (
        sa["metrics"]["output_speed_tok_per_s"]["p50"],
        sb["metrics"]["output_speed_tok_per_s"]["p50"],
    )
    assert row[1:] == (f"{va:,.2f}", f"{vb:,.2f}", f"{vb - va:,.2f}", f"{vb / va:.3f}")
    assert vb < va  # twice the gap between tokens
    measured = written.page.chart("compare_roofline").data.of_kind("measured")
    assert sorted(p.label for p in measured) == [
        "A: concurrency=1",
        "A: concurrency=2",
        "B: concurrency=1",
        "B: concurrency=2",
    ]
    assert (tmp_path / "cmp" / "report.html").exists() and (
        tmp_path / "cmp" / "report" / "a_roofline.svg"
    ).exists()
    p = roofline("report", str(a), str(b))  # no --out: beside the first run
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(a.parent / f"compare-{a.name}-vs-{b.name}" / "report.html")


def test_ceiling_plot(tmp_path):
    from roofline.bounds.analysis import CeilingRequest, analyse
    from roofline.report.build import ceiling_page

    out = tmp_path / "roofline.html"
    p = roofline(
        "ceiling", "llama-3.1-8b", "--hardware", "h100", "--batch", "1,8,512", "--plot", str(out)
    )
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    assert "decode b=512" in html and "prefill 1,024 tok" in html and "<svg" in html
    _, a = analyse(CeilingRequest(model="llama-3.1-8b", hardware="h100", batches=(1, 8, 512)))
    data = ceiling_page(a).chart("roofline").data
    f = a.model.flops_per_token
    decode = {p.label: p for p in data.of_kind("decode")}
    for b in a.batches:
        p = decode[f"decode b={b.batch}"]
        assert p.intensity_flop_per_byte == pytest.approx(b.batch * f / b.bytes_per_step)
        assert p.flop_per_s == pytest.approx(b.batch * f / b.seconds_per_step)
        assert p.flop_per_s <= data.attainable_flop_per_s(p.intensity_flop_per_byte) * (1 + 1e-9)
    assert data.peak_flop_per_s == a.peak_flops and data.ridge_flop_per_byte == pytest.approx(
        a.peak_flops / a.bandwidth_bytes_per_s
    )
    assert (
        decode["decode b=1"].intensity_flop_per_byte
        < data.ridge_flop_per_byte
        < data.of_kind("prefill")[0].intensity_flop_per_byte
    )
    png = tmp_path / "r.png"
    assert (
        roofline("ceiling", "llama-3.1-8b", "--hardware", "h100", "--plot", str(png)).returncode
        == 0
    )
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = roofline(
        "ceiling", "llama-3.1-8b", "--hardware", "h100", "--plot", str(tmp_path / "r.pdf")
    )
    assert bad.returncode == 2 and "--plot writes" in bad.stderr


def test_ceiling_without_plot_stays_light():
    code = (
        "import sys\nfrom roofline.cli.main import run\n"
        "sys.argv = ['roofline', 'ceiling', 'llama-3.1-8b', '--hardware', 'h100', '--json']\n"
        "import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        run()\n    except SystemExit as e:\n        assert not e.code\n"
        "print(','.join(m for m in ('matplotlib', 'numpy', 'torch') if m in sys.modules))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ""
