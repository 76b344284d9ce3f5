"""This CPU's kernel shapes against the defaults, side by side (issue 48: kernels chosen per host).

Loads a model at --dtype, runs the choice (`kernel_choice.measure_kernel_choice`: a coordinate
descent over `kernel_shapes.KNOBS` on the model's own weights) and prints what it picked and how
long it took; then times one-row passes and VERIFY_ROWS-row passes in the default shapes and in the
chosen ones, interleaved (each round: default, chosen), and prints min/median/max ms and the ratio
of medians. Every variant gives the same bits (tests/engine/kernels/test_kernel_shapes.py), so the
ratio is the whole story: above 1.00x the choice paid.

    python benchmarks/kernel_shapes.py [--model FILE] [--dtype stored] [--rounds 15] [--isa avx2]
"""

from __future__ import annotations

import argparse
import statistics

from engine_vs_peers import apply_isa, describe_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a GGUF or folder (default: the shipped file)")
    ap.add_argument("--dtype", default="stored")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--isa", choices=("host", "avx2"), default="host")
    args = ap.parse_args()
    apply_isa(args.isa)

    from roofline.engine import load_runner
    from roofline.engine.runtime.kernel_choice import (
        VERIFY_ROWS,
        KernelChoice,
        measure_kernel_choice,
    )
    from roofline.engine.runtime.pass_timing import pass_seconds, timing_slot

    runner = load_runner(args.model, dtype=args.dtype, threads=args.threads, max_seq_len=64)
    describe_cpu(runner.threads)
    chosen = measure_kernel_choice(runner)
    print(f"choice: {chosen.describe()}")
    runner.thread_chooser = None  # every pass on runner.threads
    for rows in (1, VERIFY_ROWS):
        times: dict[str, list[float]] = {"default": [], "chosen": []}
        with timing_slot(runner):
            for round_ in range(args.rounds + 1):
                for name, choice in (("default", KernelChoice()), ("chosen", chosen)):
                    runner.kernels = choice
                    ms = pass_seconds(runner, rows) * 1e3
                    if round_:
                        times[name].append(ms)
        med = {k: statistics.median(v) for k, v in times.items()}
        line = ", ".join(f"{k} {min(v):.2f}/{med[k]:.2f}/{max(v):.2f} ms" for k, v in times.items())
        print(f"{rows} row(s): {line}; chosen/default speed {med['default'] / med['chosen']:.3f}x")


if __name__ == "__main__":
    main()
