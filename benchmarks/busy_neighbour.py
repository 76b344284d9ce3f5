"""Decode speed and TTFT of the embedded engine's thread settings on a quiet machine and beside a
busy neighbour (one process spinning a core), side by side in one run.

Configurations, each in a process of its own that loads the model once and then runs one generation
per request (chat prompt, greedy, N new tokens with EOS ignored; timings as `roofline generate`
reports them: TTFT = prefill + first sample, decode tok/s over the decode steps):

    default      no --threads: the adaptive thread count, idle OpenMP workers sleeping
    threads=1    --threads 1
    threads=N    --threads N (all cores, fixed)
    old default  --threads N with libgomp's default spin before an idle worker sleeps
                 (GOMP_SPINCOUNT=300000): what the default was before the adaptive count
    llama-bench  llama.cpp's C++ benchmark at t=1 and t=N when --llama-bench is given (its pp test
                 on a prompt of the same length gives a TTFT, its tg test the decode speed)

Each round runs every configuration quiet, then starts the neighbour
(`python -c 'while True: pass'`) and runs them all again; the order of configurations rotates from
round to round. The table gives min / median / max over rounds, then the ratios of medians measured
in this run.

On a machine that others share, their load is a neighbour too: --nice -10 (root) raises this run,
its workers and its neighbour above them, which comes closer to a quiet machine plus one busy
process.

Usage: python benchmarks/busy_neighbour.py [--rounds 5] [--tokens 64] [--dtype fp32] [--nice N]
           [--llama-bench PATH [--gguf FILE]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROMPT = "Write a short story about a robot who learns to paint."
NEIGHBOUR = [sys.executable, "-c", "while True: pass"]
# the workers' environment: this one without OpenMP wait settings (importing the engine here sets
# one)
BASE_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
}


# ------------------------------------------------------------------------------------------ worker
# side
def worker(threads: int | None, dtype: str, tokens: int) -> None:
    """Load once, print the prompt length, then for each line on stdin run one generation and print
    its timings as one JSON line."""
    from roofline.engine import SamplingParams, generate, load_runner

    runner = load_runner(None, dtype=dtype, threads=threads)
    tok = runner.tokenizer
    ids = tok.encode(
        tok.apply_chat_template([{"role": "user", "content": PROMPT}]), add_special_tokens=False
    )
    print(json.dumps({"ready": True, "prompt_tokens": len(ids)}), flush=True)
    for _ in sys.stdin:
        gen = generate(
            runner, ids, SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        )
        out = list(gen)
        chooser = runner.thread_chooser
        print(
            json.dumps(
                {
                    "ttft_s": gen.timings.prefill_seconds,
                    "tok_per_s": gen.timings.decode_tok_per_s,
                    "ids": out,
                    "threads_now": chooser.current if chooser else runner.threads,
                }
            ),
            flush=True,
        )


class Engine:
    """A worker process of this script for one configuration."""

    def __init__(
        self, label: str, threads: int | None, dtype: str, tokens: int, env: dict[str, str]
    ) -> None:
        self.label = label
        args = [sys.executable, __file__, "--worker", "--dtype", dtype, "--tokens", str(tokens)]
        if threads is not None:
            args += ["--threads", str(threads)]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**BASE_ENV, **env}
        )
        self.prompt_tokens = json.loads(self._line())["prompt_tokens"]

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the worker exited (code {self.proc.wait()})")
        return line

    def run(self) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class LlamaBench:
    """llama.cpp's llama-bench at one thread count: pp (prompt) and tg (decode) in one
    invocation."""

    def __init__(
        self, label: str, binary: str, gguf: str, threads: int, prompt_tokens: int, tokens: int
    ) -> None:
        self.label, self.binary, self.gguf, self.threads = label, binary, gguf, threads
        self.prompt_tokens, self.tokens = prompt_tokens, tokens

    def run(self) -> dict:
        cmd = [
            self.binary,
            "-m",
            self.gguf,
            "-t",
            str(self.threads),
            "-p",
            str(self.prompt_tokens),
            "-n",
            str(self.tokens),
            "-r",
            "1",
            "-o",
            "json",
        ]
        # BASE_ENV: not the engine's OMP_WAIT_POLICY=PASSIVE, which slows llama.cpp's barriers 4-5x
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, check=True, env=BASE_ENV
        ).stdout
        tests = json.loads(out)
        pp = next(t["avg_ts"] for t in tests if t["n_prompt"] > 0)
        tg = next(t["avg_ts"] for t in tests if t["n_gen"] > 0)
        return {"ttft_s": self.prompt_tokens / pp, "tok_per_s": tg}

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------ driver
# side
def spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64, help="new tokens per generation")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "int8"])
    p.add_argument(
        "--llama-bench",
        default=os.environ.get("LLAMA_BENCH"),
        help="path of llama.cpp's llama-bench",
    )
    p.add_argument("--gguf", help="GGUF file for llama-bench (default: the default model's file)")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this run and its children (negative needs root)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.threads, a.dtype, a.tokens)
        return

    if a.nice:
        os.nice(a.nice)
    from roofline.hardware.probe import usable_cpu_count

    cores = usable_cpu_count()
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    configs = [
        ("default", None, {}),
        ("threads=1", 1, passive),
        (f"threads={cores}", cores, passive),
        ("old default", cores, {"GOMP_SPINCOUNT": "300000"}),
    ]
    print(f"{cores} cores; loading {len(configs)} workers ({a.dtype}) ...", file=sys.stderr)
    engines: list = [
        Engine(label, threads, a.dtype, a.tokens, env) for label, threads, env in configs
    ]
    prompt_tokens = engines[0].prompt_tokens
    if a.llama_bench:
        from roofline.modelspec.default_model import default_model_path

        gguf = a.gguf or str(default_model_path())
        engines += [
            LlamaBench(f"llama-bench t={t}", a.llama_bench, gguf, t, prompt_tokens, a.tokens)
            for t in sorted({1, cores})
        ]
    else:
        print("llama-bench: skipped (give --llama-bench PATH or set LLAMA_BENCH)", file=sys.stderr)

    results: dict[tuple[str, str], list[dict]] = {}
    reference_ids: list[int] | None = None
    try:
        for r in range(a.rounds):
            order = engines[r % len(engines) :] + engines[: r % len(engines)]
            for condition in ("quiet", "busy"):
                neighbour = subprocess.Popen(NEIGHBOUR) if condition == "busy" else None
                try:
                    time.sleep(0.5)
                    for e in order:
                        res = e.run()
                        # every configuration of the embedded engine: the same tokens
                        if "ids" in res:
                            reference_ids = reference_ids or res["ids"]
                            if res["ids"] != reference_ids:
                                raise SystemExit(
                                    f"{e.label} produced other tokens than the first configuration"
                                )
                        results.setdefault((e.label, condition), []).append(res)
                        print(
                            f"round {r + 1} {condition:5} {e.label:15} "
                            f"TTFT {res['ttft_s'] * 1e3:7.0f} ms  {res['tok_per_s']:6.1f} tok/s"
                            + (
                                f"  (on {res['threads_now']} threads)"
                                if "threads_now" in res
                                else ""
                            ),
                            file=sys.stderr,
                            flush=True,
                        )
                finally:
                    if neighbour is not None:
                        neighbour.kill()
                        neighbour.wait()
    finally:
        for e in engines:
            e.close()

    print(
        f"\n{a.dtype}, prompt {prompt_tokens} tokens, {a.tokens} new tokens, {a.rounds} rounds, "
        f"niceness {os.nice(0)}; min / median / max"
    )
    print("| configuration | condition | decode tok/s | TTFT ms |\n|---|---|---|---|")
    for condition in ("quiet", "busy"):
        for e in engines:
            runs = results[(e.label, condition)]
            print(
                f"| {e.label} | {condition} | {spread([x['tok_per_s'] for x in runs])} | "
                f"{spread([x['ttft_s'] * 1e3 for x in runs])} |"
            )

    def med(label: str, condition: str, key: str) -> float:
        return statistics.median(x[key] for x in results[(label, condition)])

    print(
        "\nratios of medians "
        "(tok/s: higher is better for the first; TTFT: lower is better for the first)"
    )
    print("| ratio | condition | decode tok/s | TTFT |\n|---|---|---|---|")
    pairs = [("default", "threads=1"), ("default", "old default"), ("default", f"threads={cores}")]
    if a.llama_bench and cores > 1:
        pairs.append((f"llama-bench t={cores}", "llama-bench t=1"))
    for x, y in pairs:
        for condition in ("quiet", "busy"):
            tok = med(x, condition, "tok_per_s") / med(y, condition, "tok_per_s")
            ttft = med(x, condition, "ttft_s") / med(y, condition, "ttft_s")
            print(f"| {x} / {y} | {condition} | {tok:.2f} | {ttft:.2f} |")


if __name__ == "__main__":
    main()
