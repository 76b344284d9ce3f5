"""What `roofline generate` prints after the text (its timings), from a stand-in runner and
generation: the bytes per token the engine reads and the file's, and the decode rate against both
ceilings."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from roofline.cli.generate import _print_timings
from roofline.hardware.window import BandwidthWindow


def stand_ins(file_bytes: int | None = 96_600_000):
    """The default model as the engine runs it today: a 4-bit GGUF expanded to fp32 (538.1 MB vs
    96.6 MB)."""
    runner = SimpleNamespace(
        name="smollm2",
        path="m.gguf",
        dtype="fp32",
        threads=2,
        bytes_per_token=538_100_000,
        file_bytes_per_token=file_bytes,
        config=SimpleNamespace(moe=False),
    )
    timings = SimpleNamespace(
        decode_tok_per_s=41.9,
        prompt_tokens=5,
        generated_tokens=21,
        prefill_seconds=0.1,
        prefill_tok_per_s=50.0,
        passes=21,
        decode_tokens=20,
        decode_seconds=20 / 41.9,
        expert_reads=0,
    )
    gen = SimpleNamespace(
        timings=timings, sequence=SimpleNamespace(finish_reason="length"), speculation=None
    )
    return runner, gen


def test_json_has_both_byte_counts_and_both_percentages(capsys):
    runner, gen = stand_ins()
    _print_timings(
        runner,
        gen,
        "text",
        as_json=True,
        as_markdown=False,
        chat=False,
        window=BandwidthWindow(27e9, 26e9),
    )
    d = json.loads(capsys.readouterr().out)
    assert d["bytes_per_token"] == 538_100_000 and d["file_bytes_per_token"] == 96_600_000
    assert d["read_ratio"] == pytest.approx(538.1 / 96.6)
    v = d["vs_ceiling"]
    assert v["percent_of_ceiling"] == pytest.approx(100 * 41.9 * 538.1e6 / 27e9)
    assert v["percent_of_file_ceiling"] == pytest.approx(100 * 41.9 * 96.6e6 / 27e9)
    assert v["file_ceiling_tok_per_s"] == pytest.approx(27e9 / 96.6e6)


def test_table_shows_the_files_ceiling_and_the_ratio_line(capsys):
    runner, gen = stand_ins()
    _print_timings(
        runner,
        gen,
        "text",
        as_json=False,
        as_markdown=True,
        chat=False,
        window=BandwidthWindow(27e9),
    )
    out = capsys.readouterr().out
    assert (
        "| file bytes / token | 96.6 MB (as the file stores them; the engine reads 5.57x) |" in out
    )
    assert "| file's ceiling | 279.5 tok/s = 27.0 GB/s / 96.6 MB |" in out
    assert "| % of file's ceiling | 15.0% |" in out and "| % of ceiling | 83.5% |" in out
    assert (
        "the engine reads 538.1 MB per token, 5.57x the file's 96.6 MB: "
        "measured against the file, 15% of ceiling" in out
    )


def test_without_a_probe_the_ratio_is_still_said(capsys):
    runner, gen = stand_ins()
    _print_timings(runner, gen, "text", as_json=False, as_markdown=True, chat=False, window=None)
    out = capsys.readouterr().out
    assert (
        "the engine reads 538.1 MB per token, 5.57x the file's 96.6 MB" in out
        and "% of file's ceiling" not in out
    )


def test_a_mixture_of_experts_shows_the_experts_its_passes_read(capsys):
    """20 decode passes that read 100 experts over 2 layers: 2.5 a layer a pass, and the bytes
    `bytes_per_pass` gives for them, in the JSON and the table."""
    runner, gen = stand_ins()
    runner.config = SimpleNamespace(moe=True, n_layers=2, n_experts=8, n_experts_used=2)
    seen = []
    runner.bytes_per_pass = lambda reads, passes: seen.append((reads, passes)) or 600_000_000.0
    gen.timings.expert_reads = 100
    _print_timings(runner, gen, "text", as_json=True, as_markdown=False, chat=False, window=None)
    d = json.loads(capsys.readouterr().out)
    assert seen == [(100, 20)]
    assert d["experts_read_per_layer_pass"] == 2.5 and d["measured_bytes_per_pass"] == 6e8
    _print_timings(runner, gen, "text", as_json=False, as_markdown=True, chat=False, window=None)
    out = capsys.readouterr().out
    assert (
        "| experts read / decode pass | 2.50 of 8 a layer (a row routes to 2; a pass reads the "
        "union of its rows'): 600.0 MB a pass, 538.1 MB at one row |" in out
    )
