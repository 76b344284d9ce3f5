"""How a completion's events become an HTTP answer: an SSE stream (`stream_events`, sent by a
`CancellingStream` that frees the request's slot however the stream ends), or one JSON body once
the request is done (`collect`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from roofline.engine.runtime.scheduler import Event, RequestHandle
from roofline.engine.serve.protocol import APIError
from roofline.engine.serve.response_builder import ResponseBuilder, sse
from roofline.engine.serve.shutdown import SHUTDOWN

DISCONNECTED = object()  # put into a request's queue when its client goes away


class CancellingStream(StreamingResponse):
    """A streaming response that cancels its request however the stream ends (done, error,
    disconnect)."""

    def __init__(self, content: AsyncIterator[bytes], handle: RequestHandle, done):
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._handle = handle
        self._done = done

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # no-op for a finished request; frees the slot of an abandoned one
            self._handle.cancel()
            self._done()


def shutting_down() -> APIError:
    return APIError(
        503,
        "the server is shutting down; retry on another instance",
        type="server_error",
        code="shutting_down",
    )


def error_event_body(event: Event) -> dict[str, Any]:
    return APIError(
        500, event.error or "generation failed", type="server_error", code="engine_error"
    ).body()


def stats_of(event: Event) -> dict[str, int] | None:
    return event.spec.to_json() if event.spec is not None else None


async def stream_events(
    queue: asyncio.Queue, builder: ResponseBuilder, include_usage: bool, token_ids: bool = False
) -> AsyncIterator[bytes]:
    """SSE chunks: (chat) a role chunk, one chunk per event that carries text (an event may carry
    several tokens: a verify step that accepted drafts), a finish chunk with the request's pass and
    draft counts (`"roofline"`), the usage chunk with empty choices when asked for, then [DONE].
    token_ids: every chunk carries the ids of its tokens (then an event with ids but no text yet
    gets a chunk too), the first one the prompt's ids as well."""
    first = token_ids  # the prompt's ids still to send
    if builder.chat:
        yield sse(
            builder.chunk(text="", role=True, with_usage_field=include_usage, prompt_ids=first)
        )
        first = False
    while True:
        event: Event = await queue.get()
        if event is SHUTDOWN:
            yield sse(shutting_down().body())
            break
        if event.finish_reason == "error":
            yield sse(error_event_body(event))
            break
        if event.text or (token_ids and event.token_ids):
            yield sse(
                builder.chunk(
                    text=event.text,
                    with_usage_field=include_usage,
                    token_ids=list(event.token_ids) if token_ids else None,
                    prompt_ids=first,
                )
            )
            first = False
        if event.final:
            yield sse(
                builder.chunk(
                    finish_reason=event.finish_reason,
                    with_usage_field=include_usage,
                    stats=stats_of(event),
                    token_ids=[] if token_ids else None,
                    prompt_ids=first,
                )
            )
            if include_usage and event.usage is not None:
                yield sse(builder.usage_chunk(event.usage, stats_of(event)))
            break
    yield sse("[DONE]")


async def collect(
    request: Request,
    queue: asyncio.Queue,
    handle: RequestHandle,
    builder: ResponseBuilder,
    token_ids: bool = False,
) -> Response:
    """Wait for the whole completion; a client that hangs up meanwhile cancels its request."""

    async def watch_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        queue.put_nowait(DISCONNECTED)

    watcher = asyncio.create_task(watch_disconnect())
    parts: list[str] = []
    ids: list[int] = []
    try:
        while True:
            event = await queue.get()
            if event is DISCONNECTED:
                return Response(status_code=499)  # nobody reads it; the slot is freed below
            if event is SHUTDOWN:
                return JSONResponse(shutting_down().body(), status_code=503)
            parts.append(event.text)
            ids.extend(event.token_ids)
            if event.final:
                break
    finally:
        watcher.cancel()
        handle.cancel()
    if event.finish_reason == "error":
        return JSONResponse(error_event_body(event), status_code=500)
    return JSONResponse(
        builder.full(
            "".join(parts),
            event.finish_reason,
            event.usage,
            token_ids=ids if token_ids else None,
            stats=stats_of(event),
        )
    )
