"""The SGLang launcher: `python -m sglang.launch_server` and its knobs.

Flag names follow SGLang's own documentation (read 2026-12): `launch_server`'s arguments,
including those the B200 study's ladder turned.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roofline.bench.engines.base import Knob, KnobKind, Launcher, flag, knob_table
from roofline.bench.engines.launchers import dist_version, installed, need_model

_SGLANG_NGRAM = (
    "speculative_ngram_max_bfs_breadth",
    "speculative_ngram_min_bfs_breadth",
    "speculative_ngram_max_trie_depth",
    "speculative_ngram_capacity",
    "speculative_ngram_match_type",
)
_SGLANG_SPEC = (
    "speculative_num_draft_tokens",
    "speculative_attention_mode",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    *_SGLANG_NGRAM,
)


@dataclass(frozen=True)
class SglangLauncher(Launcher):
    """`python -m sglang.launch_server`: knob `a_b` -> `--a-b v`; bools are switches (present when
    true)."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        model = need_model(self.name, model, "a Hugging Face id or model folder")
        out = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            host,
            "--port",
            str(port),
        ]
        for knob, value in self.settings(config):
            if knob.kind == KnobKind.BOOL:
                out += [flag(knob.name)] if value else []
            elif not (knob.name == "speculative_algorithm" and value == "none"):
                out += [flag(knob.name), str(value)]
        return out + list(extra_args)

    def check(self, config: Mapping[str, Any]) -> None:
        algorithm = config.get("speculative_algorithm")
        self.needs(config, _SGLANG_SPEC, algorithm not in (None, "none"), "speculative_algorithm")
        self.needs(
            config, _SGLANG_NGRAM, algorithm == "NGRAM", "speculative_algorithm set to NGRAM"
        )
        self.ordered(
            config, "speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth"
        )

    def version(self) -> str | None:
        found = dist_version("sglang")
        return found[1] if found else None

    def unavailable(self) -> str | None:
        return (
            None
            if installed("sglang")
            else "SGLang is not installed here (it needs CUDA: pip install sglang on a GPU machine)"
        )


SGLANG = SglangLauncher(
    name="sglang",
    help="SGLang's server (GPU); --model HF id or folder",
    knobs=knob_table(
        Knob(
            "dtype",
            "choice",
            ("auto", "half", "float16", "bfloat16", "float", "float32"),
            "weights and compute",
        ),
        Knob("tp_size", "int", help="tensor-parallel GPUs", minimum=1),
        Knob(
            "mem_fraction_static",
            "float",
            help="share of GPU memory for weights and KV cache",
            minimum=0,
        ),
        Knob("context_length", "int", help="context length in tokens", minimum=1),
        Knob("max_running_requests", "int", help="requests running together at most", minimum=1),
        Knob("cuda_graph_max_bs", "int", help="largest batch captured in a CUDA graph", minimum=1),
        Knob("attention_backend", "str", help="attention kernels, e.g. fa3, flashinfer, triton"),
        Knob("disable_radix_cache", "bool", help="no prefix cache"),
        Knob("stream_interval", "int", help="tokens per streamed chunk", minimum=1),
        Knob(
            "scheduler_recv_interval",
            "int",
            help="scheduler steps between polls for new requests",
            minimum=1,
        ),
        Knob(
            "speculative_algorithm",
            "choice",
            ("none", "NGRAM", "EAGLE", "EAGLE3", "STANDALONE"),
            "speculative decoding method",
        ),
        Knob("speculative_num_draft_tokens", "int", help="tokens verified per step", minimum=1),
        Knob(
            "speculative_attention_mode",
            "choice",
            ("prefill", "decode"),
            "attention kernels for the verify pass",
        ),
        Knob("speculative_draft_model_path", "str", help="EAGLE/STANDALONE draft weights"),
        Knob("speculative_num_steps", "int", help="EAGLE: draft steps", minimum=1),
        Knob("speculative_eagle_topk", "int", help="EAGLE: branches per step", minimum=1),
        Knob(
            "speculative_ngram_max_bfs_breadth",
            "int",
            help="NGRAM: widest draft-tree branching",
            minimum=1,
        ),
        Knob(
            "speculative_ngram_min_bfs_breadth",
            "int",
            help="NGRAM: narrowest draft-tree branching",
            minimum=1,
        ),
        Knob(
            "speculative_ngram_max_trie_depth",
            "int",
            help="NGRAM: longest suffix in the trie",
            minimum=1,
        ),
        Knob("speculative_ngram_capacity", "int", help="NGRAM: trie nodes kept", minimum=1),
        Knob(
            "speculative_ngram_match_type",
            "choice",
            ("BFS", "PROB"),
            "NGRAM: how drafts are picked",
        ),
    ),
)
