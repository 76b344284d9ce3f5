"""Bad arguments: one line on stderr, exit code 2, nothing measured."""

import subprocess
import sys

import pytest

BAD = [
    (["http://127.0.0.1:9", "--slo", "latency=3s"], "unknown SLO"),
    (["http://127.0.0.1:9", "--rate", "-2"], "--rate"),
    (["http://127.0.0.1:9", "--rate", "2,zero"], "--rate"),
    (["http://127.0.0.1:9", "--duration", "soon"], "duration"),
    (["http://127.0.0.1:9", "--duration", "0s"], "--duration"),
    (["http://127.0.0.1:9", "--concurrency", "0"], "--concurrency"),
    (["http://127.0.0.1:9", "--arrivals", "weibull"], "--arrivals"),
    (["http://127.0.0.1:9", "--reps", "0"], "--reps"),
    (["http://127.0.0.1:9", "--input-len", "1-0", "--synthetic"], "--input-len"),
    (["http://127.0.0.1:9", "--usage", "sometimes"], "--usage"),
    (["http://127.0.0.1:9", "--workload", "everything"], "unknown workload 'everything'"),
    (["http://127.0.0.1:9", "--workload", "shared-prefix", "--synthetic"], "disagree"),
    (["http://127.0.0.1:9", "--workload", "prompts"], "needs --prompts FILE"),
    (["http://127.0.0.1:9", "--workload", "shared-prefix", "--prefix-tokens", "0"], "positive"),
    (["http://127.0.0.1:9", "--repeat-policy", "never"], "--repeat-policy must be one of auto"),
    (["http://127.0.0.1:9", "--prompts", "/nonexistent/prompts.jsonl"], "prompt file"),
    (["ftp://127.0.0.1:9"], "URL"),
    ([], "give a server URL"),
    (
        ["--engine", "turbo"],
        "unknown engine 'turbo'; the known ones: embedded, llamacpp, vllm, sglang, command",
    ),
    (
        ["--engine", "embedded", "--engine-arg", "dtype=fp64"],
        "knob 'dtype' of engine embedded must be one of",
    ),
    (["--engine", "embedded", "--engine-arg", "thread=2"], "no knob 'thread'"),
    (["--engine", "vllm", "--engine-arg", "num_speculative_tokens=4"], "needs speculative_method"),
    (
        ["--engine", "vllm", "--engine-cmd", "{python} -m x"],
        "--engine-cmd starts the command engine",
    ),
    (["--engine", "command"], "needs --engine-cmd"),
    (["http://127.0.0.1:9", "--engine-arg", "threads=2"], "--engine-arg goes with"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a[1:] or a or ["none"]) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "roofline", "bench", *args, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "run" / "requests.jsonl").exists()


def test_bad_prompt_file_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    p = subprocess.run(
        [sys.executable, "-m", "roofline", "bench", "http://127.0.0.1:9", "--prompts", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "p.jsonl line 2" in p.stderr
