"""`roofline bench --verify`: greedy outputs under the run's load against each prompt alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bench_helpers import plan
from fake_engines import fake_engine

from roofline.bench.driver import Progress, run_bench
from roofline.bench.engines import COMMAND, GreedyOutput, GreedyRequestFailed
from roofline.bench.loadgen import Scenario
from roofline.bench.results import SUMMARY_JSON
from roofline.bench.session import EngineSpec, run_session
from roofline.bench.summary import RunSummary
from roofline.bench.tables import markdown
from roofline.bench.verify import (
    Divergence,
    Verify,
    compare_loaded,
    run_verify,
    verify_line,
    verify_streams,
)
from roofline.bench.workloads import Prompt

# "hi" is shorter than the flipped position: only "hello world" can diverge, at its token 5
PROMPTS = [Prompt("short", "hi"), Prompt("long", "hello world")]
FLIP = 5


def ids(text: str) -> tuple[int, ...]:
    return tuple(ord(c) for c in text)


def test_each_loaded_output_is_compared_with_its_prompts_reference():
    ref = [GreedyOutput("a", "abc", ids("abc")), GreedyOutput("b", "xyz", ids("xyz"))]
    same = compare_loaded(ref, [*ref, *ref], streams=4)
    assert (same.checked, same.identical, same.first_divergence, same.basis) == (
        4,
        4,
        None,
        "token_ids",
    )
    assert same.exact
    # request 3 is prompt b (i mod 2) and differs at its token 1
    bad = GreedyOutput("b", "xYz", ids("xYz"))
    v = compare_loaded(ref, [ref[0], ref[1], ref[0], bad], streams=4)
    assert (v.checked, v.identical, v.exact) == (4, 3, False)
    d = v.first_divergence
    assert (d.prompt, d.position, d.basis, d.request) == ("b", 1, "token_ids", 3)
    assert "89" in d.loaded and "121" in d.reference  # ord("Y"), ord("y")
    text = compare_loaded(
        [GreedyOutput("a", "abc", None)], [GreedyOutput("a", "abd", None)], streams=2
    )
    assert (text.basis, text.first_divergence.position) == ("text", 2)


def test_streams_are_the_most_requests_any_scenario_keeps_in_flight():
    two = [Prompt("a", "x"), Prompt("b", "y")]
    assert verify_streams(plan("u", [Scenario("sequential")], prompts=two)) == 1
    closed = [Scenario("concurrency", concurrency=c) for c in (1, 8, 4)]
    assert verify_streams(plan("u", closed, prompts=two)) == 8
    assert verify_streams(plan("u", [Scenario("rate", rate_per_s=2.0)], prompts=two)) == 2
    capped = Scenario("rate", rate_per_s=2.0, max_concurrency=6)
    assert verify_streams(plan("u", [capped], prompts=two)) == 6


def test_record_round_trips_and_says_what_it_found():
    d = Divergence("long", 5, "token_ids", 1, "1 2 3", "1 2 4")
    for v in (
        Verify(4, 4, None, 4, "token_ids"),
        Verify(2, 1, d, 2, "token_ids"),
        Verify(0, 0, streams=1),
        Verify(0, 0, streams=3, error="no answer"),
    ):
        assert Verify.from_json(json.loads(json.dumps(v.to_json()))) == v
    assert Verify.from_json(None) is None
    assert "4 of 4" in verify_line(Verify(4, 4, None, 4, "token_ids"))
    line = verify_line(Verify(2, 1, d, 2, "token_ids"))
    assert "1 of 2" in line and "NOT EXACT" in line and "'long'" in line and "token 5" in line
    assert "nothing to check" in verify_line(Verify(0, 0, streams=1))
    assert "could not finish (no answer)" in verify_line(Verify(0, 0, streams=3, error="no answer"))


def test_null_server_is_identical_at_any_concurrency(null_url, tmp_path):
    out = tmp_path / "run"
    p = plan(null_url, [Scenario("concurrency", concurrency=3, num_requests=3)], verify=True)
    summary = run_bench(p, out, Progress()).summary
    v = summary.verify
    # one prompt: three loaded requests, all the same text as the prompt alone
    assert (v.checked, v.identical, v.first_divergence, v.streams, v.basis) == (
        3,
        3,
        None,
        3,
        "text",
    )
    on_disk = json.loads((out / SUMMARY_JSON).read_text())
    assert on_disk["verify"]["first_divergence"] is None
    assert RunSummary.from_json(on_disk).verify == v
    assert "3 of 3 greedy outputs at 3 streams identical" in markdown(summary)


def recording_greedy(calls: list, fail_on: str | None = None):
    """A greedy function that answers each prompt with its own text (and notes every call)."""

    async def greedy(url, model, prompts, max_tokens):
        calls.append([q.id for q in prompts])
        if fail_on in calls[-1]:
            raise GreedyRequestFailed(f"no answer for {fail_on}")
        return [GreedyOutput(q.id, q.prompt, ids(q.prompt)) for q in prompts]

    return greedy


def test_one_stream_sends_nothing_and_a_failed_request_is_reported():
    calls: list = []
    one = plan("u", [Scenario("sequential")], prompts=PROMPTS, verify=True)
    assert run_verify(one, "m", recording_greedy(calls)) == Verify(0, 0, streams=1)
    assert calls == []
    three = plan("u", [Scenario("concurrency", concurrency=3)], prompts=PROMPTS, verify=True)
    v = run_verify(three, "m", recording_greedy(calls))
    assert (v.checked, v.identical, v.basis) == (3, 3, "token_ids")
    # each prompt alone, then three requests: the prompts in turn
    assert sorted(map(tuple, calls)) == sorted([("short",), ("long",)] * 2 + [("short",)])
    failed = run_verify(three, "m", recording_greedy([], fail_on="long"))
    assert (failed.checked, failed.error, failed.exact) == (0, "no answer for long", False)
    assert "could not finish" in verify_line(failed)


def test_a_given_reference_is_not_asked_for_again():
    """A caller that has each prompt's output alone (tune's greedy pass) sends only the loaded
    requests, and they are held against that reference."""
    calls: list = []
    three = plan("u", [Scenario("concurrency", concurrency=3)], prompts=PROMPTS, verify=True)
    alone = [GreedyOutput(q.id, q.prompt, ids(q.prompt)) for q in PROMPTS]
    v = run_verify(three, "m", recording_greedy(calls), reference=alone)
    assert sorted(map(tuple, calls)) == sorted([("short",), ("long",), ("short",)])
    assert (v.checked, v.identical) == (3, 3)
    other = [GreedyOutput(q.id, q.prompt, [*ids(q.prompt), 7]) for q in PROMPTS]
    differs = run_verify(three, "m", recording_greedy([]), reference=other)
    assert differs.identical == 0 and differs.first_divergence is not None


def test_without_verify_the_summary_has_no_verify_key(null_url, tmp_path):
    out = tmp_path / "run"
    summary = run_bench(plan(null_url, [Scenario("sequential", num_requests=1)]), out, Progress())
    on_disk = json.loads((out / SUMMARY_JSON).read_text())
    assert "verify" not in on_disk and summary.summary.verify is None
    assert "verify" not in summary.summary.to_json()
    # an old summary.json (no "verify") loads, and round-trips unchanged
    old = RunSummary.from_json(on_disk)
    assert old.verify is None and RunSummary.from_json(old.to_json()) == old


def test_token_flipped_under_load_is_found_with_its_prompt_and_position(tmp_path):
    template, _ = fake_engine(tmp_path, "batched", "--flip", str(FLIP))
    engine = EngineSpec(COMMAND, template=template, ready_timeout_s=20)
    p = plan(
        "",
        [Scenario("concurrency", concurrency=2, num_requests=2)],
        prompts=PROMPTS,
        verify=True,
        warmup=0,
    )
    v = run_session(p, tmp_path / "run", Progress(), engine).summary.verify
    assert (v.checked, v.identical, v.streams, v.basis, v.exact) == (2, 1, 2, "token_ids", False)
    d = v.first_divergence
    assert (d.prompt, d.position, d.request) == ("long", FLIP, 1)
    assert d.reference.split()[-4] == str(ord(" ")) and d.loaded.split()[-4] == str(ord(" ") + 1)


def test_cli_reports_the_divergence_and_exits_0(tmp_path):
    template, _ = fake_engine(tmp_path, "batched", "--flip", str(FLIP))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": q.id, "prompt": q.prompt}) + "\n" for q in PROMPTS)
    )
    out = tmp_path / "run"
    args = ["--engine", "command", "--engine-cmd", template, "--prompts", str(prompts)]
    args += ["--concurrency", "2", "--reps", "1", "--warmup", "0", "--verify", "--no-report"]
    p = subprocess.run(
        [sys.executable, "-m", "roofline", "bench", *args, "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    printed = json.loads(p.stdout)["verify"]
    assert (printed["checked"], printed["identical"]) == (2, 1)
    assert printed["first_divergence"]["prompt"] == "long"
    assert printed["first_divergence"]["position"] == FLIP
    assert "NOT EXACT UNDER LOAD" in p.stderr and "'long'" in p.stderr
    assert json.loads((out / SUMMARY_JSON).read_text())["verify"] == printed
    assert "NOT EXACT UNDER LOAD" in (out / "summary.md").read_text()


@pytest.mark.parametrize("flag", ["--verify"])
def test_help_names_the_flag(flag):
    from typer.testing import CliRunner

    from roofline.cli.main import app

    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and flag in result.output
