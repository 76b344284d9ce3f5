"""Honest repeats: with a server that remembers across requests, first-time and repeated prompts
are reported apart (split), or only first-time prompts are counted (fresh)."""

from __future__ import annotations

import asyncio
import json

import pytest
from bench_helpers import measured, nullserver, plan

from roofline.bench.driver import Progress, discover, run_bench
from roofline.bench.loadgen import Scenario
from roofline.bench.options import BenchOptions, plan_from_options
from roofline.bench.records import RequestRecord
from roofline.bench.repeats import WARMUP_PROMPT, effective_policy, repeated_ids, same_as
from roofline.bench.results import read_requests
from roofline.bench.summary import RunSummary
from roofline.bench.tables import tables
from roofline.bench.workloads import Prompt
from roofline.errors import UserError
from roofline.response_stats import ServerStats

PROMPTS = [Prompt("a", "hello"), Prompt("b", "world"), Prompt("c", "hello")]  # c repeats a


def _run(url: str, tmp_path, memory: bool | None, **kw):
    p = plan(url, [Scenario("sequential")], prompts=PROMPTS, reps=2, max_tokens=8, **kw)
    info = asyncio.run(discover(p))
    if memory is not None:  # what a server with a shared draft trie says in /v1/models
        info["roofline"] = ServerStats(cross_request_memory=memory).to_json()
    return run_bench(p, tmp_path / "run", Progress(), info=info)


def test_a_remembering_server_reports_first_time_and_repeated_prompts_apart(tmp_path):
    with nullserver("--ttft", "1ms", "--gap", "1ms") as url:
        out = _run(url, tmp_path, memory=True)
    s = out.summary.scenarios[0]
    lines, _ = read_requests(out.run_dir)
    warm = [ln for ln in lines if ln.phase == "warmup"]
    assert warm and all(ln.prompt == WARMUP_PROMPT.id for ln in warm)  # teaches nothing
    # rep 0: a and b first-time, c is a's text again; rep 1: all three repeated
    assert s.repeats is not None and s.repeats.policy == "split" and s.repeats.server_memory
    assert (s.repeats.first.ok, s.repeats.repeated.ok) == (2, 4)
    assert s.requests.ok == 6  # split: every request still counts
    assert s.repeats.first.output_speed_median_tok_per_s is not None
    written = json.loads((out.run_dir / "summary.json").read_text())
    assert written["scenarios"][0]["repeats"]["first"]["ok"] == 2
    again = RunSummary.from_json(written)
    assert again.scenarios[0].repeats == s.repeats
    assert again.to_json()["scenarios"][0]["repeats"] == written["scenarios"][0]["repeats"]
    table = next(t for t in tables(out.summary) if t[0] == "first-time and repeated prompts")
    assert [r[1] for r in table[2]] == ["first-time", "repeated"]
    assert any("remembers across requests" in n for n in table[3])


def test_fresh_counts_first_time_prompts_only(tmp_path):
    with nullserver("--ttft", "1ms", "--gap", "1ms") as url:
        out = _run(url, tmp_path, memory=True, repeat_policy="fresh")
    s = out.summary.scenarios[0]
    lines, _ = read_requests(out.run_dir)
    assert len(measured(lines)) == 6  # sent and recorded ...
    assert s.requests.measured == 2 and s.requests.ok == 2  # ... but only first-time ones count
    assert s.repeats.repeated.ok == 4 and s.repeats.counted == "first-time prompts only"


@pytest.mark.parametrize("memory, policy", [(False, "auto"), (None, "auto"), (True, "repeat")])
def test_no_groups_without_memory_or_when_repeats_count_alike(tmp_path, memory, policy):
    with nullserver("--ttft", "1ms", "--gap", "1ms") as url:
        out = _run(url, tmp_path, memory=memory, repeat_policy=policy)
    s = out.summary.scenarios[0]
    assert s.repeats is None and s.requests.ok == 6
    assert "repeats" not in json.loads((out.run_dir / "summary.json").read_text())["scenarios"][0]
    lines, _ = read_requests(out.run_dir)
    assert all(ln.prompt == "a" for ln in lines if ln.phase == "warmup")


def test_repeated_by_send_time_across_ids_and_phases():
    identity = same_as(PROMPTS)
    assert identity == {WARMUP_PROMPT.id: WARMUP_PROMPT.id, "a": "a", "b": "b", "c": "a"}
    lines = [
        {"id": 0, "prompt": "b", "intended_ns": 50, "sent_ns": 1},
        {"id": 1, "prompt": "c", "intended_ns": 0, "sent_ns": 1},
        {"id": 2, "prompt": "a", "intended_ns": 10, "sent_ns": 1},  # c sent it earlier
        {"id": 3, "prompt": "b", "intended_ns": 20, "sent_ns": None},  # never sent: taught nothing
        {"id": 4, "prompt": "b", "intended_ns": 60, "sent_ns": 1},
    ]
    assert repeated_ids([RequestRecord.from_json(ln) for ln in lines], identity) == {2, 4}


def test_policy_choice_and_errors():
    assert effective_policy("auto", True) == "split"
    assert effective_policy("auto", None) == "repeat"
    assert effective_policy("fresh", False) == "fresh"
    with pytest.raises(UserError, match="--repeat-policy must be one of auto, fresh, split"):
        plan_from_options(BenchOptions(url="http://127.0.0.1:9", repeat_policy="once"))
    assert plan_from_options(BenchOptions(url="x:1", repeat_policy="fresh")).repeat_policy == (
        "fresh"
    )


def test_server_stats_carry_cross_request_memory():
    assert ServerStats.from_json({"cross_request_memory": True}).cross_request_memory is True
    assert ServerStats.from_json({"cross_request_memory": "yes"}).cross_request_memory is None
    assert "cross_request_memory" not in ServerStats().to_json()


def test_the_servers_draft_positions_are_shown_as_the_run_left_them():
    from roofline.bench.positions import AFTER_KEY
    from roofline.response_stats import PositionAcceptance

    rows = (PositionAcceptance("trie", "5-8", 1, 10, 9), PositionAcceptance("trie", "5-8", 2, 9, 3))
    after = ServerStats(position_acceptance=rows).to_json()
    summary = RunSummary(provenance={"server": {"roofline": {}, AFTER_KEY: after}})
    table = next(t for t in tables(summary) if t[0] == "draft positions accepted (server)")
    assert table[2] == [["trie", "5-8", "1", "10", "90%"], ["trie", "5-8", "2", "9", "33%"]]
    assert not any(t[0].startswith("draft positions") for t in tables(RunSummary(provenance={})))


def test_a_mixture_of_experts_servers_reads_are_shown_for_the_run_alone():
    """The server's counts before (40 passes, 300 reads) and after (60, 420): the run's 20 passes
    read 120 experts, 6 a pass where one row reads 4 (2 layers x top-2), so each pass read 2
    experts of 1.5 MB more than bytes_per_token's 100 MB."""
    from roofline.bench.experts_read import experts_read
    from roofline.bench.positions import AFTER_KEY

    def stats(passes, reads):
        return ServerStats(
            bytes_per_token=100e6,
            decode_passes=passes,
            expert_reads=reads,
            expert_read_bytes=1.5e6,
            one_row_expert_reads=4,
        )

    before, after = stats(40, 300), stats(60, 420)
    assert ServerStats.from_json(after.to_json()) == after
    x = experts_read(before, after)
    assert (x.passes, x.reads, x.bytes_per_pass) == (20, 120, 103e6)
    provenance = {"server": {"roofline": before.to_json(), AFTER_KEY: after.to_json()}}
    table = next(t for t in tables(RunSummary(provenance=provenance)) if t[0].startswith("experts"))
    assert table[2] == [["20", "6.0 (one row: 4)", "103.0 MB", "100.0 MB"]]
    # a dense model's server reports passes but no experts: no table
    dense = {"server": {"roofline": ServerStats(decode_passes=1).to_json(), AFTER_KEY: {}}}
    assert not any(t[0].startswith("experts") for t in tables(RunSummary(provenance=dense)))
