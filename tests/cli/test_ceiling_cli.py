"""`roofline ceiling`, `hardware list`, `models list` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer
from light_ceiling import ceiling_run_imports
from typer.testing import CliRunner

from roofline.cli import ceiling as ceiling_cli
from roofline.hardware import profile as profile_mod


def _roofline(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roofline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def test_gpt_oss_120b_on_b200_output() -> None:
    out = _roofline("ceiling", "openai/gpt-oss-120b", "--hardware", "b200")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for figure in (
        "955.5 M",
        "3.58 B",
        "579.1 M",
        "1.91 GB",
        "1.90 GB",
        "1.16 GB",
        "4.97 GB",
        "mxfp4 (4.25 bit)",
        "0.622 ms",
        "1,609",
        "vendor peak",
        "efficiency 100%",
        "context 0",
    ):
        assert figure in text, figure


def test_ceiling_is_light_and_fast() -> None:
    # No torch, numba, aiohttp, numpy, matplotlib or optuna behind `roofline ceiling`, nor the
    # engine or the report: what keeps its answer well under a second on any host.
    assert ceiling_run_imports("openai/gpt-oss-120b", "--hardware", "b200") == []


def test_json_has_every_number() -> None:
    out = _roofline(
        "ceiling",
        "deepseek-ai/DeepSeek-V3",
        "--hardware",
        "gb200-nvl72",
        "--tp",
        "72",
        "--allreduce-us",
        "5",
        "--context",
        "8192",
        "--batch",
        "1,64",
        "--prompt-tokens",
        "4096",
        "--alpha",
        "0.8",
        "--price-per-hour",
        "500",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["kv"]["bytes_per_token"] == 576 * 2 * 61  # MLA latent, bf16 by default
    assert d["hardware"]["devices"] == 72 and d["tensor_parallel"]["tp"] == 72
    assert d["tensor_parallel"]["allreduce_seconds"] == pytest.approx(61 * 2 * 5e-6)
    assert [b["batch"] for b in d["batches"]] == [1, 64] and d["batches"][1][
        "experts_per_layer"
    ] > 8
    assert d["prefill"]["dtype"] == "fp8" and d["speculative"]["best_gamma"] == 8
    assert all(b["dollars_per_million_tokens"] > 0 for b in d["batches"])
    assert d["decode"]["tok_per_s"] == pytest.approx(
        d["bandwidth_bytes_per_s"] / d["bytes_per_token"]
    )


def test_markdown(tmp_path) -> None:
    cfg = tmp_path / "model" / "config.json"
    cfg.parent.mkdir()
    from roofline.modelspec.catalogue import find_model

    cfg.write_text(json.dumps(find_model("meta-llama/Llama-3.1-70B").config))
    out = _roofline(
        "ceiling",
        str(cfg),
        "--hardware",
        "h100-sxm",
        "--gpus",
        "8",
        "--context",
        "8192",
        "--batch",
        "1,8,32",
        "--weights",
        "fp8",
        "--kv",
        "fp8",
        "--markdown",
    )
    assert out.returncode == 0, out.stderr
    assert "| bytes per decoded token | params | format | bytes |" in out.stdout
    assert "| decode batch 32 |" in out.stdout and "KV cache (8,192 tokens)" in out.stdout
    assert "8 x NVIDIA H100" in out.stdout


def test_lists() -> None:
    hw = _roofline("hardware", "list", "--json")
    keys = {h["key"] for h in json.loads(hw.stdout)}
    assert {"h100-sxm", "b200", "gb200-nvl72", "mi355x", "groq-lpx"} <= keys
    models = _roofline("models", "list", "--json")
    ids = {m["id"] for m in json.loads(models.stdout)}
    assert {"openai/gpt-oss-120b", "deepseek-ai/DeepSeek-V3", "guide/1t-moe"} <= ids
    assert "gpt-oss-120b" in _roofline("models", "list").stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["ceiling", "qwen3-8b", "--hardware", "h900"], "unknown hardware"),
        (["ceiling", "qwen3-8b", "--hardware", "h100", "--context", "-5"], "--context"),
        (
            ["ceiling", "qwen3-8b", "--hardware", "h100", "--bandwidth", "0"],
            "bandwidth must be positive",
        ),
        (["ceiling", "nobody/nothing", "--hardware", "h100"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, words: str) -> None:
    out = _roofline(*args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and words in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"model_type": ', "not valid JSON"),
        # llama would take LlamaConfig's defaults for what is left out; internlm2 (remote code) has
        # none to take
        ('{"model_type": "internlm2", "hidden_size": 64}', "missing"),
        ('{"model_type": "t5", "d_model": 512}', "unknown architecture"),
    ],
)
def test_bad_configs_are_one_line_exit_2(tmp_path, content: str, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    out = _roofline("ceiling", str(path), "--hardware", "h100")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and words in out.stderr and "Traceback" not in out.stderr


def test_local_hardware_in_process(monkeypatch) -> None:
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
    app = typer.Typer()
    ceiling_cli.register(app)
    result = CliRunner().invoke(app, ["ceiling", "qwen3-8b", "--hardware", "local", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["hardware"]["measured"] and d["bandwidth_bytes_per_s"] == 3.1e10
    assert any(
        "measured read bandwidth, median; min 29.0, max 32.0 GB/s, 3 runs" in a
        for a in d["assumptions"]
    )


def test_local_without_profile_says_run_probe(tmp_path) -> None:
    out = _roofline(
        "ceiling", "qwen3-8b", "--hardware", "local", env={profile_mod.CACHE_DIR_ENV: str(tmp_path)}
    )
    assert out.returncode == 2 and "roofline probe" in out.stderr and out.stderr.count("\n") == 1
