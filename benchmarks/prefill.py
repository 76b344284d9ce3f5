"""Prompt prefill of roofline's embedded engine next to llama.cpp's `llama-bench`, and a short
request's time to first token while a long prompt is being prefilled, chunked prefill on and off.
One run, side by side.

1. Prefill tok/s at 512 and 2048 prompt tokens, fp32 and bf16, same weights (the default model
   dequantized; llama.cpp gets them written as F32 and BF16 GGUFs), same thread count, random token
   ids. roofline: `ModelRunner.prefill` of the whole prompt (its chunks included), prompt tokens /
   wall time. llama.cpp: `llama-bench -p N -n 0 -r 1 -fa on` (its pp<N> figure, flash attention on),
   one invocation per round. Rounds run every configuration in turn, so drift on a shared machine
   hits all alike; the table gives min / median / max over rounds and the ratio of the medians.
2. TTFT of a short request (16 tokens) submitted 50 ms after a long one (2048 tokens) to a running
   `Scheduler` (no HTTP), chunked prefill on (the server's defaults: granules of the runner's
   default size, as many per turn as fit the `prefill_chunk_ms` time target) and off (the whole
   prompt as one chunk, in one step), interleaved per round. Also the long request's own TTFT.

llama-bench: give its path with --llama-bench or the LLAMA_BENCH environment variable (build it from
llama.cpp's sources, target `llama-bench`); without it that part is skipped and says so.

Usage: python benchmarks/prefill.py [--llama-bench PATH] [--rounds 3] [--threads 2]
                                    [--sizes 512,2048] [--dtypes fp32,bf16] [--ttft-dtypes fp32]
                                    [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

GGUF_FORMAT = {"fp32": "F32", "bf16": "BF16"}
SHORT_PROMPT_TOKENS = 16
SHORT_DELAY_SECONDS = 0.05


# llama-bench runs in the environment this script started with, not with the OMP_WAIT_POLICY=PASSIVE
# that importing roofline's engine sets (llama.cpp's per-operation barriers ran 4-5x slower with
# it).
PEER_ENV = dict(os.environ)


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def random_ids(n: int, seed: int, vocab: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, vocab - 100, n)]


def roofline_prefill_tok_per_s(runner, n: int, seed: int) -> float:
    ids = random_ids(n, seed, runner.config.vocab_size)
    t0 = time.perf_counter()
    runner.prefill(0, ids)
    seconds = time.perf_counter() - t0
    runner.release(0)
    return n / seconds


def llama_bench_tok_per_s(binary: str, gguf: Path, n: int, threads: int) -> float:
    """llama-bench's pp<n> tok/s (one repetition, after its own warm-up run)."""
    out = subprocess.run(
        [
            binary,
            "-m",
            str(gguf),
            "-t",
            str(threads),
            "-p",
            str(n),
            "-n",
            "0",
            "-r",
            "1",
            "-fa",
            "on",
            "-o",
            "csv",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        env=PEER_ENV,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return float(rows[-1]["avg_ts"])


def short_request_ttft(runner, chunked: bool, long_n: int, seed: int) -> tuple[float, float]:
    """(TTFT of a short request submitted 50 ms after a long one, TTFT of the long one), seconds."""
    from roofline.engine.runtime.prefill_chunks import DEFAULT_PREFILL_CHUNK_TOKENS
    from roofline.engine.runtime.sampling import SamplingParams
    from roofline.engine.runtime.scheduler import Scheduler

    chunk = DEFAULT_PREFILL_CHUNK_TOKENS if chunked else runner.max_seq_len
    budget = None if chunked else runner.max_seq_len  # None: the time target
    runner.prefill_chunk_tokens = chunk
    vocab = runner.config.vocab_size
    first: dict[str, float] = {}
    done = {name: threading.Event() for name in ("long", "short")}

    def sink_for(name):
        def sink(event):
            if event.token_ids and name not in first:
                first[name] = time.perf_counter()
            if event.final:
                done[name].set()

        return sink

    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    try:
        with Scheduler(runner, prefill_token_budget=budget) as sched:
            t_long = time.perf_counter()
            sched.submit(random_ids(long_n, seed, vocab), params, sink_for("long"))
            time.sleep(SHORT_DELAY_SECONDS)
            t_short = time.perf_counter()
            sched.submit(
                random_ids(SHORT_PROMPT_TOKENS, seed + 1, vocab), params, sink_for("short")
            )
            for e in done.values():
                if not e.wait(600):
                    raise RuntimeError("a request did not finish in 10 minutes")
    finally:
        runner.prefill_chunk_tokens = DEFAULT_PREFILL_CHUNK_TOKENS
    return first["short"] - t_short, first["long"] - t_long


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--llama-bench",
        default=os.environ.get("LLAMA_BENCH"),
        help="path of llama.cpp's llama-bench binary (default: $LLAMA_BENCH)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default="512,2048", help="prompt lengths, comma-separated")
    ap.add_argument(
        "--dtypes", default="fp32,bf16", help="formats of the prefill part ('' to skip it)"
    )
    ap.add_argument(
        "--ttft-dtypes", default="fp32", help="formats of the TTFT part ('' to skip it)"
    )
    ap.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    dtypes = [d for d in args.dtypes.split(",") if d]
    ttft_dtypes = [d for d in args.ttft_dtypes.split(",") if d]

    from roofline.cli.output import emit_table
    from roofline.engine import load_runner
    from roofline.modelspec.default_model import default_model_path

    source = Path(args.model) if args.model else default_model_path()
    notes, ggufs = [], {}
    runners = {}
    for dtype in sorted(set(dtypes) | set(ttft_dtypes)):
        print(f"loading roofline {dtype} ...", file=sys.stderr)
        runners[dtype] = load_runner(
            str(source),
            dtype=dtype,
            threads=args.threads,
            max_batch=2,
            max_seq_len=max(sizes) + SHORT_PROMPT_TOKENS + 8,
        )
    workdir = tempfile.TemporaryDirectory(prefix="roofline-prefill-")
    binary = args.llama_bench
    if binary and not Path(binary).is_file():
        sys.exit(f"--llama-bench {binary}: no such file")
    if binary:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from engine_vs_peers import write_float

        print("writing F32 / BF16 GGUFs for llama-bench ...", file=sys.stderr)
        for dtype in dtypes:
            out = Path(workdir.name) / f"model-{GGUF_FORMAT[dtype]}.gguf"
            ggufs[dtype] = write_float(Path(source), out, GGUF_FORMAT[dtype])
    else:
        notes.append(
            "llama-bench: skipped -- give its path with --llama-bench PATH or LLAMA_BENCH=PATH"
        )

    rates: dict[tuple[str, str, int], list[float]] = {}
    ttft: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for n in sizes:
            for dtype in dtypes:
                value = roofline_prefill_tok_per_s(runners[dtype], n, seed=r)
                rates.setdefault(("roofline", dtype, n), []).append(value)
                print(
                    f"round {r + 1}/{args.rounds} roofline {dtype} pp{n}: {value:.0f} tok/s",
                    file=sys.stderr,
                )
                if binary:
                    value = llama_bench_tok_per_s(binary, ggufs[dtype], n, args.threads)
                    rates.setdefault(("llama.cpp", dtype, n), []).append(value)
                    print(
                        f"round {r + 1}/{args.rounds} llama-bench {GGUF_FORMAT[dtype]} pp{n}: "
                        f"{value:.0f} tok/s",
                        file=sys.stderr,
                    )
        for dtype in ttft_dtypes:
            for chunked in (True, False) if r % 2 == 0 else (False, True):
                short, long = short_request_ttft(runners[dtype], chunked, max(sizes), seed=100 + r)
                ttft.setdefault((dtype, chunked), []).append((short, long))
                print(
                    f"round {r + 1}/{args.rounds} TTFT {dtype} chunked={chunked}: "
                    f"short {short:.2f} s, long {long:.2f} s",
                    file=sys.stderr,
                )

    rows = []
    for n in sizes:
        for dtype in dtypes:
            ours = rates[("roofline", dtype, n)]
            peer = rates.get(("llama.cpp", dtype, n))
            ratio = f"{statistics.median(ours) / statistics.median(peer):.2f}x" if peer else "-"
            rows.append((f"pp{n}", dtype, spread(ours), spread(peer) if peer else "-", ratio))
    emit_table(
        "prefill tok/s, side by side",
        [
            "prompt",
            "format",
            "roofline min / median / max",
            "llama-bench min / median / max",
            "roofline / llama-bench",
        ],
        rows,
        as_markdown=args.markdown,
        notes=[
            f"{args.threads} threads, {args.rounds} rounds, random token ids, "
            f"source {source.name}; llama-bench: -p N -n 0 -r 1 -fa on, "
            "F32 / BF16 GGUFs of the same (dequantized) weights",
            *notes,
        ],
    )
    if ttft:
        rows = []
        for dtype in ttft_dtypes:
            on, off = ttft[(dtype, True)], ttft[(dtype, False)]
            ratio = statistics.median(s for s, _ in off) / statistics.median(s for s, _ in on)
            for chunked, values in ((True, on), (False, off)):
                rows.append(
                    (
                        dtype,
                        "on" if chunked else "off",
                        spread([s for s, _ in values], "{:.2f}"),
                        spread([t for _, t in values], "{:.2f}"),
                        f"{ratio:.1f}x" if chunked else "",
                    )
                )
        emit_table(
            f"TTFT of a {SHORT_PROMPT_TOKENS}-token request submitted "
            f"{SHORT_DELAY_SECONDS * 1e3:.0f} ms after a {max(sizes)}-token one (seconds)",
            [
                "format",
                "chunked prefill",
                "short TTFT min / median / max",
                "long TTFT min / median / max",
                "short TTFT off / on",
            ],
            rows,
            as_markdown=args.markdown,
            notes=[
                "on: the server's defaults (granules of the runner's default size, as many "
                "per turn as fit the prefill_chunk_ms target); off: the whole prompt as one "
                "chunk in one step"
            ],
        )


if __name__ == "__main__":
    main()
