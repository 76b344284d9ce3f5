"""llama.cpp's launcher: llama-server when it is on PATH (the C++ server), else llama-cpp-python's
server. Flag names from llama-server's README and --help (read 2026-12) and llama-cpp-python's
server settings (0.3.35)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roofline.bench.engines.base import Knob, Launcher, flag, knob_table
from roofline.bench.engines.launchers import dist_version, installed, need_model
from roofline.errors import UserError


def llama_server_help(binary: str) -> str:
    """`llama-server --help` (the flag spellings changed across releases; the help says which
    apply)."""
    try:
        p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout + p.stderr


def llama_server_args(config: Mapping[str, Any], help_text: str) -> list[str]:
    """Knob flags for llama-server. Releases from 2026 spell the draft lengths
    --spec-draft-n-max/min and the lookup n-gram size --spec-ngram-simple-size-n/m; older ones
    --draft-max/min and --spec-ngram-size-n; flash attention took on|off from late 2025 and was a
    bare switch before."""
    new = "--spec-draft-n-max" in help_text
    out: list[str] = []
    for name in ("threads", "ctx_size", "batch_size", "ubatch_size", "n_gpu_layers"):
        if config.get(name) is not None:
            out += [flag(name), str(config[name])]
    fa = config.get("flash_attn")
    if fa is not None:
        if "on|off" in help_text:
            out += ["--flash-attn", "on" if fa else "off"]
        elif fa:
            out += ["--flash-attn"]
    draft, lookup = config.get("model_draft"), bool(config.get("lookup"))
    if draft is not None:
        out += ["--model-draft", draft]
    if lookup:
        if "--spec-type" not in help_text:
            raise UserError(
                "knob 'lookup' of engine llamacpp: this llama-server has no lookup decoding (no "
                "--spec-type)"
            )
        out += ["--spec-type", "ngram-simple"]
    n = config.get("lookup_ngram")
    if n is not None:
        size_n = "--spec-ngram-simple-size-n" if new else "--spec-ngram-size-n"
        if size_n not in help_text:
            raise UserError(
                "knob 'lookup_ngram' of engine llamacpp: this llama-server cannot set the lookup "
                "n-gram size"
            )
        out += [size_n, str(n)]
    dmax, dmin = config.get("draft_max"), config.get("draft_min")
    if not new:
        out += (["--draft-max", str(dmax)] if dmax is not None else []) + (
            ["--draft-min", str(dmin)] if dmin is not None else []
        )
        return out
    if dmax is not None:
        out += (["--spec-draft-n-max", str(dmax)] if draft else []) + (
            ["--spec-ngram-simple-size-m", str(dmax)] if lookup else []
        )
    if dmin is not None:
        if not draft:
            raise UserError(
                "knob 'draft_min' of engine llamacpp: this llama-server sets a minimum draft only "
                "for a draft model (model_draft)"
            )
        out += ["--spec-draft-n-min", str(dmin)]
    return out


def llama_cpp_python_args(config: Mapping[str, Any]) -> list[str]:
    """Knob flags for `python -m llama_cpp.server` (its settings' names; bools take true/false). Its
    only speculative decoding is prompt lookup, with a draft length."""
    names = {
        "threads": "--n_threads",
        "ctx_size": "--n_ctx",
        "batch_size": "--n_batch",
        "ubatch_size": "--n_ubatch",
        "n_gpu_layers": "--n_gpu_layers",
    }
    out: list[str] = []
    for knob, name in names.items():
        if config.get(knob) is not None:
            out += [name, str(config[knob])]
    if config.get("flash_attn") is not None:
        out += ["--flash_attn", "true" if config["flash_attn"] else "false"]
    for knob in ("model_draft", "draft_min", "lookup_ngram"):
        if config.get(knob) is not None:
            raise UserError(
                f"knob {knob!r} of engine llamacpp needs llama-server on PATH: llama-cpp-python's "
                "server offers prompt lookup only (knobs lookup, draft_max)"
            )
    if config.get("lookup"):
        out += ["--draft_model", "prompt-lookup-decoding"]
        if config.get("draft_max") is not None:
            out += ["--draft_model_num_pred_tokens", str(config["draft_max"])]
    return out


@dataclass(frozen=True)
class LlamaCppLauncher(Launcher):
    """llama-server when it is on PATH (the C++ server: the fair comparison), else
    llama-cpp-python's server. Health is polled on /v1/models, which both answer (llama-cpp-python
    has no /health)."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        model = need_model(self.name, model, "a .gguf file")
        binary = shutil.which("llama-server")
        if binary:
            head = [binary, "--model", model, "--host", host, "--port", str(port)]
            return head + llama_server_args(config, llama_server_help(binary)) + list(extra_args)
        head = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            model,
            "--host",
            host,
            "--port",
            str(port),
        ]
        return head + llama_cpp_python_args(config) + list(extra_args)

    def check(self, config: Mapping[str, Any]) -> None:
        drafting = config.get("model_draft") is not None or bool(config.get("lookup"))
        self.needs(config, ("draft_max", "draft_min"), drafting, "model_draft or lookup")
        self.needs(config, ("lookup_ngram",), bool(config.get("lookup")), "lookup set to true")
        self.ordered(config, "draft_min", "draft_max")

    def version(self) -> str | None:
        binary = shutil.which("llama-server")
        if binary:
            try:
                p = subprocess.run(
                    [binary, "--version"], capture_output=True, text=True, timeout=30
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
            lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
            line = next((ln for ln in lines if ln.startswith("version")), lines[0] if lines else "")
            return f"llama-server {line.removeprefix('version:').strip()}".strip()
        found = dist_version("llama_cpp_python")
        return f"llama-cpp-python {found[1]}" if found else None

    def unavailable(self) -> str | None:
        if shutil.which("llama-server") or installed("llama_cpp"):
            return None
        return (
            "llama.cpp is not installed here: put llama-server on PATH, or pip install "
            "'llama-cpp-python[server]'"
        )

    async def greedy_outputs(self, url, model_id, prompts, max_tokens):
        from roofline.bench.engines.greedy import llamacpp_greedy

        return await llamacpp_greedy(url, model_id, prompts, max_tokens)


LLAMACPP = LlamaCppLauncher(
    name="llamacpp",
    health_path="/v1/models",
    help="llama.cpp: llama-server on PATH, else python -m llama_cpp.server; --model FILE.gguf",
    knobs=knob_table(
        Knob("threads", "int", help="CPU threads for generation", minimum=1),
        Knob("ctx_size", "int", help="context size in tokens (0: the model's)", minimum=0),
        Knob("batch_size", "int", help="logical batch size", minimum=1),
        Knob("ubatch_size", "int", help="physical batch size", minimum=1),
        Knob("flash_attn", "bool", help="flash attention"),
        Knob("n_gpu_layers", "int", help="layers offloaded to the GPU (-1: all)", minimum=-1),
        Knob("model_draft", "str", help="draft model file (llama-server only)"),
        Knob("draft_max", "int", help="most tokens drafted per step", minimum=0),
        Knob(
            "draft_min", "int", help="fewest tokens drafted per step (llama-server only)", minimum=0
        ),
        Knob(
            "lookup",
            "bool",
            help="lookup decoding: draft from n-grams of the context, no draft model",
        ),
        Knob("lookup_ngram", "int", help="n-gram size looked up (llama-server only)", minimum=1),
    ),
)
