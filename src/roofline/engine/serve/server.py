"""The OpenAI-compatible HTTP server: FastAPI routes over one `Scheduler`, served by uvicorn.

FastAPI + uvicorn: Starlette cancels a stream the moment its client goes away (ASGI
`http.disconnect`), the hook that frees a slot; pydantic gives the 400s field paths. The event loop
only relays: JSON parsing, tokenization and chat templates run in a worker thread, the model in the
scheduler's. Limits: http_limits.py; stopping with streams open: shutdown.py; what the routes
share (auth, model card, parsing and tokenizing): server_state.py.

Routes: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health, /metrics. With an API
key every /v1 route wants `Authorization: Bearer <key>`; /health stays open (launchers need no
secret), /metrics too unless `metrics_require_key` (as in vLLM).
"""

from __future__ import annotations

import asyncio
import collections
import socket
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from roofline.engine.runtime.scheduler import Scheduler, asyncio_sink
from roofline.engine.serve.http_limits import (
    Limits,
    NoDelayH11Protocol,
    check_headers,
    read_body,
    set_nodelay,
)
from roofline.engine.serve.protocol import APIError, sampling_params
from roofline.engine.serve.response_builder import ResponseBuilder
from roofline.engine.serve.server_responses import (
    CancellingStream,
    collect,
    shutting_down,
    stream_events,
)
from roofline.engine.serve.server_state import ServerState
from roofline.engine.serve.shutdown import Drain, GracefulServer


def _check_threads(asked: int | None, most: int) -> None:
    """A 400 for a request that asks more threads (`roofline_threads`) than the server runs on."""
    if asked is not None and asked > most:
        raise APIError(
            400,
            f"roofline_threads: this server runs on at most {most} threads, got {asked}",
            param="roofline_threads",
            code="invalid_value",
        )


class _HeaderCount:
    """ASGI middleware: a JSON 431 for a request with more header fields than the limits allow."""

    def __init__(self, app, limits: Limits, refused: collections.Counter):
        self.app, self.limits, self.refused = app, limits, refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            try:
                check_headers(scope["headers"], self.limits)
            except APIError as e:
                self.refused[e.status] += 1
                await JSONResponse(e.body(), status_code=e.status, headers={"Connection": "close"})(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def create_app(
    runner=None,
    *,
    scheduler: Scheduler | None = None,
    served_model_name: str | None = None,
    api_key: str | None = None,
    limits: Limits | None = None,
    grace_s: float = 10.0,
    metrics_require_key: bool = False,
) -> FastAPI:
    """The ASGI app for one runner, or for a scheduler already stepping one (`Scheduler.loading`).
    Its lifespan starts the scheduler thread (if not started yet) and stops it on shutdown. Serve it
    with `uvicorn_server` (which applies `limits` to the connections and `grace_s` to stopping)."""
    if scheduler is None:
        scheduler = Scheduler(runner)
    if metrics_require_key and not api_key:
        raise ValueError("metrics_require_key needs an api_key")
    limits = limits or Limits()
    state = ServerState(
        scheduler, served_model_name, api_key, limits, Drain(grace_s), metrics_require_key
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.scheduler.start()
        try:
            yield
        finally:
            await asyncio.to_thread(state.scheduler.close)

    app = FastAPI(
        title="roofline", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.roofline = state
    app.add_middleware(_HeaderCount, limits=limits, refused=state.refused)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        state.refused[exc.status] += 1
        headers = (
            {"Connection": "close"}
            if exc.status in (408, 431) or exc.code == "shutting_down"
            else None
        )
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(
        request: Request, exc: Exception
    ) -> JSONResponse:  # still logged, with its traceback
        return JSONResponse(
            APIError(
                500,
                f"internal error ({type(exc).__name__}); see the server log",
                type="server_error",
                code="internal_error",
            ).body(),
            status_code=500,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse(
            APIError(
                exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code
            ).body(),
            status_code=exc.status_code,
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.drain.stopping:
            return JSONResponse({"status": "stopping"}, status_code=503)
        if state.scheduler.alive:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "stopped"}, status_code=503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if state.metrics_require_key:
            state.check_auth(request)
        return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        state.check_auth(request)
        return JSONResponse({"object": "list", "data": [state.model_card()]})

    @app.get("/v1/models/{model:path}")
    async def model(model: str, request: Request) -> JSONResponse:
        state.check_auth(request)
        state.check_model(model)
        return JSONResponse(state.model_card())

    async def complete(request: Request, chat: bool) -> Response:
        drain = state.drain
        if drain.stopping:
            raise shutting_down()
        drain.begin()
        streaming = False
        try:
            state.check_auth(request)
            raw = await read_body(request, state.limits)
            req = await asyncio.to_thread(state.parse, raw, chat)
            del raw
            state.check_model(req.model)
            prompt_ids = await asyncio.to_thread(state.prompt_ids, req, chat)
            params = sampling_params(req, len(prompt_ids), state.scheduler.max_seq_len)
            _check_threads(req.roofline_threads, state.scheduler.max_threads)
            sink, queue = asyncio_sink(asyncio.get_running_loop())
            try:
                handle = state.scheduler.submit(
                    prompt_ids,
                    params,
                    sink,
                    speculate=req.speculative,
                    options=req.spec_options(),
                    threads=req.roofline_threads,
                    kernels=req.roofline_kernels,
                )
            except RuntimeError as e:
                raise APIError(
                    503, f"{e}; retry later", type="server_error", code="unavailable"
                ) from None
            drain.watch(queue)
            builder = ResponseBuilder(
                state.model_name,
                chat=chat,
                prompt_token_ids=list(prompt_ids) if req.return_token_ids else None,
            )
            if req.stream:

                def done() -> None:
                    drain.unwatch(queue)
                    drain.end()

                streaming = True
                return CancellingStream(
                    stream_events(queue, builder, req.include_usage(), req.return_token_ids),
                    handle,
                    done,
                )
            try:
                return await collect(request, queue, handle, builder, req.return_token_ids)
            finally:
                drain.unwatch(queue)
        finally:
            if not streaming:
                drain.end()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0 = any free port); bound before serving so the address is
    known."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio turns Nagle off only on sockets whose proto says TCP,
    # and an accepted socket inherits the listener's (Linux also inherits TCP_NODELAY itself; each
    # connection sets it again when accepted, see http_limits.NoDelayH11Protocol).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_nodelay(sock)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def uvicorn_server(app: FastAPI, *, log_level: str = "warning") -> GracefulServer:
    """A uvicorn server for `app`; run it with `.run(sockets=[bind_socket(...)])`. It stops on
    SIGINT and SIGTERM as shutdown.py says (the app's grace period), then the lifespan stops the
    scheduler."""
    import uvicorn

    state: ServerState = app.state.roofline
    config = uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
        access_log=False,
        http=NoDelayH11Protocol,
        h11_max_incomplete_event_size=state.limits.max_header_bytes,
    )
    return GracefulServer(config, state.drain)
