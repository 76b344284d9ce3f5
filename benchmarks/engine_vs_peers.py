"""Decode speed of roofline's embedded engine next to its peers, side by side in one run.

Same prompt ids, batch 1, greedy, the same thread count, N new tokens (EOS ignored), for:
  roofline fp32, bf16 and int8 (weight-only, per-row scales); llama.cpp (llama-cpp-python) on the same weights written as F32 and BF16 GGUFs,
  and on the original file; Hugging Face transformers `generate` fp32.
Decode tok/s counts the tokens after the first over the time between the first and the last one, so
prefill is left out for every engine. Rounds run the engines in turn (engine order within a round fixed),
so drift on a shared machine hits all of them alike; the table gives min / median / max over rounds.

    bytes/token = weights read per decoded token (all but the embedding table, + one embedding row, + the
                  full lm_head); % of bandwidth = bytes/token x tok/s / read bandwidth of this machine
                  (`roofline probe`'s profile, else measured here with a 1 GiB sum).

Usage: python benchmarks/engine_vs_peers.py [--tokens 128] [--rounds 3] [--threads 2] [--model X.gguf]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = "Explain in a few paragraphs why decoding a language model one token at a time is limited by memory bandwidth."


def read_bandwidth() -> tuple[float, str]:
    """Bytes/s the machine reads, from the probe profile when there is one."""
    try:
        from roofline.hardware.profile import load_local_profile

        profile = load_local_profile()
    except Exception as e:  # a damaged profile should not stop the benchmark
        print(f"(hardware profile unusable: {e})", file=sys.stderr)
        profile = None
    if profile:
        return float(profile["bandwidth_bytes_per_s"]["read"]["median"]), "roofline probe profile (read, median)"
    a = np.ones(2**28, dtype=np.float32)
    rates = []
    for _ in range(5):
        t = time.perf_counter()
        a.sum()
        rates.append(a.nbytes / (time.perf_counter() - t))
    return float(np.median(rates)), "measured here: numpy sum over 1 GiB, median of 5"


# ---------------------------------------------------------------------------------------------- GGUF
def _llamacpp_rows(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """HF q/k row order -> llama.cpp's: within each head, row h*hd/2 + i moves to 2i + h (adjacent RoPE pairs)."""
    hd = rows.shape[0] // n_heads
    return np.ascontiguousarray(rows.reshape(n_heads, 2, hd // 2, -1).swapaxes(1, 2)).reshape(rows.shape)


def write_float_gguf(source: Path, checkpoint, out: Path, fmt: str) -> Path:
    """The checkpoint's (dequantized, HF-order) tensors as an F32 or BF16 GGUF, metadata copied from `source`."""
    import gguf

    from roofline.engine.loaders.gguf_names import hf_name

    reader = gguf.GGUFReader(str(source))
    cfg = checkpoint.config
    writer = gguf.GGUFWriter(str(out), cfg.arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if fmt == "F32" else gguf.LlamaFileType.MOSTLY_BF16)
    by_hf = {hf_name(t.name): t.name for t in reader.tensors}
    for name, tensor in checkpoint.tensors.items():
        arr = tensor.float().numpy()
        if cfg.arch == "llama" and ".self_attn.q_proj.weight" in name:
            arr = _llamacpp_rows(arr, cfg.n_heads)
        elif cfg.arch == "llama" and ".self_attn.k_proj.weight" in name:
            arr = _llamacpp_rows(arr, cfg.n_kv_heads)
        if fmt == "BF16" and arr.ndim == 2:  # norms and biases stay F32, as llama.cpp's converter writes them
            writer.add_tensor(by_hf[name], gguf.quants.quantize(arr, gguf.GGMLQuantizationType.BF16),
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            writer.add_tensor(by_hf[name], np.ascontiguousarray(arr, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def gguf_bytes_per_token(path: Path) -> int:
    """Weight bytes per decoded token of a GGUF: every tensor but the embedding, one embedding row, the lm_head
    (output.weight, or the embedding table again when tied)."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    embed = tensors["token_embd.weight"]
    rows = int(embed.shape[-1])  # GGUF shapes are (in, out): the last is the vocabulary
    total = sum(int(t.n_bytes) for n, t in tensors.items() if n != "token_embd.weight")
    total += int(embed.n_bytes) // rows
    return total + (0 if "output.weight" in tensors else int(embed.n_bytes))


# ---------------------------------------------------------------------------------------------- engines
class Roofline:
    def __init__(self, model, dtype, threads):
        from roofline.engine import load_runner

        self.runner = load_runner(model, dtype=dtype, threads=threads, max_seq_len=1024)
        self.bytes_per_token = self.runner.bytes_per_token

    def run(self, ids, n):
        from roofline.engine import SamplingParams, generate

        gen = generate(self.runner, ids, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))
        tokens = list(gen)
        return gen.timings.decode_tok_per_s, tokens


class LlamaCpp:
    def __init__(self, path, threads):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                         flash_attn=True, verbose=False)
        self.bytes_per_token = gguf_bytes_per_token(path)

    def run(self, ids, n):
        tokens, times = [], []
        for tok in self.llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
            times.append(time.perf_counter())
            tokens.append(int(tok))
            if len(tokens) == n:
                break
        return (n - 1) / (times[-1] - times[0]), tokens


class Transformers:
    def __init__(self, path, threads, bytes_per_token):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self._dir = tempfile.TemporaryDirectory(prefix="roofline-hf-")
        os.symlink(path, Path(self._dir.name) / Path(path).name)
        self.model = AutoModelForCausalLM.from_pretrained(self._dir.name, gguf_file=Path(path).name,
                                                          dtype=torch.float32).eval()
        self.bytes_per_token = bytes_per_token  # same fp32 weights as roofline fp32

    def run(self, ids, n):
        import torch
        from transformers.generation.streamers import BaseStreamer

        times = []

        class Clock(BaseStreamer):
            def put(self, value):
                times.append(time.perf_counter())

            def end(self):
                pass

        with torch.no_grad():
            out = self.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                      streamer=Clock())
        times = times[1:]  # the first put() is the prompt
        return (n - 1) / (times[-1] - times[0]), out[0, len(ids):].tolist()


# ---------------------------------------------------------------------------------------------- main
def agreement(tokens, reference) -> str:
    same = next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b), min(len(tokens), len(reference)))
    return "all" if same == len(reference) else f"first {same}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()

    from roofline.cli.output import emit_table
    from roofline.engine.default_model import default_model_path
    from roofline.engine.loaders import load_checkpoint

    source = Path(args.model) if args.model else default_model_path()
    bandwidth, bw_source = read_bandwidth()
    engines: dict[tuple[str, str], object] = {}
    skipped = []
    print("loading roofline fp32 / bf16 / int8 ...", file=sys.stderr)
    for dtype in ("fp32", "bf16", "int8"):
        engines[("roofline", dtype)] = Roofline(str(source), dtype, args.threads)
    ids = engines[("roofline", "fp32")].runner.tokenizer.encode(PROMPT)
    workdir = tempfile.TemporaryDirectory(prefix="roofline-bench-")
    if importlib.util.find_spec("llama_cpp") is None:
        skipped.append("llama.cpp: llama-cpp-python is not installed (pip install llama-cpp-python)")
    else:
        print("writing F32 / BF16 GGUFs and loading llama.cpp ...", file=sys.stderr)
        checkpoint = load_checkpoint(source)
        for fmt in ("F32", "BF16"):
            path = write_float_gguf(source, checkpoint, Path(workdir.name) / f"model-{fmt}.gguf", fmt)
            engines[("llama.cpp", fmt.lower())] = LlamaCpp(path, args.threads)
        del checkpoint
        engines[("llama.cpp", "original")] = LlamaCpp(source, args.threads)
    if importlib.util.find_spec("transformers") is None:
        skipped.append("HF transformers: not installed (pip install transformers)")
    else:
        print("loading transformers fp32 ...", file=sys.stderr)
        engines[("transformers", "fp32")] = Transformers(source, args.threads, engines[("roofline", "fp32")].bytes_per_token)

    rates: dict = {key: [] for key in engines}
    tokens: dict = {}
    for r in range(args.rounds):
        for key, engine in engines.items():
            tok_per_s, out = engine.run(ids, args.tokens)
            rates[key].append(tok_per_s)
            tokens[key] = out
            print(f"round {r + 1}/{args.rounds} {key[0]} {key[1]}: {tok_per_s:.1f} tok/s", file=sys.stderr)

    reference = tokens[("roofline", "fp32")]
    rows = []
    for (name, fmt), engine in engines.items():
        med = statistics.median(rates[(name, fmt)])
        gbps = engine.bytes_per_token * med / 1e9
        peer = ("llama.cpp", {"fp32": "f32", "bf16": "bf16"}.get(fmt)) if name == "roofline" else None
        ratio = f"{med / statistics.median(rates[peer]):.2f}x" if peer in engines else ""
        rows.append((name, fmt, f"{min(rates[(name, fmt)]):.1f} / {med:.1f} / {max(rates[(name, fmt)]):.1f}",
                     f"{engine.bytes_per_token / 1e6:.1f}", f"{gbps:.1f}", f"{100 * gbps * 1e9 / bandwidth:.0f}%",
                     ratio, agreement(tokens[(name, fmt)], reference)))
    notes = [f"prompt {len(ids)} tokens, {args.tokens} new tokens, greedy, batch 1, {args.threads} threads, "
             f"{args.rounds} rounds; source {source.name}",
             f"read bandwidth {bandwidth / 1e9:.1f} GB/s ({bw_source})",
             "vs llama.cpp: roofline median tok/s / llama.cpp median tok/s at the same format",
             "same ids: greedy tokens equal to roofline fp32's ('all' or up to the first divergence)"] + skipped
    emit_table("decode speed, side by side", ["engine", "format", "tok/s min / median / max", "MB/token", "GB/s",
                                              "% of read bw", "vs llama.cpp", "same ids"],
               rows, as_markdown=args.markdown, notes=notes)


if __name__ == "__main__":
    main()
