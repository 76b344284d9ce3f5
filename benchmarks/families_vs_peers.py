"""roofline's engine (`--dtype stored`) against llama.cpp's llama-bench on random-weight GGUFs of
four families' realistic shapes (issue 47): decode tok/s of each, bytes per token vs the ceiling.

The files are written once in --files-dir with gguf-py, seeded random weights (normal, std 0.02;
norms around 1), matrices in --format (Q4_1 by default; Q4_K_M: llama-quantize's mix of Q4_K
and Q6_K with its fallbacks; gpt-oss's experts MXFP4, as it ships),
the embedding (and an untied lm_head) in --embedding-format, norms, biases, sinks and the router
F32:
  gemma3-1b    Gemma 3 1B's shape: hidden 1152, 26 layers, 4 heads / 1 kv head of 256, ffn 6912,
               sliding window 512 on five layers in six (RoPE base 10k local, 1M global), q/k norms,
               post norms, tied embeddings.
  qwen3moe-1b  a Qwen3-MoE-like model: hidden 1024, 16 layers, 16 heads / 4 kv heads of 64,
               32 experts of ffn 512, top-4, an F32 router, untied lm_head (~1 B total,
               ~0.2 B active).
  mixtral-4l   Mixtral 8x7B's layer at half its width (hidden 2048, 16 heads / 4 kv heads of 128,
               8 experts of ffn 7168, top-2; `llama` with experts, as llama.cpp writes Mixtral),
               4 layers (1.5 B total, 0.4 B active).
  gpt-oss-4l   4 of gpt-oss-20b's 24 layers at its own size (hidden 2880, 64 heads / 8 kv heads of
               64, 32 experts of ffn 2880 at MXFP4, top-4, sinks, biases, YaRN, window 128 on
               every other layer): 3.3 B total, 0.5 B active.
A matrix over 16 M weights repeats the rows of a 16 M-weight random sample (quantized once), so
that writing a file takes seconds: reading the bytes costs the same whatever they hold.
The vocabulary is SmolLM2's (the tokenizer.ggml.* fields of the shipped SmolLM2 GGUF, 49152 tokens)
so that both engines load a real tokenizer; it is not the families' own (Gemma's 262144, Qwen's
151936, Mixtral's 32000, gpt-oss's 201088), so the embedding and lm_head hold other bytes than the
real models'.

Rounds are interleaved (each round: every model, llama-bench `-p 0 -n TOKENS -fa 1 -r 1` then
roofline's TOKENS greedy `runner.decode` steps after a BOS prefill), as in engine_vs_peers.py.
bytes/token: what roofline's runner reads per decode step at `--dtype stored`
(`runner.bytes_per_token`) and its loader's count of the file (`runner.file_bytes_per_token`),
against the ceiling's count of the same file
(`roofline.modelspec.files.file_weight_bytes_per_token`); GB/s = the ceiling's bytes/token x median
tok/s.

    LB=path/to/llama.cpp/build/bin     # built as shared/ENVIRONMENT.md says
    python benchmarks/families_vs_peers.py --llama-bench $LB/llama-bench \\
        --rounds 3 --threads 2 --tokens 128 --json families.json

`--tiny` writes both families at tiny sizes (a smoke run; the vocabulary stays SmolLM2's).
`--isa avx2` as in engine_vs_peers.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from engine_vs_peers import (
    Roofline,
    add_common_arguments,
    apply_isa,
    copy_fields,
    describe_cpu,
    find_llama_bench,
    finish,
    llama_bench,
    ratio,
    spread,
)

WEIGHT_FORMATS = ("Q4_1", "Q8_0", "Q4_0", "Q4_K_M")
EMBEDDING_FORMATS = ("same", "Q8_0", "BF16", "Q6_K")
# fp16 scales' byte offsets in a K-quant block (d, dmin; Q6_K's d), which gguf-py cannot quantize
K_QUANT_SCALES_AT = {"Q4_K": (0, 2), "Q6_K": (208,)}
STD = 0.02


@dataclass(frozen=True)
class Shape:
    arch: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    experts: int = 0
    experts_used: int = 0
    window: int = 0  # sliding window (Gemma 3: five layers in six; gpt-oss: every other)
    tied: bool = True
    experts_format: str = ""  # the experts' weight format ("": --format)


SHAPES = {
    "gemma3-1b": Shape("gemma3", 1152, 26, 4, 1, 256, 6912, window=512),
    "qwen3moe-1b": Shape("qwen3moe", 1024, 16, 16, 4, 64, 512, 32, 4, tied=False),
    "mixtral-4l": Shape("llama", 2048, 4, 16, 4, 128, 7168, 8, 2, tied=False),
    "gpt-oss-4l": Shape(
        "gpt-oss", 2880, 4, 64, 8, 64, 2880, 32, 4, window=128, tied=False, experts_format="MXFP4"
    ),
}
# gpt-oss-20b's YaRN (config.json's rope_scaling) and RoPE base
GPT_OSS_ROPE = dict(base=150_000.0, factor=32.0, original_context=4096)
TINY = {
    "gemma3-1b": dict(hidden=64, layers=6, heads=4, kv_heads=1, head_dim=32, ffn=128, window=16),
    "qwen3moe-1b": dict(
        hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=64, experts=8, experts_used=2
    ),
    "mixtral-4l": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=64),
    "gpt-oss-4l": dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=64, window=8),
}
TILE_WEIGHTS = 1 << 24


# ------------------------------------------------------------------------------------ the files
def tensors(shape: Shape):
    """(GGUF name, numpy shape, kind) of each tensor; kind: 'norm', 'vector' (a bias or the
    sinks), 'router', 'embd', 'matrix' or 'experts'."""
    s, q, kv = shape, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    oss = s.arch == "gpt-oss"
    yield "output_norm.weight", (s.hidden,), "norm"
    for i in range(s.layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (s.hidden,), "norm"
        for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            yield b + name + ".weight", (rows, s.hidden), "matrix"
            if oss:
                yield b + name + ".bias", (rows,), "vector"
        yield b + "attn_output.weight", (s.hidden, q), "matrix"
        if oss:
            yield b + "attn_output.bias", (s.hidden,), "vector"
            yield b + "attn_sinks.weight", (s.heads,), "vector"
            yield b + "post_attention_norm.weight", (s.hidden,), "norm"  # the norm before the MoE
        elif s.arch != "llama":
            yield b + "attn_q_norm.weight", (s.head_dim,), "norm"
            yield b + "attn_k_norm.weight", (s.head_dim,), "norm"
        if not oss:
            yield b + "ffn_norm.weight", (s.hidden,), "norm"
        if s.arch == "gemma3":
            yield b + "post_attention_norm.weight", (s.hidden,), "norm"
            yield b + "post_ffw_norm.weight", (s.hidden,), "norm"
        if s.experts:
            yield b + "ffn_gate_inp.weight", (s.experts, s.hidden), "router"
            for name, rows, cols in (
                ("ffn_gate_exps", s.ffn, s.hidden),
                ("ffn_up_exps", s.ffn, s.hidden),
                ("ffn_down_exps", s.hidden, s.ffn),
            ):
                yield b + name + ".weight", (s.experts, rows, cols), "experts"
                if oss:
                    yield b + name + ".bias", (s.experts, rows), "vector"
            if oss:
                yield b + "ffn_gate_inp.bias", (s.experts,), "vector"
        else:
            yield b + "ffn_gate.weight", (s.ffn, s.hidden), "matrix"
            yield b + "ffn_up.weight", (s.ffn, s.hidden), "matrix"
            yield b + "ffn_down.weight", (s.hidden, s.ffn), "matrix"


def more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's use_more_bits: Q4_K_M keeps attn_v and ffn_down of these layers in Q6_K."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_format(name: str, kind: str, fmt: str, shape: Shape, cols: int) -> str:
    """A matrix's format: fmt, or under Q4_K_M llama-quantize's choice (Q6_K for attn_v and
    ffn_down on `more_bits` layers, else Q4_K; rows of cols not a multiple of 256 take its
    fallbacks, Q5_0 and Q8_0, as Gemma 3 1B's 1152 and gpt-oss's 2880 do)."""
    if fmt == "Q4_K_M":
        layer = int(name.split(".")[1]) if name.startswith("blk.") else 0
        v_or_down = any(p in name for p in ("attn_v.", "ffn_down.", "ffn_down_exps."))
        fmt = "Q6_K" if v_or_down and more_bits(layer, shape.layers) else "Q4_K"
    if fmt in K_QUANT_SCALES_AT and cols % 256:
        return {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}[fmt]
    return fmt


def k_quant_blocks(qtype, rows: int, cols: int, rng) -> np.ndarray:
    """Random K-quant rows (rows, bytes): random quants and sub-block scales, fp16 super-block
    scales small enough that the weights stay around STD."""
    from gguf.constants import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for at in K_QUANT_SCALES_AT[qtype.name]:
        d = np.full((rows, cols // block), STD / 1000, np.float16)
        raw[:, :, at : at + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, -1)


def write_model(shape: Shape, vocab_file: Path, out: Path, fmt: str, embd_fmt: str) -> None:
    """A GGUF of `shape` with seeded random weights and vocab_file's tokenizer."""
    import gguf
    from gguf.quants import quantize

    reader = gguf.GGUFReader(str(vocab_file))
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    s, a = shape, shape.arch
    w = gguf.GGUFWriter(str(out), a)
    w.add_name(f"random-{out.stem}")
    w.add_block_count(s.layers)
    w.add_context_length(32768)
    w.add_embedding_length(s.hidden)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    if s.arch == "llama":  # Mixtral: the experts have feed_forward_length rows
        w.add_feed_forward_length(s.ffn)
    elif s.experts:
        w.add_feed_forward_length(s.ffn * s.experts_used)
        w.add_expert_feed_forward_length(s.ffn)
    else:
        w.add_feed_forward_length(s.ffn)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.experts_used)
    if s.arch == "gpt-oss":
        w.add_sliding_window(s.window)
        w.add_rope_freq_base(GPT_OSS_ROPE["base"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(GPT_OSS_ROPE["factor"])
        w.add_rope_scaling_orig_ctx_len(int(GPT_OSS_ROPE["original_context"]))
    elif s.window:
        w.add_sliding_window(s.window)
        w.add_rope_freq_base(1_000_000.0)  # the global layers'; the local ones' is 10k
        w.add_rope_freq_base_swa(10_000.0)
    elif s.experts:
        w.add_rope_freq_base(1_000_000.0)
    copy_fields(reader, w, lambda key: key.startswith("tokenizer."))

    rng = np.random.default_rng(0)
    embd_fmt = fmt if embd_fmt == "same" else embd_fmt

    def add(name: str, dims: tuple[int, ...], kind: str) -> None:
        if kind == "norm":
            w.add_tensor(name, (1 + STD * rng.standard_normal(dims)).astype(np.float32))
            return
        if kind in ("vector", "router"):
            w.add_tensor(name, (STD * rng.standard_normal(dims)).astype(np.float32))
            return
        # rows of a random sample of at most TILE_WEIGHTS weights, quantized once and repeated
        rows, cols = int(np.prod(dims[:-1])), dims[-1]
        sample = min(rows, max(1, TILE_WEIGHTS // cols))
        x = (STD * rng.standard_normal((sample, cols), dtype=np.float32)).astype(np.float32)
        kind_format = {"embd": embd_fmt, "experts": s.experts_format}.get(kind) or fmt
        qtype = gguf.GGMLQuantizationType[tensor_format(name, kind, kind_format, s, cols)]
        if qtype.name in K_QUANT_SCALES_AT:
            blocks = k_quant_blocks(qtype, sample, cols, rng)
        else:
            blocks = quantize(x, qtype)
        blocks = np.resize(blocks, (rows, blocks.shape[-1])).reshape(*dims[:-1], -1)
        w.add_tensor(name, blocks, raw_dtype=qtype)

    add("token_embd.weight", (vocab, s.hidden), "embd")
    if not s.tied:
        add("output.weight", (vocab, s.hidden), "embd")
    for name, dims, kind in tensors(s):
        add(name, dims, kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_files(args, shapes: dict[str, Shape]) -> dict[str, Path]:
    """model -> GGUF path, written once in --files-dir (kept there for later runs)."""
    from roofline.modelspec.default_model import default_model_path

    args.files_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{'-tiny' if args.tiny else ''}.{args.format}.embd-{args.embedding_format}"
    files = {}
    for model, shape in shapes.items():
        out = args.files_dir / f"{model}{tag}.gguf"
        if not out.exists():
            print(f"writing {out} ...", file=sys.stderr)
            tmp = out.with_suffix(".tmp")
            write_model(shape, default_model_path(), tmp, args.format, args.embedding_format)
            tmp.rename(out)
        files[model] = out
    return files


def params(shape: Shape, vocab: int) -> tuple[float, float]:
    """(total, active) weights of a shape, embeddings included."""
    total = active = vocab * shape.hidden * (1 if shape.tied else 2)
    for _, dims, _ in tensors(shape):
        n = float(np.prod(dims))
        total += n
        active += n * shape.experts_used / shape.experts if len(dims) == 3 else n
    return total, active


# ------------------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap, "roofline-gguf-families")
    ap.add_argument("--models", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    ap.add_argument("--format", choices=WEIGHT_FORMATS, default="Q4_1", help="the matrices'")
    ap.add_argument(
        "--embedding-format",
        choices=EMBEDDING_FORMATS,
        default="Q8_0",
        help="token_embd's (and an untied lm_head's); same: --format",
    )
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, for a smoke run")
    args = ap.parse_args()
    apply_isa(args.isa)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if bad := [m for m in models if m not in SHAPES]:
        ap.error(f"unknown models {bad}; choose from {','.join(SHAPES)}")
    shapes = {m: replace(SHAPES[m], **TINY[m]) if args.tiny else SHAPES[m] for m in models}

    from roofline.cli.output import emit_table
    from roofline.modelspec.files import file_weight_bytes_per_token

    skipped: list[str] = []
    bench = find_llama_bench(args.llama_bench, skipped)
    cpu = describe_cpu(args.threads)
    files = make_files(args, shapes)
    print("loading roofline runners (--dtype stored) ...", file=sys.stderr)
    engines = {m: Roofline(path, args.threads, args.tokens) for m, path in files.items()}
    rates = {m: {"llama-bench": [], "roofline": []} for m in files}

    for rnd in range(args.rounds):
        for model, path in files.items():
            line = f"round {rnd + 1}/{args.rounds} {model} tg{args.tokens}:"
            if bench:
                lb = llama_bench(bench, path, args.threads, args.tokens, 0)
                rates[model]["llama-bench"].append(lb)
                line += f" llama-bench {lb:.1f},"
            rf = engines[model].tg(args.tokens)
            rates[model]["roofline"].append(rf)
            print(f"{line} roofline {rf:.1f} tok/s", file=sys.stderr)

    results = {}
    for model, path in files.items():
        runner = engines[model].runner
        vocab = runner.config.vocab_size
        ceiling = file_weight_bytes_per_token(path)
        engine, loader = runner.bytes_per_token, runner.file_bytes_per_token
        lb, rf = rates[model]["llama-bench"], rates[model]["roofline"]
        rows = []
        for name, xs in (("llama-bench", lb), ("roofline", rf)):
            gbs = f"{ceiling * statistics.median(xs) / 1e9:.2f}" if xs else ""
            rows.append((name, spread(xs), ratio(rf, lb) if name == "roofline" else "", gbs))
        total, active = params(shapes[model], vocab)
        emit_table(
            f"{model} ({shapes[model].arch}, {total / 1e6:.1f} M weights, {active / 1e6:.1f} M "
            f"active; {args.format}, embedding {args.embedding_format}): {path.name}, "
            f"file {path.stat().st_size / 1e6:.1f} MB",
            ["engine", f"tg{args.tokens} tok/s min/median/max", "ratio", "GB/s"],
            rows,
            as_markdown=args.markdown,
        )
        emit_table(
            f"{model}: weight bytes per decoded token",
            ["count", "MB/token", "vs ceiling"],
            [
                (
                    "roofline engine (runner.bytes_per_token)",
                    f"{engine / 1e6:.2f}",
                    f"{engine / ceiling:.3f}",
                ),
                (
                    "roofline loader (runner.file_bytes_per_token)",
                    f"{loader / 1e6:.2f}",
                    f"{loader / ceiling:.3f}",
                ),
                ("ceiling (file_weight_bytes_per_token)", f"{ceiling / 1e6:.2f}", "1.000"),
            ],
            as_markdown=args.markdown,
        )
        results[model] = {
            "file": str(path),
            "file_bytes": path.stat().st_size,
            "shape": asdict(shapes[model]),
            "vocab": vocab,
            "weights_total": total,
            "weights_active": active,
            "bytes_per_token_engine": engine,
            "bytes_per_token_loader": loader,
            "bytes_per_token_ceiling": ceiling,
            "llama_bench_tg": lb,
            "roofline_tg": rf,
        }
    notes = [
        "ratio: roofline median / llama-bench median; GB/s: the ceiling's bytes/token x median "
        "tok/s",
        f"{args.rounds} rounds, tg {args.tokens} tokens, {args.threads} threads; llama-bench "
        f"{bench or 'not run'}",
        "random weights; the vocabulary is SmolLM2's (49152 tokens), not the families' (Gemma "
        "262144, Qwen 151936, Mixtral 32000, gpt-oss 201088): the embedding and lm_head rows "
        "are the families' width, their count SmolLM2's, so each token's lm_head bytes differ "
        "from the real models'",
        *skipped,
    ]
    finish(
        notes,
        args.json,
        {
            "cpu": cpu,
            "isa": args.isa,
            "threads": args.threads,
            "rounds": args.rounds,
            "tokens": args.tokens,
            "format": args.format,
            "embedding_format": args.embedding_format,
            "tiny": args.tiny,
            "llama_bench": bench,
            "models": results,
            "skipped": skipped,
        },
    )


if __name__ == "__main__":
    main()
