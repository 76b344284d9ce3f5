"""roofline serve against llama.cpp's C++ llama-server under load, on the same GGUF file (issue 20).

Both servers get the same threads and slots: llama-server `-np N` (flash attention on, its prompt
cache on as it is by default, without `--cache-reuse`, which changes outputs; `--metrics`) and
`roofline serve --max-batch N`, each with room for N requests of the longest prompt. Against
each, `roofline bench --concurrency 1,4,16 --duration 20s` runs two workloads: the built-in
prompts, and `--workload shared-prefix` (every request the same --prefix-tokens document and its
own question, so a prefix cache can reuse the document).

Rounds are interleaved: each round starts one server, runs both workloads, stops it, then the other
(the order alternates by round), so drift on a shared machine hits both alike. Tables give, per
workload and stream count, min / median / max over rounds of aggregate output tok/s, TTFT p50,
TPOT p50 and per-user speed (Output Speed p50), and the ratio of medians roofline / llama-server
(above 1 is better for tok/s, below 1 for times). The prefix-cache figures each server's /metrics
gives are printed where it gives them. The CPU model and its SIMD flags are printed first.

    LS=path/to/llama.cpp/build/bin/llama-server     # built as shared/ENVIRONMENT.md says
    python benchmarks/serving.py --model smol-F32.gguf --llama-server $LS --threads 2 \\
        --rounds 2 --json serving.json
    python benchmarks/serving.py --model smol-F32.gguf --llama-server $LS --dry-run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# (label, summary.json figure, is a time in ms, higher is better)
FIGURES = (
    ("aggregate tok/s", "output_tok_per_s", False, True),
    ("TTFT p50 ms", "ttft_s", True, False),
    ("TPOT p50 ms", "tpot_s", True, False),
    ("per-user tok/s p50", "output_speed_tok_per_s", False, True),
)
# The servers run in the environment this script started with (see engine_vs_peers.py: roofline's
# OpenMP settings slow llama.cpp's threads down; roofline serve sets its own as it starts).
PEER_ENV = dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seq_len(a: argparse.Namespace) -> int:
    """Tokens one request may need: the longer workload's prompt plus its answer, with room."""
    return max(2048, a.prefix_tokens + a.suffix_tokens + a.output_len + 256)


def llama_server_command(a: argparse.Namespace, port: int) -> list[str]:
    from roofline.bench.engines.llamacpp import llama_server_args, llama_server_help

    slots = max(a.concurrency)
    exists = a.llama_server and Path(a.llama_server).exists()
    help_text = llama_server_help(a.llama_server) if exists else "on|off"
    config = {"threads": a.threads, "ctx_size": slots * seq_len(a), "flash_attn": True}
    head = [a.llama_server or "llama-server", "-m", str(a.model)]
    net = ["--host", "127.0.0.1", "--port", str(port), "-np", str(slots), "--metrics"]
    return head + net + llama_server_args(config, help_text)


def roofline_command(a: argparse.Namespace, port: int) -> list[str]:
    return [
        *(sys.executable, "-m", "roofline", "serve", "--model", str(a.model)),
        *("--host", "127.0.0.1", "--port", str(port), "--threads", str(a.threads)),
        *("--max-batch", str(max(a.concurrency)), "--max-seq-len", str(seq_len(a))),
    ]


# engine -> its server command; llama-server first (the baseline of the ratios)
ENGINES = {"llama-server": llama_server_command, "roofline": roofline_command}
# workload -> what `roofline bench` adds for it
WORKLOADS = {
    "builtin": lambda a: [],
    "shared-prefix": lambda a: [
        *("--workload", "shared-prefix", "--prefix-tokens", str(a.prefix_tokens)),
        *("--suffix-tokens", str(a.suffix_tokens), "--output-len", str(a.output_len)),
    ],
}


def bench_command(url: str, workload: str, a: argparse.Namespace, out: Path) -> list[str]:
    cmd = [
        *(sys.executable, "-m", "roofline", "bench", url, "--api", a.api),
        *("--concurrency", ",".join(map(str, a.concurrency)), "--duration", a.duration),
        *("--max-tokens", str(a.output_len), "--ignore-eos", "--warmup", "1"),
        *("--out", str(out), "--no-report", "--seed", str(a.seed)),
        *WORKLOADS[workload](a),
    ]
    if a.tokenizer:
        cmd += ["--tokenizer", str(a.tokenizer)]
    return cmd


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{url}/health", timeout=2) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"no answer from {url}/health after {timeout_s:g} s")


@contextlib.contextmanager
def started(cmd: list[str], url: str, log: Path, timeout_s: float):
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=PEER_ENV)
        try:
            wait_ready(url, proc, timeout_s)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def figures(run_dir: Path) -> dict:
    """streams -> {figure: value, "prefix_cache": {...}} from a bench run's summary.json."""
    summary = json.loads((run_dir / "summary.json").read_text())
    out = {}
    for s in summary["scenarios"]:
        metrics = s.get("metrics") or {}
        row = {"output_tok_per_s": s.get("output_tok_per_s")}
        for key in ("ttft_s", "tpot_s", "output_speed_tok_per_s"):
            row[key] = (metrics.get(key) or {}).get("p50")
        row["prefix_cache"] = s.get("prefix_cache")
        out[int(s["scenario"].get("concurrency") or 1)] = row
    return out


def run_rounds(a: argparse.Namespace) -> dict:
    """engine -> workload -> streams -> [figures of each round]."""
    results: dict = {e: {w: {} for w in WORKLOADS} for e in ENGINES}
    for r in range(a.rounds):
        for engine in list(ENGINES) if r % 2 == 0 else list(ENGINES)[::-1]:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            out = a.out / f"round{r}-{engine}"
            out.mkdir(parents=True, exist_ok=True)
            cmd = ENGINES[engine](a, port)
            print(f"round {r + 1}/{a.rounds}: {engine}", file=sys.stderr)
            with started(cmd, url, out / "server.log", a.ready_timeout):
                for workload in WORKLOADS:
                    run_dir = out / workload
                    bench = bench_command(url, workload, a, run_dir)
                    subprocess.run(bench, check=True, stdout=subprocess.DEVNULL)
                    for streams, row in figures(run_dir).items():
                        results[engine][workload].setdefault(streams, []).append(row)
    return results


def spread(values: list) -> tuple[float, float, float] | None:
    v = [x for x in values if x is not None]
    return (min(v), statistics.median(v), max(v)) if v else None


def tables(results: dict, a: argparse.Namespace) -> None:
    from roofline.cli.output import emit_table

    for workload in WORKLOADS:
        rows = []
        for streams in a.concurrency:
            for label, key, is_time, _ in FIGURES:
                scale = 1e3 if is_time else 1.0
                cells, medians = [], []
                for engine in ENGINES:
                    s = spread([row[key] for row in results[engine][workload].get(streams, [])])
                    cells.append("-" if s is None else " / ".join(f"{scale * x:.1f}" for x in s))
                    medians.append(None if s is None else s[1])
                ratio = (
                    "-" if None in medians or not medians[0] else f"{medians[1] / medians[0]:.2f}"
                )
                rows.append([str(streams), label, *cells, ratio])
        emit_table(
            f"{workload}: min / median / max over {a.rounds} rounds",
            ["streams", "figure", *ENGINES, "roofline / llama-server"],
            rows,
            as_markdown=a.markdown,
            notes=["ratio of medians: above 1 is better for tok/s, below 1 for ms"],
        )
        for engine in ENGINES:
            for streams in a.concurrency:
                caches = [r["prefix_cache"] for r in results[engine][workload].get(streams, [])]
                shown = [c for c in caches if c and c.get("exposed")]
                if shown:
                    c = shown[-1]
                    print(
                        f"{workload} {engine} {streams} streams, last round's prefix cache: "
                        f"{c['hits']:.0f} hits of {c['lookups']:.0f} {c['unit']}, "
                        f"{c['tokens_reused']:.0f} tokens reused"
                    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="the GGUF file both servers load")
    ap.add_argument("--llama-server", default=None, help="path of llama.cpp's llama-server")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,16", help="streams; slots = the largest")
    ap.add_argument("--duration", default="20s", help="per scenario")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--output-len", type=int, default=64, help="tokens per answer (--ignore-eos)")
    ap.add_argument("--prefix-tokens", type=int, default=1000)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json: exact sizes")
    ap.add_argument("--api", default="chat", choices=("chat", "completions"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds per server start")
    ap.add_argument("--out", type=Path, default=Path("runs") / time.strftime("serving-%Y%m%d-%H%M"))
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args()
    a.concurrency = [int(c) for c in a.concurrency.split(",") if c.strip()]
    from engine_vs_peers import cpu_info  # a sibling script: the same CPU line everywhere

    cpu = cpu_info()
    flags = " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu["flags"].items())
    print(f"CPU: {cpu['model']}; {flags}; {a.threads} threads; {max(a.concurrency)} slots")
    if a.dry_run:
        for engine in ENGINES:
            print(" ".join(ENGINES[engine](a, 8080)))
            for workload in WORKLOADS:
                run_dir = a.out / f"round0-{engine}" / workload
                print("  " + " ".join(bench_command("http://127.0.0.1:8080", workload, a, run_dir)))
        return
    if not (a.llama_server and Path(a.llama_server).exists()):
        ap.error("--llama-server PATH: llama.cpp's llama-server, built as ENVIRONMENT.md says")
    results = run_rounds(a)
    tables(results, a)
    if a.json:
        data = {"cpu": cpu, "arguments": sys.argv[1:], "results": results}
        a.json.write_text(json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    main()
