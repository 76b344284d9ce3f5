"""`serve(options)`: load the model, start the scheduler, serve HTTP until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

from roofline.engine.runtime.model_runner import load_runner
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.speculate.step import speculation_factory
from roofline.engine.serve.http_limits import Limits
from roofline.engine.serve.options import ServeOptions
from roofline.engine.serve.server import bind_socket, create_app, uvicorn_server
from roofline.errors import UserError
from roofline.kernel_modes import KERNELS_MODES


def serve(o: ServeOptions) -> None:
    """Serve until stopped. The port is tried before the model loads (a busy port fails in a
    second, not after the load) and bound for good after it, so that connections are refused, not
    left hanging, until the server is ready."""
    if o.exposed_without_key:
        _log(
            f"warning: --host {o.host} accepts connections from other machines and no --api-key "
            "is set: anyone who can reach this port can use the model"
        )
    _listen(o).close()
    _log(
        f"loading {o.model or 'the default model'} ({o.dtype}, max batch {o.max_batch}, "
        f"speculation {o.speculation.method}) ..."
    )

    def load():
        runner = load_runner(
            o.model,
            dtype=o.dtype,
            threads=o.threads,
            max_batch=o.max_batch,
            max_seq_len=o.max_seq_len,
            kernels=o.kernels,
        )
        # both shapes, whatever the server's own: a request may ask either (`roofline_kernels`)
        for mode in KERNELS_MODES:
            runner.offer_kernels(mode)
        _log(f"kernels for this CPU: {runner.kernels.describe()}")
        runner.prefill_chunk_tokens = o.prefill_granule
        return runner

    def speculate(runner):
        # timed whether or not this server drafts: /v1/models reports them (tune's predictions);
        # once per host, model, dtype, threads and kernel shapes (the user cache)
        runner.measure_pass_costs(cached=True)
        return speculation_factory(o.speculation, runner)

    scheduler = Scheduler.loading(
        load,
        speculation=speculate,
        prefill_chunk_ms=o.prefill_chunk_ms,
        prefix_cache_mb=o.prefix_cache_mb,
    )
    app = create_app(
        scheduler=scheduler,
        served_model_name=o.served_model_name,
        api_key=o.api_key,
        limits=Limits(max_body_bytes=o.max_body_bytes, body_timeout_s=o.body_timeout_s),
        grace_s=o.grace_s,
        metrics_require_key=o.metrics_require_key,
    )
    runner = scheduler.runner
    with _listen(o) as sock:
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(
            f"roofline serve: {app.state.roofline.model_name!r} ({runner.path}, {runner.dtype}, "
            f"max batch {runner.max_batch}, context {runner.max_seq_len}, "
            f"speculation {o.speculation.method}, prefix cache {o.prefix_cache_mb:g} MB, "
            f"prefill granule {o.prefill_granule}) listening on http://{shown}:{bound_port}/v1 "
            f"(auth {'on' if o.api_key else 'off'}); Ctrl-C stops",
            flush=True,
        )
        uvicorn_server(app, log_level=o.log_level).run(sockets=[sock])  # returns on SIGINT/SIGTERM
    drain = app.state.roofline.drain
    early = (
        f"; {drain.ended_early} request(s) ended early after the {o.grace_s:g} s grace"
        if drain.ended_early
        else ""
    )
    _log(f"stopped{early}")


def _listen(o: ServeOptions):
    try:
        return bind_socket(o.host, o.port)
    except OSError as e:
        raise UserError(
            f"cannot listen on {o.host}:{o.port} ({e.strerror or e}); choose another --port or "
            "--host"
        ) from None


def _log(line: str) -> None:
    print(f"roofline serve: {line}", file=sys.stderr, flush=True)
