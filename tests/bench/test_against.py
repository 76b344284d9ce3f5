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
        assert above_ceiling(pct, bandwidth_bytes_per_s=30e9, bytes_per_token=538e6, bandwidth_from="measured",
                             bytes_from="engine") is None


def test_slightly_above_a_measured_ceiling_the_probe_is_suspect():
    e = above_ceiling(108.0, bandwidth_bytes_per_s=30e9, bytes_per_token=538e6, bandwidth_from="measured",
                      bytes_from="engine")
    assert e["suspect"] == SUSPECT_BANDWIDTH
    assert e["note"].startswith("above 100%: ") and "32.4 GB/s streamed" in e["note"] and "8% more" in e["note"]
    assert "probe's measured bandwidth is the suspect" in e["note"]


def test_far_above_a_measured_ceiling_the_bytes_per_token_are_suspect():
    e = above_ceiling(130.6, bandwidth_bytes_per_s=34.9e9, bytes_per_token=538e6, bandwidth_from="measured",
                      bytes_from="engine")
    assert e["suspect"] == SUSPECT_BYTES
    assert "538.0 MB per token reported by the engine is the suspect" in e["note"]
    assert "no probe kernel came within 15%" in e["note"] and "31% more" in e["note"]


def test_above_a_listed_figure_the_bytes_counted_from_the_config_are_suspect():
    e = above_ceiling(101.0, bandwidth_bytes_per_s=8e12, bytes_per_token=4.97e9, bandwidth_from="listed",
                      bytes_from="config")
    assert e["suspect"] == SUSPECT_BYTES and "counted from the model's config" in e["note"]
    assert "the bandwidth is a listed figure" in e["note"]


def test_above_a_bandwidth_given_by_hand_that_bandwidth_is_suspect():
    e = above_ceiling(150.0, bandwidth_bytes_per_s=1e9, bytes_per_token=4e6, bandwidth_from="given", bytes_from="engine")
    assert e["suspect"] == SUSPECT_BANDWIDTH and "given on the command line" in e["note"]


def test_sources_are_read_off_the_ceiling():
    assert bandwidth_source("local") == "measured"
    assert bandwidth_source("30GB/s") == bandwidth_source(" 1.5e9 B/s ") == "given"
    assert bandwidth_source("b200") == "listed"
    server, _ = resolve_ceiling(model=None, hardware="30GB/s", served="m", server_info=SERVER)
    assert bytes_source(server) == "engine"
    assert bytes_source(Ceiling(1e9, 1e12, hardware="b200", assumptions=("bandwidth 1 TB/s",))) == "config"


def test_percent_cell_never_shows_more_than_100_without_its_suspect():
    assert percent_text(None) == "-" and percent_text({}) == "-"
    assert percent_text({"percent_of_ceiling": 87.25}) == "87.2%"
    assert percent_text({"percent_of_ceiling": 130.6, "suspect": SUSPECT_BYTES}) == "130.6% (bytes/token suspect, see note)"
    assert percent_text({"percent_of_ceiling": 104.0, "suspect": SUSPECT_BANDWIDTH}).startswith("104.0% (bandwidth suspect")

    class Typed:  # bench.summary.VsCeiling has the same attributes
        percent_of_ceiling, suspect = 120.0, SUSPECT_BYTES

    assert percent_text(Typed()) == "120.0% (bytes/token suspect, see note)"


def test_a_window_makes_the_hardware_this_machine_held_against_the_higher_figure():
    window = BandwidthWindow(30e9, 33e9, "simd-sum", "gemv")
    c, note = resolve_ceiling(model=None, hardware=None, served="m", server_info=SERVER, window=window)
    assert note is None and c.hardware == "local" and c.bandwidth_bytes_per_s == 33e9
    assert c.tok_per_s == pytest.approx(33e9 / 538e6)
    assert c.assumptions[0].startswith("bytes per token as reported by the server")
    assert c.assumptions[1] == window.describe()
    # held again after the run: the bandwidth line is replaced, never duplicated
    later = held_against_window(c, BandwidthWindow(30e9, 25e9))
    assert later.bandwidth_bytes_per_s == 30e9
    assert [a for a in later.assumptions if a.startswith("bandwidth ")] == [BandwidthWindow(30e9, 25e9).describe()]
    assert "drifted 17%" in later.assumptions[-1]


def test_a_catalogue_ceiling_with_a_window_keeps_its_bytes_and_takes_the_window():
    listed = Ceiling(4.97e9, 8e12, model="gpt-oss-120b", hardware="b200",
                     assumptions=("bandwidth 8 TB/s (vendor peak) x efficiency 100%", "context 0"))
    held = held_against_window(listed, BandwidthWindow(40e9, 42e9))
    assert held.bytes_per_token == 4.97e9 and held.bandwidth_bytes_per_s == 42e9 and held.hardware == "local"
    assert held.assumptions[0] == "context 0" and held.assumptions[-1].startswith("bandwidth 42.0 GB/s")


def test_vs_ceiling_carries_the_suspect_and_note_into_the_summary():
    from roofline.bench.summarize import vs_ceiling

    c, _ = resolve_ceiling(model=None, hardware=None, served="m", server_info=SERVER, window=BandwidthWindow(27e9))
    below = vs_ceiling(c, {"p50": 45.0})
    assert below["percent_of_ceiling"] < 100 and "suspect" not in below and "note" not in below
    above = vs_ceiling(c, {"p50": 60.0})  # 119.6% of 50.2 tok/s
    assert above["suspect"] == SUSPECT_BYTES and above["note"].startswith("above 100%")
    # with speculation passes/s is what is held against the ceiling, so 3 tokens a pass is not "above 100%"
    spec = vs_ceiling(c, {"p50": 120.0}, {"tokens_per_pass": 3.0, "passes_per_s": 40.0, "requests": 2})
    assert spec["basis"] == "passes" and spec["percent_of_ceiling"] < 100 and "note" not in spec


def test_local_decode_rate_of_generate():
    window = BandwidthWindow(30e9, 27e9)
    plain = local_decode_vs_ceiling(bytes_per_token=538e6, tok_per_s=50.0, passes_per_s=50.0, window=window)
    assert plain["basis"] == "tokens" and plain["percent_of_ceiling"] == pytest.approx(100 * 50 * 538e6 / 30e9)
    assert plain["local_bandwidth"]["bound_bytes_per_s"] == 30e9 and "note" not in plain
    spec = local_decode_vs_ceiling(bytes_per_token=538e6, tok_per_s=150.0, passes_per_s=50.0, window=window)
    assert spec["basis"] == "passes" and spec["percent_of_ceiling"] == plain["percent_of_ceiling"]
    over = local_decode_vs_ceiling(bytes_per_token=538e6, tok_per_s=80.0, passes_per_s=None, window=window)
    assert over["percent_of_ceiling"] > 100 and over["suspect"] == SUSPECT_BYTES and "note" in over
