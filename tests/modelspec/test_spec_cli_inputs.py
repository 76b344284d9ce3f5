"""What a user types or points at, through the real command line: huge numbers in a config, a
context past the model's limit, malformed --batch lists. One line, the right exit code, never a
traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _roofline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roofline", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def _llama() -> dict:
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
        "max_position_embeddings": 4096,
    }


@pytest.mark.parametrize("where", ["top", "nested", "unread_key", "list"])
def test_integer_past_python_digit_limit_is_one_line_exit_2(tmp_path, where: str) -> None:
    huge = "9" * 5000  # Python refuses int() of more than 4,300 digits unless told otherwise
    body = json.dumps(_llama())[:-1]
    text = {
        "top": body.replace('"hidden_size": 64', f'"hidden_size": {huge}') + "}",
        "nested": json.dumps({"model_type": "gemma3", "text_config": {"hidden_size": 0}}).replace(
            "0}", huge + "}"
        ),
        "unread_key": body + f', "pad_token_id": {huge}' + "}",
        "list": body + f', "eos_token_id": [1, -{huge}]' + "}",
    }[where]
    path = tmp_path / "config.json"
    path.write_text(text)
    out = _roofline("ceiling", str(path), "--hardware", "h100")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
    assert "digits" in out.stderr


def test_context_beyond_max_position_embeddings_warns_and_goes_on(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_llama()))
    out = _roofline("ceiling", str(tmp_path), "--hardware", "h100", "--context", "5000", "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("\n") == 1 and "max_position_embeddings (4,096)" in out.stderr
    assert json.loads(out.stdout)["context_tokens"] == 5000  # the bound is still computed
    quiet = _roofline("ceiling", str(tmp_path), "--hardware", "h100", "--context", "4096", "--json")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_context_limit_from_family_defaults() -> None:
    # gemma-3-12b-it's config does not state max_position_embeddings; Gemma3TextConfig's default is
    # 131,072.
    out = _roofline(
        "ceiling", "gemma-3-12b-it", "--hardware", "h100", "--context", "131073", "--json"
    )
    assert out.returncode == 0 and "131,072" in out.stderr


@pytest.mark.parametrize(
    "batch",
    ["1,,2", "1,8,", ",1", "", " ", "1;2", "1,x", "0", "-1", "1.5", "1_0", "99999999999999"],
)
def test_malformed_batch_lists_are_refused(batch: str) -> None:
    out = _roofline("ceiling", "llama-3.1-8b", "--hardware", "h100", "--batch", batch)
    assert out.returncode == 2, (batch, out.stdout)
    assert "--batch" in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_well_formed_batch_lists_still_work() -> None:
    out = _roofline(
        "ceiling", "llama-3.1-8b", "--hardware", "h100", "--batch", " 1, 8,32 ", "--json"
    )
    assert out.returncode == 0, out.stderr
    assert [b["batch"] for b in json.loads(out.stdout)["batches"]] == [1, 8, 32]
